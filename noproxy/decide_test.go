package noproxy

import (
	"errors"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"golang.org/x/net/http/httpproxy"
)

// D and P keep the table readable.
const (
	D = Direct
	P = Proxy
)

// decisionRow is one list/URL pair with the expected answer of each family.
type decisionRow struct {
	noProxy, url         string
	goWant, curl, python Decision
}

// decisionTable covers the corners where the families disagree. The Go
// column is also checked against httpproxy itself, and the curl and Python
// columns against the real tools when they are installed
// (realclients_test.go).
var decisionTable = []decisionRow{
	// wildcards
	{"", "http://example.com/", P, P, P},
	{"*", "http://example.com/", D, D, D},
	{"*", "http://10.0.0.1/", D, D, D},
	{"*,foo.com", "http://example.com/", D, P, P},
	{"foo.com,*", "https://example.com/", D, P, P},
	{" *", "http://example.com/", D, P, P},
	// names, leading dots, "*." prefixes, suffix vs subdomain
	{"example.com", "http://example.com/", D, D, D},
	{"example.com", "http://www.example.com/", D, D, D},
	{"example.com", "http://notexample.com/", P, P, P},
	{".example.com", "http://example.com/", P, D, D},
	{".example.com", "http://www.example.com/", D, D, D},
	{"*.example.com", "http://www.example.com/", D, P, P},
	{"*.example.com", "http://example.com/", P, P, P},
	{"example.com.", "http://example.com/", P, D, P},
	{"example.com", "http://www.example.com./", P, D, P},
	{"EXAMPLE.com", "http://www.Example.COM/", D, D, D},
	{"a.example.com,,  ,b.example.com", "http://x.b.example.com/", D, D, D},
	{"bücher.example", "http://xn--bcher-kva.example/", D, P, P},
	// ports
	{"example.com:8080", "http://example.com:8080/", D, P, D},
	{"example.com:443", "https://example.com/", D, P, P},
	{"example.com:8080", "http://example.com/", P, P, P},
	{"corp.example:6443", "https://api.corp.example:6443/", D, P, D},
	{"10.0.0.1:8080", "http://10.0.0.1:8080/", D, P, P},
	// CIDRs and IP literals
	{"10.0.0.0/8", "http://10.1.2.3/", D, D, D},
	{"10.0.0.0/8", "http://10.1.2.3:8080/", D, D, D},
	{"10.0.0.0/0", "http://10.0.0.1/", D, P, P},
	{"10.0.0.1/0", "http://10.0.0.1/", D, D, P},
	{"10.0.0.1", "http://10.0.0.1/", D, D, D},
	{"10.0.0.0/ 8", "http://10.1.2.3/", P, P, D},
	{"10.0.0.0/+8", "http://10.1.2.3/", P, D, D},
	{"10.0.0.0/8x", "http://10.1.2.3/", P, D, P},
	{"10.0.0.0/4294967304", "http://10.1.2.3/", P, D, P},
	{"10.1/8", "http://10.2.3.4/", P, P, D},
	{"0.0.1", "http://10.0.0.1/", P, P, D},
	{"192.168.1.5", "http://0xc0.168.1.5/", P, D, P},
	{"::ffff:10.1.2.3", "http://10.1.2.3/", D, P, P},
	// IP literals vs names: numeric shorthands are names to Go
	{"127.1", "http://127.1/", D, P, D},
	{"127.0.0.0/8", "http://127.1/", P, D, D},
	// IPv6
	{"2001:db8::1", "http://[2001:db8::1]/", D, D, D},
	{"2001:db8::/32", "http://[2001:db8::1]/", D, P, P},
	{"[2001:db8::1]", "http://[2001:db8::1]/", P, P, P},
	{"[2001:db8::1]:443", "https://[2001:db8::1]/", D, P, P},
	{"2001:db8:0::1", "http://[2001:db8::1]/", D, P, P},
	{"2001:db8::1", "http://[2001:db8:0:0:0:0:0:1]/", D, D, P},
	{"fe80:", "http://[fe80::1]/", P, P, D},
	// loopback: only Go exempts it, and only exactly "localhost"
	{"", "http://localhost/", D, P, P},
	{"", "http://127.0.0.1:8080/", D, P, P},
	{"", "http://[::1]/", D, P, P},
	{"", "http://LOCALHOST/", P, P, P},
	{"127.0.0.1", "http://localhost/", D, P, P},
	{"localhost", "http://localhost:8080/", D, D, D},
	// blanks inside the list
	{"exa mple.com", "http://example.com/", P, P, D},
	{"foo bar.com", "http://bar.com/", P, D, P},
	// the seed-000 situation
	{"kubernetes", "https://kubernetes:443/", D, D, D},
	{"kubernetes", "https://kubernetes.default.svc/", P, P, P},
	{"svc", "https://kubernetes.default.svc/", D, D, D},
	{".svc", "https://kubernetes.default.svc:443/", D, D, D},
	{"172.31.0.0/16", "https://172.31.0.1:443/", D, D, D},
	{"kubernetes,.svc", "https://172.31.0.1/", P, P, P},
	{".corp.example", "http://api.corp.example:6443/", D, D, D},
}

