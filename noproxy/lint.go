package noproxy

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"sort"
	"strings"

	"github.com/hcpbot/hcpbot/redact"
)

// Severity ranks findings.
type Severity string

// Severities, most severe first.
const (
	SeverityCritical Severity = "critical"
	SeverityWarning  Severity = "warning"
	SeverityInfo     Severity = "info"
)

func (s Severity) rank() int {
	switch s {
	case SeverityCritical:
		return 0
	case SeverityWarning:
		return 1
	}
	return 2
}

// Finding codes. They are stable: the bot and its users key on them.
const (
	CodeMissingKubernetes           = "missing-kubernetes"
	CodeMissingServiceCIDR          = "missing-service-cidr"
	CodeMissingClusterCIDR          = "missing-cluster-cidr"
	CodeMissingMachineCIDR          = "missing-machine-cidr"
	CodeMissingLocalhost            = "missing-localhost"
	CodeMissingSvc                  = "missing-svc"
	CodeMissingClusterLocal         = "missing-cluster-local"
	CodeMissingKubernetesDefaultSvc = "missing-kubernetes-default-svc"
	CodeHTTPSProxyWithoutTrustedCA  = "https-proxy-scheme-without-trusted-ca"
	CodeProxySchemeNotHTTP          = "proxy-scheme-not-http"
	CodeCredentialsInProxyURL       = "credentials-in-proxy-url"
	CodeInvalidProxyURL             = "invalid-proxy-url"
	CodeWildcardDisablesProxy       = "wildcard-disables-proxy"
	CodeAmbiguousEntry              = "ambiguous-entry"
	CodeUnmatchableEntry            = "unmatchable-entry"
	CodeDuplicateEntry              = "duplicate-entry"
)

// Finding is one lint result. Entry, Reason and Fix never contain proxy
// credentials.
type Finding struct {
	Severity Severity `json:"severity"`
	Code     string   `json:"code"`
	// Entry is the noProxy entry, proxy URL or value the finding is about.
	Entry  string `json:"entry,omitempty"`
	Reason string `json:"reason"`
	Fix    string `json:"fix,omitempty"`
}

// Platform names with their own conventions. Any other non-empty value is
// taken as a HyperShift platform type if it is one, else as generic.
const (
	PlatformKonvoy = "Konvoy"
)

// ClusterProxy is the proxy configuration of one cluster.
type ClusterProxy struct {
	HTTPProxy  string
	HTTPSProxy string
	NoProxy    string
	// TrustedCA is the name of the CA bundle ConfigMap (trustedCA.name).
	TrustedCA    string
	ServiceCIDRs []string
	ClusterCIDRs []string
	MachineCIDRs []string
	// Platform is a HyperShift platform type (KubeVirt, AWS, Azure, Agent,
	// None, ...), PlatformKonvoy, or "" for a plain workload environment.
	Platform string
	// APIServerHost and APIServerPort are the API endpoint the nodes use
	// (HostedCluster status.controlPlaneEndpoint).
	APIServerHost string
	APIServerPort int32
	// Release is the HyperShift release the cluster runs (HostedCluster
	// status.version). It picks the kube-apiserver-proxy rule
	// (RuleForRelease); "" judges under both.
	Release string
	// Clients are the families the cluster's workloads use: the coverage
	// findings and Missing judge by them. Nil means DefaultClients.
	Clients []Client
}

// DefaultClients are the families a cluster is judged by when its
// ClusterProxy names none: Go, curl, Python requests and urllib (Ansible).
func DefaultClients() []Client { return []Client{Go, Curl, Python, Urllib} }

func (c ClusterProxy) clients() []Client {
	if len(c.Clients) == 0 {
		return DefaultClients()
	}
	return c.Clients
}

type platformKind int

const (
	platformGeneric platformKind = iota
	platformHyperShift
	platformKonvoy
)

func (c ClusterProxy) platform() platformKind {
	switch strings.ToLower(c.Platform) {
	case strings.ToLower(PlatformKonvoy):
		return platformKonvoy
	case "aws", "azure", "kubevirt", "agent", "none", "openstack", "ibmcloud", "powervs", "gcp":
		return platformHyperShift
	}
	return platformGeneric
}

