package diagnose

import (
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/noproxy"
)

// The HyperShift condition types the condition rules read
// (api/hypershift/v1beta1/hostedcluster_conditions.go and the NodePool
// conditions).
const (
	condKubeAPIServerAvailable    = "KubeAPIServerAvailable"
	condControlPlaneConnection    = "ControlPlaneConnectionAvailable"
	condDataPlaneConnection       = "DataPlaneConnectionAvailable"
	condIgnitionEndpointAvailable = "IgnitionEndpointAvailable"
	condEtcdAvailable             = "EtcdAvailable"
	condValidProxyConfiguration   = "ValidProxyConfiguration"
	condLiveMigratable            = "KubeVirtNodesLiveMigratable"
	condInfraMTU                  = "ValidKubeVirtInfraNetworkMTU"
	condReachedIgnition           = "ReachedIgnitionEndpoint" // NodePool
	condAvailable                 = "Available"
	condExternalDNSReachable      = "ExternalDNSReachable"
	condReconciliationActive      = "ReconciliationActive" // HostedCluster and NodePool
	condNetworkPolicyRBAC         = "ValidKubeVirtInfraNetworkPolicyRBAC"
)

// HyperShift's condition reasons the rules read, with the file:line of
// openshift/hypershift 3ee9615 that writes them (the package
// documentation has the whole table).
const (
	// reasonStatusUnknown: the HostedControlPlane or the condition on it
	// does not exist (hostedcluster_controller.go:823-836), or external
	// DNS is not configured (hostedcontrolplane_controller.go:812-814).
	// Not reported, never a fault.
	reasonStatusUnknown = "StatusUnknown"
	// reasonNoWorkerNodes: Unknown on both connection conditions when no
	// node is Ready and schedulable (resources.go:1675-1680, 1888-1892);
	// False before 0d5f3d6b36 (2025-11), which is read the same way.
	reasonNoWorkerNodes = "NoWorkerNodesAvailable"
	// reasonReconcileError: Unknown, the HCCO could not count the nodes
	// or read the connectivity-check ConfigMap (resources.go:1668-1673,
	// 1882-1887, 1904-1908): it cannot evaluate the condition.
	reasonReconcileError = "ReconcileError"
	// reasonConfigMapNotFound: Unknown, the connectivity-check ConfigMap
	// is not there yet (resources.go:1894-1903).
	reasonConfigMapNotFound = "ConfigMapNotFound"
)

// conditionKey is the symptom key of a HostedCluster condition,
// "cond/<Type>": a rule that explains the condition's cause names it, and
// the rule reporting the condition itself leaves it out.
func (c *Cluster) conditionKey(condType string) string { return "cond/" + condType }

// poolConditionKey is the symptom key of a NodePool condition.
func poolConditionKey(ns, name, condType string) string {
	return "cond/nodepool/" + ns + "/" + name + "/" + condType
}

// condMatch picks the shapes (status, reason) of a condition a rule reads.
type condMatch func(event.Condition) bool

// isFalse matches status False.
func isFalse(cd event.Condition) bool { return cd.Status == event.ConditionFalse }

// No matcher accepts Unknown/StatusUnknown: every Unknown a rule reads
// names its own reason.

// noWorkers matches a connection condition that says no node is Ready
// and schedulable: Unknown/NoWorkerNodesAvailable (False before 2025-11).
func noWorkers(cd event.Condition) bool {
	return cd.Reason == reasonNoWorkerNodes && cd.Status != event.ConditionTrue
}

// cannotEvaluate matches Unknown/ReconcileError and Unknown/ConfigMapNotFound:
// the HCCO could not make the check.
func cannotEvaluate(cd event.Condition) bool {
	return cd.Status == event.ConditionUnknown && (cd.Reason == reasonReconcileError || cd.Reason == reasonConfigMapNotFound)
}

// lostWithControlPlane matches what a connection condition shows when the
// control plane itself is down (etcd, the API server): False, or
// Unknown/ReconcileError, since the HCCO's node list then fails.
func lostWithControlPlane(cd event.Condition) bool {
	return (cd.Status == event.ConditionFalse && !noWorkers(cd)) ||
		(cd.Status == event.ConditionUnknown && cd.Reason == reasonReconcileError)
}

