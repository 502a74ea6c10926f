package diagnose

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hcpbot/hcpbot/event"
)

// The grading of nodes-notready: critical when no node is Ready, when at
// least NodesCriticalFraction of the cluster's nodes are affected (half its
// capacity is gone), or when at least NodesCriticalCount nodes are (their
// workloads are more than a large cluster's spare capacity absorbs without
// a person); a warning otherwise, so one node of 2,000 is a warning. Nodes
// that are joining (no status yet, within the grace) count in the total
// only.
const (
	NodesCriticalFraction = 0.5
	NodesCriticalCount    = 50
)

// NodeSeverity grades affected of total nodes and says why, as a sentence.
func NodeSeverity(affected, total int) (Severity, string) {
	total = max(total, affected)
	share := 100 * float64(affected) / float64(max(total, 1))
	of := fmt.Sprintf("%s of %s (%s%%)", count(affected), plural(total, "node", "nodes"), percent(share))
	switch {
	case affected >= total:
		return SeverityCritical, "Critical: no node is Ready."
	case float64(affected) >= NodesCriticalFraction*float64(total):
		return SeverityCritical, fmt.Sprintf("Critical: %s is at least half the cluster.", of)
	case affected >= NodesCriticalCount:
		return SeverityCritical, fmt.Sprintf("Critical: %s is at least %d nodes.", of, NodesCriticalCount)
	}
	return SeverityWarning, fmt.Sprintf("Warning: %s is less than half the cluster and fewer than %d nodes.", of, NodesCriticalCount)
}

// percent writes a share with the precision that keeps it nonzero.
func percent(p float64) string {
	if p >= 10 || p == 0 {
		return strconv.FormatFloat(p, 'f', 0, 64)
	}
	if p >= 1 {
		return strconv.FormatFloat(p, 'f', 1, 64)
	}
	return strconv.FormatFloat(p, 'f', 2, 64)
}

// splitNodes counts problem nodes: NotReady (a Ready condition other than
// True) and not joining.
func splitNodes(nodes []*entry[nodeRec]) (notReady, notJoining int) {
	for _, e := range nodes {
		if e.rec.notJoining {
			notJoining++
		} else {
			notReady++
		}
	}
	return notReady, notJoining
}

// nodesTitle: "1 of 2,000 nodes NotReady", "3 of 2,003 nodes not
// joining", "5 of 2,005 nodes NotReady or not joining".
func nodesTitle(nodes []*entry[nodeRec], total int) string {
	notReady, notJoining := splitNodes(nodes)
	what := "NotReady"
	switch {
	case notReady == 0:
		what = "not joining"
	case notJoining > 0:
		what = "NotReady or not joining"
	}
	return fmt.Sprintf("%s of %s %s", count(len(nodes)), plural(total, "node", "nodes"), what)
}

// nodesPart is the nodes' share of a symptom list: "2 of 3 nodes are
// NotReady", "1 of 2,000 nodes are not joining", "2 of 9 nodes are NotReady
// and 1 not joining".
func nodesPart(nodes []*entry[nodeRec], total int) string {
	notReady, notJoining := splitNodes(nodes)
	of := plural(total, "node is", "nodes are")
	switch {
	case notJoining == 0:
		return fmt.Sprintf("%s of %s NotReady", count(notReady), of)
	case notReady == 0:
		return fmt.Sprintf("%s of %s not joining (no Ready condition since creation)", count(notJoining), of)
	}
	return fmt.Sprintf("%s of %s NotReady and %s not joining", count(notReady), of, count(notJoining))
}

