package diagnose

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hcpbot/hcpbot/event"
)

// The reasons and messages of the connection conditions, as the
// hosted-cluster-config-operator writes them
// (control-plane-operator/hostedclusterconfigoperator/controllers/resources/resources.go
// at openshift/hypershift 3ee9615, "HCCO" below).
const (
	reasonAgentPodsNotFound  = "KonnectivityAgentPodsNotFound" // HCCO:1707-1713, two messages
	reasonLogsAccessFailed   = "LogsAccessFailed"              // declared (API:349), never set
	reasonReconciliationErr  = "ReconciliationError"           // HCCO:1681-1687, False: the agent pods could not be listed
	reasonKASAccessFailed    = "KASAccessFailed"               // HCCO:1911-1926
	reasonConnectionStale    = "ConnectionCheckStale"          // HCCO:1928-1933
	msgNoAgentRunning        = "Couldn't find any konnectivity-agent running"
	msgAgentLogsUnreadable   = "failed to read konnectivity-agent logs"
	msgNoCheckRecorded       = "no successful connectivity check recorded"
	msgLastSucceededUnparsed = "failed to parse lastSucceeded"
)

// connectivityCheckName is the hosted cluster's record of the workers
// reaching the API server (HCCO manifests/kasconnectionchecker.go:10-17).
const connectivityCheckName = "kube-system/control-plane-connectivity-check"

// controlPlaneUnreachable reads ControlPlaneConnectionAvailable=False as
// the HCCO writes it (HCCO:1874-1939): KASAccessFailed (no success
// recorded, or an unparsable stamp) and ConnectionCheckStale (the last
// success is older than 5 minutes: the checker stamps only on success,
// so a stamp that stops moving is the workers failing to reach the API
// server) are the connection failing. Its Unknown shapes belong to
// no-workers (NoWorkerNodesAvailable) and connection-unknown
// (ReconcileError, ConfigMapNotFound).
func controlPlaneUnreachable(c *Cluster, _ time.Time, x Explained) (Diagnosis, bool) {
	cd, ok := c.hcCondUnexplained(condControlPlaneConnection, connectionFault, x)
	if !ok {
		return Diagnosis{}, false
	}
	d := Diagnosis{Severity: SeverityCritical, Symptoms: []string{c.conditionKey(condControlPlaneConnection)}}
	if x.brief {
		return d, true
	}
	ns := c.controlPlaneNamespace()
	d.Evidence = append(d.Evidence, c.condEvidence(cd))
	check := c.connectivityEvidence()
	if check != nil {
		d.Evidence = append(d.Evidence, *check)
	}
	d.Title = fmt.Sprintf("Workers of %s cannot reach the API server (%s)", c.label(), condShort(cd))
	var what string
	switch {
	case cd.Reason == reasonConnectionStale:
		what = "the workers' last successful request to the API server is older than 5 minutes: the kas-connection-checker pods stamp " + connectivityCheckName + " about every 60 s, only on success, so the stamp stopped moving because their requests fail"
	case cd.Reason == reasonKASAccessFailed && strings.Contains(cd.Message, msgNoCheckRecorded):
		what = "no request from the workers to the API server has ever succeeded: the kas-connection-checker pods have recorded no success in " + connectivityCheckName
	case cd.Reason == reasonKASAccessFailed && strings.Contains(cd.Message, msgLastSucceededUnparsed):
		what = "the workers' record of reaching the API server (" + connectivityCheckName + ") holds no readable time, so no success can be shown"
	default:
		what = "HyperShift reports the workers' connection to the API server failing (" + firstNonEmpty(cd.Reason, "no reason given") + ")"
	}
	d.RootCause = fmt.Sprintf("On %s, %s. Each request goes from the worker to kubernetes.default.svc through the kube-apiserver-proxy on the node to the API endpoint; check that path: a proxy refusing CONNECT, a firewall, or the API's Route, load balancer or NodePort.", c.key.Cluster, what)
	d.Confidence = Confidence{ConfidenceMedium, "HyperShift's condition is observed directly; which hop of the path fails the bot does not see"}
	failing := 0
	for _, e := range c.apiProxies.live() {
		if e.rec.connectFailure {
			failing++
			d.Evidence = append(d.Evidence, apiProxyEvidence(e))
		}
	}
	switch {
	case failing > 0:
		d.Confidence = Confidence{ConfidenceHigh, fmt.Sprintf("HyperShift's condition and %s agree", plural(failing, "kube-apiserver-proxy with CONNECT failures", "kube-apiserver-proxies with CONNECT failures"))}
	case check != nil && c.connectivity[""].rec.problem():
		d.Confidence = Confidence{ConfidenceHigh, "HyperShift's condition and the hosted cluster's own connectivity record agree"}
	}
	d.NextSteps = []string{
		"oc get cm -n kube-system control-plane-connectivity-check -o jsonpath='{.data.lastSucceeded}' (hosted cluster): the last success, UTC",
		"oc get deploy,pods -n kube-system -l app=kas-connection-checker -o wide (hosted cluster): checker pods running on the workers?",
		"oc get pods -n kube-system -l k8s-app=kube-apiserver-proxy -o wide (hosted cluster): one per worker, running?",
		"oc logs -n kube-system kube-apiserver-proxy-<node> --all-containers --tail=50 (hosted cluster): CONNECT or dial errors?",
		fmt.Sprintf("oc get pods -n %s -l app=kube-apiserver (management cluster): is the API server itself up?", ns),
	}
	d.NextSteps = append(d.NextSteps, fmt.Sprintf("oc get hostedcluster -n %s %s -o jsonpath='{.status.conditions[?(@.type==\"%s\")]}' (management cluster)", c.key.Cluster.Namespace, c.key.Cluster.Name, condControlPlaneConnection))
	return d, true
}