// connectionFault matches a connection condition that reports the
// connection itself failing: False, except NoWorkerNodesAvailable.
func connectionFault(cd event.Condition) bool { return isFalse(cd) && !noWorkers(cd) }

// hcCond returns the HostedCluster's condition of type condType when
// match accepts it.
func (c *Cluster) hcCond(condType string, match condMatch) (event.Condition, bool) {
	hc, ok := c.live()
	if !ok {
		return event.Condition{}, false
	}
	for _, cd := range hc.Conditions {
		if cd.Type == condType {
			return cd, match(cd)
		}
	}
	return event.Condition{}, false
}

// hcCondUnexplained is hcCond for a condition no earlier rule explains.
func (c *Cluster) hcCondUnexplained(condType string, match condMatch, x Explained) (event.Condition, bool) {
	cd, ok := c.hcCond(condType, match)
	if !ok || x.Has(c.conditionKey(condType)) {
		return event.Condition{}, false
	}
	return cd, true
}

// condText writes a condition as HyperShift shows it: "Type=Status
// (Reason): message", with any PEM block cut from the message.
func condText(cd event.Condition) string {
	text := cd.Type + "=" + string(cd.Status)
	if cd.Reason != "" {
		text += " (" + cd.Reason + ")"
	}
	if msg := withoutPEM(cd.Message); msg != "" {
		text += ": " + msg
	}
	return clip(text, maxEvidenceText)
}

// withoutPEM cuts a message at the first PEM block: certificates are not
// evidence, their subject and expiry are.
func withoutPEM(s string) string {
	if i := strings.Index(s, "-----BEGIN"); i >= 0 {
		return strings.TrimSpace(s[:i]) + " [PEM omitted]"
	}
	return s
}

// condEvidence is a HostedCluster condition as evidence, at its
// lastTransitionTime (else when the HostedCluster was observed): the
// start of its current status, which may be older than its reason.
func (c *Cluster) condEvidence(cd event.Condition) Evidence {
	return Evidence{At: firstTime(cd.LastTransitionTime, c.hc.st.obs), Kind: "condition", Object: c.hcObject(), Text: condText(cd)}
}

// explainCond adds a condition match accepts that d explains: its key to
// the symptoms and the condition to the evidence, unless an earlier rule
// explains it. It reports whether it did.
func (c *Cluster) explainCond(d *Diagnosis, condType string, x Explained, match condMatch) bool {
	cd, ok := c.hcCondUnexplained(condType, match, x)
	if !ok {
		return false
	}
	d.Symptoms = append(d.Symptoms, c.conditionKey(condType))
	if !x.brief {
		d.Evidence = append(d.Evidence, c.condEvidence(cd))
	}
	return true
}

// noAvailableNodes reports whether the cluster has nodes and none counts
// as available the way HyperShift counts (support/util/util.go:568-590):
// Ready and schedulable, so Ready nodes that are all cordoned count as
// none.
func (c *Cluster) noAvailableNodes() bool {
	n := c.Nodes()
	if n.Summary {
		return n.Total > 0 && n.Available() == 0
	}
	return n.Total > 0 && c.problemNodes() == n.Total
}

// noWorkersLeft reports, for a connection condition, that its reason is
// NoWorkerNodesAvailable and no node is available: the rule that explains
// the nodes explains it too. The reason is checked first, as counting
// the nodes is the dearer part.
func (c *Cluster) noWorkersLeft(cd event.Condition) bool {
	return noWorkers(cd) && c.noAvailableNodes()
}

// endpointURL turns an endpoint as HyperShift publishes it (host, or
// host:port) into the URL a client fetches, and its host.
func endpointURL(ep string) (host, url string) {
	ep = strings.TrimSpace(ep)
	ep = strings.TrimPrefix(strings.TrimPrefix(ep, "https://"), "http://")
	ep, _, _ = strings.Cut(ep, "/")
	if ep == "" {
		return "", ""
	}
	if h, _, err := net.SplitHostPort(ep); err == nil {
		return h, "https://" + ep + "/"
	}
	if strings.Contains(ep, ":") { // a bare IPv6 address
		return ep, "https://[" + ep + "]/"
	}
	return ep, "https://" + ep + "/"
}

