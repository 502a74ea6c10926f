package diagnose

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hcpbot/hcpbot/event"
)

// ignitionFailures are the signs that workers do not get their ignition:
// NodePools with ReachedIgnitionEndpoint=False and the HostedCluster's
// IgnitionEndpointAvailable=False.
type ignitionFailures struct {
	pools []*entry[nodePoolRec]
	// endpoint are the NodePools with their own
	// IgnitionEndpointAvailable=False (nodepool/conditions.go:272-348:
	// present only while failing).
	endpoint []*entry[nodePoolRec]
	hc       *event.Condition
}

// ignitionFailures collects them, leaving out those x explains; pools
// sorted by key if sorted.
func (c *Cluster) ignitionFailures(x Explained, sorted bool) ignitionFailures {
	var f ignitionFailures
	for _, e := range c.nodePools.visible(sorted) {
		if cd, ok := e.rec.cond(condReachedIgnition); ok && cd.Status == event.ConditionFalse && !x.Has(poolConditionKey(e.rec.namespace, e.rec.name, condReachedIgnition)) {
			f.pools = append(f.pools, e)
		}
	}
	for _, e := range c.nodePools.visible(sorted) {
		if cd, ok := e.rec.cond(condIgnitionEndpointAvailable); ok && cd.Status == event.ConditionFalse && !x.Has(poolConditionKey(e.rec.namespace, e.rec.name, condIgnitionEndpointAvailable)) {
			f.endpoint = append(f.endpoint, e)
		}
	}
	if cd, ok := c.hcCondUnexplained(condIgnitionEndpointAvailable, isFalse, x); ok {
		f.hc = &cd
	}
	return f
}

func (f ignitionFailures) any() bool { return len(f.pools) > 0 || len(f.endpoint) > 0 || f.hc != nil }

// notReached keeps the NodePools whose machines did not reach the
// endpoint (reason ignitionNotReached, or none): the failures a proxy on
// the path can cause. The other reasons (IgnitionEndpointMissing,
// IgnitionCACertMissing, NotFound, FailedToGet) and the HostedCluster's
// IgnitionEndpointAvailable are about the ignition server itself.
func (f ignitionFailures) notReached() ignitionFailures {
	var out ignitionFailures
	for _, e := range f.pools {
		if cd, _ := e.rec.cond(condReachedIgnition); cd.Reason == reasonIgnitionNotReached || cd.Reason == "" {
			out.pools = append(out.pools, e)
		}
	}
	return out
}

// reasonIgnitionNotReached is HyperShift's reason for machines that have
// not fetched their ignition.
const reasonIgnitionNotReached = "ignitionNotReached"

// keys are the failures' symptom keys.
func (f ignitionFailures) keys(c *Cluster) []string {
	var out []string
	for _, e := range f.pools {
		out = append(out, poolConditionKey(e.rec.namespace, e.rec.name, condReachedIgnition))
	}
	for _, e := range f.endpoint {
		out = append(out, poolConditionKey(e.rec.namespace, e.rec.name, condIgnitionEndpointAvailable))
	}
	if f.hc != nil {
		out = append(out, c.conditionKey(condIgnitionEndpointAvailable))
	}
	return out
}

// evidence lists the failures: the NodePools' conditions, then the
// HostedCluster's.
func (f ignitionFailures) evidence(c *Cluster) []Evidence {
	var ev []Evidence
	for _, e := range f.pools {
		ev = append(ev, poolEvidence(e, condReachedIgnition))
	}
	ev = capEvidence(ev, maxEvidencePerKind, "NodePools that have not reached the ignition endpoint")
	var ep []Evidence
	for _, e := range f.endpoint {
		ep = append(ep, poolEvidence(e, condIgnitionEndpointAvailable))
	}
	ev = append(ev, capEvidence(ep, maxEvidencePerKind, "NodePools without an ignition endpoint")...)
	if f.hc != nil {
		ev = append(ev, c.condEvidence(*f.hc))
	}
	return ev
}

