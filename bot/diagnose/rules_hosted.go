package diagnose

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hcpbot/hcpbot/event"
)

// hostedNotWatched: the agent does not watch the hosted cluster because
// its admin kubeconfig Secret is missing, invalid or refused (an exec
// plugin, a file, ...): the bot is blind inside it until the Secret is
// fixed. The agent's reason is the root cause, word for word.
func hostedNotWatched(c *Cluster, _ time.Time, _ Explained) (Diagnosis, bool) {
	if _, ok := c.live(); !ok {
		return Diagnosis{}, false
	}
	e := c.unwatched()
	if e == nil {
		return Diagnosis{}, false
	}
	at := firstTime(e.rec.since, e.since)
	reason := firstNonEmpty(e.rec.err, "the agent did not say why")
	secret := firstNonEmpty(c.hc.p.KubeconfigSecret, "<status.kubeconfig.name>")
	d := Diagnosis{
		Severity: SeverityWarning,
		Title:    "hcpbot does not watch " + c.label() + ": " + clip(reason, maxTitleReason),
		RootCause: "The agent does not watch the hosted cluster since " + at.Format(time.RFC3339) + ": " + reason + ". " +
			"Until the admin kubeconfig Secret is fixed, the bot sees only what the management cluster shows of it (HostedCluster, NodePools, KubeVirt VMs): " +
			"nodes, operators and the API server inside it are not checked, and actions that reach into it (NodePort exposure) are refused.",
		Confidence: Confidence{ConfidenceHigh, "the agent reports why it does not watch the cluster"},
		Evidence:   []Evidence{{At: at, Kind: "reachability", Object: c.hcObject(), Text: clip("not watched: "+reason, maxEvidenceText)}},
		NextSteps: []string{
			fmt.Sprintf("oc get secret -n %s %s -o jsonpath='{.data.kubeconfig}' | base64 -d (management cluster): HyperShift writes it with an inline CA and client certificate only; hcpbot refuses exec and auth-provider plugins, file paths, insecure-skip-tls-verify, proxy-url, basic auth and impersonation", c.key.Cluster.Namespace, secret),
			"If it was changed by hand or by something other than HyperShift, treat it as a security event: find who wrote it (audit log) before restoring it.",
		},
	}
	return d, true
}

// maxTitleReason bounds the reason quoted in a title.
const maxTitleReason = 160

