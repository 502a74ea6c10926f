package diagnose

import (
	"fmt"
	"strings"
	"time"

	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/noproxy"
	"github.com/hcpbot/hcpbot/redact"
)

// operatorCrashLoop: crashlooping pods that no proxy rule explains.
func operatorCrashLoop(c *Cluster, _ time.Time, x Explained) (Diagnosis, bool) {
	if c.Gone() {
		return Diagnosis{}, false
	}
	var pods []*entry[crashRec]
	for _, e := range c.crashes.live() {
		if !x.Has(podKey(e.rec.namespace, e.rec.pod)) {
			pods = append(pods, e)
		}
	}
	if len(pods) == 0 {
		return Diagnosis{}, false
	}
	first := pods[0].rec
	d := Diagnosis{Severity: SeverityWarning}
	if len(pods) == 1 {
		d.Title = fmt.Sprintf("%s/%s is crashlooping in %s", first.namespace, first.pod, c.label())
	} else {
		d.Title = fmt.Sprintf("%d pods are crashlooping in %s", len(pods), c.label())
	}
	var ev []Evidence
	sigs := map[event.Signature]bool{}
	for _, e := range pods {
		ev = append(ev, crashEvidence(e))
		d.Symptoms = append(d.Symptoms, podKey(e.rec.namespace, e.rec.pod))
		sigs[e.rec.sig] = true
	}
	d.Evidence = capEvidence(ev, maxEvidencePerKind, "crashlooping pods")

	parts := []string{fmt.Sprintf("%s restarting in a loop; the last termination of %s/%s says: %s", plural(len(pods), "pod is", "pods are"), first.namespace, first.pod, sentence(firstNonEmpty(first.line, "(no message)")))}
	for _, sig := range []event.Signature{event.SignatureAPIServerConnectivity, event.SignatureProxyConnect, event.SignatureUnknownAuthority, event.SignatureNone} {
		if !sigs[sig] {
			continue
		}
		switch sig {
		case event.SignatureAPIServerConnectivity:
			parts = append(parts, "The operator cannot reach the API server at start-up.")
			d.NextSteps = append(d.NextSteps, "Check the API server path from the workers: the kube-apiserver-proxy pod on the operator's node (oc logs -n kube-system kube-apiserver-proxy-<node>) and the control plane's kube-apiserver.")
		case event.SignatureProxyConnect:
			parts = append(parts, "A connection through the HTTP proxy failed.")
			d.NextSteps = append(d.NextSteps, "Check that the proxy allows CONNECT to the destination in the message, or that noProxy exempts it.")
		case event.SignatureUnknownAuthority:
			parts = append(parts, "TLS verification failed with an unknown authority, typically a TLS-intercepting proxy whose CA is not trusted.")
			d.NextSteps = append(d.NextSteps, "Add the proxy's CA to the ConfigMap named by spec.configuration.proxy.trustedCA (key ca-bundle.crt).")
		case event.SignatureNone:
			d.NextSteps = append(d.NextSteps, fmt.Sprintf("oc logs -n %s %s -c %s --previous (in the hosted cluster) for the full log.", first.namespace, first.pod, firstNonEmpty(first.container, "<container>")))
		}
	}
	statement, known := c.proxyStatement()
	if sigs[event.SignatureAPIServerConnectivity] || sigs[event.SignatureProxyConnect] {
		parts = append(parts, statement)
	}
	if by := x.By(c.proxyKey()); by != "" {
		parts = append(parts, "A "+by+" diagnosis is active for this cluster; this crash shows no proxy signature but may follow from it.")
	}
	d.RootCause = strings.Join(parts, " ")
	switch {
	case !known:
		d.Confidence = Confidence{ConfidenceLow, "the HostedCluster has not been seen yet, so its proxy settings could not be checked"}
	case sigs[event.SignatureNone] && len(sigs) == 1:
		d.Confidence = Confidence{ConfidenceLow, "the termination message matches no known signature"}
	default:
		d.Confidence = Confidence{ConfidenceMedium, "the termination message is observed directly and matches a known signature; what the operator could not reach, and why, the bot does not see"}
	}
	return d, true
}

// managementProxyLint: the OpenShift Proxy/cluster of a management cluster
// misses entries in noProxy. Informational: OpenShift renders most
// defaults into status itself, so only what the rendered list still lacks
// is reported.
func managementProxyLint(c *Cluster, _ time.Time, _ Explained) (Diagnosis, bool) {
	es := c.ocp.live()
	if !c.key.Management() || len(es) != 1 {
		return Diagnosis{}, false
	}
	e := es[0]
	p := e.rec
	rendered := firstNonEmpty(p.status.NoProxy, p.spec.NoProxy)
	cp := noproxy.ClusterProxy{
		HTTPProxy: firstNonEmpty(p.status.HTTPProxy, p.spec.HTTPProxy), HTTPSProxy: firstNonEmpty(p.status.HTTPSProxy, p.spec.HTTPSProxy),
		NoProxy: rendered, TrustedCA: p.spec.TrustedCA,
	}
	var add []string
	d := Diagnosis{Severity: SeverityInfo, Symptoms: []string{"proxy/cluster"}}
	for _, f := range noproxy.Lint(cp) {
		if !strings.HasPrefix(f.Code, "missing-") || f.Code == noproxy.CodeMissingServiceCIDR || f.Code == noproxy.CodeMissingClusterCIDR {
			continue
		}
		add = append(add, f.Entry)
		d.Evidence = append(d.Evidence, Evidence{At: e.since, Kind: "lint", Object: "proxy/cluster", Text: clip(f.Code+": "+f.Reason, maxEvidenceText)})
	}
	if len(add) == 0 {
		return Diagnosis{}, false
	}
	after := noproxy.Merge(p.spec.NoProxy, add)
	added := splitList(after)[len(splitList(noproxy.Merge(p.spec.NoProxy, nil))):]
	if len(added) == 0 {
		return Diagnosis{}, false
	}
	d.Title = "Proxy/cluster of " + c.key.Source + ": noProxy lacks " + strings.Join(added, ", ")
	d.RootCause = fmt.Sprintf("The rendered noProxy of Proxy/cluster (%q) lacks %s, so clients that honour NO_PROXY send those requests through the proxy. OpenShift adds the networks and .svc/.cluster.local by itself; these it does not.", redact.RedactText(rendered), strings.Join(added, ", "))
	d.Confidence = Confidence{ConfidenceHigh, "the lint applies the NO_PROXY rules of Go, curl and Python to the rendered list"}
	d.Fix = &Fix{
		Kind: "noproxy", Target: "Proxy/cluster",
		Before: redact.RedactText(p.spec.NoProxy), After: redact.RedactText(after), Add: added,
		Diff: redact.RedactText(listDiff("spec.noProxy", splitList(p.spec.NoProxy), splitList(after))),
	}
	if cmd := patchCommand(d.Fix, "proxy/cluster", `{"spec":{"noProxy":%s}}`, p.spec.NoProxy); cmd != "" {
		d.NextSteps = append(d.NextSteps, cmd)
	}
	d.NextSteps = append(d.NextSteps, "Changing Proxy/cluster rolls out to every node of the management cluster (machine config); plan it.")
	return d, true
}
