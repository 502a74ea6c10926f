package noproxy

import (
	"errors"
	"testing"
)

// familyRow is one list/URL pair with the expected answer of the families
// that have no column in decisionTable.
type familyRow struct {
	noProxy, url       string
	urllib, wget, node Decision
}

// familyTable documents the corners of urllib, wget and proxy-from-env;
// the urllib and node columns are also checked against the real clients
// (realfamilies_test.go).
var familyTable = []familyRow{
	{"", "http://example.com/", P, P, P},
	{"*", "http://example.com/", D, P, D},
	{"foo,*", "http://example.com/", P, P, D},
	{"example.com", "http://example.com/", D, D, D},
	{"example.com", "http://www.example.com/", D, D, P},
	{"example.com", "http://notexample.com/", P, P, P},
	{".example.com", "http://example.com/", D, P, P},
	{".example.com", "http://www.example.com/", D, D, D},
	{"*.example.com", "http://www.example.com/", P, P, D},
	{"*example.com", "http://notexample.com/", P, P, D},
	{"EXAMPLE.com", "http://www.Example.COM/", D, D, P},
	{"EXAMPLE.com", "http://Example.COM/", D, D, D},
	{"example.com:8080", "http://example.com:8080/", D, P, D},
	{"example.com:443", "https://example.com/", P, P, D},
	{"example.com:8080", "http://example.com/", P, P, P},
	{"example.com", "http://u:p@example.com/", P, D, D},
	{"a ,example.com", "http://example.com/", D, D, D},
	{"example.com ,a", "http://example.com/", D, P, D},
	{"a example.com", "http://example.com/", P, P, D},
	{"10.0.0.0/8", "http://10.1.2.3/", P, P, P},
	{"172.31.0.0/16", "https://172.31.0.1/", P, P, P},
	{"0.0.1", "http://10.0.0.1/", D, D, P},
	{"10.0.0.1", "http://10.0.0.1:8080/", D, D, D},
	{"127.0.0.1", "http://127.1/", P, P, D},
	{"::1", "http://[::1]/", P, D, P},
	{"[::1]", "http://[::1]:8080/", D, P, D},
	{"[2001:db8::1]", "http://[2001:db8:0::1]/", P, P, D},
	{"localhost", "http://localhost/", D, D, D},
	{"", "http://localhost/", P, P, P},
	{"a,,b", "http://example.com./", P, D, P},
	{".svc", "https://kubernetes.default.svc/", D, D, D},
	{"kubernetes", "https://kubernetes.default.svc/", P, P, P},
	{"svc", "https://kubernetes.default.svc/", D, D, P},
}

func TestFamilyTable(t *testing.T) {
	for _, r := range familyTable {
		for c, want := range map[Client]Decision{Urllib: r.urllib, Wget: r.wget, Node: r.node} {
			v, err := Explain(c, r.noProxy, r.url)
			if err != nil {
				t.Errorf("Explain(%v, %q, %q): %v", c, r.noProxy, r.url, err)
				continue
			}
			if v.Decision != want {
				t.Errorf("Explain(%v, %q, %q) = %v (%s), want %v", c, r.noProxy, r.url, v.Decision, v.Why, want)
			}
		}
	}
}

func TestParseClientAndNames(t *testing.T) {
	for _, c := range AllClients() {
		got, err := ParseClient(c.String())
		if err != nil || got != c {
			t.Errorf("ParseClient(%q) = %v, %v", c.String(), got, err)
		}
	}
	for in, want := range map[string]Client{"requests": Python, "Ansible": Urllib, " NODE ": Node, "proxy-from-env": Node} {
		if got, err := ParseClient(in); err != nil || got != want {
			t.Errorf("ParseClient(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := ParseClient("java"); !errors.Is(err, ErrUnknownClient) {
		t.Errorf("ParseClient(java) error = %v", err)
	}
}

func TestFamilyErrors(t *testing.T) {
	tests := []struct {
		client       Client
		noProxy, url string
		want         error
	}{
		{Wget, "", "http://example.com:99999/", ErrInvalidURL},
		{Wget, "", "http://[fe80::1%25eth0]/", ErrInvalidURL},
		{Node, "", "http://example.com:65536/", ErrInvalidURL},
		{Node, "", "http://a.1/", ErrInvalidURL},
		{Node, "", "http://256.1.1.1/", ErrInvalidURL},
		{Node, "a\x00", "http://x/", ErrUnsupportedInput},
		{Urllib, "\xff", "http://x/", ErrUnsupportedInput},
	}
	for _, tt := range tests {
		if _, err := Decide(tt.client, tt.noProxy, tt.url); !errors.Is(err, tt.want) {
			t.Errorf("Decide(%v, %q, %q) error = %v, want %v", tt.client, tt.noProxy, tt.url, err, tt.want)
		}
	}
	// Explain names the entry that matched.
	v, err := Explain(Node, "foo, *.example.com", "https://api.example.com/")
	if err != nil || v.Entry != "*.example.com" || v.Client != Node {
		t.Errorf("Explain(Node) = %+v, %v", v, err)
	}
	if got := rfc5952([16]byte{0x20, 0x01, 0x0d, 0xb8, 15: 1}); got != "2001:db8::1" {
		t.Errorf("rfc5952 = %q", got)
	}
}