func (c ClusterProxy) hasProxy() bool {
	return strings.TrimSpace(c.HTTPProxy) != "" || strings.TrimSpace(c.HTTPSProxy) != ""
}

// Lint checks a cluster's proxy settings. A cluster without a proxy yields
// no findings. Findings are ordered by severity, then by the order of the
// checks (proxy URLs, list entries, missing entries).
func Lint(c ClusterProxy) []Finding {
	if !c.hasProxy() {
		return nil
	}
	var fs []Finding
	fs = append(fs, lintProxyURLs(c)...)
	entries := Parse(c.NoProxy)
	fs = append(fs, lintEntries(c.NoProxy, entries)...)
	fs = append(fs, lintCoverage(c, entries)...)
	sort.SliceStable(fs, func(i, j int) bool { return fs[i].Severity.rank() < fs[j].Severity.rank() })
	for i := range fs {
		fs[i].Entry = redact.RedactText(fs[i].Entry)
		fs[i].Reason = redact.RedactText(fs[i].Reason)
		fs[i].Fix = redact.RedactText(fs[i].Fix)
	}
	return fs
}

func lintProxyURLs(c ClusterProxy) []Finding {
	var fs []Finding
	for _, p := range []struct{ field, value string }{{"httpProxy", c.HTTPProxy}, {"httpsProxy", c.HTTPSProxy}} {
		v := strings.TrimSpace(p.value)
		if v == "" {
			continue
		}
		shown := redact.RedactURL(v)
		u, err := parseProxyURL(v)
		if err != nil {
			fs = append(fs, Finding{SeverityCritical, CodeInvalidProxyURL, shown,
				fmt.Sprintf("%s is not a usable proxy URL: %v", p.field, err),
				"use http://host:port"})
			continue
		}
		if u.User != nil {
			fs = append(fs, Finding{SeverityWarning, CodeCredentialsInProxyURL, shown,
				fmt.Sprintf("%s carries credentials; they are copied into every node's and pod's environment and show up in logs", p.field),
				"authenticate the cluster at the proxy by source address, or rotate the password and keep it out of the spec"})
		}
		switch {
		case c.platform() == platformKonvoy && u.Scheme != "http":
			fs = append(fs, Finding{SeverityCritical, CodeProxySchemeNotHTTP, shown,
				fmt.Sprintf("Konvoy requires the http:// scheme for %s (Ansible cannot use https proxies and the proxy certificate is not verified)", p.field),
				"use http://" + u.Host})
		case u.Scheme == "https" && strings.TrimSpace(c.TrustedCA) == "":
			fs = append(fs, Finding{SeverityWarning, CodeHTTPSProxyWithoutTrustedCA, shown,
				fmt.Sprintf("%s is an https:// proxy but no trustedCA bundle is configured, so clients can verify the proxy's certificate only if a public CA signed it", p.field),
				"set trustedCA.name to a ConfigMap with key ca-bundle.crt holding the proxy's CA, or use http:// (CONNECT still keeps the TLS to the destination end-to-end)"})
		}
	}
	return fs
}

// parseProxyURL follows httpproxy's parseProxy, which reads a value
// without scheme as http://value; unlike parseProxy it does not retry a
// value that already has a "://", which httpproxy would turn into a proxy
// named "http:".
func parseProxyURL(v string) (*url.URL, error) {
	u, err := url.Parse(v)
	if (err != nil || u.Scheme == "" || u.Host == "") && !strings.Contains(v, "://") {
		if u2, err2 := url.Parse("http://" + v); err2 == nil && u2.Host != "" {
			return u2, nil
		}
	}
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // url.Error repeats the URL, password included
		}
		return nil, err
	}
	if u.Host == "" {
		return nil, errors.New("no host")
	}
	return u, nil
}

