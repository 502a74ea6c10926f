package diagnose

import (
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/noproxy"
	"github.com/hcpbot/hcpbot/redact"
)

// verdict is HyperShift's kube-apiserver-proxy decision for one proxy spec
// of one HostedCluster.
type verdict struct {
	proxy    bool // httpsProxy is set; without it HyperShift never tunnels
	version  string
	rule     noproxy.ReleaseRule // 0 when the version does not tell
	platform string
	in       noproxy.HyperShiftInput
	// recent and legacy are whether each rule bypasses the proxy.
	recent, legacy bool
	// text is explain's answer, kept by Cluster.decide.
	text string
}

// hyperShiftInput is what HyperShift reads: the spec noProxy, the first
// service and cluster networks, and the API addresses. Missing values stay
// empty, which noproxy treats as unknown and never matches.
func hyperShiftInput(hc event.HostedClusterState, noProxy string) noproxy.HyperShiftInput {
	in := noproxy.HyperShiftInput{NoProxy: noProxy}
	if len(hc.ServiceNetwork) > 0 {
		in.ServiceCIDR = hc.ServiceNetwork[0]
	}
	if len(hc.ClusterNetwork) > 0 {
		in.ClusterCIDR = hc.ClusterNetwork[0]
	}
	if ep := hc.ControlPlaneEndpoint; ep != nil {
		in.ExternalAddress, in.ExternalPort = ep.Host, ep.Port
	}
	if a := hc.APIServer; a != nil {
		in.InternalAddress, in.InternalPort = a.Host, a.Port
	}
	return in
}

func decide(hc event.HostedClusterState, spec event.ProxySpec) verdict {
	v := verdict{
		proxy:    strings.TrimSpace(spec.HTTPSProxy) != "",
		version:  hc.Version,
		platform: hc.Platform,
		in:       hyperShiftInput(hc, spec.NoProxy),
	}
	v.rule, _ = noproxy.RuleForRelease(hc.Version)
	v.recent = noproxy.HyperShiftBypass(noproxy.Recent, v.in)
	v.legacy = noproxy.HyperShiftBypass(noproxy.Legacy, v.in)
	return v
}

// tunnel reports whether the workers tunnel API traffic through the proxy;
// with an unknown release, whether either rule would.
func (v verdict) tunnel() bool {
	if !v.proxy {
		return false
	}
	switch v.rule {
	case noproxy.Recent:
		return !v.recent
	case noproxy.Legacy:
		return !v.legacy
	}
	return !v.recent || !v.legacy
}

// certain says whether the model alone settles the tunnel, and if not, why.
func (v verdict) certain() (bool, string) {
	if v.rule == 0 && v.recent != v.legacy {
		return false, "the release is unknown and only one of the two HyperShift rules tunnels"
	}
	switch strings.ToLower(v.platform) {
	case "aws", "azure":
		return false, "on " + v.platform + " HyperShift tunnels only when the workers reach the control plane over the internet, not through a private endpoint"
	}
	return true, ""
}

func ruleName(r noproxy.ReleaseRule) string {
	if r == noproxy.Legacy {
		return "the 4.14–4.22 rule (substring search of the noProxy string)"
	}
	return "the recent rule (entry-wise; releases outside 4.14–4.22)"
}

// explain says, in a sentence or two, what HyperShift decides and why.
func (v verdict) explain() string {
	if v.text != "" {
		return v.text
	}
	if !v.proxy {
		return "No httpsProxy is set, so the kube-apiserver-proxy on the workers connects straight to the API server."
	}
	switch v.rule {
	case noproxy.Recent, noproxy.Legacy:
		bypass := v.recent
		if v.rule == noproxy.Legacy {
			bypass = v.legacy
		}
		head := fmt.Sprintf("HyperShift %s applies %s", v.version, ruleName(v.rule))
		if bypass {
			return head + ": " + v.whyBypass(v.rule) + ", so the kube-apiserver-proxy on the workers bypasses the proxy for the API server."
		}
		return head + ": " + v.whyTunnel(v.rule) + ", so the kube-apiserver-proxy on every worker tunnels API traffic through the proxy with HTTP CONNECT."
	}
	rec := "bypasses the proxy (" + v.whyBypass(noproxy.Recent) + ")"
	leg := "bypasses the proxy (" + v.whyBypass(noproxy.Legacy) + ")"
	if !v.recent {
		rec = "tunnels (" + v.whyTunnel(noproxy.Recent) + ")"
	}
	if !v.legacy {
		leg = "tunnels (" + v.whyTunnel(noproxy.Legacy) + ")"
	}
	s := fmt.Sprintf("The HyperShift release is unknown, so both rules were applied: the recent rule %s; the 4.14–4.22 rule %s.", rec, leg)
	if v.tunnel() {
		s += " The cluster is at risk because at least one of them tunnels API traffic through the proxy."
	}
	return s
}