// hostedAPIUnreachable: the agent's probe fails or HyperShift reports the
// kube-apiserver unavailable. A cluster the agent does not watch has no
// probe; that is hostedNotWatched.
func hostedAPIUnreachable(c *Cluster, _ time.Time, x Explained) (Diagnosis, bool) {
	hc, ok := c.live()
	if !ok || x.Has(c.apiKey()) {
		return Diagnosis{}, false
	}
	var probe *entry[reachRec]
	if es := c.reach.live(); len(es) == 1 && !es[0].rec.reachable && !es[0].rec.unwatched {
		probe = es[0]
	}
	var conds []event.Condition
	apiDown, lbDown, dnsDown := false, false, false
	for _, cd := range hc.Conditions {
		if cd.Status != event.ConditionFalse {
			continue
		}
		switch {
		case cd.Type == condKubeAPIServerAvailable:
			apiDown = true
		case cd.Type == condAvailable && cd.Reason == reasonKASLoadBalancerNotReachable:
			lbDown = true
		case cd.Type == condAvailable:
		case cd.Type == condExternalDNSReachable && !x.Has(c.conditionKey(condExternalDNSReachable)):
			dnsDown = true
		default:
			continue
		}
		conds = append(conds, cd)
	}
	if probe == nil && !apiDown && !lbDown && !dnsDown {
		return Diagnosis{}, false
	}
	d := Diagnosis{
		Severity: SeverityCritical,
		Title:    "API server of " + c.label() + " is unreachable",
		Symptoms: []string{c.apiKey()},
	}
	if probe == nil && !apiDown && !lbDown {
		// Only the API's name does not resolve from the control plane:
		// clients by IP, and those with their own resolver, still reach it.
		d.Severity = SeverityWarning
		d.Title = "API hostname of " + c.label() + " does not resolve"
	}
	for _, cd := range conds {
		d.Symptoms = append(d.Symptoms, c.conditionKey(cd.Type))
	}
	// Without the API server the workers lose their connection to the
	// control plane and konnectivity its agents: those conditions follow.
	cp := c.explainCond(&d, condControlPlaneConnection, x, lostWithControlPlane)
	dp := c.explainCond(&d, condDataPlaneConnection, x, lostWithControlPlane)
	if x.brief {
		return d, true
	}
	var parts []string
	if probe != nil {
		at := probe.rec.since
		if at.IsZero() {
			at = probe.since
		}
		text := "probe of " + firstNonEmpty(probe.rec.endpoint, "the API server") + " fails"
		if probe.rec.err != "" {
			text += ": " + probe.rec.err
		}
		d.Evidence = append(d.Evidence, Evidence{At: at, Kind: "reachability", Object: c.hcObject(), Text: clip(text, maxEvidenceText)})
		parts = append(parts, fmt.Sprintf("The agent cannot reach the hosted API server at %s since %s.", firstNonEmpty(probe.rec.endpoint, "its endpoint"), at.Format(time.RFC3339)))
	}
	for _, cd := range conds {
		d.Evidence = append(d.Evidence, c.condEvidence(cd))
		switch {
		case cd.Type == condKubeAPIServerAvailable:
			parts = append(parts, "HyperShift reports "+condShort(cd)+" for the HostedCluster.")
		case cd.Type == condAvailable && cd.Reason == reasonKASLoadBalancerNotReachable:
			parts = append(parts, fmt.Sprintf("HyperShift's health check of the API endpoint fails (%s: %s): the load balancer, Route or NodePort that publishes the API does not answer healthy, so clients outside the control plane, the workers included, cannot reach it.", condShort(cd), firstNonEmpty(cd.Message, "no message")))
		case cd.Type == condExternalDNSReachable:
			parts = append(parts, fmt.Sprintf("The API server's external hostname does not resolve from the control plane (%s: %s): the DNS record is missing or not propagated, so clients that use the name cannot reach the API.", condShort(cd), firstNonEmpty(cd.Message, "no message")))
		}
	}
	if cp || dp {
		var following []string
		for _, t := range []string{condControlPlaneConnection, condDataPlaneConnection} {
			if cd, ok := c.hcCond(t, lostWithControlPlane); ok && slices.Contains(d.Symptoms, c.conditionKey(t)) {
				following = append(following, condShort(cd))
			}
		}
		parts = append(parts, "The workers' lost connection to the control plane ("+joinList(following, "and")+") follows from it.")
	}
	parts = append(parts, "Nodes, operators and the bot's own view of the hosted cluster depend on it; the cause is in the control plane or on the path to it, which the bot does not see.")
	d.RootCause = strings.Join(parts, " ")
	switch {
	case probe != nil && (apiDown || lbDown):
		d.Confidence = Confidence{ConfidenceHigh, "the agent's probe and HyperShift's condition agree"}
	case probe != nil:
		d.Confidence = Confidence{ConfidenceMedium, "only the agent's probe fails; HyperShift does not report the API server down, so the path from the agent may be at fault"}
	default:
		d.Confidence = Confidence{ConfidenceMedium, "only HyperShift's condition reports it; the agent's probe does not fail"}
	}
	ns := c.controlPlaneNamespace()
	d.NextSteps = []string{
		fmt.Sprintf("oc get pods -n %s -l app=kube-apiserver (management cluster): are the kube-apiserver pods running and ready?", ns),
		fmt.Sprintf("oc get hostedcluster -n %s %s -o jsonpath='{.status.conditions}'", c.key.Cluster.Namespace, c.key.Cluster.Name),
		"Check the route, load balancer or NodePort that publishes the API endpoint, from the management cluster and from a worker.",
	}
	if dnsDown {
		host := "<API hostname>"
		if hc.APIServer != nil && hc.APIServer.Host != "" {
			host = hc.APIServer.Host
		}
		d.NextSteps = append(d.NextSteps, fmt.Sprintf("dig +short %s (from the management cluster and from a client): does the API hostname resolve? Check the external-dns records of the cluster's DNS zone", host))
	}
	if lbDown {
		d.NextSteps = append(d.NextSteps, fmt.Sprintf("oc get svc,route -n %s | grep kube-apiserver (management cluster): does the load balancer have an ingress address, does the Route exist?", ns))
	}
	return d, true
}

