package diagnose

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/noproxy"
	"github.com/hcpbot/hcpbot/redact"
)

// This file holds the read side of Cluster that the rules share: queries,
// names and evidence lines.

// HostedCluster returns the newest HostedClusterState, if one was seen.
// Slices are shared with c: do not modify them.
func (c *Cluster) HostedCluster() (event.HostedClusterState, bool) {
	return c.hc.p, c.hc.present
}

// Gone reports whether the HostedCluster was deleted (or is missing from a
// management snapshot): such a cluster has no diagnoses.
func (c *Cluster) Gone() bool { return c.hc.present && c.hc.p.Deleted }

// live returns the HostedClusterState when the cluster exists.
func (c *Cluster) live() (event.HostedClusterState, bool) {
	return c.hc.p, c.hc.present && !c.hc.p.Deleted
}

// effectiveProxy is the newest proxy spec of the HostedCluster: from its
// state, or from a proxy change observed after that state. since is when
// it was first seen.
func (c *Cluster) effectiveProxy() (spec event.ProxySpec, since time.Time) {
	spec, since = c.hc.p.Proxy, c.hc.proxySince
	for i := len(c.changes) - 1; i >= 0; i-- {
		ch := c.changes[i]
		if ch.target != event.ProxyTargetHostedCluster {
			continue
		}
		if ch.st.obs.After(c.hc.st.obs) {
			return ch.new, ch.st.obs
		}
		break
	}
	return spec, since
}

// hcChanges returns the HostedCluster proxy changes, oldest first.
func (c *Cluster) hcChanges() []proxyChange {
	var out []proxyChange
	for _, ch := range c.changes {
		if ch.target == event.ProxyTargetHostedCluster {
			out = append(out, ch)
		}
	}
	return out
}

// riskyChange finds the edit that made the current spec tunnel: walking
// back from the newest change while each one leaves a tunnelling spec, the
// first whose old spec did not tunnel (it bypassed, or had no proxy).
func (c *Cluster) riskyChange(hc event.HostedClusterState) (proxyChange, bool) {
	return c.changeThatMade(func(spec event.ProxySpec) bool { return c.decide(hc, spec).tunnel() })
}

// changeThatMade returns the newest proxy change that turned a spec
// without the property bad into one with it, while the current spec has
// it and every later change kept it.
func (c *Cluster) changeThatMade(bad func(event.ProxySpec) bool) (proxyChange, bool) {
	spec, _ := c.effectiveProxy()
	if !bad(spec) {
		return proxyChange{}, false
	}
	hist := c.hcChanges()
	for i := len(hist) - 1; i >= 0; i-- {
		ch := hist[i]
		if !bad(ch.new) {
			return proxyChange{}, false // an edit we did not see made it bad
		}
		if !bad(ch.old) {
			return ch, true
		}
	}
	return proxyChange{}, false
}

// serviceIP is the kubernetes Service IP of hc (the first address of its
// first service network), "" when unknown.
func serviceIP(hc event.HostedClusterState) string {
	if len(hc.ServiceNetwork) == 0 {
		return ""
	}
	p, err := netip.ParsePrefix(strings.TrimSpace(hc.ServiceNetwork[0]))
	if err != nil {
		return ""
	}
	return p.Masked().Addr().Next().String()
}

// proxiedFamilies returns those of c's workload client families that send
// requests to the kubernetes Service IP (what in-cluster clients dial)
// through the HTTPS proxy of spec; nil without a proxy.
func (c *Cluster) proxiedFamilies(hc event.HostedClusterState, spec event.ProxySpec) []string {
	ip := serviceIP(hc)
	if strings.TrimSpace(spec.HTTPSProxy) == "" || ip == "" {
		return nil
	}
	return c.familiesThrough(ip, spec.NoProxy, c.clients())
}