// connectivityEvidence is the hosted cluster's connectivity-check record
// as evidence, nil when the agent reported none.
func (c *Cluster) connectivityEvidence() *Evidence {
	es := c.connectivity.live()
	if len(es) != 1 {
		return nil
	}
	e := es[0]
	r := e.rec
	obj := "configmap/" + connectivityCheckName
	ev := Evidence{At: firstTime(r.observedAt, e.since), Kind: "connectivity", Object: obj}
	switch {
	case r.missing:
		ev.Text = "the ConfigMap does not exist"
	case r.lastSucceeded.IsZero() && r.raw != "":
		ev.Text = fmt.Sprintf("lastSucceeded %q is not a time", r.raw)
	case r.lastSucceeded.IsZero():
		ev.Text = "no lastSucceeded: no successful check recorded"
	default:
		ev.Text = "lastSucceeded " + r.lastSucceeded.Format(time.RFC3339)
		if r.stale {
			// The stamp stopped moving: the failure began at it.
			ev.At = r.lastSucceeded
			ev.Text += fmt.Sprintf(", stale (older than %s when observed at %s)", firstNonZero(r.staleAfter, 5*time.Minute), r.observedAt.Format(time.RFC3339))
		}
	}
	ev.Text = clip(ev.Text, maxEvidenceText)
	return &ev
}