// reasonKASLoadBalancerNotReachable is Available=False when HyperShift's
// health check of the API endpoint (load balancer, Route or NodePort)
// fails (API:328; hostedcontrolplane_controller.go:929-931, 955-1043).
const reasonKASLoadBalancerNotReachable = "KASLoadBalancerNotReachable"

// reasonComponentsNotAvailable is Available=False while control-plane
// components are not Available (API:361; hostedcontrolplane_controller.go:932-937,
// 1073-1097). HyperShift checks the components only while Available is
// not True (hostedcontrolplane_controller.go:825-829), so the reason
// shows during bring-up, or after Available went False for another
// reason: not when one component fails on a healthy cluster.
const reasonComponentsNotAvailable = "ComponentsNotAvailable"

// controlPlaneComponents: the hosted control plane is not Available
// because some of its components are not (Available=False,
// ComponentsNotAvailable). The message names them.
func controlPlaneComponents(c *Cluster, _ time.Time, x Explained) (Diagnosis, bool) {
	d := Diagnosis{Severity: SeverityWarning}
	if !c.explainCond(&d, condAvailable, x, func(cd event.Condition) bool {
		return isFalse(cd) && cd.Reason == reasonComponentsNotAvailable
	}) {
		return Diagnosis{}, false
	}
	if x.brief {
		return d, true
	}
	cd, _ := c.hcCond(condAvailable, isFalse)
	ns := c.controlPlaneNamespace()
	names := ""
	if _, list, ok := strings.Cut(cd.Message, "available:"); ok {
		names = strings.TrimSpace(list)
	}
	switch {
	case names != "":
		d.Title = fmt.Sprintf("Control plane of %s is not available: waiting for %s", c.label(), clip(names, maxTitleReason))
		d.RootCause = fmt.Sprintf("HyperShift reports the hosted control plane of %s not Available because these components are not: %s. HyperShift checks the components only while the control plane is not yet Available, so this is a cluster coming up (or one whose control plane already went unavailable): if it lasts, look at those components' pods in %s (management cluster).", c.key.Cluster, names, ns)
	default:
		d.Title = fmt.Sprintf("Control plane of %s is not available (%s)", c.label(), condShort(cd))
		d.RootCause = fmt.Sprintf("HyperShift reports the hosted control plane of %s not Available: %s. This shows while the control plane comes up; if it lasts, check the control-plane-operator and the components in %s (management cluster).", c.key.Cluster, firstNonEmpty(cd.Message, "no message"), ns)
	}
	d.Confidence = Confidence{ConfidenceMedium, "HyperShift's condition names the components; why they are not Available the bot does not see"}
	d.NextSteps = []string{
		fmt.Sprintf("oc get controlplanecomponents -n %s (management cluster): which are not Available, and why?", ns),
		fmt.Sprintf("oc get pods -n %s | grep -v Running (management cluster)", ns),
		fmt.Sprintf("oc logs -n %s deployment/control-plane-operator --tail=100 (management cluster)", ns),
	}
	return d, true
}