func lintEntries(noProxy string, entries []Entry) []Finding {
	var fs []Finding
	seen := map[string]string{}
	for _, e := range entries {
		if e.Kind == KindWildcard {
			if strings.TrimSpace(noProxy) == "*" {
				fs = append(fs, Finding{SeverityWarning, CodeWildcardDisablesProxy, e.Text,
					"noProxy is \"*\": every client but wget (which has no wildcard) connects directly to every host, the proxy is effectively off",
					"list the hosts, domains and CIDRs that must be reached directly instead"})
			} else {
				fs = append(fs, Finding{SeverityWarning, CodeWildcardDisablesProxy, e.Text,
					"Go and Node (proxy-from-env) clients bypass the proxy for every host when any entry is \"*\"; curl, Python requests and urllib only when the whole value is \"*\", and wget never, so they keep using the proxy",
					"remove \"*\" and list the destinations that must be reached directly"})
			}
		} else if code, reason, fix := entryIssue(e); code != "" {
			fs = append(fs, Finding{SeverityWarning, code, e.Text, reason, fix})
		}
		k := mergeKey(e.Text)
		if first, dup := seen[k]; dup {
			why := fmt.Sprintf("%q appears more than once", e.Text)
			if first != e.Text {
				why = fmt.Sprintf("%q means the same as the earlier %q", e.Text, first)
			}
			fs = append(fs, Finding{SeverityInfo, CodeDuplicateEntry, e.Text, why, "drop the repetition"})
		} else {
			seen[k] = e.Text
		}
	}
	return fs
}

// entryIssue explains entries the three client families read differently
// (ambiguous) or that no client can ever match (unmatchable).
func entryIssue(e Entry) (code, reason, fix string) {
	const ambiguous, unmatchable = CodeAmbiguousEntry, CodeUnmatchableEntry
	switch e.Kind {
	case KindStarDomain:
		return ambiguous,
			fmt.Sprintf("Go reads %q as %q (subdomains only); curl and Python have no \"*.\" wildcard and never match it", e.Text, "."+e.Host),
			fmt.Sprintf("write %q (curl and Python then also match %q itself) or %q", "."+e.Host, e.Host, e.Host)
	case KindHostPort, KindIPPort:
		if e.Kind == KindIPPort && e.Addr.Is4() {
			return ambiguous,
				"Go honours the port (the URL's, or 80/443 from the scheme); curl and Python never match an address entry with a port",
				fmt.Sprintf("write %q without the port", e.Host)
		}
		return ambiguous,
			"Go honours the port (the URL's, or 80/443 from the scheme); curl never matches an entry with a port; Python only when the URL spells out the same port",
			fmt.Sprintf("write %q without the port", e.Host)
	case KindCIDR:
		if e.Prefix.Addr().Is6() && !e.Prefix.Addr().Is4In6() {
			return ambiguous,
				"only Go honours IPv6 CIDRs: Python requests understands IPv4 CIDRs only and curl up to 8.8 compares IPv6 hosts as text",
				"also list the IPv6 addresses that curl and Python clients dial, in canonical form"
		}
		if e.Prefix.Bits() == 0 {
			return ambiguous,
				"Go matches every IPv4 address; curl reads /0 as the single address and Python rejects the mask",
				"list the networks that must be reached directly"
		}
	case KindIP:
		if e.Addr.Is6() && e.Addr.String() != e.Host {
			return ambiguous,
				"Go compares IPv6 addresses numerically, curl and Python compare the text",
				fmt.Sprintf("write it as %q", e.Addr.String())
		}
	case KindDomain, KindDotDomain:
		bare := strings.Trim(e.Host, ".")
		if bare != "" && strings.Trim(bare, "0123456789.") == "" {
			if strings.HasSuffix(e.Host, ".") {
				return unmatchable,
					"address-prefix notation (\"10.0.0.\") is not understood by Go, curl or Python",
					"use a CIDR such as 10.0.0.0/8"
			}
			return ambiguous,
				"Go and curl never match an IP address against a name entry, but Python's urllib fallback matches IPv4 hosts that end in \"." + bare + "\"",
				"use an IP address or a CIDR"
		}
		if strings.HasSuffix(e.Host, ".") {
			return ambiguous,
				"curl ignores the trailing dot; Go and Python then never match ordinary host names",
				fmt.Sprintf("write %q", strings.TrimSuffix(e.Text, "."))
		}
	case KindInvalid:
		if strings.ContainsAny(e.Text, " \t") {
			return ambiguous,
				"Go sees one entry that never matches; curl up to 8.8 splits it at the blank (8.9+ stops reading the list there); Python deletes spaces and reads one joined name",
				"separate entries with commas"
		}
		return unmatchable, fmt.Sprintf("no client can match it: %s", e.Problem), "remove or rewrite it"
	}
	return "", "", ""
}