// endpointProxied reports whether a Go client (ignition, the konnectivity
// agent) with the HostedCluster's proxy spec sends requests to endpoint
// through the HTTPS proxy, and the endpoint's host: package noproxy's Go
// NO_PROXY matching over the spec noProxy. False without a proxy or an
// endpoint.
func endpointProxied(spec event.ProxySpec, endpoint string) (string, bool) {
	host, url := endpointURL(endpoint)
	if strings.TrimSpace(spec.HTTPSProxy) == "" || url == "" {
		return host, false
	}
	d, err := noproxy.Decide(noproxy.Go, spec.NoProxy, url)
	return host, err == nil && d == noproxy.Proxy
}

// condHead is "Type=Status (Reason)", as observed.
func condHead(cd event.Condition) string {
	s := cd.Type + "=" + string(cd.Status)
	if cd.Reason != "" {
		s += " (" + cd.Reason + ")"
	}
	return s
}

// condShort is "Type=Status, Reason" for a title.
func condShort(cd event.Condition) string {
	s := cd.Type + "=" + string(cd.Status)
	if cd.Reason != "" {
		s += ", " + cd.Reason
	}
	return s
}

// etcdUnavailable: the hosted control plane's etcd is unavailable
// (EtcdAvailable=False). The API server cannot serve without it, so it
// explains the API server's unavailability and the workers' lost
// connections to the control plane.
func etcdUnavailable(c *Cluster, _ time.Time, x Explained) (Diagnosis, bool) {
	cd, ok := c.hcCondUnexplained(condEtcdAvailable, isFalse, x)
	if !ok {
		return Diagnosis{}, false
	}
	d := Diagnosis{Severity: SeverityCritical, Symptoms: []string{c.conditionKey(condEtcdAvailable)}}
	if !x.brief {
		d.Evidence = []Evidence{c.condEvidence(cd)}
	}
	if kas, ok := c.hcCond(condKubeAPIServerAvailable, isFalse); ok && !x.Has(c.apiKey()) {
		d.Symptoms = append(d.Symptoms, c.apiKey())
		if !x.brief {
			d.Evidence = append(d.Evidence, c.condEvidence(kas))
		}
	}
	c.explainCond(&d, condControlPlaneConnection, x, lostWithControlPlane)
	c.explainCond(&d, condDataPlaneConnection, x, lostWithControlPlane)
	if x.brief {
		return d, true
	}
	ns := c.controlPlaneNamespace()
	d.Title = fmt.Sprintf("etcd of %s is unavailable (%s)", c.label(), condShort(cd))
	switch cd.Reason {
	case "EtcdWaitingForQuorum":
		d.RootCause = fmt.Sprintf("etcd of %s has no quorum, so the API server cannot read or write and the hosted cluster stalls. Check the etcd pods and their volumes in %s (management cluster): a lost member, or a disk full past the 8 GiB quota.", c.key.Cluster, ns)
	case "StatefulSetNotFound":
		d.RootCause = fmt.Sprintf("The etcd StatefulSet of %s is missing, so there is no etcd and no API server. Check the control-plane-operator in %s (management cluster), which creates it.", c.key.Cluster, ns)
	case "EtcdRecoveryJobFailed":
		d.RootCause = fmt.Sprintf("HyperShift's etcd recovery job for %s failed, so etcd stays without quorum. Check the job's log and the etcd members in %s (management cluster).", c.key.Cluster, ns)
	default:
		d.RootCause = fmt.Sprintf("etcd of %s is unavailable (%s), so the API server cannot serve. Check the etcd pods in %s (management cluster).", c.key.Cluster, firstNonEmpty(cd.Reason, "no reason given"), ns)
	}
	d.Confidence = Confidence{ConfidenceHigh, "HyperShift reports etcd unavailable; the API server cannot work without it"}
	d.NextSteps = []string{
		fmt.Sprintf("oc get statefulset,pods,pvc -n %s -l app=etcd -o wide (management cluster): members running, volumes bound?", ns),
		fmt.Sprintf("oc logs -n %s etcd-0 -c etcd --tail=100 (management cluster): quorum, leader and database space messages", ns),
		fmt.Sprintf("oc exec -n %s etcd-0 -c etcd -- df -h /var/lib (management cluster): is the data volume full?", ns),
	}
	if cd.Reason == "EtcdRecoveryJobFailed" {
		d.NextSteps = append(d.NextSteps, fmt.Sprintf("oc get jobs -n %s (management cluster), then oc logs -n %s job/<recovery job>", ns, ns))
	}
	return d, true
}
