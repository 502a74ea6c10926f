package diagnose

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/noproxy"
	"github.com/hcpbot/hcpbot/redact"
)

// The stable rule IDs.
const (
	RuleProxyTunnel          = "proxy-tunnel"
	RuleRiskyProxyChange     = "risky-proxy-change"
	RuleHostedNotWatched     = "hosted-not-watched"
	RuleHostedAPIUnreachable = "hosted-api-unreachable"
	RuleNodesNotReady        = "nodes-notready"
	RuleOperatorCrashLoop    = "operator-crashloop"
	RuleManagementProxyLint  = "management-proxy-lint"
)

// DefaultRules returns the built-in rules in priority order. Adding a rule
// is one RuleFunc and one entry here; rules before it explain symptoms for
// it, rules after it see what it explained.
func DefaultRules() RuleSet {
	return RuleSet{
		{RuleProxyTunnel, proxyTunnel},
		{RuleRiskyProxyChange, riskyProxyChange},
		{RuleHostedNotWatched, hostedNotWatched},
		{RuleHostedAPIUnreachable, hostedAPIUnreachable},
		{RuleNodesNotReady, nodesNotReady},
		{RuleOperatorCrashLoop, operatorCrashLoop},
		{RuleManagementProxyLint, managementProxyLint},
	}
}

// RuleSummary names what a rule finds without naming a cluster, for lists
// of many clusters; "" for an unknown rule.
func RuleSummary(id string) string {
	switch id {
	case RuleProxyTunnel:
		return "API traffic tunnelled through the HTTPS proxy"
	case RuleRiskyProxyChange:
		return "a proxy change makes the workers tunnel API traffic"
	case RuleHostedNotWatched:
		return "hosted cluster not watched (admin kubeconfig unusable)"
	case RuleHostedAPIUnreachable:
		return "hosted cluster API unreachable"
	case RuleNodesNotReady:
		return "nodes NotReady without a proxy cause"
	case RuleOperatorCrashLoop:
		return "operator crashlooping without a proxy cause"
	case RuleManagementProxyLint:
		return "management cluster proxy lint"
	}
	return ""
}

// maxEvidencePerKind bounds the evidence lines of one kind in a diagnosis.
const maxEvidencePerKind = 10

// tunnelSymptoms are the observations that API traffic through the proxy
// fails.
type tunnelSymptoms struct {
	signature  []*entry[crashRec] // failed checking apiserver connectivity
	connect    []*entry[crashRec] // a dial through the proxy failed
	nodes      []*entry[nodeRec]  // NotReady or Unknown
	pools      []*entry[nodePoolRec]
	tunnelPods []*entry[apiProxyRec] // tunnel mode; with or without failures
	failing    int                   // tunnel pods with CONNECT failures
	haproxy    int                   // pods observed in direct mode
}

// tunnelSymptoms collects them sorted by key, or in any order when
// sorted is false (the first phase, whose symptoms are sorted anyway).
func (c *Cluster) tunnelSymptoms(sorted bool) tunnelSymptoms {
	var s tunnelSymptoms
	for _, e := range c.crashes.visible(sorted) {
		switch e.rec.sig {
		case event.SignatureAPIServerConnectivity:
			s.signature = append(s.signature, e)
		case event.SignatureProxyConnect:
			s.connect = append(s.connect, e)
		}
	}
	for _, e := range c.nodes.visible(sorted) {
		if e.rec.notReady() {
			s.nodes = append(s.nodes, e)
		}
	}
	s.pools = c.unhealthyPools(sorted)
	for _, e := range c.apiProxies.visible(sorted) {
		switch e.rec.mode {
		case event.ProxyModeTunnel:
			s.tunnelPods = append(s.tunnelPods, e)
			if e.rec.connectFailure {
				s.failing++
			}
		case event.ProxyModeHAProxy:
			s.haproxy++
		}
	}
	return s
}

// keys are the symptoms proxy-tunnel explains: the proxy spec and every
// object that shows the tunnel failing.
func (s tunnelSymptoms) keys(c *Cluster) []string {
	out := make([]string, 0, 1+len(s.signature)+len(s.nodes)+len(s.pools)+len(s.tunnelPods)+len(s.connect))
	out = append(out, c.proxyKey())
	for _, e := range s.signature {
		out = append(out, podKey(e.rec.namespace, e.rec.pod))
	}
	for _, e := range s.nodes {
		out = append(out, nodeKey(e.rec.name))
	}
	for _, e := range s.pools {
		out = append(out, nodePoolKey(e.rec.namespace, e.rec.name))
	}
	for _, e := range s.tunnelPods {
		out = append(out, podKey(firstNonEmpty(e.ref.namespace, "kube-system"), e.rec.pod))
	}
	for _, e := range s.connect {
		out = append(out, podKey(e.rec.namespace, e.rec.pod))
	}
	return out
}