func (r decisionRow) want(c Client) Decision {
	switch c {
	case Go:
		return r.goWant
	case Curl:
		return r.curl
	}
	return r.python
}

func TestDecisionTable(t *testing.T) {
	if len(decisionTable) < 40 {
		t.Fatalf("the table must keep at least 40 rows, has %d", len(decisionTable))
	}
	for _, r := range decisionTable {
		for _, c := range Clients() {
			got, err := Decide(c, r.noProxy, r.url)
			if err != nil {
				t.Errorf("Decide(%v, %q, %q): %v", c, r.noProxy, r.url, err)
				continue
			}
			if got != r.want(c) {
				v, _ := Explain(c, r.noProxy, r.url)
				t.Errorf("Decide(%v, %q, %q) = %v (%s), want %v", c, r.noProxy, r.url, got, v.Why, r.want(c))
			}
		}
	}
}

// httpproxyDecision is what golang.org/x/net/http/httpproxy answers with a
// proxy configured for both schemes; a nil proxy URL means direct.
func httpproxyDecision(noProxy string, u *url.URL) (Decision, error) {
	cfg := httpproxy.Config{HTTPProxy: "http://proxy.invalid:3128", HTTPSProxy: "http://proxy.invalid:3128", NoProxy: noProxy}
	p, err := cfg.ProxyFunc()(u)
	if err != nil {
		return 0, err
	}
	if p == nil {
		return Direct, nil
	}
	return Proxy, nil
}

func TestDecisionTableGoColumnMatchesHTTPProxy(t *testing.T) {
	for _, r := range decisionTable {
		u, err := url.Parse(r.url)
		if err != nil {
			t.Fatal(err)
		}
		got, err := httpproxyDecision(r.noProxy, u)
		if err != nil {
			t.Fatal(err)
		}
		if got != r.goWant {
			t.Errorf("httpproxy(%q, %q) = %v, table says %v", r.noProxy, r.url, got, r.goWant)
		}
	}
}

func TestExplain(t *testing.T) {
	tests := []struct {
		client           Client
		noProxy, url     string
		wantEntry, inWhy string
	}{
		{Go, "foo, .Example.com ,bar", "http://www.example.com/", ".Example.com", "subdomain"},
		{Go, "", "http://localhost/", "", "localhost"},
		{Go, "", "http://127.0.0.2/", "", "loopback"},
		{Go, "a,*", "http://x/", "*", "\"*\""},
		{Curl, "*", "http://x/", "*", "whole value"},
		{Curl, "a b .x.org", "http://w.x.org/", ".x.org", "matched"},
		{Python, "*", "http://x/", "*", "whole value"},
		{Python, "0.1", "http://10.0.0.1/", "0.1", "urllib"},
		{Python, "10.0.0.0/8", "http://10.2.3.4/", "10.0.0.0/8", "CIDR"},
		{Python, "nope", "http://x/", "", "no entry"},
	}
	for _, tt := range tests {
		v, err := Explain(tt.client, tt.noProxy, tt.url)
		if err != nil {
			t.Fatalf("Explain(%v, %q, %q): %v", tt.client, tt.noProxy, tt.url, err)
		}
		if v.Client != tt.client || v.Entry != tt.wantEntry || !strings.Contains(v.Why, tt.inWhy) {
			t.Errorf("Explain(%v, %q, %q) = %+v, want entry %q and why containing %q", tt.client, tt.noProxy, tt.url, v, tt.wantEntry, tt.inWhy)
		}
	}
}