// lintCoverage reports well-known destinations that the list does not
// exempt. Severities depend on who fills the gaps: HyperShift and Konvoy
// add their defaults to the rendered list themselves, which lowers those
// findings to info.
func lintCoverage(c ClusterProxy, entries []Entry) []Finding {
	var fs []Finding
	plat := c.platform()
	sev := func(generic Severity) Severity {
		if plat == platformGeneric {
			return generic
		}
		return SeverityInfo
	}
	addedBy := ""
	switch plat {
	case platformHyperShift:
		addedBy = "; HyperShift adds it to the rendered noProxy (status) by itself, so only clients configured from the spec value miss it"
	case platformKonvoy:
		addedBy = "; Konvoy adds it for core components by itself, so only workloads whose NO_PROXY you set miss it"
	}

	if f, ok := lintKubernetes(c, plat); ok {
		fs = append(fs, f)
	}
	for i, cidr := range c.ServiceCIDRs {
		if f, ok := lintServiceCIDR(c, entries, plat, addedBy, i, cidr); ok {
			fs = append(fs, f)
		}
	}
	for _, cidr := range c.ClusterCIDRs {
		if !cidrCovered(entries, cidr) {
			fs = append(fs, Finding{sev(SeverityWarning), CodeMissingClusterCIDR, cidr,
				"requests to pod IPs in the cluster network " + cidr + " (webhooks, metrics scraping, pod-to-pod HTTP) go through the proxy" + addedBy,
				"add " + cidr})
		}
	}
	for _, cidr := range c.MachineCIDRs {
		if !cidrCovered(entries, cidr) {
			fs = append(fs, Finding{sev(SeverityWarning), CodeMissingMachineCIDR, cidr,
				"requests to node IPs in the machine network " + cidr + " (kubelet, node exporters, ingress on nodes) go through the proxy" + addedBy,
				"add " + cidr})
		}
	}
	type probe struct {
		code, entry, fix, what string
		urls                   []string
	}
	for _, p := range []probe{
		{CodeMissingLocalhost, "localhost", "add localhost and 127.0.0.1",
			"requests to localhost and 127.0.0.1 (Go exempts loopback by itself)", []string{"http://localhost/", "http://127.0.0.1/"}},
		{CodeMissingSvc, ".svc", "add .svc",
			"requests to Services by name (name.namespace.svc)", []string{"https://name.namespace.svc/"}},
		{CodeMissingClusterLocal, ".cluster.local", "add .cluster.local",
			"requests to fully qualified Service names (name.namespace.svc.cluster.local)", []string{"https://name.namespace.svc.cluster.local/"}},
		{CodeMissingKubernetesDefaultSvc, "kubernetes.default.svc", "add kubernetes.default.svc (or .svc)",
			"requests to kubernetes.default.svc, the API server's in-cluster name,", []string{"https://kubernetes.default.svc/"}},
	} {
		if miss := proxiedBy(c.clients(), c.NoProxy, p.urls...); len(miss) > 0 {
			fs = append(fs, Finding{sev(SeverityWarning), p.code, p.entry,
				fmt.Sprintf("%s go through the proxy in %s clients%s", p.what, strings.Join(miss, ", "), addedBy),
				p.fix})
		}
	}
	return fs
}