// proxiedFamiliesOf is proxiedFamilies' verdict for a proxied spec: the
// families of clients that send requests to the Service IP ip through
// the proxy despite noProxy.
func proxiedFamiliesOf(ip, noProxy string, clients []noproxy.Client) []string {
	host := ip
	if strings.Contains(ip, ":") {
		host = "[" + ip + "]"
	}
	var out []string
	for _, cl := range clients {
		if d, err := noproxy.Decide(cl, noProxy, "https://"+host+"/"); err == nil && d == noproxy.Proxy {
			out = append(out, cl.String())
		}
	}
	return out
}

func (c *Cluster) notReadyNodes(x Explained) []*entry[nodeRec] {
	var out []*entry[nodeRec]
	for _, e := range c.nodes.live() {
		if e.rec.notReady() && !x.Has(nodeKey(e.rec.name)) {
			out = append(out, e)
		}
	}
	return out
}

// NodeCount is the node population the bot knows of a hosted cluster.
// From the agent's node summary when one arrived (Summary true): every
// node, healthy ones included. Else only the nodes the bot heard of,
// which are those that were once a problem (an agent older than the
// summary).
type NodeCount struct {
	Total, Ready, NotReady, Unknown, Joining, NotJoining int
	// Cordoned are Ready but unschedulable (counted in Ready too).
	Cordoned  int
	Summary   bool
	JoinGrace time.Duration
}

// Available is HyperShift's count of available workers: Ready and
// schedulable (support/util/util.go:568-590).
func (n NodeCount) Available() int { return max(n.Ready-n.Cordoned, 0) }

// Nodes returns the node population of c.
func (c *Cluster) Nodes() NodeCount {
	known := len(c.nodes.live())
	if es := c.summary.live(); len(es) == 1 {
		s := es[0].rec
		n := NodeCount{Total: s.Total, Ready: s.Ready, NotReady: s.NotReady, Unknown: s.Unknown,
			Joining: s.Joining, NotJoining: s.NotJoining, Cordoned: s.Cordoned, Summary: true, JoinGrace: s.JoinGrace}
		// The summary is coalesced and may lag a node event by a few
		// seconds: never claim fewer nodes than are reported.
		n.Total = max(n.Total, c.problemNodes())
		return n
	}
	return NodeCount{Total: known}
}

// problemNodes counts the visible nodes that are a problem.
func (c *Cluster) problemNodes() int {
	n := 0
	for _, e := range c.nodes.live() {
		if e.rec.notReady() {
			n++
		}
	}
	return n
}

// nodeTotal is M in "N of M nodes".
func (c *Cluster) nodeTotal() int { return c.Nodes().Total }

// unhealthyPools returns the NodePools with AllNodesHealthy=False, sorted
// by key if sorted.
func (c *Cluster) unhealthyPools(sorted bool) []*entry[nodePoolRec] {
	var out []*entry[nodePoolRec]
	for _, e := range c.nodePools.visible(sorted) {
		if cond, ok := e.rec.cond("AllNodesHealthy"); ok && cond.Status == event.ConditionFalse {
			out = append(out, e)
		}
	}
	return out
}

// Unwatched says why the agent does not watch the hosted cluster (its
// admin kubeconfig Secret is missing, invalid or refused), and since when;
// ok is false while it is watched or nothing was reported.
func (c *Cluster) Unwatched() (reason string, since time.Time, ok bool) {
	e := c.unwatched()
	if e == nil {
		return "", time.Time{}, false
	}
	return e.rec.err, firstTime(e.rec.since, e.since), true
}

func (c *Cluster) unwatched() *entry[reachRec] {
	if es := c.reach.live(); len(es) == 1 && !es[0].rec.reachable && es[0].rec.unwatched {
		return es[0]
	}
	return nil
}

func firstTime(a, b time.Time) time.Time {
	if a.IsZero() {
		return b
	}
	return a
}

func (c *Cluster) launcherFor(node string) *entry[launcherRec] {
	for _, e := range c.launchers.live() {
		if e.rec.vmi == node {
			return e
		}
	}
	return nil
}

// Names and symptom keys.

func (c *Cluster) label() string {
	return c.key.Cluster.String() + " on " + c.key.Source
}

