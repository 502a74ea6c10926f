package diagnose

import (
	"fmt"
	"strings"
	"time"

	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/noproxy"
	"github.com/hcpbot/hcpbot/redact"
)

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
	// What HyperShift reports downstream of the tunnel: the workers
	// cannot reach the API server, konnectivity has no worker (when every
	// node is down), ignition fails while it goes through the proxy too.
	// cpIdle is ControlPlaneConnectionAvailable's NoWorkerNodesAvailable
	// when every node is down: explained, not a kind of its own.
	cpConn, dataPlane, cpIdle *event.Condition
	ignition                  ignitionFailures
	ignitionHost              string // set when ignition goes through the proxy
}

// downstream adds what HyperShift reports downstream of the tunnel,
// leaving out what x explains.
func (c *Cluster) downstream(s *tunnelSymptoms, hc event.HostedClusterState, spec event.ProxySpec, x Explained, sorted bool) {
	if cd, ok := c.hcCondUnexplained(condControlPlaneConnection, connectionFault, x); ok {
		s.cpConn = &cd
	}
	if len(s.nodes) > 0 {
		if cd, ok := c.hcCondUnexplained(condDataPlaneConnection, c.noWorkersLeft, x); ok {
			s.dataPlane = &cd
		}
		if cd, ok := c.hcCondUnexplained(condControlPlaneConnection, c.noWorkersLeft, x); ok {
			s.cpIdle = &cd
		}
	}
	if f := c.ignitionFailures(x, sorted).notReached(); f.any() {
		if host, ok := c.ignitionThroughProxy(hc, spec); ok {
			s.ignition, s.ignitionHost = f, host
		}
	}
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
	if s.cpConn != nil {
		out = append(out, c.conditionKey(condControlPlaneConnection))
	}
	if s.dataPlane != nil {
		out = append(out, c.conditionKey(condDataPlaneConnection))
	}
	if s.cpIdle != nil {
		out = append(out, c.conditionKey(condControlPlaneConnection))
	}
	return append(out, s.ignition.keys(c)...)
}

func (s tunnelSymptoms) connectFailures() bool { return s.failing > 0 || len(s.connect) > 0 }

// kinds counts the kinds of symptoms seen: the operator signature, NotReady
// nodes, unhealthy NodePools, CONNECT failures, HyperShift's
// ControlPlaneConnectionAvailable=False, ignition failing through the
// proxy.
func (s tunnelSymptoms) kinds() int {
	n := 0
	for _, b := range []bool{len(s.signature) > 0, len(s.nodes) > 0, len(s.pools) > 0, s.connectFailures(), s.cpConn != nil, s.ignition.any()} {
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
	c.downstream(&s, hc, spec, x, !x.brief)
	if s.kinds() == 0 {
		return Diagnosis{}, false
	}
	if x.brief {
		return Diagnosis{Severity: SeverityCritical, Symptoms: s.keys(c)}, true
	}

	d := Diagnosis{
		Severity: SeverityCritical,
		Title:    "API traffic of " + c.label() + " is tunnelled through the HTTPS proxy",
		Symptoms: s.keys(c),
	}
	if s.ignitionHost != "" {
		d.Fix = c.noProxyFix(c.hcTarget(), "spec.configuration.proxy.noProxy", spec, hc, s.ignitionHost)
	} else {
		d.Fix = c.noProxyFix(c.hcTarget(), "spec.configuration.proxy.noProxy", spec, hc)
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
		total := max(c.nodeTotal(), len(s.nodes))
		d.Nodes = &NodeImpact{Affected: len(s.nodes), Total: total, Text: nodesPart(s.nodes, total)}
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
	for _, cd := range []*event.Condition{s.cpConn, s.dataPlane, s.cpIdle} {
		if cd != nil {
			parts = append(parts, "HyperShift reports "+condShort(*cd))
			d.Evidence = append(d.Evidence, note(c.condEvidence(*cd)))
		}
	}
	if s.ignition.any() {
		parts = append(parts, "ignition from "+hc.IgnitionEndpoint+" goes through the proxy too and is not reached ("+plural(len(s.ignition.pools), "NodePool", "NodePools")+")")
		for _, ev := range s.ignition.evidence(c) {
			d.Evidence = append(d.Evidence, note(ev))
		}
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
	if d.Fix != nil && len(d.Fix.Add) > 0 {
		them := "them"
		if len(d.Fix.Add) == 1 {
			them = "it"
		}
		what := "tunnel API traffic"
		if s.ignitionHost != "" {
			what = "tunnel API traffic and fetch ignition"
		}
		d.Summary = fmt.Sprintf("The noProxy of %s lacks %s, so its workers %s through the HTTPS proxy. Fix: add %s to spec.configuration.proxy.noProxy.",
			c.key.Cluster, strings.Join(d.Fix.Add, ", "), what, them)
	} else {
		d.Summary = fmt.Sprintf("The noProxy of %s does not make HyperShift bypass the HTTPS proxy for the API server, so its workers tunnel API traffic through the proxy.", c.key.Cluster)
	}

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
		if d, ok := c.riskyForWorkloads(hc); ok {
			return d, true
		}
		return c.riskyForEndpoints(hc)
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

// riskyForEndpoints is the warning for an edit that sends the workers'
// ignition or konnectivity traffic through the proxy: new workers would
// not boot, or oc logs and exec would stop working, once the change
// reaches them. Warned when the edit is seen, before anything breaks.
func (c *Cluster) riskyForEndpoints(hc event.HostedClusterState) (Diagnosis, bool) {
	ch, ok := c.changeThatMade(func(spec event.ProxySpec) bool { return len(proxiedEndpoints(hc, spec)) > 0 })
	if !ok {
		return Diagnosis{}, false
	}
	spec, since := c.effectiveProxy()
	eps := proxiedEndpoints(hc, spec)
	var what, hosts []string
	for _, ep := range eps {
		what = append(what, ep.what+" ("+ep.endpoint+")")
		hosts = append(hosts, ep.host)
	}
	trigger := changeRef(ch)
	d := Diagnosis{
		Severity: SeverityWarning,
		Title:    "Proxy change on " + c.label() + " sends " + strings.Join(endpointNames(eps), " and ") + " through the proxy",
		RootCause: fmt.Sprintf("The proxy edit at %s (noProxy %q → %q) no longer bypasses %s. Add %s to noProxy before new workers boot or the konnectivity agents reconnect.",
			ch.st.obs.Format(time.RFC3339), trigger.OldNoProxy, trigger.NewNoProxy, strings.Join(what, " and "), strings.Join(hosts, ", ")),
		Evidence:   []Evidence{changeEvidence(ch), c.proxySpecEvidence(spec, since)},
		Symptoms:   []string{c.proxyKey()},
		Trigger:    trigger,
		Confidence: Confidence{ConfidenceMedium, "Go's NO_PROXY rule is deterministic; whether the proxy refuses this traffic is not known before it is tried"},
		Fix:        fixAdding(c.hcTarget(), "spec.configuration.proxy.noProxy", spec.NoProxy, hosts),
	}
	d.NextSteps = c.fixSteps(d.Fix, spec)
	return d, true
}