func TestDecideErrors(t *testing.T) {
	tests := []struct {
		client       Client
		noProxy, url string
		want         error
	}{
		{Go, "", "://nope", ErrInvalidURL},
		{Go, "", "example.com", ErrInvalidURL},
		{Go, "", "ftp://example.com/", ErrUnsupportedScheme},
		{Go, "", "http:///path", ErrInvalidURL},
		{Client(42), "", "http://x/", ErrUnknownClient},
		{Curl, "", "http://example.com:99999/", ErrInvalidURL},
		{Python, "a", "http://example.com:99999/", ErrInvalidURL},
		{Python, "a\x00b", "http://example.com/", ErrUnsupportedInput},
		{Python, "\xff", "http://example.com/", ErrUnsupportedInput},
	}
	for _, tt := range tests {
		_, err := Decide(tt.client, tt.noProxy, tt.url)
		if !errors.Is(err, tt.want) {
			t.Errorf("Decide(%v, %q, %q) error = %v, want %v", tt.client, tt.noProxy, tt.url, err, tt.want)
		}
	}
	// Python only looks at the port of non-IPv4 hosts, like requests.
	if d, err := Decide(Python, "10.0.0.0/8", "http://10.0.0.1:99999/"); err != nil || d != Direct {
		t.Errorf("Python with an IPv4 host must not check the port: %v, %v", d, err)
	}
	// Errors never echo the URL's password.
	_, err := Decide(Go, "", "http://user:s3cret@host:port/")
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("error %v should exist and not contain the password", err)
	}
}

func TestStrings(t *testing.T) {
	if Go.String() != "go" || Curl.String() != "curl" || Python.String() != "python" || Client(9).String() != "Client(9)" {
		t.Error("Client.String")
	}
	if Direct.String() != "direct" || Proxy.String() != "proxy" || Decision(0).String() != "Decision(0)" {
		t.Error("Decision.String")
	}
	if b, _ := Curl.MarshalText(); string(b) != "curl" {
		t.Error("Client.MarshalText")
	}
	if b, _ := Direct.MarshalText(); string(b) != "direct" {
		t.Error("Decision.MarshalText")
	}
	if Recent.String() != "recent" || Legacy.String() != "legacy" || ReleaseRule(0).String() != "ReleaseRule(0)" {
		t.Error("ReleaseRule.String")
	}
}

func TestCurlHelpers(t *testing.T) {
	atoi := []struct {
		in   string
		want int32
	}{
		{"8", 8}, {"", 0}, {" 8", 8}, {"+8", 8}, {"-1", -1}, {"8x", 8}, {"x8", 0},
		{"4294967304", 8}, {"99999999999999999999", -1}, {"-99999999999999999999", 0},
	}
	for _, tt := range atoi {
		if got := cAtoi(tt.in); got != tt.want {
			t.Errorf("cAtoi(%q) = %d, want %d", tt.in, got, tt.want)
		}
	}
	norm := []struct{ in, want string }{
		{"127.1", "127.0.0.1"}, {"0x7f.1", "127.0.0.1"}, {"2130706433", "127.0.0.1"},
		{"0177.0.0.1", "127.0.0.1"}, {"1.2.3.04", "1.2.3.4"}, {"1.2.3.", ""}, {"08", ""},
		{"256.1.1.1", ""}, {"1.16777216", ""}, {"1.2.65536", ""}, {"4294967296", ""}, {"0x", ""}, {"a.b", ""},
	}
	for _, tt := range norm {
		got, ok := curlIPv4Normalize(tt.in)
		if got != tt.want || ok != (tt.want != "") {
			t.Errorf("curlIPv4Normalize(%q) = %q, %v; want %q", tt.in, got, ok, tt.want)
		}
	}
	ntop := []struct{ in, want string }{
		{"::", "::"}, {"::1", "::1"}, {"2001:db8::1", "2001:db8::1"}, {"::ffff:1.2.3.4", "::ffff:1.2.3.4"},
		{"::2:3", "::0.2.0.3"}, {"1:0:0:1:0:0:0:1", "1:0:0:1::1"}, {"1:0:0:0:1:0:0:1", "1::1:0:0:1"},
		{"1:0:1:1:1:1:1:1", "1:0:1:1:1:1:1:1"}, {"1::", "1::"}, {"FE80::A", "fe80::a"},
	}
	for _, tt := range ntop {
		a := mustAddr(t, tt.in)
		if got := glibcNtop6(a.As16()); got != tt.want {
			t.Errorf("glibcNtop6(%s) = %q, want %q", tt.in, got, tt.want)
		}
	}
	pton := []struct {
		in string
		ok bool
	}{{"1.2.3.4", true}, {"01.2.3.4", false}, {"1.2.3", false}, {"1.2.3.4.", false}, {"256.0.0.0", false}, {"0.0.0.0", true}, {"1..2.3", false}}
	for _, tt := range pton {
		if _, ok := inetPton4(tt.in); ok != tt.ok {
			t.Errorf("inetPton4(%q) ok = %v, want %v", tt.in, ok, tt.ok)
		}
	}
}