func (c *Cluster) hcObject() string { return "hostedcluster/" + c.key.Cluster.String() }

func (c *Cluster) hcTarget() string { return "HostedCluster/" + c.key.Cluster.String() }

// controlPlaneNamespace is where HyperShift runs the control plane and, on
// KubeVirt, the VMs: <namespace>-<name with '.' replaced by '-'>.
func (c *Cluster) controlPlaneNamespace() string {
	return c.key.Cluster.Namespace + "-" + strings.ReplaceAll(c.key.Cluster.Name, ".", "-")
}

func (c *Cluster) proxyKey() string { return "proxy/" + c.key.Cluster.String() }
func (c *Cluster) apiKey() string   { return "api/" + c.key.Cluster.String() }

func nodeKey(name string) string         { return "node/" + name }
func podKey(ns, name string) string      { return "pod/" + ns + "/" + name }
func nodePoolKey(ns, name string) string { return "nodepool/" + ns + "/" + name }

// Evidence lines. Free text is clipped so one chatty message cannot crowd
// out the rest.

const maxEvidenceText = 400

func nodeEvidence(e *entry[nodeRec]) Evidence {
	at := e.rec.ltt
	if at.IsZero() {
		at = e.since
	}
	if e.rec.notJoining {
		text := "no Ready condition: the kubelet has not posted the node's status (not joining)"
		if !e.rec.created.IsZero() {
			text = "created " + e.rec.created.Format(time.RFC3339) + ", no Ready condition since: the kubelet has not posted the node's status (not joining)"
		}
		return Evidence{At: firstTime(e.rec.created, e.since), Kind: "node", Object: nodeKey(e.rec.name), Text: text}
	}
	text := "Ready=" + string(e.rec.ready)
	if e.rec.reason != "" {
		text += " (" + e.rec.reason + ")"
	}
	if e.rec.message != "" {
		text += ": " + e.rec.message
	}
	return Evidence{At: at, Kind: "node", Object: nodeKey(e.rec.name), Text: clip(text, maxEvidenceText)}
}

func crashEvidence(e *entry[crashRec]) Evidence {
	r := e.rec
	at := r.finished
	if at.IsZero() {
		at = e.since
	}
	text := fmt.Sprintf("container %s restarted %d times", r.container, r.restarts)
	if r.exitCode != 0 {
		text += fmt.Sprintf(", exit code %d", r.exitCode)
	}
	if r.waiting != "" {
		text += " (" + r.waiting + ")"
	}
	if r.sig != event.SignatureNone {
		text += ", signature " + string(r.sig)
	}
	if r.line != "" {
		text += ": " + r.line
	}
	return Evidence{At: at, Kind: "crashloop", Object: podKey(r.namespace, r.pod), Text: clip(text, maxEvidenceText+maxLine)}
}

func poolEvidence(e *entry[nodePoolRec], condType string) Evidence {
	cond, _ := e.rec.cond(condType)
	cond.Type = condType
	at := cond.LastTransitionTime
	if at.IsZero() {
		at = e.since
	}
	return Evidence{At: at, Kind: "nodepool", Object: nodePoolKey(e.rec.namespace, e.rec.name), Text: condText(cond)}
}

func apiProxyEvidence(e *entry[apiProxyRec]) Evidence {
	r := e.rec
	text := fmt.Sprintf("kube-apiserver-proxy on node %s runs in %s mode", r.node, r.mode)
	if r.mode == event.ProxyModeTunnel {
		text += " (kubernetes-default-proxy tunnels through the proxy with HTTP CONNECT)"
	}
	if r.connectFailure {
		text += "; CONNECT failure"
		if r.connectMessage != "" {
			text += ": " + r.connectMessage
		}
	}
	ns := e.ref.namespace
	if ns == "" {
		ns = "kube-system"
	}
	return Evidence{At: e.since, Kind: "apiserver-proxy", Object: podKey(ns, r.pod), Text: clip(text, maxEvidenceText)}
}

