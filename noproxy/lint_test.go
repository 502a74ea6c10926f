package noproxy

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// seed000 is the HostedCluster of seed 000 with the default networks.
func seed000() ClusterProxy {
	return ClusterProxy{
		HTTPProxy:     "http://192.168.201.2:3128",
		HTTPSProxy:    "http://192.168.201.2:3128",
		NoProxy:       "192.168.201.0/24,.apps.ocp7.stormshift.coe.muc.redhat.com",
		TrustedCA:     "redhat-root-ca-bundle-v1",
		ServiceCIDRs:  []string{"172.31.0.0/16"},
		ClusterCIDRs:  []string{"10.132.0.0/14"},
		Platform:      "KubeVirt",
		APIServerHost: "api.ocp7.example.com",
		APIServerPort: 443,
	}
}

// codes maps code → severity; a code appearing twice is recorded once with
// its first severity.
func codes(fs []Finding) map[string]Severity {
	m := map[string]Severity{}
	for _, f := range fs {
		if _, ok := m[f.Code]; !ok {
			m[f.Code] = f.Severity
		}
	}
	return m
}

func checkOrdered(t *testing.T, fs []Finding) {
	t.Helper()
	for i := 1; i < len(fs); i++ {
		if fs[i-1].Severity.rank() > fs[i].Severity.rank() {
			t.Fatalf("findings not ordered by severity: %v", fs)
		}
	}
}

func TestLintProxyLessClusterHasNoFindings(t *testing.T) {
	c := ClusterProxy{NoProxy: "*,*.x,a b", ServiceCIDRs: []string{"172.31.0.0/16"}, Platform: "KubeVirt"}
	if fs := Lint(c); fs != nil {
		t.Errorf("Lint = %v, want none", fs)
	}
	if m := Missing(c); m != nil {
		t.Errorf("Missing = %v, want none", m)
	}
	if got := FixNoProxy(c); got != "*,*.x,a b" {
		t.Errorf("FixNoProxy = %q", got)
	}
}

func TestLintSeed000(t *testing.T) {
	c := seed000()
	fs := Lint(c)
	checkOrdered(t, fs)
	want := map[string]Severity{
		CodeMissingKubernetes:           SeverityCritical,
		CodeMissingServiceCIDR:          SeverityInfo,
		CodeMissingClusterCIDR:          SeverityInfo,
		CodeMissingLocalhost:            SeverityInfo,
		CodeMissingSvc:                  SeverityInfo,
		CodeMissingClusterLocal:         SeverityInfo,
		CodeMissingKubernetesDefaultSvc: SeverityInfo,
	}
	if got := codes(fs); !reflect.DeepEqual(got, want) {
		t.Fatalf("codes = %v, want %v\n%v", got, want, fs)
	}
	crit := fs[0]
	if crit.Entry != "kubernetes" || !strings.Contains(crit.Reason, "tunnels API traffic") || !strings.Contains(crit.Reason, "Service IP") {
		t.Errorf("critical finding = %+v", crit)
	}
	if m := Missing(c); !reflect.DeepEqual(m, []string{"kubernetes", "172.31.0.0/16", "10.132.0.0/14"}) {
		t.Errorf("Missing = %q", m)
	}
	fixed := FixNoProxy(c)
	if fixed != "192.168.201.0/24,.apps.ocp7.stormshift.coe.muc.redhat.com,kubernetes,172.31.0.0/16,10.132.0.0/14" {
		t.Errorf("FixNoProxy = %q", fixed)
	}
	// After the fix only HyperShift's own defaults remain, as info.
	c.NoProxy = fixed
	for _, f := range Lint(c) {
		if f.Severity != SeverityInfo {
			t.Errorf("after the fix: %+v", f)
		}
	}
	if m := Missing(c); m != nil {
		t.Errorf("after the fix Missing = %q", m)
	}
}

