package diagnose

import (
	"fmt"
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
	for _, cd := range hc.Conditions {
		if (cd.Type == "KubeAPIServerAvailable" || cd.Type == "Available") && cd.Status == event.ConditionFalse {
			conds = append(conds, cd)
		}
	}
	apiDown := false
	for _, cd := range conds {
		apiDown = apiDown || cd.Type == "KubeAPIServerAvailable"
	}
	if probe == nil && !apiDown {
		return Diagnosis{}, false
	}
	d := Diagnosis{
		Severity: SeverityCritical,
		Title:    "API server of " + c.label() + " is unreachable",
		Symptoms: []string{c.apiKey()},
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
	}
	if apiDown {
		parts = append(parts, "HyperShift reports KubeAPIServerAvailable=False for the HostedCluster.")
	}
	// Without the API server the workers lose their connection to the
	// control plane and konnectivity its agents: those conditions follow.
	cp := c.explainCond(&d, condControlPlaneConnection, x, nil)
	dp := c.explainCond(&d, condDataPlaneConnection, x, nil)
	if cp || dp {
		parts = append(parts, "The workers' lost connection to the control plane ("+joinList(condsFollowing(cp, dp), "and")+") follows from it.")
	}
	parts = append(parts, "Nodes, operators and the bot's own view of the hosted cluster depend on it; the cause is in the control plane or on the path to it, which the bot does not see.")
	d.RootCause = strings.Join(parts, " ")
	if probe != nil && apiDown {
		d.Confidence = Confidence{ConfidenceHigh, "the agent's probe and HyperShift's condition agree"}
	} else if probe != nil {
		d.Confidence = Confidence{ConfidenceMedium, "only the agent's probe fails; HyperShift does not report the API server down, so the path from the agent may be at fault"}
	} else {
		d.Confidence = Confidence{ConfidenceMedium, "only HyperShift's condition reports it; the agent's probe does not fail"}
	}
	ns := c.controlPlaneNamespace()
	d.NextSteps = []string{
		fmt.Sprintf("oc get pods -n %s -l app=kube-apiserver (management cluster): are the kube-apiserver pods running and ready?", ns),
		fmt.Sprintf("oc get hostedcluster -n %s %s -o jsonpath='{.status.conditions}'", c.key.Cluster.Namespace, c.key.Cluster.Name),
		"Check the route, load balancer or NodePort that publishes the API endpoint, from the management cluster and from a worker.",
	}
	return d, true
}

// condsFollowing names the connection conditions that follow from an
// unavailable control plane.
func condsFollowing(cp, dp bool) []string {
	var out []string
	if cp {
		out = append(out, condControlPlaneConnection+"=False")
	}
	if dp {
		out = append(out, condDataPlaneConnection+"=False")
	}
	return out
}