// hsInput carries methods on noproxy's input type.
type hsInput noproxy.HyperShiftInput

// internalAddress is where the workers' kube-apiserver-proxy listens, with
// HyperShift's defaults.
func (in hsInput) internalAddress() (string, int32) {
	addr, port := in.InternalAddress, in.InternalPort
	if addr == "" {
		addr = noproxy.DefaultInternalAddressV4
		if ip, _, err := net.ParseCIDR(in.ServiceCIDR); err == nil && ip.To4() == nil {
			addr = noproxy.DefaultInternalAddressV6
		}
	}
	if port == 0 {
		port = noproxy.DefaultInternalPort
	}
	return addr, port
}

// whyBypass names what makes rule r bypass the proxy. The decision itself
// is noproxy's; this only finds the words for it, in the order the rule
// checks.
func (v verdict) whyBypass(r noproxy.ReleaseRule) string {
	in := hsInput(v.in)
	internal, _ := in.internalAddress()
	if r == noproxy.Legacy {
		for _, s := range []string{in.ExternalAddress, internal, "kubernetes", canonical(in.ServiceCIDR), canonical(in.ClusterCIDR)} {
			if s != "" && strings.Contains(in.NoProxy, s) {
				return fmt.Sprintf("the noProxy string contains %q", s)
			}
		}
		return "the noProxy string names the API server"
	}
	for _, e := range splitList(in.NoProxy) {
		switch {
		case strings.Contains(e, "kubernetes"):
			return fmt.Sprintf("the entry %q contains \"kubernetes\"", e)
		case in.ServiceCIDR != "" && e == canonical(in.ServiceCIDR):
			return fmt.Sprintf("the entry %q equals the service network", e)
		case in.ClusterCIDR != "" && e == canonical(in.ClusterCIDR):
			return fmt.Sprintf("the entry %q equals the cluster network", e)
		}
	}
	return "Go's NO_PROXY matching exempts the API address"
}

// canonical mirrors HyperShift, which compares with the masked network.
func canonical(cidr string) string {
	if _, n, err := net.ParseCIDR(strings.TrimSpace(cidr)); err == nil {
		return n.String()
	}
	return cidr
}

// whyTunnel lists what the noProxy lacks under rule r.
func (v verdict) whyTunnel(r noproxy.ReleaseRule) string {
	in := v.in
	internal, iport := hsInput(in).internalAddress()
	var nets []string
	if in.ServiceCIDR != "" {
		nets = append(nets, "the service network "+in.ServiceCIDR)
	}
	if in.ClusterCIDR != "" {
		nets = append(nets, "the cluster network "+in.ClusterCIDR)
	}
	addrs := []string{}
	if in.ExternalAddress != "" {
		port := in.ExternalPort
		if port == 0 {
			port = 443
		}
		addrs = append(addrs, "https://"+net.JoinHostPort(in.ExternalAddress, strconv.Itoa(int(port))))
	}
	addrs = append(addrs, "https://"+net.JoinHostPort(internal, strconv.Itoa(int(iport))))
	if r == noproxy.Legacy {
		items := []string{`"kubernetes"`}
		items = append(items, nets...)
		if in.ExternalAddress != "" {
			items = append(items, "the API address "+in.ExternalAddress)
		}
		items = append(items, "the worker-side API address "+internal)
		return "the noProxy string contains none of " + joinList(items, "or")
	}
	s := `no noProxy entry contains "kubernetes"`
	if len(nets) > 0 {
		s += " or equals " + joinList(nets, "or")
	}
	return s + ", and Go's NO_PROXY matching exempts none of " + joinList(addrs, "and")
}