// ignitionThroughProxy reports whether the cluster's spec sends ignition
// through the HTTPS proxy (the spec noProxy does not exempt the ignition
// endpoint under Go's NO_PROXY rules), and the endpoint's host.
func (c *Cluster) ignitionThroughProxy(hc event.HostedClusterState, spec event.ProxySpec) (string, bool) {
	return endpointProxied(spec, hc.IgnitionEndpoint)
}

// poolOfNode names the NodePool of a hosted node: from its virt-launcher
// pod on KubeVirt, else from its name, which HyperShift derives from the
// NodePool's ("<nodepool>-<suffix>"); "" when unknown.
func (c *Cluster) poolOfNode(node string) string {
	if l := c.launcherFor(node); l != nil && l.rec.nodePool != "" {
		return l.rec.nodePool
	}
	best := ""
	for _, e := range c.nodePools.visible(false) {
		if n := e.rec.name; strings.HasPrefix(node, n+"-") && len(n) > len(best) {
			best = n
		}
	}
	return best
}

// notJoiningOf returns the nodes not joining of the given NodePools that
// x does not explain, sorted by name if sorted.
func (c *Cluster) notJoiningOf(pools []*entry[nodePoolRec], x Explained, sorted bool) []*entry[nodeRec] {
	if len(pools) == 0 {
		return nil
	}
	names := make(map[string]bool, len(pools))
	for _, e := range pools {
		names[e.rec.name] = true
	}
	var out []*entry[nodeRec]
	for _, e := range c.nodes.visible(sorted) {
		if e.rec.notJoining && !x.Has(nodeKey(e.rec.name)) && names[c.poolOfNode(e.rec.name)] {
			out = append(out, e)
		}
	}
	return out
}