func (s tunnelSymptoms) connectFailures() bool { return s.failing > 0 || len(s.connect) > 0 }

// kinds counts the kinds of symptoms seen: the operator signature, NotReady
// nodes, unhealthy NodePools, CONNECT failures.
func (s tunnelSymptoms) kinds() int {
	n := 0
	for _, b := range []bool{len(s.signature) > 0, len(s.nodes) > 0, len(s.pools) > 0, s.connectFailures()} {
		if b {
			n++
		}
	}
	return n
}

// proxyTunnel: the spec tunnels API traffic through the proxy and the
// cluster shows it (seed 000).
func proxyTunnel(c *Cluster, _ time.Time, x Explained) (Diagnosis, bool) {
	hc, ok := c.live()
	if !ok {
		return Diagnosis{}, false
	}
	spec, since := c.effectiveProxy()
	v := c.decide(hc, spec)
	if !v.tunnel() {
		return Diagnosis{}, false
	}
	s := c.tunnelSymptoms(!x.brief)
	if s.kinds() == 0 {
		return Diagnosis{}, false
	}
	if x.brief {
		return Diagnosis{Severity: SeverityCritical, Symptoms: s.keys(c)}, true
	}

	d := Diagnosis{
		Severity: SeverityCritical,
		Title:    "API traffic of " + c.label() + " is tunnelled through the HTTPS proxy",
		Fix:      c.noProxyFix(c.hcTarget(), "spec.configuration.proxy.noProxy", spec, hc),
		Symptoms: s.keys(c),
	}
	d.Evidence = append(d.Evidence, c.proxySpecEvidence(spec, since))

	var parts []string
	var latest time.Time
	note := func(ev Evidence) Evidence {
		if ev.At.After(latest) {
			latest = ev.At
		}
		return ev
	}
	if n := len(s.signature); n > 0 {
		parts = append(parts, plural(n, "pod fails", "pods fail")+" checking apiserver connectivity ("+s.signature[0].rec.pod+")")
		var ev []Evidence
		for _, e := range s.signature {
			ev = append(ev, note(crashEvidence(e)))
		}
		d.Evidence = append(d.Evidence, capEvidence(ev, maxEvidencePerKind, "crashlooping pods")...)
	}
	if len(s.nodes) > 0 {
		parts = append(parts, nodesPart(s.nodes, c.nodeTotal()))
		d.Nodes = &NodeImpact{Affected: len(s.nodes), Total: max(c.nodeTotal(), len(s.nodes))}
		var ev []Evidence
		for _, e := range s.nodes {
			ev = append(ev, note(nodeEvidence(e)))
		}
		d.Evidence = append(d.Evidence, capEvidence(ev, maxEvidencePerKind, "NotReady nodes")...)
	}
	for _, e := range s.pools {
		parts = append(parts, "NodePool "+e.rec.name+" reports AllNodesHealthy=False")
		d.Evidence = append(d.Evidence, note(poolEvidence(e, "AllNodesHealthy")))
	}
	if s.connectFailures() {
		parts = append(parts, "CONNECT through the proxy fails ("+plural(s.failing+len(s.connect), "pod", "pods")+")")
	}
	var podEv []Evidence
	for _, e := range s.tunnelPods {
		ev := apiProxyEvidence(e)
		if e.rec.connectFailure {
			ev = note(ev)
		}
		podEv = append(podEv, ev)
	}
	d.Evidence = append(d.Evidence, capEvidence(podEv, maxEvidencePerKind, "tunnel-mode kube-apiserver-proxy pods")...)
	for _, e := range s.connect {
		d.Evidence = append(d.Evidence, note(crashEvidence(e)))
	}

	cause := fmt.Sprintf("HostedCluster %s (%s) has httpsProxy %s and spec noProxy %q. %s Symptoms: %s.",
		c.key.Cluster, firstNonEmpty(hc.Platform, "platform unknown"), spec.HTTPSProxy, redact.RedactText(spec.NoProxy),
		v.explain(), strings.Join(parts, "; "))
	if ch, ok := c.riskyChange(hc); ok {
		d.Evidence = append(d.Evidence, changeEvidence(ch))
		if !ch.st.obs.After(latest) {
			d.Trigger = changeRef(ch)
			cause += fmt.Sprintf(" It began with the proxy change seen at %s.", ch.st.obs.Format(time.RFC3339))
		}
	}
	d.RootCause = cause

	level, why := ConfidenceMedium, fmt.Sprintf("%s of symptoms", plural(s.kinds(), "kind", "kinds"))
	if s.kinds() >= 2 && (len(s.signature) > 0 || s.connectFailures()) {
		level = ConfidenceHigh
		why += ", including " + strongest(s)
	} else {
		why += "; high confidence needs two kinds including the operator's connectivity failure or a CONNECT failure"
	}
	if ok, reason := v.certain(); !ok && len(s.tunnelPods) == 0 && level == ConfidenceHigh {
		level, why = ConfidenceMedium, why+"; but "+reason+" and no tunnel-mode kube-apiserver-proxy was observed"
	}
	if len(s.tunnelPods) == 0 && s.haproxy > 0 {
		level, why = ConfidenceLow, why+"; but every observed kube-apiserver-proxy runs in direct (haproxy) mode, so the workers may not have rolled out this spec yet"
	}
	d.Confidence = Confidence{Level: level, Why: why}

	d.NextSteps = c.fixSteps(d.Fix, spec)
	d.NextSteps = append(d.NextSteps,
		"The change rolls out every NodePool of the cluster; afterwards the kube-apiserver-proxy pods (namespace kube-system of the hosted cluster, label k8s-app=kube-apiserver-proxy) run plain HAProxy without the kubernetes-default-proxy container.")
	if len(s.tunnelPods) > 0 {
		d.NextSteps = append(d.NextSteps, fmt.Sprintf("To see the tunnel fail meanwhile: oc logs -n kube-system %s -c kubernetes-default-proxy (in the hosted cluster).", s.tunnelPods[0].rec.pod))
	}
	return d, true
}

