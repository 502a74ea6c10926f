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
)

// reasonNoWorkerNodes is the DataPlaneConnectionAvailable reason that the
// rule explaining the nodes (proxy-tunnel, nodes-notready) explains too
// when every node is down.
const reasonNoWorkerNodes = "NoWorkerNodesAvailable"

// conditionKey is the symptom key of a HostedCluster condition,
// "cond/<Type>": a rule that explains the condition's cause names it, and
// the rule reporting the condition itself leaves it out.
func (c *Cluster) conditionKey(condType string) string { return "cond/" + condType }

// poolConditionKey is the symptom key of a NodePool condition.
func poolConditionKey(ns, name, condType string) string {
	return "cond/nodepool/" + ns + "/" + name + "/" + condType
}

// hcFalse returns the HostedCluster's condition of type condType when it
// is False.
func (c *Cluster) hcFalse(condType string) (event.Condition, bool) {
	hc, ok := c.live()
	if !ok {
		return event.Condition{}, false
	}
	for _, cd := range hc.Conditions {
		if cd.Type == condType && cd.Status == event.ConditionFalse {
			return cd, true
		}
	}
	return event.Condition{}, false
}

// hcFalseUnexplained is hcFalse for a condition no earlier rule explains.
func (c *Cluster) hcFalseUnexplained(condType string, x Explained) (event.Condition, bool) {
	cd, ok := c.hcFalse(condType)
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
// lastTransitionTime (else when the HostedCluster was observed).
func (c *Cluster) condEvidence(cd event.Condition) Evidence {
	return Evidence{At: firstTime(cd.LastTransitionTime, c.hc.st.obs), Kind: "condition", Object: c.hcObject(), Text: condText(cd)}
}

// explainCond adds a False condition that d explains: its key to the
// symptoms and the condition to the evidence, unless an earlier rule
// explains it. It reports whether it did.
func (c *Cluster) explainCond(d *Diagnosis, condType string, x Explained, pred func(event.Condition) bool) bool {
	cd, ok := c.hcFalseUnexplained(condType, x)
	if !ok || (pred != nil && !pred(cd)) {
		return false
	}
	d.Symptoms = append(d.Symptoms, c.conditionKey(condType))
	if !x.brief {
		d.Evidence = append(d.Evidence, c.condEvidence(cd))
	}
	return true
}

// allNodesDown reports whether the cluster has nodes and none is Ready.
func (c *Cluster) allNodesDown() bool {
	n := c.Nodes()
	if n.Summary {
		return n.Total > 0 && n.Ready == 0
	}
	return n.Total > 0 && c.problemNodes() == n.Total
}

// noWorkersLeft reports, for DataPlaneConnectionAvailable=False, that
// its reason is NoWorkerNodesAvailable and every node is down: the rule
// that explains the nodes explains it too. The reason is checked first,
// as counting the nodes is the dearer part.
func (c *Cluster) noWorkersLeft(cd event.Condition) bool {
	return cd.Reason == reasonNoWorkerNodes && c.allNodesDown()
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

// controlPlaneUnreachable: HyperShift reports that the workers cannot
// reach the API server (ControlPlaneConnectionAvailable=False), and no
// earlier rule (proxy-tunnel, etcd-unavailable, hosted-api-unreachable)
// explains why.
func controlPlaneUnreachable(c *Cluster, _ time.Time, x Explained) (Diagnosis, bool) {
	cd, ok := c.hcFalseUnexplained(condControlPlaneConnection, x)
	if !ok {
		return Diagnosis{}, false
	}
	d := Diagnosis{Severity: SeverityCritical, Symptoms: []string{c.conditionKey(condControlPlaneConnection)}}
	if x.brief {
		return d, true
	}
	ns := c.controlPlaneNamespace()
	d.Title = fmt.Sprintf("Workers of %s cannot reach the API server (%s)", c.label(), condShort(cd))
	d.Evidence = []Evidence{c.condEvidence(cd)}
	failing := 0
	for _, e := range c.apiProxies.live() {
		if e.rec.connectFailure {
			failing++
			d.Evidence = append(d.Evidence, apiProxyEvidence(e))
		}
	}
	if cd.Reason == "ConnectionCheckStale" {
		d.Severity = SeverityWarning
		d.RootCause = fmt.Sprintf("HyperShift's check that the workers of %s reach the API server is older than 5 minutes (ConnectionCheckStale), so nobody is verifying the data plane's path to the control plane. Check the control-plane-operator and hosted-cluster-config-operator in %s (management cluster).", c.key.Cluster, ns)
		d.Confidence = Confidence{ConfidenceMedium, "the condition says the check is stale, not that the connection fails"}
		d.NextSteps = []string{
			fmt.Sprintf("oc get pods -n %s -l 'app in (control-plane-operator,hosted-cluster-config-operator)' (management cluster): running and ready?", ns),
			fmt.Sprintf("oc logs -n %s deployment/hosted-cluster-config-operator --tail=100 (management cluster)", ns),
		}
	} else {
		d.RootCause = fmt.Sprintf("HyperShift reports that the workers of %s cannot reach the hosted API server (%s). Check the kube-apiserver-proxy on the workers and the path to the API endpoint: a proxy refusing CONNECT, a firewall, or the API's Route, load balancer or NodePort.", c.key.Cluster, firstNonEmpty(cd.Reason, "no reason given"))
		d.Confidence = Confidence{ConfidenceMedium, "HyperShift's condition is observed directly; which hop of the path fails the bot does not see"}
		if failing > 0 {
			d.Confidence = Confidence{ConfidenceHigh, fmt.Sprintf("HyperShift's condition and %s agree", plural(failing, "kube-apiserver-proxy with CONNECT failures", "kube-apiserver-proxies with CONNECT failures"))}
		}
		d.NextSteps = []string{
			"oc get pods -n kube-system -l k8s-app=kube-apiserver-proxy -o wide (hosted cluster): one per worker, running?",
			"oc logs -n kube-system kube-apiserver-proxy-<node> --all-containers --tail=50 (hosted cluster): CONNECT or dial errors?",
			fmt.Sprintf("oc get pods -n %s -l app=kube-apiserver (management cluster): is the API server itself up?", ns),
		}
	}
	d.NextSteps = append(d.NextSteps, fmt.Sprintf("oc get hostedcluster -n %s %s -o jsonpath='{.status.conditions[?(@.type==\"%s\")]}' (management cluster)", c.key.Cluster.Namespace, c.key.Cluster.Name, condControlPlaneConnection))
	return d, true
}

// condShort is "Type=Status, Reason" for a title.
func condShort(cd event.Condition) string {
	s := cd.Type + "=" + string(cd.Status)
	if cd.Reason != "" {
		s += ", " + cd.Reason
	}
	return s
}

// konnectivityDown: the konnectivity tunnel between the control plane and
// the workers is down (DataPlaneConnectionAvailable=False), so everything
// the API server reaches on the workers fails: oc logs, oc exec,
// port-forward, webhooks and aggregated APIs served there.
func konnectivityDown(c *Cluster, _ time.Time, x Explained) (Diagnosis, bool) {
	cd, ok := c.hcFalseUnexplained(condDataPlaneConnection, x)
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
	var cause, check string
	switch cd.Reason {
	case reasonNoWorkerNodes:
		cause = "no worker node is available to run the konnectivity agents"
		check = "Check why the cluster has no Ready worker (NodePools, machines, VMs)"
	case "KonnectivityAgentPodsNotFound":
		cause = "no konnectivity-agent pod runs in kube-system of the hosted cluster"
		check = "Check the konnectivity-agent DaemonSet in the hosted cluster and the konnectivity server in the control-plane namespace " + ns
	case "LogsAccessFailed":
		cause = "HyperShift's test of reading logs through it failed"
		check = "Check the konnectivity-agent pods in kube-system of the hosted cluster (connection read failure) and the konnectivity server in " + ns + " (No agent available)"
	default:
		cause = "HyperShift reports " + firstNonEmpty(cd.Reason, "no reason")
		check = "Check the konnectivity-agent pods in kube-system of the hosted cluster and the konnectivity server in " + ns
	}
	d.RootCause = fmt.Sprintf("Konnectivity between the control plane and the workers of %s is down because %s, so oc logs, oc exec, port-forward and webhooks served on the workers fail. %s.", c.key.Cluster, cause, check)
	d.Confidence = Confidence{ConfidenceMedium, "HyperShift's condition is observed directly; the agents' and the server's logs are not"}
	if cd.Reason == reasonNoWorkerNodes {
		d.NextSteps = append(d.NextSteps,
			"oc get nodes (hosted cluster): is any worker Ready?",
			fmt.Sprintf("oc get nodepool -n %s -o wide (management cluster)", c.key.Cluster.Namespace))
	}
	d.NextSteps = append(d.NextSteps,
		"oc get pods -n kube-system -l app=konnectivity-agent -o wide (hosted cluster): one running agent per worker?",
		"oc logs -n kube-system -l app=konnectivity-agent --tail=50 (hosted cluster): look for connection read failure",
		fmt.Sprintf("oc logs -n %s deployment/kube-apiserver -c konnectivity-server --tail=50 (management cluster): look for No agent available", ns))
	if hc, ok := c.live(); ok {
		spec, _ := c.effectiveProxy()
		if host, proxied := endpointProxied(spec, hc.KonnectivityEndpoint); proxied {
			d.NextSteps = append(d.NextSteps, fmt.Sprintf("spec noProxy does not exempt the konnectivity endpoint %s (Go NO_PROXY rules): if the agents reach it through the proxy, the proxy must allow CONNECT to it, or add %s to spec.configuration.proxy.noProxy.", hc.KonnectivityEndpoint, host))
		}
	}
	return d, true
}

// etcdUnavailable: the hosted control plane's etcd is unavailable
// (EtcdAvailable=False). The API server cannot serve without it, so it
// explains the API server's unavailability and the workers' lost
// connections to the control plane.
func etcdUnavailable(c *Cluster, _ time.Time, x Explained) (Diagnosis, bool) {
	cd, ok := c.hcFalseUnexplained(condEtcdAvailable, x)
	if !ok {
		return Diagnosis{}, false
	}
	d := Diagnosis{Severity: SeverityCritical, Symptoms: []string{c.conditionKey(condEtcdAvailable)}}
	if !x.brief {
		d.Evidence = []Evidence{c.condEvidence(cd)}
	}
	if kas, ok := c.hcFalse(condKubeAPIServerAvailable); ok && !x.Has(c.apiKey()) {
		d.Symptoms = append(d.Symptoms, c.apiKey())
		if !x.brief {
			d.Evidence = append(d.Evidence, c.condEvidence(kas))
		}
	}
	c.explainCond(&d, condControlPlaneConnection, x, nil)
	c.explainCond(&d, condDataPlaneConnection, x, nil)
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