// ignitionUnreachable: workers do not get their ignition, so machines
// never become nodes. When the spec sends ignition through the HTTPS
// proxy, that is the cause and the fix is the noProxy entry for the
// ignition host, proposed like proxy-tunnel's; proxy-tunnel explains
// these failures when it fires, since its fix then carries that entry.
func ignitionUnreachable(c *Cluster, _ time.Time, x Explained) (Diagnosis, bool) {
	hc, ok := c.live()
	if !ok {
		return Diagnosis{}, false
	}
	f := c.ignitionFailures(x, !x.brief)
	if !f.any() {
		return Diagnosis{}, false
	}
	nodes := c.notJoiningOf(append(slices.Clone(f.pools), f.endpoint...), x, !x.brief)
	d := Diagnosis{Severity: SeverityWarning, Symptoms: f.keys(c)}
	for _, e := range nodes {
		d.Symptoms = append(d.Symptoms, nodeKey(e.rec.name))
	}
	if c.noAvailableNodes() || c.nodeTotal() == 0 {
		d.Severity = SeverityCritical // no worker at all: nothing runs
	}
	if x.brief {
		return d, true
	}
	spec, _ := c.effectiveProxy()
	host, proxied := c.ignitionThroughProxy(hc, spec)
	reached := f.notReached()
	proxied = proxied && reached.any()
	endpoint := firstNonEmpty(hc.IgnitionEndpoint, "the ignition endpoint")
	d.Evidence = f.evidence(c)
	if len(nodes) > 0 {
		total := max(c.nodeTotal(), len(nodes))
		d.Nodes = &NodeImpact{Affected: len(nodes), Total: total, Text: nodesPart(nodes, total)}
		var ev []Evidence
		for _, e := range nodes {
			ev = append(ev, nodeEvidence(e))
		}
		d.Evidence = append(d.Evidence, capEvidence(ev, maxEvidencePerKind, "nodes not joining")...)
	}

	where, reason := "", "" // the NodePools' ReachedIgnitionEndpoint
	if len(f.pools) > 0 {
		pools := f.pools
		if proxied {
			pools = reached.pools // the failures the proxy explains come first
		}
		first, _ := pools[0].rec.cond(condReachedIgnition)
		reason = first.Reason
		where = "NodePool " + pools[0].rec.name
		if len(pools) > 1 {
			where = fmt.Sprintf("%d NodePools (%s, …)", len(pools), pools[0].rec.name)
		}
		where += " of " + c.key.Cluster.String() + " reports " + condHead(first)
	}
	d.Title = strings.TrimSpace("Workers of " + c.label() + " do not reach the ignition endpoint " + hc.IgnitionEndpoint)
	ns := c.controlPlaneNamespace()
	if f.hc != nil && !proxied {
		switch f.hc.Reason {
		case "NotFound":
			d.Title = "Ignition server of " + c.label() + " is missing: new workers get no ignition"
		case "WaitingForAvailable":
			d.Title = "Ignition server of " + c.label() + " is not available: new workers get no ignition"
		}
	}
	if proxied {
		d.Title = fmt.Sprintf("Workers of %s fetch ignition from %s through the HTTPS proxy", c.label(), host)
		d.Fix = fixAdding(c.hcTarget(), "spec.configuration.proxy.noProxy", spec.NoProxy, []string{host})
		d.RootCause = fmt.Sprintf("%s: new workers fetch ignition from %s through the HTTPS proxy %s, because spec noProxy does not exempt that host under Go's NO_PROXY rules. Add %s to spec.configuration.proxy.noProxy, or make the proxy reach the ignition endpoint.", where, endpoint, spec.HTTPSProxy, host)
		d.Confidence = Confidence{ConfidenceHigh, "ignition is reported unreached and the spec sends it through the proxy (noproxy's Go matching is deterministic)"}
		d.NextSteps = c.fixSteps(d.Fix, spec)
		d.NextSteps = append(d.NextSteps, "The change rolls out every NodePool of the cluster; the new machines fetch ignition directly.")
	} else {
		// The root cause stays two sentences: the most basic failure
		// names the cause (the ignition server itself, then the
		// NodePools' endpoint, then reaching it), the others are named.
		var who []string
		if f.hc != nil {
			who = append(who, "HostedCluster "+c.key.Cluster.String()+" reports "+condHead(*f.hc))
		}
		for i, e := range f.endpoint {
			if i == 2 {
				who = append(who, fmt.Sprintf("%d more NodePools report %s=False", len(f.endpoint)-2, condIgnitionEndpointAvailable))
				break
			}
			cd, _ := e.rec.cond(condIgnitionEndpointAvailable)
			who = append(who, "NodePool "+e.rec.name+" reports "+condHead(cd))
		}
		if where != "" {
			who = append(who, where)
		}
		var cause string
		switch {
		case f.hc != nil:
			cause = hcIgnitionCause(*f.hc, ns)
		case len(f.endpoint) > 0:
			cd, _ := f.endpoint[0].rec.cond(condIgnitionEndpointAvailable)
			cause = poolEndpointCause(cd, ns)
		default:
			cause = ignitionCause(reason, endpoint, ns)
		}
		d.RootCause = joinList(who, "and") + ": " + cause

		d.Confidence = Confidence{ConfidenceMedium, "HyperShift's conditions are observed directly; the path from the machines to the endpoint the bot does not see"}
		if len(f.pools)+len(f.endpoint) > 0 && f.hc != nil {
			d.Confidence.Why = "the NodePool and the HostedCluster both report it; " + d.Confidence.Why
		}
	}
	if len(f.pools) > 0 {
		e := f.pools[0]
		d.NextSteps = append(d.NextSteps, fmt.Sprintf("oc get nodepool -n %s %s -o jsonpath='{.status.conditions[?(@.type==\"%s\")]}' (management cluster)", e.rec.namespace, e.rec.name, condReachedIgnition))
	}
	d.NextSteps = append(d.NextSteps,
		fmt.Sprintf("oc get pods -n %s -l app=ignition-server -o wide (management cluster): ignition server running?", ns),
		fmt.Sprintf("oc get route,svc -n %s | grep ignition (management cluster): how the endpoint %s is published", ns, endpoint))
	if strings.EqualFold(hc.Platform, "KubeVirt") {
		d.NextSteps = append(d.NextSteps,
			fmt.Sprintf("oc get networkpolicy -n %s (management cluster): may the VMs reach the ignition endpoint?", ns),
			fmt.Sprintf("virtctl console -n %s <vmi> (management cluster): the VM's console shows ignition's fetch errors", ns))
	}
	return d, true
}