func TestLintHyperShiftReleaseDependent(t *testing.T) {
	c := seed000()
	c.APIServerHost = "api.ocp7.example.com"
	c.NoProxy = ".example.com"
	fs := Lint(c)
	if got := codes(fs)[CodeMissingKubernetes]; got != SeverityWarning {
		t.Fatalf("missing-kubernetes = %q, want warning: %v", got, fs)
	}
	for _, f := range fs {
		if f.Code == CodeMissingKubernetes && !strings.Contains(f.Reason, "only recent HyperShift releases") {
			t.Errorf("reason = %q", f.Reason)
		}
	}
	// The legacy substring search is fooled by 172.20.0.10.
	c.NoProxy = "172.20.0.10"
	for _, f := range Lint(c) {
		if f.Code == CodeMissingKubernetes && (f.Severity != SeverityWarning || !strings.Contains(f.Reason, "only older")) {
			t.Errorf("legacy-only bypass: %+v", f)
		}
	}
	// The release picks the rule: ".example.com" bypasses under the recent
	// rule (only an info about name-dialling clients) and tunnels under
	// 4.14–4.22 (critical); the finding names the release and the rule.
	c.NoProxy = ".example.com"
	for _, tt := range []struct {
		release string
		want    Severity
		reason  string
	}{
		{"4.23.1", SeverityInfo, "HyperShift 4.23.1 applies the recent rule"},
		{"4.19.7", SeverityCritical, "HyperShift 4.19.7 applies the 4.14–4.22 rule"},
		{"", SeverityWarning, "the HyperShift release is unknown"},
	} {
		c.Release = tt.release
		fs := Lint(c)
		if got := codes(fs)[CodeMissingKubernetes]; got != tt.want {
			t.Errorf("release %q: missing-kubernetes = %q, want %q: %v", tt.release, got, tt.want, fs)
		}
		for _, f := range fs {
			if f.Code == CodeMissingKubernetes && !strings.Contains(f.Reason, tt.reason) {
				t.Errorf("release %q: reason %q lacks %q", tt.release, f.Reason, tt.reason)
			}
		}
	}
	c.Release = ""
	// Bypassing via the service CIDR leaves only an info about name-dialling clients.
	c.NoProxy = "172.31.0.0/16"
	for _, f := range Lint(c) {
		if f.Code == CodeMissingKubernetes && f.Severity != SeverityInfo {
			t.Errorf("bypass via service CIDR: %+v", f)
		}
	}
	// Without httpsProxy HyperShift never tunnels.
	c.HTTPSProxy, c.NoProxy = "", ""
	for _, f := range Lint(c) {
		if f.Code == CodeMissingKubernetes && f.Severity == SeverityCritical {
			t.Errorf("no httpsProxy: %+v", f)
		}
	}
}

func TestLintGenericEntries(t *testing.T) {
	c := ClusterProxy{
		HTTPProxy:    "http://alice:s3cret@proxy.corp:3128",
		HTTPSProxy:   "https://proxy.corp:3129",
		NoProxy:      "*.corp,a b,*,10.0.0.0/0,dup.example,DUP.example,10.0.0.,fd00::/8,host:443,10.1.0.0/16,http://x,2001:db8:0::1,example.com.,0.1",
		ServiceCIDRs: []string{"10.96.0.0/12"},
		ClusterCIDRs: []string{"10.1.0.0/16"},
		MachineCIDRs: []string{"192.168.0.0/24"},
	}
	fs := Lint(c)
	checkOrdered(t, fs)
	byEntry := map[string][]string{}
	for _, f := range fs {
		byEntry[f.Entry] = append(byEntry[f.Entry], f.Code+"/"+string(f.Severity))
	}
	want := map[string][]string{
		"http://***@proxy.corp:3128": {"credentials-in-proxy-url/warning"},
		"https://proxy.corp:3129":    {"https-proxy-scheme-without-trusted-ca/warning"},
		"*.corp":                     {"ambiguous-entry/warning"},
		"a b":                        {"ambiguous-entry/warning"},
		"*":                          {"wildcard-disables-proxy/warning"},
		"10.0.0.0/0":                 {"ambiguous-entry/warning"},
		"DUP.example":                {"duplicate-entry/info"},
		"10.0.0.":                    {"unmatchable-entry/warning"},
		"fd00::/8":                   {"ambiguous-entry/warning"},
		"host:443":                   {"ambiguous-entry/warning"},
		"http://x":                   {"unmatchable-entry/warning"},
		"2001:db8:0::1":              {"ambiguous-entry/warning"},
		"example.com.":               {"ambiguous-entry/warning"},
		"0.1":                        {"ambiguous-entry/warning"},
		"10.96.0.0/12":               {"missing-service-cidr/critical"},
		"192.168.0.0/24":             {"missing-machine-cidr/warning"},
		"localhost":                  {"missing-localhost/warning"},
		".svc":                       {"missing-svc/warning"},
		".cluster.local":             {"missing-cluster-local/warning"},
		"kubernetes.default.svc":     {"missing-kubernetes-default-svc/warning"},
		"kubernetes":                 {"missing-kubernetes/warning"},
	}
	for entry, codes := range want {
		if !reflect.DeepEqual(byEntry[entry], codes) {
			t.Errorf("entry %q: %v, want %v", entry, byEntry[entry], codes)
		}
	}
	for entry := range byEntry {
		if _, ok := want[entry]; !ok {
			t.Errorf("unexpected findings for %q: %v", entry, byEntry[entry])
		}
	}
	out, _ := json.Marshal(fs)
	if strings.Contains(string(out), "s3cret") || strings.Contains(string(out), "alice") {
		t.Errorf("findings leak credentials: %s", out)
	}
	for _, f := range fs {
		if f.Severity == SeverityCritical && f.Code == CodeMissingServiceCIDR && !strings.Contains(f.Reason, "10.96.0.1") {
			t.Errorf("the service finding must name the Service IP: %q", f.Reason)
		}
	}
}

