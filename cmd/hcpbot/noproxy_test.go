package main

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestNoProxyExplainTable(t *testing.T) {
	code, out, errOut := run(t, "noproxy", "explain", "--no-proxy", "kubernetes,.svc,*.corp.example",
		"https://kubernetes:443", "https://172.31.0.1/", "https://api.corp.example/", "http://localhost/")
	if code != 0 {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	want := [][]string{
		{"URL", "GO", "CURL", "PYTHON", "URLLIB", "WGET", "NODE"},
		{"https://kubernetes:443", "direct", "direct", "direct", "direct", "direct", "direct"},
		{"https://172.31.0.1/", "proxy", "proxy", "proxy", "proxy", "proxy", "proxy"},
		{"https://api.corp.example/", "direct", "proxy", "proxy", "proxy", "proxy", "direct"},
		{"http://localhost/", "direct", "proxy", "proxy", "proxy", "proxy", "proxy"},
	}
	if len(lines) != len(want) {
		t.Fatalf("output:\n%s", out)
	}
	col := strings.Index(lines[0], "GO")
	for i, w := range want {
		if got := strings.Fields(lines[i]); !reflect.DeepEqual(got, w) {
			t.Errorf("line %d = %q, want %q", i, got, w)
		}
		if strings.Index(lines[i], w[1]) != col {
			t.Errorf("line %d is not aligned:\n%s", i, out)
		}
	}
}

func TestNoProxyExplainJSON(t *testing.T) {
	// Flags may follow the URLs; credentials never reach the output.
	code, out, errOut := run(t, "noproxy", "explain", "http://alice:s3cret@10.1.2.3:8080/", "http://x:99999/",
		"--json", "--no-proxy", "10.0.0.0/8 , *.x")
	if code != 0 {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	// The fields of the first version of `explain --json` keep their values.
	old := []map[string]any{
		{"url": "http://***@10.1.2.3:8080/", "go": "direct", "curl": "direct", "python": "direct"},
		{"url": "http://x:99999/", "go": "proxy", "curl": "error", "python": "error"},
	}
	oldErrors := map[string]any{
		"curl":   `invalid URL: curl rejects port "99999"`,
		"python": "invalid URL: Python raises ValueError: port out of range 0-65535",
	}
	if len(rows) != len(old) {
		t.Fatalf("rows = %v", rows)
	}
	for i, w := range old {
		for k, v := range w {
			if rows[i][k] != v {
				t.Errorf("row %d field %q = %v, want %v", i, k, rows[i][k], v)
			}
		}
	}
	errs, _ := rows[1]["errors"].(map[string]any)
	for k, v := range oldErrors {
		if errs[k] != v {
			t.Errorf("errors[%q] = %v, want %v", k, errs[k], v)
		}
	}
	// Every family has its field; the new ones follow their own rules.
	newFields := []map[string]any{
		{"urllib": "proxy", "wget": "proxy", "node": "proxy"},
		{"urllib": "proxy", "wget": "error", "node": "error"},
	}
	for i, w := range newFields {
		for k, v := range w {
			if rows[i][k] != v {
				t.Errorf("row %d field %q = %v, want %v", i, k, rows[i][k], v)
			}
		}
	}
	if _, ok := errs["wget"]; !ok {
		t.Errorf("errors lack wget: %v", errs)
	}
	if strings.Contains(out, "s3cret") || strings.Contains(out, "alice") {
		t.Errorf("output leaks credentials: %s", out)
	}
}

func TestNoProxyExplainClients(t *testing.T) {
	code, out, errOut := run(t, "noproxy", "explain", "--clients", "node,requests,ansible", "--json",
		"--no-proxy", "example.com", "http://www.example.com/")
	if code != 0 {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	want := []map[string]any{{"url": "http://www.example.com/", "node": "proxy", "python": "direct", "urllib": "direct"}}
	if !reflect.DeepEqual(rows, want) {
		t.Errorf("rows = %v, want %v", rows, want)
	}
	code, out, _ = run(t, "noproxy", "explain", "--clients", "wget,go", "--no-proxy", ".example.com", "http://example.com/")
	if code != 0 || strings.Fields(strings.Split(out, "\n")[0])[1] != "WGET" || len(strings.Fields(strings.Split(out, "\n")[1])) != 3 {
		t.Errorf("--clients wget,go: code %d, out %q", code, out)
	}
	code, _, errOut = run(t, "noproxy", "explain", "--clients", "java", "--no-proxy", "", "http://x/")
	if code != 2 || !strings.Contains(errOut, `unknown client "java"`) {
		t.Errorf("--clients java: code %d, stderr %q", code, errOut)
	}
}

func TestNoProxyExplainEmptyListAndDoubleDash(t *testing.T) {
	code, out, errOut := run(t, "noproxy", "explain", "--no-proxy", "", "--", "http://127.0.0.1/")
	if code != 0 || !strings.Contains(out, "direct") || !strings.Contains(out, "proxy") {
		t.Fatalf("code %d, out %q, err %q", code, out, errOut)
	}
}

func TestNoProxyUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"noproxy"}, "missing subcommand"},
		{[]string{"noproxy", "frobnicate"}, `unknown subcommand "frobnicate"`},
		{[]string{"noproxy", "explain", "https://kubernetes"}, "--no-proxy is required"},
		{[]string{"noproxy", "explain", "--no-proxy", "x"}, "at least one URL"},
		{[]string{"noproxy", "explain", "--no-proxy", "x", "kubernetes:443"}, `URL "kubernetes:443"`},
		{[]string{"noproxy", "explain", "--no-proxy", "x", "ftp://h/"}, "unsupported URL scheme"},
		{[]string{"noproxy", "explain", "--no-proxy", "x", "http://u:pw@h:port/"}, `URL "http://***@h:port/"`},
		{[]string{"noproxy", "explain", "--bogus"}, "flag provided but not defined"},
		{[]string{"noproxy", "lint", "--service-cidr", "172.31.0.0"}, `"172.31.0.0" is not a CIDR`},
		{[]string{"noproxy", "lint", "--cluster-cidr", "10.0.0.0/8,nope"}, `"nope" is not a CIDR`},
		{[]string{"noproxy", "lint", "--api-server", "h:0"}, `--api-server "h:0"`},
		{[]string{"noproxy", "lint", "extra"}, `unexpected argument "extra"`},
	}
	for _, tt := range tests {
		code, _, errOut := run(t, tt.args...)
		if code != 2 || !strings.Contains(errOut, tt.want) {
			t.Errorf("%q: code %d, stderr %q; want 2 and %q", tt.args, code, errOut, tt.want)
		}
		if strings.Contains(errOut, "pw@") {
			t.Errorf("%q: stderr leaks credentials: %q", tt.args, errOut)
		}
	}
}