func TestPythonHelpers(t *testing.T) {
	aton := []struct {
		in   string
		want uint32
		ok   bool
	}{
		{"10.1", 0x0a000001, true}, {"127.0.0.1 junk", 0x7f000001, true}, {"0x7f.1", 0x7f000001, true},
		{"1.2.3.4.5", 0, false}, {"1.2.3.256", 0, false}, {"1.2.65535", 0x0102ffff, true}, {"", 0, false},
		{" 1.2.3.4", 0, false}, {"1.2.3.4x", 0, false}, {"4294967295", 0xffffffff, true}, {"4294967296", 0, false},
	}
	for _, tt := range aton {
		got, ok := inetAton(tt.in)
		if got != tt.want || ok != tt.ok {
			t.Errorf("inetAton(%q) = %#x, %v; want %#x, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
	ints := []struct {
		in   string
		want int
		ok   bool
	}{
		{"8", 8, true}, {" 8\t", 8, true}, {"+8", 8, true}, {"-8", -8, true}, {"0_8", 8, true}, {"08", 8, true},
		{"_8", 0, false}, {"8_", 0, false}, {"1__6", 0, false}, {"", 0, false}, {"8x", 0, false}, {"٢٤", 24, true},
		{"\x1c24\x1f", 24, true}, {"２４", 24, true}, {strings.Repeat("1", 4301), 0, false},
	}
	for _, tt := range ints {
		got, ok := pyInt(tt.in)
		if ok != tt.ok || (ok && got != tt.want) {
			t.Errorf("pyInt(%q) = %d, %v; want %d, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
	split := []struct{ in, want string }{{"::1", ":"}, {"fe80::", "fe80:"}, {"host", "host"}, {"a:b", "a:b"}, {"a:12", "a"}}
	for _, tt := range split {
		if got := pySplitPort(tt.in); got != tt.want {
			t.Errorf("pySplitPort(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	hosts := []struct{ in, host, port string }{
		{"http://User@Example.COM:80/x", "example.com", "80"},
		{"http://[FE80::1%25Eth0]:8/", "fe80::1%25Eth0", "8"},
		{"  http://h/", "h", ""},
		{"http://h\t:8\n1/", "h", "81"},
		{"mailto:x@y", "", ""},
	}
	for _, tt := range hosts {
		h, p, err := pyHostPort(tt.in)
		if err != nil || h != tt.host || p != tt.port {
			t.Errorf("pyHostPort(%q) = %q, %q, %v; want %q, %q", tt.in, h, p, err, tt.host, tt.port)
		}
	}
	for _, bad := range []string{"http://[::1/", "http://::1]/", "http://[1.2.3.4]/", "http://[vz.x]/", "http://[::1%]/"} {
		if _, _, err := pyHostPort(bad); !errors.Is(err, ErrInvalidURL) {
			t.Errorf("pyHostPort(%q) error = %v, want ErrInvalidURL", bad, err)
		}
	}
	if _, _, err := pyHostPort("http://[v1f.x]/"); err != nil {
		t.Errorf("IPvFuture must be accepted: %v", err)
	}
}

func mustAddr(t *testing.T, s string) netip.Addr {
	t.Helper()
	a, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
