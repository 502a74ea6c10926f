package noproxy

import (
	"strings"
	"testing"
)

func TestLintClientsNamesIgnoredEntries(t *testing.T) {
	c := ClusterProxy{HTTPProxy: "http://proxy:3128", Platform: PlatformKonvoy,
		NoProxy:      "10.0.0.0/18,example.com,*.corp.example,.svc,api.example:6443,10.96.0.0/12,172.16.0.8/30",
		ServiceCIDRs: []string{"10.96.0.0/12"}}
	fs := LintClients(c, AllClients())
	byEntry := map[string]Finding{}
	for _, f := range fs {
		byEntry[f.Entry] = f
		if f.Code != CodeIgnoredByClients && f.Code != CodeListForAllClients {
			t.Errorf("unexpected finding %+v", f)
		}
	}
	want := map[string]string{
		"10.0.0.0/18":      "`10.0.0.0/18` protects Go, curl, requests; not urllib/Ansible, wget, node",
		"example.com":      "`example.com` protects Go, curl, requests, urllib/Ansible, wget; not node",
		"*.corp.example":   "`*.corp.example` protects Go, node; not curl, requests, urllib/Ansible, wget",
		"api.example:6443": "`api.example:6443` protects Go, requests, urllib/Ansible, node; not curl, wget",
	}
	for entry, prefix := range want {
		if f, ok := byEntry[entry]; !ok || !strings.HasPrefix(f.Reason, prefix) {
			t.Errorf("entry %q: %+v, want reason starting %q", entry, f, prefix)
		}
	}
	if _, ok := byEntry[".svc"]; ok {
		t.Errorf(".svc protects every family, yet: %+v", byEntry[".svc"])
	}
	if f := byEntry["10.0.0.0/18"]; !strings.Contains(f.Fix, "no CIDR support") {
		t.Errorf("CIDR fix %q", f.Fix)
	}
	// The proposed list protects every probe of every entry in every
	// family, except networks too large to spell out.
	var list string
	for _, f := range fs {
		if f.Code == CodeListForAllClients {
			list = f.Entry
		}
	}
	if list == "" {
		t.Fatalf("no %s finding: %v", CodeListForAllClients, fs)
	}
	for _, u := range []string{"http://www.example.com/", "http://example.com/", "http://www.corp.example/",
		"https://api.example:6443/", "https://10.96.0.1/", "http://172.16.0.9/", "http://a.b.svc/"} {
		for _, cl := range AllClients() {
			if d, err := Decide(cl, list, u); err != nil || d != Direct {
				t.Errorf("%v sends %s through the proxy with the proposed list %q", cl, u, list)
			}
		}
	}
	if !strings.HasPrefix(list, c.NoProxy+",") {
		t.Errorf("the proposed list %q must keep the user's entries first", list)
	}
	// The families selected are the ones judged.
	for _, f := range LintClients(c, []Client{Go, Curl, Python}) {
		if f.Entry == "10.0.0.0/18" || f.Entry == "example.com" {
			t.Errorf("Go, curl and requests all honour %q: %+v", f.Entry, f)
		}
	}
	if fs := LintClients(ClusterProxy{NoProxy: "10.0.0.0/8"}, AllClients()); fs != nil {
		t.Errorf("no proxy, yet %v", fs)
	}
}

func TestLintJudgesByClusterClients(t *testing.T) {
	c := ClusterProxy{HTTPProxy: "http://proxy:3128", NoProxy: "kubernetes,172.31.0.0/16", ServiceCIDRs: []string{"172.31.0.0/16"}}
	reason := func(c ClusterProxy) string {
		for _, f := range Lint(c) {
			if f.Code == CodeMissingSvc {
				return f.Reason
			}
		}
		return ""
	}
	if r := reason(c); !strings.Contains(r, "in go, curl, python, urllib clients") {
		t.Errorf("default families: %q", r)
	}
	c.Clients = []Client{Wget}
	if r := reason(c); !strings.Contains(r, "in wget clients") {
		t.Errorf("wget only: %q", r)
	}
	// Missing follows the families too: node needs nothing more for
	// https://kubernetes/, and Go's view is unchanged.
	c.Clients = []Client{Node}
	if m := Missing(c); len(m) != 0 {
		t.Errorf("Missing for node = %v", m)
	}
}