func lintKubernetes(c ClusterProxy, plat platformKind) (Finding, bool) {
	kubeDirect := len(proxiedBy(c.clients(), c.NoProxy, "https://kubernetes/")) == 0
	const fix = "add kubernetes to noProxy, together with the service and cluster network CIDRs"
	if plat != platformHyperShift || strings.TrimSpace(c.HTTPSProxy) == "" {
		if kubeDirect {
			return Finding{}, false
		}
		sev := SeverityWarning
		if plat == platformKonvoy {
			sev = SeverityInfo
		}
		return Finding{sev, CodeMissingKubernetes, "kubernetes",
			"clients that dial https://kubernetes by name go through the proxy; in-cluster clients dial the Service IP instead, so this alone does not protect them (see the service network)", fix}, true
	}
	in := HyperShiftInput{NoProxy: c.NoProxy, ExternalAddress: c.APIServerHost, ExternalPort: c.APIServerPort}
	if len(c.ServiceCIDRs) > 0 {
		in.ServiceCIDR = c.ServiceCIDRs[0]
	}
	if len(c.ClusterCIDRs) > 0 {
		in.ClusterCIDR = c.ClusterCIDRs[0]
	}
	recent, why := hyperShiftDecide(Recent, in)
	legacy, whyLegacy := hyperShiftDecide(Legacy, in)
	// A known release settles which rule applies; the findings name it.
	head := ""
	if rule, ok := RuleForRelease(c.Release); ok {
		words := "recent"
		if rule == Legacy {
			words = "4.14–4.22"
		}
		head = fmt.Sprintf("HyperShift %s applies the %s rule: ", c.Release, words)
		if rule == Legacy {
			recent, why = legacy, whyLegacy
		}
		legacy = recent
	}
	switch {
	case !recent && !legacy:
		return Finding{SeverityCritical, CodeMissingKubernetes, "kubernetes",
			head + "the kube-apiserver-proxy on every worker tunnels API traffic through the HTTPS proxy (HTTP CONNECT): no noProxy entry contains \"kubernetes\" or equals the service/cluster network, and the API addresses are not exempt; in-cluster clients dial the Service IP, which lands on that tunnel",
			fix}, true
	case recent != legacy:
		rule, other := "recent", "older (4.14–4.22)"
		if legacy {
			rule, other, why = "older (4.14–4.22)", "recent", whyLegacy
		}
		return Finding{SeverityWarning, CodeMissingKubernetes, "kubernetes",
			fmt.Sprintf("the HyperShift release is unknown: only %s HyperShift releases render the direct kube-apiserver-proxy (%s); %s releases tunnel API traffic through the proxy", rule, why, other),
			fix}, true
	case !kubeDirect:
		return Finding{SeverityInfo, CodeMissingKubernetes, "kubernetes",
			fmt.Sprintf("%sthe kube-apiserver-proxy already bypasses the proxy (%s), but clients that dial https://kubernetes by name still use it", head, why),
			"add kubernetes to noProxy"}, true
	}
	return Finding{}, false
}

func lintServiceCIDR(c ClusterProxy, entries []Entry, plat platformKind, addedBy string, i int, cidr string) (Finding, bool) {
	if cidrCovered(entries, cidr) {
		return Finding{}, false
	}
	svcIP := ""
	if p, err := netip.ParsePrefix(strings.TrimSpace(cidr)); err == nil {
		svcIP = p.Masked().Addr().Next().String()
	}
	apiDirect := svcIP != "" && len(proxiedBy(c.clients(), c.NoProxy, "https://"+bracketHost(svcIP)+"/")) == 0
	sev := SeverityCritical
	reason := fmt.Sprintf("in-cluster clients dial the kubernetes Service IP %s (KUBERNETES_SERVICE_HOST) and other ClusterIPs in %s, and those requests go through the proxy; kubernetes or .svc entries only help clients that dial by name", svcIP, cidr)
	if apiDirect {
		sev = SeverityWarning
		reason = fmt.Sprintf("the kubernetes Service IP %s is exempt, but requests to other ClusterIPs in %s go through the proxy", svcIP, cidr)
	}
	if plat != platformGeneric {
		sev = SeverityInfo
		reason += addedBy
		if plat == platformHyperShift && i == 0 {
			reason += "; list it in the spec anyway: the kube-apiserver-proxy decision reads only the spec noProxy, and recent releases bypass the proxy when an entry equals the service network"
		}
	}
	return Finding{sev, CodeMissingServiceCIDR, cidr, reason, "add " + cidr}, true
}