func strongest(s tunnelSymptoms) string {
	switch {
	case len(s.signature) > 0 && s.connectFailures():
		return "the operator's apiserver connectivity failure and CONNECT failures"
	case len(s.signature) > 0:
		return "the operator's apiserver connectivity failure"
	}
	return "CONNECT failures through the proxy"
}

// noProxyFixSteps tells how to apply a HostedCluster noProxy fix.
func (c *Cluster) noProxyFixSteps(f *Fix, spec event.ProxySpec) []string {
	if f == nil {
		return nil
	}
	resource := fmt.Sprintf("hostedcluster -n %s %s", c.key.Cluster.Namespace, c.key.Cluster.Name)
	if cmd := patchCommand(f, resource, `{"spec":{"configuration":{"proxy":{"noProxy":%s}}}}`, spec.NoProxy); cmd != "" {
		return []string{"Add " + strings.Join(f.Add, ", ") + " to noProxy: " + cmd}
	}
	return []string{"noProxy contains text that looks like credentials (shown redacted); remove it, then add " + strings.Join(f.Add, ", ") + " to spec.configuration.proxy.noProxy of HostedCluster " + c.key.Cluster.String() + "."}
}

// riskyProxyChange: a proxy edit made the spec tunnel, and nothing shows it
// yet. Prevention beats diagnosis, so it is reported at once; once
// symptoms follow, proxy-tunnel explains "proxy/<ns>/<name>" and takes over.
func riskyProxyChange(c *Cluster, _ time.Time, x Explained) (Diagnosis, bool) {
	hc, ok := c.live()
	if !ok || x.Has(c.proxyKey()) {
		return Diagnosis{}, false
	}
	ch, ok := c.riskyChange(hc)
	if !ok {
		return c.riskyForWorkloads(hc)
	}
	spec, since := c.effectiveProxy()
	v := c.decide(hc, spec)
	trigger := changeRef(ch)
	what := "changed"
	if strings.TrimSpace(ch.old.HTTPSProxy) == "" {
		what = "was set"
	}
	d := Diagnosis{
		Severity: SeverityWarning,
		Title:    "Proxy change on " + c.label() + " makes the workers tunnel API traffic through the proxy",
		RootCause: fmt.Sprintf("At %s the proxy of HostedCluster %s %s: noProxy %q → %q. %s No symptoms yet: as the NodePools roll out, every worker whose kube-apiserver-proxy cannot CONNECT through the proxy loses the API server, its node goes NotReady and service-ca-operator fails its apiserver connectivity check.",
			ch.st.obs.Format(time.RFC3339), c.key.Cluster, what, trigger.OldNoProxy, trigger.NewNoProxy, v.explain()),
		Evidence: []Evidence{changeEvidence(ch), c.proxySpecEvidence(spec, since)},
		Fix:      c.noProxyFix(c.hcTarget(), "spec.configuration.proxy.noProxy", spec, hc),
		Symptoms: []string{c.proxyKey()},
		Trigger:  trigger,
	}
	if ok, reason := v.certain(); ok {
		d.Confidence = Confidence{ConfidenceHigh, "HyperShift's kube-apiserver-proxy rule is deterministic and tunnels for this noProxy"}
	} else {
		d.Confidence = Confidence{ConfidenceMedium, reason}
	}
	d.NextSteps = c.fixSteps(d.Fix, spec)
	d.NextSteps = append(d.NextSteps,
		"Fix it before the NodePool rollout replaces the workers: each new worker comes up with a tunnelling kube-apiserver-proxy.",
		"If API traffic must go through the proxy, make sure it allows CONNECT to the API server and watch for nodes going NotReady.")
	return d, true
}