func TestLintWholeWildcardAndServiceIP(t *testing.T) {
	fs := Lint(ClusterProxy{HTTPProxy: "http://p:1", NoProxy: " * ", ServiceCIDRs: []string{"10.96.0.0/12"}})
	var wild *Finding
	for i := range fs {
		if fs[i].Code == CodeWildcardDisablesProxy {
			wild = &fs[i]
		}
	}
	if wild == nil || !strings.Contains(wild.Reason, "effectively off") {
		t.Errorf("whole-value wildcard: %+v", fs)
	}
	if m := Missing(ClusterProxy{HTTPProxy: "http://p:1", NoProxy: "*"}); m != nil {
		t.Errorf("Missing with * = %v", m)
	}
	// Only the kubernetes Service IP listed: the API is fine, other
	// ClusterIPs are not.
	fs = Lint(ClusterProxy{HTTPProxy: "http://p:1", NoProxy: "10.96.0.1,kubernetes", ServiceCIDRs: []string{"10.96.0.0/12"}})
	if got := codes(fs)[CodeMissingServiceCIDR]; got != SeverityWarning {
		t.Errorf("service IP only: %v", fs)
	}
	// A covering CIDR counts.
	fs = Lint(ClusterProxy{HTTPProxy: "http://p:1", NoProxy: "10.0.0.0/8", ServiceCIDRs: []string{"10.96.0.0/12"}, ClusterCIDRs: []string{"10.128.0.0/14"}})
	if _, ok := codes(fs)[CodeMissingServiceCIDR]; ok {
		t.Errorf("covered service CIDR reported: %v", fs)
	}
	if _, ok := codes(fs)[CodeMissingClusterCIDR]; ok {
		t.Errorf("covered cluster CIDR reported: %v", fs)
	}
}

func TestLintKonvoy(t *testing.T) {
	c := ClusterProxy{
		HTTPProxy:    "http://proxy.company.com:3128",
		HTTPSProxy:   "https://proxy.company.com:3128",
		NoProxy:      "172.0.0.0/16,.intra.net",
		ServiceCIDRs: []string{"10.0.0.0/18"},
		ClusterCIDRs: []string{"192.168.0.0/16"},
		Platform:     "Konvoy",
	}
	got := codes(Lint(c))
	if got[CodeProxySchemeNotHTTP] != SeverityCritical {
		t.Errorf("Konvoy https proxy: %v", got)
	}
	if _, ok := got[CodeHTTPSProxyWithoutTrustedCA]; ok {
		t.Errorf("Konvoy reports the scheme, not the CA: %v", got)
	}
	for code, sev := range got {
		if strings.HasPrefix(code, "missing-") && sev != SeverityInfo {
			t.Errorf("Konvoy adds %s itself, want info: %v", code, sev)
		}
	}
	c.HTTPProxy = "proxy.company.com:3128" // no scheme means http
	c.HTTPSProxy = "http://proxy.company.com:3128"
	if _, ok := codes(Lint(c))[CodeProxySchemeNotHTTP]; ok {
		t.Errorf("scheme-less proxy is http")
	}
}

func TestLintInvalidProxyURL(t *testing.T) {
	fs := Lint(ClusterProxy{HTTPProxy: "http://u:p@[::1", HTTPSProxy: "%zz"})
	n := 0
	for _, f := range fs {
		if f.Code == CodeInvalidProxyURL {
			n++
			if f.Severity != SeverityCritical || strings.Contains(f.Reason+f.Entry, "u:p") {
				t.Errorf("invalid proxy finding %+v", f)
			}
		}
	}
	if n != 2 {
		t.Errorf("want 2 invalid-proxy-url findings, got %v", fs)
	}
}

func TestMerge(t *testing.T) {
	tests := []struct {
		noProxy string
		add     []string
		want    string
	}{
		{"", []string{"kubernetes"}, "kubernetes"},
		{" a , B ,, a ", []string{"b", "c"}, "a,B,c"},
		{"Kubernetes", []string{"kubernetes"}, "Kubernetes"},
		{"10.0.0.1/8", []string{"10.0.0.0/8"}, "10.0.0.1/8"},
		{"::ffff:10.0.0.1", []string{"10.0.0.1"}, "::ffff:10.0.0.1"},
		{"[::1]:80", []string{"[0::1]:80", "[::1]:81"}, "[::1]:80,[::1]:81"},
		{"a", []string{" , ", "x, y"}, "a,x,y"},
		{"a,b", nil, "a,b"},
	}
	for _, tt := range tests {
		if got := Merge(tt.noProxy, tt.add); got != tt.want {
			t.Errorf("Merge(%q, %q) = %q, want %q", tt.noProxy, tt.add, got, tt.want)
		}
	}
}