func TestNoProxyHelp(t *testing.T) {
	code, out, _ := run(t, "noproxy", "--help")
	if code != 0 || !strings.Contains(out, "explain") || !strings.Contains(out, "lint") {
		t.Errorf("noproxy --help: code %d, out %q", code, out)
	}
	code, _, errOut := run(t, "noproxy", "lint", "--help")
	if code != 0 || !strings.Contains(errOut, "--service-cidr") {
		t.Errorf("noproxy lint --help: code %d, err %q", code, errOut)
	}
	code, out, _ = run(t, "--help")
	if code != 0 || !strings.Contains(out, "noproxy") {
		t.Errorf("--help does not list noproxy: %q", out)
	}
}

func TestNoProxyLintSeed000(t *testing.T) {
	args := []string{"noproxy", "lint",
		"--no-proxy", "192.168.201.0/24,.apps.ocp7.stormshift.coe.muc.redhat.com",
		"--http-proxy", "http://192.168.201.2:3128", "--https-proxy", "http://bob:hunter2@192.168.201.2:3128",
		"--trusted-ca", "redhat-root-ca-bundle-v1", "--service-cidr", "172.31.0.0/16", "--cluster-cidr", "10.132.0.0/14",
		"--platform", "KubeVirt", "--api-server", "api.ocp7.example.com:6443"}
	code, out, errOut := run(t, args...)
	if code != 0 {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	first := strings.SplitN(out, "\n", 2)[0]
	if f := strings.Fields(first); len(f) != 3 || f[0] != "CRITICAL" || f[1] != "missing-kubernetes" || f[2] != "kubernetes" {
		t.Errorf("first line %q", first)
	}
	if !strings.Contains(out, "fix: add kubernetes") || !strings.Contains(out, "http://***@192.168.201.2:3128") {
		t.Errorf("output:\n%s", out)
	}
	if strings.Contains(out, "hunter2") || strings.Contains(out, "bob") {
		t.Errorf("output leaks credentials:\n%s", out)
	}

	code, out, errOut = run(t, append(args, "--json")...)
	if code != 0 {
		t.Fatalf("--json: code %d, stderr %q", code, errOut)
	}
	var fs []struct {
		Severity, Code, Entry, Reason, Fix string
	}
	if err := json.Unmarshal([]byte(out), &fs); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	got := map[string]string{}
	for _, f := range fs {
		got[f.Code] = f.Severity
		if f.Reason == "" {
			t.Errorf("finding without reason: %+v", f)
		}
	}
	for code, sev := range map[string]string{
		"missing-kubernetes": "critical", "credentials-in-proxy-url": "warning",
		"missing-service-cidr": "info", "missing-cluster-cidr": "info",
	} {
		if got[code] != sev {
			t.Errorf("%s = %q, want %q (all: %v)", code, got[code], sev, got)
		}
	}
}

func TestNoProxyLintClients(t *testing.T) {
	args := []string{"noproxy", "lint", "--http-proxy", "http://proxy:3128", "--platform", "Konvoy",
		"--no-proxy", "10.0.0.0/18,example.com,.svc", "--json"}
	code, out, errOut := run(t, args...)
	if code != 0 {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	var fs []struct{ Severity, Code, Entry, Reason, Fix string }
	if err := json.Unmarshal([]byte(out), &fs); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	got := map[string]string{}
	list := ""
	for i, f := range fs {
		if f.Code == "ignored-by-some-clients" {
			got[f.Entry] = f.Reason
		}
		if f.Code == "list-for-all-clients" {
			list = f.Entry
		}
		if i > 0 && f.Severity == "warning" && fs[i-1].Severity == "info" {
			t.Errorf("findings are not ordered by severity: %v", fs)
		}
	}
	if !strings.HasPrefix(got["10.0.0.0/18"], "`10.0.0.0/18` protects Go, curl, requests; not urllib/Ansible, wget, node") {
		t.Errorf("10.0.0.0/18: %q", got["10.0.0.0/18"])
	}
	if !strings.HasPrefix(got["example.com"], "`example.com` protects Go, curl, requests, urllib/Ansible, wget; not node") {
		t.Errorf("example.com: %q", got["example.com"])
	}
	if _, ok := got[".svc"]; ok || list != "10.0.0.0/18,example.com,.svc,.example.com" {
		t.Errorf(".svc flagged or list %q", list)
	}
	// --clients narrows the families judged.
	code, out, _ = run(t, append(args, "--clients", "go,curl,requests")...)
	if code != 0 || strings.Contains(out, "ignored-by-some-clients") {
		t.Errorf("--clients go,curl,requests: code %d, out %s", code, out)
	}
}

func TestNoProxyJava(t *testing.T) {
	code, out, errOut := run(t, "noproxy", "java", "--no-proxy", "localhost,.svc,10.0.0.0/8,10.0.0.0/18,api.example:6443")
	if code != 0 {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	for _, want := range []string{
		"http.nonProxyHosts=localhost|*.localhost|*.svc|10.*|api.example|*.api.example\n",
		"export JAVA_TOOL_OPTIONS='-Dhttp.nonProxyHosts=localhost|*.localhost|*.svc|10.*|api.example|*.api.example'",
		"cannot express 10.0.0.0/18 (dropped): Java has no CIDR matching",
		"cannot express api.example:6443 (approximated as api.example|*.api.example): Java cannot restrict a port",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = run(t, "noproxy", "java", "--json", "--no-proxy", "fd00::/112,example.com")
	var tr struct {
		NonProxyHosts string `json:"nonProxyHosts"`
		Notes         []struct {
			Entry   string `json:"entry"`
			Dropped bool   `json:"dropped"`
		} `json:"notes"`
	}
	if err := json.Unmarshal([]byte(out), &tr); err != nil || code != 0 {
		t.Fatalf("code %d, %v: %s", code, err, out)
	}
	if tr.NonProxyHosts != "example.com|*.example.com" || len(tr.Notes) != 1 || tr.Notes[0].Entry != "fd00::/112" || !tr.Notes[0].Dropped {
		t.Errorf("--json: %+v", tr)
	}
	if code, _, errOut := run(t, "noproxy", "java"); code != 2 || !strings.Contains(errOut, "--no-proxy is required") {
		t.Errorf("without --no-proxy: code %d, stderr %q", code, errOut)
	}
}

func TestNoProxyLintNoProxyConfigured(t *testing.T) {
	code, out, _ := run(t, "noproxy", "lint", "--no-proxy", "*,a b", "--service-cidr", "172.31.0.0/16")
	if code != 0 || strings.TrimSpace(out) != "no findings" {
		t.Errorf("code %d, out %q", code, out)
	}
	code, out, _ = run(t, "noproxy", "lint", "--json")
	if code != 0 || strings.TrimSpace(out) != "[]" {
		t.Errorf("--json without proxy: code %d, out %q", code, out)
	}
}

func TestNoProxySplitAPIServer(t *testing.T) {
	tests := []struct {
		in   string
		host string
		port int32
		ok   bool
	}{
		{"api.example.com:6443", "api.example.com", 6443, true},
		{"api.example.com", "api.example.com", 443, true},
		{"[fd00::1]:6443", "fd00::1", 6443, true},
		{"fd00::1", "fd00::1", 443, true},
		{"h:x", "", 0, false},
		{":443", "", 0, false},
	}
	for _, tt := range tests {
		h, p, err := noProxySplitAPIServer(tt.in)
		if (err == nil) != tt.ok || h != tt.host || p != tt.port {
			t.Errorf("noProxySplitAPIServer(%q) = %q, %d, %v", tt.in, h, p, err)
		}
	}
}