// hcIgnitionCause reads the HostedCluster's IgnitionEndpointAvailable=False
// (hostedcluster_controller.go:1135-1178): the ignition-server Deployment
// in the control-plane namespace is missing (NotFound) or not Available
// (WaitingForAvailable).
func hcIgnitionCause(cd event.Condition, ns string) string {
	switch cd.Reason {
	case "NotFound":
		return "the ignition-server Deployment does not exist in " + ns + ", so no machine can fetch its ignition. The control-plane-operator creates it: check that operator (management cluster)."
	case "WaitingForAvailable":
		return "the ignition-server Deployment in " + ns + " is not Available, so machines cannot fetch their ignition. Check its pods: scheduling, image pulls, crashes (management cluster)."
	}
	return "the ignition server is not available (" + firstNonEmpty(cd.Message, "no message") + "). Check the ignition-server Deployment in " + ns + " (management cluster)."
}

// poolEndpointCause reads a NodePool's IgnitionEndpointAvailable=False
// (nodepool/conditions.go:272-348; reasons nodepool_conditions.go:130-131).
func poolEndpointCause(cd event.Condition, ns string) string {
	switch cd.Reason {
	case "IgnitionEndpointMissing":
		return "the HostedCluster publishes no ignition endpoint yet (status.ignitionEndpoint), so the NodePool cannot create machines that fetch it. Check the ignition-server Route or Service in " + ns + " (management cluster)."
	case "IgnitionCACertMissing":
		return "the ignition server's CA Secret is missing or has no tls.crt (" + firstNonEmpty(cd.Message, "no message") + "), so machines cannot verify the endpoint. Check the ignition-server CA Secret in " + ns + " (management cluster)."
	case "ExternalDNSHostNotReachable":
		return "the ignition endpoint's DNS name does not resolve (" + firstNonEmpty(cd.Message, "no message") + "), so machines cannot reach it. Check the DNS record of the ignition endpoint."
	}
	return "the NodePool has no usable ignition endpoint (" + firstNonEmpty(cd.Message, "no message") + ")."
}

// ignitionCause is the cause of a NodePool's ReachedIgnitionEndpoint
// failure by its reason, and what to check: one sentence each.
func ignitionCause(reason, endpoint, ns string) string {
	switch reason {
	case "IgnitionEndpointMissing":
		return "the HostedCluster publishes no ignition endpoint yet, so new machines have nothing to fetch. Check the ignition-server Route or Service in " + ns + " (management cluster)."
	case "IgnitionCACertMissing":
		return "the ignition server's CA certificate is missing, so machines cannot verify the endpoint. Check the ignition-server CA Secret in " + ns + " (management cluster)."
	case "NotFound", "FailedToGet":
		return "HyperShift could not read what it needs to serve the NodePool's ignition (the condition message names it). Check the NodePool's token and user-data Secrets and the ignition-server pods in " + ns + " (management cluster)."
	}
	return "the machines have not fetched their ignition from " + endpoint + ", so they never become nodes. Check that the machines reach it (a NetworkPolicy on KubeVirt, a NodePort ignition endpoint not reachable from the VM network, a proxy) and the ignition-server pods in " + ns + "."
}