// riskyForWorkloads is the other proxy-change warning: the kube-apiserver-
// proxy is fine, but a proxy edit made some client family the cluster's
// workloads use (Cluster.SetClients; default Go, curl, Python requests,
// urllib) send its requests to the kubernetes Service IP through the
// proxy — urllib, wget and node ignore CIDR entries, for one.
func (c *Cluster) riskyForWorkloads(hc event.HostedClusterState) (Diagnosis, bool) {
	ch, ok := c.changeThatMade(func(spec event.ProxySpec) bool { return len(c.proxiedFamilies(hc, spec)) > 0 })
	if !ok {
		return Diagnosis{}, false
	}
	spec, since := c.effectiveProxy()
	fams := c.proxiedFamilies(hc, spec)
	ip := serviceIP(hc)
	trigger := changeRef(ch)
	after := noproxy.Merge(spec.NoProxy, []string{ip})
	d := Diagnosis{
		Severity: SeverityWarning,
		Title:    "Proxy change on " + c.label() + " sends in-cluster API traffic of " + strings.Join(fams, ", ") + " workloads through the proxy",
		RootCause: fmt.Sprintf("At %s the proxy of HostedCluster %s changed: noProxy %q → %q. Workloads using %s dial the kubernetes Service IP %s through the HTTPS proxy: no entry of noProxy exempts it for them (these clients ignore CIDR entries). The kube-apiserver-proxy of the workers is not affected.",
			ch.st.obs.Format(time.RFC3339), c.key.Cluster, trigger.OldNoProxy, trigger.NewNoProxy, strings.Join(fams, ", "), ip),
		Evidence:   []Evidence{changeEvidence(ch), c.proxySpecEvidence(spec, since)},
		Symptoms:   []string{c.proxyKey()},
		Trigger:    trigger,
		Confidence: Confidence{ConfidenceMedium, "each client family's NO_PROXY rule is deterministic, but which families the workloads use is configuration (bot.noProxyClients)"},
	}
	d.Fix = &Fix{Kind: "noproxy", Target: c.hcTarget(), Before: redact.RedactText(spec.NoProxy), After: redact.RedactText(after), Add: []string{ip},
		Diff: redact.RedactText(listDiff("spec.configuration.proxy.noProxy", splitList(spec.NoProxy), splitList(after)))}
	d.NextSteps = append(c.fixSteps(d.Fix, spec),
		"If these families are not in use here, set bot.noProxyClients (or a route's noProxyClients) to the families the workloads do use.")
	return d, true
}

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
		text := cd.Type + "=" + string(cd.Status)
		if cd.Reason != "" {
			text += " (" + cd.Reason + ")"
		}
		if cd.Message != "" {
			text += ": " + cd.Message
		}
		at := cd.LastTransitionTime
		if at.IsZero() {
			at = c.hc.st.obs
		}
		d.Evidence = append(d.Evidence, Evidence{At: at, Kind: "condition", Object: c.hcObject(), Text: clip(text, maxEvidenceText)})
	}
	if apiDown {
		parts = append(parts, "HyperShift reports KubeAPIServerAvailable=False for the HostedCluster.")
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
		return Diagnosis{Symptoms: keys}, len(keys) > 0
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
		Nodes:    &NodeImpact{Affected: len(nodes), Total: max(total, len(nodes))},
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

// sentence ends s with a full stop unless it ends with punctuation.
func sentence(s string) string {
	if s == "" || strings.ContainsAny(s[len(s)-1:], ".!?…") {
		return s
	}
	return s + "."
}