// joinList joins "a, b <conj> c".
func joinList(items []string, conj string) string {
	if len(items) <= 1 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + " " + conj + " " + items[len(items)-1]
}

// noProxyFix proposes the noProxy that makes every HyperShift release
// bypass the proxy and gives in-cluster clients the networks: the user's
// list with noproxy.Missing appended by noproxy.Merge, plus "kubernetes"
// where Missing sees no gap for clients but HyperShift does (a noProxy of
// "*" satisfies Go but not the 4.14–4.22 substring search). field names
// the YAML path shown in the diff; patch is the oc command prefix. extra
// are further entries to add after those (the ignition endpoint's host,
// when ignition goes through the proxy too).
func noProxyFix(target, field string, spec event.ProxySpec, hc event.HostedClusterState, extra ...string) *Fix {
	cp := noproxy.ClusterProxy{
		HTTPProxy: spec.HTTPProxy, HTTPSProxy: spec.HTTPSProxy, NoProxy: spec.NoProxy, TrustedCA: spec.TrustedCA,
		ServiceCIDRs: hc.ServiceNetwork, ClusterCIDRs: hc.ClusterNetwork, MachineCIDRs: hc.MachineNetwork,
		Platform: hc.Platform,
	}
	if ep := hc.ControlPlaneEndpoint; ep != nil {
		cp.APIServerHost, cp.APIServerPort = ep.Host, ep.Port
	}
	add := noproxy.Missing(cp)
	after := noproxy.Merge(spec.NoProxy, add)
	if in := hyperShiftInput(hc, after); !noproxy.HyperShiftBypass(noproxy.Recent, in) || !noproxy.HyperShiftBypass(noproxy.Legacy, in) {
		add = append([]string{"kubernetes"}, add...)
	}
	return fixAdding(target, field, spec.NoProxy, append(add, extra...))
}

// fixAdding is the noProxy fix that appends add to noProxy with
// noproxy.Merge, shown as a diff of field; nil when Merge adds nothing.
func fixAdding(target, field, noProxy string, add []string) *Fix {
	after := noproxy.Merge(noProxy, add)
	base := splitList(noproxy.Merge(noProxy, nil))
	afterEntries := splitList(after)
	added := afterEntries[len(base):] // Merge keeps the user's entries first, in order
	if len(added) == 0 {
		return nil
	}
	return &Fix{
		Kind:   "noproxy",
		Target: target,
		Before: redact.RedactText(noProxy),
		After:  redact.RedactText(after),
		Add:    added,
		Diff:   redact.RedactText(listDiff(field, splitList(noProxy), afterEntries)),
	}
}

// splitList splits a noProxy at commas, trimming blanks and dropping empty
// entries, as Merge does.
func splitList(s string) []string {
	var out []string
	for e := range strings.SplitSeq(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// listDiff renders a before/after diff of two lists, one entry per line,
// "  " for kept, "- " for dropped (Merge drops repeated entries), "+ " for
// added entries. Lists are short, so a quadratic LCS is fine.
func listDiff(field string, a, b []string) string {
	n, m := len(a), len(b)
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "--- %s (before)\n+++ %s (after)\n", field, field)
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && a[i] == b[j]:
			sb.WriteString("  " + a[i] + "\n")
			i, j = i+1, j+1
		case j < m && (i == n || lcs[i][j+1] >= lcs[i+1][j]):
			sb.WriteString("+ " + b[j] + "\n")
			j++
		default:
			sb.WriteString("- " + a[i] + "\n")
			i++
		}
	}
	return sb.String()
}

// patchCommand is the oc command applying a noProxy fix, or "" when the
// value had to be redacted and so cannot be applied as shown.
func patchCommand(f *Fix, resource, jsonPath string, raw string) string {
	if f == nil || redact.RedactText(raw) != raw {
		return ""
	}
	val, _ := json.Marshal(f.After)
	body := strings.Replace(jsonPath, "%s", string(val), 1)
	return fmt.Sprintf("oc patch %s --type=merge -p '%s'", resource, strings.ReplaceAll(body, "'", `'\''`))
}

// clip bounds free text taken into a diagnosis, keeping the beginning.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