// proxiedBy returns those of the client families that send the URLs
// through the proxy.
func proxiedBy(clients []Client, noProxy string, urls ...string) []string {
	var out []string
	for _, cl := range clients {
		for _, u := range urls {
			if d, err := Decide(cl, noProxy, u); err == nil && d == Proxy {
				out = append(out, cl.String())
				break
			}
		}
	}
	return out
}

// cidrCovered reports whether an entry equals cidr or a CIDR entry contains
// all of it. Go semantics, on which curl and Python agree for IPv4 — except
// for /0, which only Go honours, so it does not count.
func cidrCovered(entries []Entry, cidr string) bool {
	want, err := netip.ParsePrefix(strings.TrimSpace(cidr))
	if err != nil {
		for _, e := range entries {
			if strings.EqualFold(e.Text, strings.TrimSpace(cidr)) {
				return true
			}
		}
		return false
	}
	want = want.Masked()
	for _, e := range entries {
		if e.Kind != KindCIDR || !e.Prefix.IsValid() || e.Prefix.Bits() == 0 {
			continue
		}
		have := e.Prefix.Masked()
		if have.Addr().Is4() == want.Addr().Is4() && have.Bits() <= want.Bits() && have.Contains(want.Addr()) {
			return true
		}
	}
	return false
}

func bracketHost(ip string) string {
	if strings.Contains(ip, ":") {
		return "[" + ip + "]"
	}
	return ip
}

// Missing returns the entries the noProxy fix should add, in order:
// "kubernetes" unless every client family already sends https://kubernetes
// directly, then the first service network and the first cluster network
// unless an entry already covers them. Without a proxy, or with a noProxy of
// exactly "*", nothing is missing.
func Missing(c ClusterProxy) []string {
	if !c.hasProxy() || strings.TrimSpace(c.NoProxy) == "*" {
		return nil // no proxy in use, or every client already bypasses it
	}
	var add []string
	if len(proxiedBy(c.clients(), c.NoProxy, "https://kubernetes/")) > 0 {
		add = append(add, "kubernetes")
	}
	entries := Parse(c.NoProxy)
	for _, cidrs := range [][]string{c.ServiceCIDRs, c.ClusterCIDRs} {
		if len(cidrs) > 0 && strings.TrimSpace(cidrs[0]) != "" && !cidrCovered(entries, cidrs[0]) {
			add = append(add, strings.TrimSpace(cidrs[0]))
		}
	}
	return add
}

// FixNoProxy is the noProxy value the bot proposes: the user's list with
// Missing(c) appended.
func FixNoProxy(c ClusterProxy) string { return Merge(c.NoProxy, Missing(c)) }

// Merge appends add to the noProxy list. It keeps the user's entries in
// their order, trims whitespace around every entry, drops empty entries and
// never lets an entry appear twice: names compare case-insensitively,
// addresses and CIDRs by value ("10.0.0.1/8" equals "10.0.0.0/8",
// "::ffff:10.0.0.1" equals "10.0.0.1"). The first spelling wins.
func Merge(noProxy string, add []string) string {
	var out []string
	seen := map[string]bool{}
	push := func(e string) {
		e = strings.TrimSpace(e)
		if e == "" {
			return
		}
		k := mergeKey(e)
		if seen[k] {
			return
		}
		seen[k] = true
		out = append(out, e)
	}
	for _, e := range strings.Split(noProxy, ",") {
		push(e)
	}
	for _, a := range add {
		for _, e := range strings.Split(a, ",") {
			push(e)
		}
	}
	return strings.Join(out, ",")
}

// mergeKey identifies entries that mean the same thing.
func mergeKey(e string) string {
	e = strings.ToLower(strings.TrimSpace(e))
	if p, err := netip.ParsePrefix(e); err == nil {
		return "cidr:" + p.Masked().String()
	}
	if a, err := netip.ParseAddr(e); err == nil {
		return "ip:" + a.Unmap().String()
	}
	if ap, err := netip.ParseAddrPort(e); err == nil {
		return "ipport:" + netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()).String()
	}
	return "name:" + e
}