func firstNonZero(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// noWorkersAvailable: HyperShift finds no Ready, schedulable node
// (Unknown/NoWorkerNodesAvailable on both connection conditions, HCCO:1675-1680,
// 1888-1892; support/util/util.go:568-590 counts the nodes) and no rule
// about the nodes explained it: the cluster has no node, or every Ready
// node is cordoned. A day-2 cluster in that state runs nothing.
func noWorkersAvailable(c *Cluster, _ time.Time, x Explained) (Diagnosis, bool) {
	d := Diagnosis{Severity: SeverityCritical}
	dp := c.explainCond(&d, condDataPlaneConnection, x, noWorkers)
	cp := c.explainCond(&d, condControlPlaneConnection, x, noWorkers)
	if !dp && !cp {
		return Diagnosis{}, false
	}
	if x.brief {
		return d, true
	}
	n := c.Nodes()
	var what, fix string
	seenReady := n.Ready
	if !n.Summary {
		seenReady = n.Total - c.problemNodes()
	}
	switch {
	case n.Total == 0:
		what = "has no nodes at all"
		fix = "Check its NodePools (replicas, autoscaling) and their machines: were the workers scaled to zero, deleted, or never created?"
	case n.Summary && n.Ready > 0 && n.Available() == 0:
		what = fmt.Sprintf("has %s, but every one is cordoned (spec.unschedulable), and HyperShift counts only Ready, schedulable nodes as available workers", plural(n.Ready, "Ready node", "Ready nodes"))
		fix = "Uncordon the nodes once their maintenance is over (oc adm uncordon <node>, hosted cluster), or add workers."
	case seenReady > 0:
		what = fmt.Sprintf("has no available worker although the agent sees %s: Ready nodes that are cordoned do not count (this agent reports no cordoned count), or the condition lags", plural(seenReady, "Ready node", "Ready nodes"))
		fix = "Check the nodes for SchedulingDisabled (oc get nodes, hosted cluster) and uncordon them when their maintenance is over."
	default:
		what = fmt.Sprintf("has %s and none is Ready and schedulable", plural(n.Total, "node", "nodes"))
		fix = "Check why its nodes are not Ready (kubelet, VMs, network)."
	}
	cond, _ := c.hcCond(condDataPlaneConnection, noWorkers)
	if !dp {
		cond, _ = c.hcCond(condControlPlaneConnection, noWorkers)
	}
	d.Title = fmt.Sprintf("No worker of %s is available (%s)", c.label(), condShort(cond))
	d.RootCause = fmt.Sprintf("HyperShift reports that %s %s, so nothing runs on it: workloads, ingress, konnectivity (oc logs, oc exec) and the check that the workers reach the API server, which is why the connection conditions are Unknown rather than False. %s", c.key.Cluster, what, fix)
	d.Confidence = Confidence{ConfidenceHigh, "HyperShift's count of available workers and the agent's node summary agree"}
	if !n.Summary {
		d.Confidence = Confidence{ConfidenceMedium, "HyperShift counts no available worker; the agent sent no node summary to confirm it"}
	}
	for _, e := range c.nodePools.visible(true) {
		text := fmt.Sprintf("NodePool %s: %d current replicas", e.rec.name, e.rec.current)
		if e.rec.autoscaled {
			text += ", autoscaled"
		} else {
			text += fmt.Sprintf(" of %d wanted", e.rec.replicas)
		}
		d.Evidence = append(d.Evidence, Evidence{At: e.since, Kind: "nodepool-size", Object: nodePoolKey(e.rec.namespace, e.rec.name), Text: text})
	}
	if n.Summary {
		d.Evidence = append(d.Evidence, Evidence{At: c.summary[""].since, Kind: "nodes", Object: c.hcObject(),
			Text: fmt.Sprintf("%s: %d Ready, %d cordoned, %d NotReady, %d Unknown", plural(n.Total, "node", "nodes"), n.Ready, n.Cordoned, n.NotReady, n.Unknown)})
	}
	d.NextSteps = []string{
		"oc get nodes -o wide (hosted cluster): Ready? SchedulingDisabled?",
		fmt.Sprintf("oc get nodepool -n %s -o wide (management cluster): replicas and current nodes", c.key.Cluster.Namespace),
		fmt.Sprintf("oc get machines.cluster.x-k8s.io -n %s (management cluster): are the machines there and running?", c.controlPlaneNamespace()),
	}
	return d, true
}

// konnectivityDown: the konnectivity tunnel between the control plane and
// the workers is down (DataPlaneConnectionAvailable, HCCO:1663-1722), so
// everything the API server reaches on the workers fails: oc logs, oc
// exec, port-forward, webhooks and aggregated APIs served there.
// KonnectivityAgentPodsNotFound has two messages, and only the message
// tells them apart: no agent pod Running, or agents Running whose logs the
// API server cannot read through the tunnel. The hosted cluster's
// aggregated APIServices sharpen where the tunnel breaks.
func konnectivityDown(c *Cluster, _ time.Time, x Explained) (Diagnosis, bool) {
	cd, ok := c.hcCondUnexplained(condDataPlaneConnection, connectionFault, x)
	if !ok {
		return Diagnosis{}, false
	}
	d := Diagnosis{Severity: SeverityWarning, Symptoms: []string{c.conditionKey(condDataPlaneConnection)}}
	if x.brief {
		return d, true
	}
	ns := c.controlPlaneNamespace()
	d.Title = fmt.Sprintf("Konnectivity of %s is down: oc logs and oc exec fail (%s)", c.label(), condShort(cd))
	d.Evidence = []Evidence{c.condEvidence(cd)}
	openshift, dataPlane := c.failingAPIServices()
	for _, e := range append(slices.Clone(openshift), dataPlane...) {
		d.Evidence = append(d.Evidence, apiServiceEvidence(e))
	}
	d.Evidence = capEvidence(d.Evidence, maxEvidencePerKind+1, "APIServices not Available")
	var cause, check string
	agentsRun := false
	switch {
	case cd.Reason == reasonAgentPodsNotFound && strings.Contains(cd.Message, msgNoAgentRunning):
		cause = "no konnectivity-agent pod is Running in kube-system of the hosted cluster"
		check = "Check the konnectivity-agent DaemonSet in the hosted cluster: scheduling, image pulls, crashes"
	case cd.Reason == reasonAgentPodsNotFound && strings.Contains(cd.Message, msgAgentLogsUnreadable), cd.Reason == reasonLogsAccessFailed:
		agentsRun = true
		cause = "konnectivity-agent pods are Running, but the API server cannot read their logs through the tunnel (API server → konnectivity-server → agent → kubelet): the agents are not connected to the konnectivity server, the server is down, or a proxy or firewall blocks the konnectivity endpoint"
		check = "Check the agents' connection to the konnectivity server (their logs) and the konnectivity-server container of the kube-apiserver pods in " + ns
	case cd.Reason == reasonAgentPodsNotFound:
		cause = "HyperShift finds no konnectivity-agent it can use (" + firstNonEmpty(cd.Message, "no message") + ")"
		check = "Check the konnectivity-agent pods in kube-system of the hosted cluster and the konnectivity server in " + ns
	case cd.Reason == reasonReconciliationErr:
		cause = "the hosted-cluster-config-operator could not list the konnectivity-agent pods (" + firstNonEmpty(cd.Message, "no message") + ")"
		check = "Check that the hosted API server answers from the control-plane namespace " + ns
	default:
		cause = "HyperShift reports " + firstNonEmpty(cd.Reason, "no reason")
		check = "Check the konnectivity-agent pods in kube-system of the hosted cluster and the konnectivity server in " + ns
	}
	first := fmt.Sprintf("Konnectivity between the control plane and the workers of %s is down because %s, so oc logs, oc exec, port-forward and webhooks served on the workers fail.", c.key.Cluster, cause)
	// Two sentences: the cause, then where to look; the hosted cluster's
	// APIServices, when they fail, say where better than the condition.
	parts := []string{first}
	switch {
	case len(openshift) > 0 && (len(dataPlane) > 0 && agentsRun):
		parts = append(parts, fmt.Sprintf("The hosted cluster's aggregated APIServices fail too, both the openshift ones (%s, served from the control plane) and those served on the workers (%s): the konnectivity server itself is the likelier common point.", apiServiceNames(openshift), apiServiceNames(dataPlane)))
	case len(openshift) > 0:
		parts = append(parts, fmt.Sprintf("The hosted cluster's openshift APIServices (%s) are not Available: the API server reaches openshift-apiserver through the konnectivity server and the control-plane konnectivity-agent (hypershift#313), so that path (or openshift-apiserver itself) is likely broken, on the control-plane side.", apiServiceNames(openshift)))
	case len(dataPlane) > 0:
		parts = append(parts, fmt.Sprintf("APIServices served on the workers (%s) are not Available either, which points at the data-plane agents.", apiServiceNames(dataPlane)))
	default:
		parts = append(parts, check+".")
	}
	d.RootCause = strings.Join(parts, " ")
	d.Confidence = Confidence{ConfidenceMedium, "HyperShift's condition is observed directly; the agents' and the server's logs are not"}
	if len(openshift)+len(dataPlane) > 0 {
		d.Confidence.Why = "HyperShift's condition and the hosted cluster's APIServices agree; where the tunnel breaks is inferred from the routing, not seen"
	}
	d.NextSteps = append(d.NextSteps,
		"oc get pods -n kube-system -l app=konnectivity-agent -o wide (hosted cluster): one running agent per worker?",
		"oc logs -n kube-system -l app=konnectivity-agent --tail=50 (hosted cluster): look for connection read failure",
		fmt.Sprintf("oc logs -n %s deployment/kube-apiserver -c konnectivity-server --tail=50 (management cluster): look for No agent available", ns),
		"oc get apiservices | grep -v True (hosted cluster): FailedDiscoveryCheck on v1.*.openshift.io?")
	if len(openshift) > 0 {
		d.NextSteps = append(d.NextSteps, fmt.Sprintf("oc get pods -n %s -l app=konnectivity-agent (management cluster): the control-plane agent that carries openshift-apiserver's traffic", ns))
	}
	if hc, ok := c.live(); ok {
		spec, _ := c.effectiveProxy()
		if host, proxied := endpointProxied(spec, hc.KonnectivityEndpoint); proxied {
			d.NextSteps = append(d.NextSteps, fmt.Sprintf("spec noProxy does not exempt the konnectivity endpoint %s (Go NO_PROXY rules): if the agents reach it through the proxy, the proxy must allow CONNECT to it, or add %s to spec.configuration.proxy.noProxy.", hc.KonnectivityEndpoint, host))
		}
	}
	return d, true
}

// failingAPIServices splits the aggregated APIServices that are not
// Available into the openshift ones (v1.<group>.openshift.io, served by
// openshift-apiserver in the control plane through default/openshift-apiserver)
// and the others (served on the workers), each sorted by name.
func (c *Cluster) failingAPIServices() (openshift, dataPlane []*entry[apiServiceRec]) {
	for _, e := range c.apiServices.visible(true) {
		if e.rec.available == event.ConditionTrue {
			continue
		}
		if strings.HasSuffix(e.rec.name, ".openshift.io") || e.rec.service == "default/openshift-apiserver" {
			openshift = append(openshift, e)
		} else {
			dataPlane = append(dataPlane, e)
		}
	}
	return openshift, dataPlane
}

func apiServiceNames(es []*entry[apiServiceRec]) string {
	names := make([]string, 0, 3)
	for i, e := range es {
		if i == 3 {
			names = append(names, fmt.Sprintf("and %d more", len(es)-3))
			break
		}
		names = append(names, e.rec.name)
	}
	return strings.Join(names, ", ")
}

func apiServiceEvidence(e *entry[apiServiceRec]) Evidence {
	r := e.rec
	text := "Available=" + string(firstNonEmpty(string(r.available), "Unknown"))
	if r.reason != "" {
		text += " (" + r.reason + ")"
	}
	if r.service != "" {
		text += ", service " + r.service
	}
	if r.message != "" {
		text += ": " + r.message
	}
	return Evidence{At: firstTime(r.ltt, e.since), Kind: "apiservice", Object: "apiservice/" + r.name, Text: clip(text, maxEvidenceText)}
}

// connectionUnknown: the HCCO cannot evaluate the connection conditions
// (Unknown/ReconcileError: it cannot list the hosted cluster's Nodes or
// read the connectivity-check ConfigMap, HCCO:1668-1673, 1882-1887,
// 1904-1908; Unknown/ConfigMapNotFound: the ConfigMap is not there yet,
// HCCO:1894-1903). It comes late: what breaks the control plane (etcd,
// the API server) explains ReconcileError first, and a cluster whose
// nodes are all down is headlined by them.
func connectionUnknown(c *Cluster, _ time.Time, x Explained) (Diagnosis, bool) {
	d := Diagnosis{Severity: SeverityWarning}
	cp := c.explainCond(&d, condControlPlaneConnection, x, cannotEvaluate)
	dp := c.explainCond(&d, condDataPlaneConnection, x, cannotEvaluate)
	if !cp && !dp {
		return Diagnosis{}, false
	}
	t := condControlPlaneConnection
	if !cp {
		t = condDataPlaneConnection
	}
	cd, _ := c.hcCond(t, cannotEvaluate)
	onlyCM := cd.Reason == reasonConfigMapNotFound && !dp
	if onlyCM {
		d.Severity = SeverityInfo
	}
	if x.brief {
		return d, true
	}
	ns := c.controlPlaneNamespace()
	if check := c.connectivityEvidence(); check != nil {
		d.Evidence = append(d.Evidence, *check)
	}
	d.Title = fmt.Sprintf("HyperShift cannot tell whether the workers of %s are connected (%s)", c.label(), condShort(cd))
	if onlyCM {
		d.RootCause = fmt.Sprintf("The hosted-cluster-config-operator of %s has not found the ConfigMap %s, where the workers record reaching the API server, so it cannot evaluate ControlPlaneConnectionAvailable; it creates that ConfigMap itself, so right after creation or an upgrade this passes. If it stays, check the operator in %s (management cluster).", c.key.Cluster, connectivityCheckName, ns)
	} else {
		d.RootCause = fmt.Sprintf("The hosted-cluster-config-operator of %s cannot evaluate the workers' connections (%s: %s). It works through the hosted cluster's API server from %s: when it cannot list the Nodes or read %s, that API server is unreachable from there or refuses it (credentials, RBAC).", c.key.Cluster, condShort(cd), firstNonEmpty(cd.Message, "no message"), ns, connectivityCheckName)
	}
	d.Confidence = Confidence{ConfidenceMedium, "HyperShift says it could not check; whether the workers are connected is unknown"}
	d.NextSteps = []string{
		fmt.Sprintf("oc logs -n %s deployment/hosted-cluster-config-operator --tail=100 (management cluster)", ns),
		fmt.Sprintf("oc get pods -n %s -l app=kube-apiserver (management cluster): is the hosted API server up?", ns),
		"oc get cm -n kube-system control-plane-connectivity-check -o jsonpath='{.data.lastSucceeded}' (hosted cluster)",
	}
	return d, true
}