// nodesNotReady: NotReady nodes that no proxy rule explains.
func nodesNotReady(c *Cluster, _ time.Time, x Explained) (Diagnosis, bool) {
	if c.Gone() {
		return Diagnosis{}, false
	}
	if x.brief {
		var keys []string
		for _, e := range c.nodes {
			if !e.gone && e.rec.notReady() && !x.Has(nodeKey(e.rec.name)) {
				keys = append(keys, nodeKey(e.rec.name))
			}
		}
		d := Diagnosis{Symptoms: keys}
		if len(keys) > 0 {
			c.explainCond(&d, condDataPlaneConnection, x, c.noWorkersLeft)
			c.explainCond(&d, condControlPlaneConnection, x, c.noWorkersLeft)
		}
		return d, len(keys) > 0
	}
	nodes := c.notReadyNodes(x)
	if len(nodes) == 0 {
		return Diagnosis{}, false
	}
	total := c.nodeTotal()
	sev, why := NodeSeverity(len(nodes), total)
	d := Diagnosis{
		Severity: sev,
		Title:    nodesTitle(nodes, total) + " in " + c.label(),
		Nodes:    &NodeImpact{Affected: len(nodes), Total: max(total, len(nodes)), Text: nodesPart(nodes, max(total, len(nodes)))},
	}
	var ev, vmEv []Evidence
	vmDown, vmKnown := 0, 0
	for _, e := range nodes {
		ev = append(ev, nodeEvidence(e))
		d.Symptoms = append(d.Symptoms, nodeKey(e.rec.name))
		if l := c.launcherFor(e.rec.name); l != nil {
			vmKnown++
			vmEv = append(vmEv, launcherEvidence(l))
			if l.rec.phase != "Running" {
				vmDown++
			}
		}
	}
	d.Evidence = append(capEvidence(ev, maxEvidencePerKind, "NotReady or not joining nodes"), capEvidence(vmEv, maxEvidencePerKind, "virt-launcher pods")...)
	for _, e := range c.unhealthyPools(true) {
		d.Evidence = append(d.Evidence, poolEvidence(e, "AllNodesHealthy"))
	}
	// With no node available, HyperShift has no worker for konnectivity
	// or the connection check (both Unknown/NoWorkerNodesAvailable): those
	// conditions are this diagnosis's, not a diagnosis of their own.
	var idle []string
	for _, t := range []string{condDataPlaneConnection, condControlPlaneConnection} {
		if cd, ok := c.hcCondUnexplained(t, c.noWorkersLeft, x); ok {
			c.explainCond(&d, t, x, c.noWorkersLeft)
			idle = append(idle, condShort(cd))
		}
	}
	var stale []*entry[apiProxyRec]
	for _, e := range c.apiProxies.live() {
		if e.rec.mode == event.ProxyModeTunnel {
			stale = append(stale, e)
		}
	}

	first := nodes[0].rec
	notReady, notJoining := splitNodes(nodes)
	var head string
	switch {
	case total == 1 && notJoining == 1:
		head = "The only node is not joining"
	case total == 1:
		head = "The only node is NotReady"
	case notJoining == 0:
		head = fmt.Sprintf("%s of %s are NotReady", count(notReady), plural(total, "node", "nodes"))
	case notReady == 0:
		head = fmt.Sprintf("%s of %s are not joining", count(notJoining), plural(total, "node", "nodes"))
	default:
		head = fmt.Sprintf("%s of %s are NotReady and %s not joining", count(notReady), plural(total, "node", "nodes"), count(notJoining))
	}
	if first.notJoining {
		head += "; " + first.name + " has had no Ready condition since its creation"
		if !first.created.IsZero() {
			head += " at " + first.created.Format(time.RFC3339)
		}
	} else {
		head += "; " + first.name + " reports Ready=" + string(first.ready)
		if first.reason != "" {
			head += " (" + first.reason + ")"
		}
	}
	parts := []string{head + "."}
	if notJoining > 0 {
		grace := "the agent's join grace"
		if n := c.Nodes(); n.JoinGrace > 0 {
			grace = n.JoinGrace.String()
		}
		parts = append(parts, fmt.Sprintf("Not joining: no Ready condition more than %s after the Node was created, so its kubelet never posted status; workers that cannot reach the API server (for instance through a proxy, seed 000) look like this first.", grace))
	}
	parts = append(parts, why)
	if n := c.Nodes(); n.Summary && n.Cordoned > 0 {
		parts = append(parts, fmt.Sprintf("%s Ready but cordoned, which HyperShift does not count as available workers.", plural(n.Cordoned, "node is", "nodes are")))
	}
	if len(idle) > 0 {
		parts = append(parts, "HyperShift reports "+joinList(idle, "and")+" as a consequence: with no available worker, konnectivity (oc logs, oc exec) and the check that the workers reach the API server have nothing to run on.")
	}
	if vmDown > 0 {
		parts = append(parts, fmt.Sprintf("The VMs behind %d of them are not running (virt-launcher phase other than Running).", vmDown))
	}
	statement, known := c.proxyStatement()
	parts = append(parts, statement)
	if len(stale) > 0 && known {
		parts = append(parts, fmt.Sprintf("%s still run in tunnel mode, so the workers have not rolled out the current proxy spec yet.", plural(len(stale), "kube-apiserver-proxy pod", "kube-apiserver-proxy pods")))
		for _, e := range stale {
			d.Evidence = append(d.Evidence, apiProxyEvidence(e))
		}
	}
	d.RootCause = strings.Join(parts, " ")
	switch {
	case !known:
		d.Confidence = Confidence{ConfidenceLow, "the HostedCluster has not been seen yet, so its proxy settings could not be checked"}
	case vmDown == len(nodes):
		d.Confidence = Confidence{ConfidenceHigh, "the VMs behind every NotReady node are not running"}
	default:
		d.Confidence = Confidence{ConfidenceMedium, "NotReady is observed directly and a proxy cause is ruled out; the cause lies in the kubelet, the VM or the network, which the bot does not see"}
	}
	d.NextSteps = []string{
		fmt.Sprintf("oc describe node %s (in the hosted cluster): conditions, kubelet events.", first.name),
	}
	if vmKnown > 0 || strings.EqualFold(platformOf(c), "KubeVirt") {
		d.NextSteps = append(d.NextSteps, fmt.Sprintf("oc get vmi,pods -n %s -l kubevirt.io=virt-launcher (management cluster): is the VM %s running?", c.controlPlaneNamespace(), first.name))
	}
	d.NextSteps = append(d.NextSteps, fmt.Sprintf("oc get nodepool -n %s -o wide: is a rollout (UpdatingConfig, UpdatingVersion) replacing the nodes?", c.key.Cluster.Namespace))
	return d, true
}

func platformOf(c *Cluster) string {
	hc, _ := c.HostedCluster()
	return hc.Platform
}

// proxyStatement says why the proxy is not the cause, or that it could not
// be checked.
func (c *Cluster) proxyStatement() (string, bool) {
	hc, ok := c.live()
	if !ok {
		return "The HostedCluster has not been seen yet, so a proxy cause is not ruled out.", false
	}
	spec, _ := c.effectiveProxy()
	v := c.decide(hc, spec)
	if !v.proxy {
		return "The cluster has no HTTPS proxy, so the proxy is not the cause.", true
	}
	if v.tunnel() {
		return "The proxy spec tunnels API traffic through the proxy: " + v.explain(), true
	}
	return "No proxy cause. " + v.explain(), true
}