func launcherEvidence(e *entry[launcherRec]) Evidence {
	r := e.rec
	text := fmt.Sprintf("VM %s: virt-launcher phase %s", r.vmi, firstNonEmpty(r.phase, "unknown"))
	if r.node != "" {
		text += " on management node " + r.node
	}
	if r.ip != "" {
		text += ", pod IP " + r.ip
	}
	return Evidence{At: e.since, Kind: "virt-launcher", Object: "virtlauncher/" + r.namespace + "/" + r.pod, Text: text}
}

func (c *Cluster) proxySpecEvidence(spec event.ProxySpec, since time.Time) Evidence {
	text := fmt.Sprintf("spec.configuration.proxy: httpsProxy %q, noProxy %q", spec.HTTPSProxy, redact.RedactText(spec.NoProxy))
	if hc, ok := c.live(); ok && (len(hc.ServiceNetwork) > 0 || len(hc.ClusterNetwork) > 0) {
		text += fmt.Sprintf("; service network %s, cluster network %s", strings.Join(hc.ServiceNetwork, ","), strings.Join(hc.ClusterNetwork, ","))
	}
	return Evidence{At: since, Kind: "proxy-spec", Object: c.hcObject(), Text: clip(text, 2*maxEvidenceText)}
}

func changeEvidence(ch proxyChange) Evidence {
	r := changeRef(ch)
	text := fmt.Sprintf("noProxy %q → %q", r.OldNoProxy, r.NewNoProxy)
	if len(r.Removed) > 0 {
		text += " (removed " + strings.Join(r.Removed, ",") + ")"
	}
	if len(r.Added) > 0 {
		text += " (added " + strings.Join(r.Added, ",") + ")"
	}
	if r.OldHTTPSProxy != r.NewHTTPSProxy {
		text += fmt.Sprintf("; httpsProxy %q → %q", r.OldHTTPSProxy, r.NewHTTPSProxy)
	}
	obj := "hostedcluster/" + ch.object
	if ch.target == event.ProxyTargetOpenShift {
		obj = "proxy/" + ch.object
	}
	return Evidence{At: ch.st.obs, Kind: "proxy-change", Object: obj, Text: clip(text, 2*maxEvidenceText)}
}

func changeRef(ch proxyChange) *ProxyChangeRef {
	target := "HostedCluster/" + ch.object
	if ch.target == event.ProxyTargetOpenShift {
		target = "Proxy/" + ch.object
	}
	return &ProxyChangeRef{
		At: ch.st.obs, Target: target,
		OldHTTPSProxy: ch.old.HTTPSProxy, NewHTTPSProxy: ch.new.HTTPSProxy,
		OldNoProxy: redact.RedactText(ch.old.NoProxy), NewNoProxy: redact.RedactText(ch.new.NoProxy),
		Added: redactAll(ch.added), Removed: redactAll(ch.removed),
	}
}

func redactAll(ss []string) []string {
	if len(ss) == 0 {
		return nil
	}
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = redact.RedactText(s)
	}
	return out
}

// capEvidence keeps the earliest max items of one kind and sums up the
// rest in one line, so a 200-node outage stays readable; Symptoms still
// list every object.
func capEvidence(ev []Evidence, max int, noun string) []Evidence {
	if len(ev) <= max {
		return ev
	}
	sorted := slices.Clone(ev)
	slices.SortFunc(sorted, compareEvidence)
	rest := sorted[max:]
	last := rest[0].At
	for _, e := range rest {
		if e.At.After(last) {
			last = e.At
		}
	}
	return append(sorted[:max:max], Evidence{
		At: last, Kind: rest[0].Kind, Object: "",
		Text: fmt.Sprintf("and %d more %s", len(rest), noun),
	})
}

func plural(n int, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%s %s", count(n), many)
}

// FormatCount writes n with thousands separators: 2,000.
func FormatCount(n int) string { return count(n) }

func count(n int) string {
	s := strconv.Itoa(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}
