package noproxy

import (
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		text string
		kind Kind
		host string
		port string
	}{
		{"*", KindWildcard, "", ""},
		{"10.0.0.0/8", KindCIDR, "", ""},
		{"10.0.0.1/8", KindCIDR, "", ""},
		{"FD00::/8", KindCIDR, "", ""},
		{"10.0.0.1", KindIP, "10.0.0.1", ""},
		{"::1", KindIP, "::1", ""},
		{"10.0.0.1:8080", KindIPPort, "10.0.0.1", "8080"},
		{"[::1]:8080", KindIPPort, "::1", "8080"},
		{"10.0.0.1:", KindIPPort, "10.0.0.1", ""},
		{"Corp.Example", KindDomain, "corp.example", ""},
		{".corp.example", KindDotDomain, "corp.example", ""},
		{"*.corp.example", KindStarDomain, "corp.example", ""},
		{"corp.example:443", KindHostPort, "corp.example", "443"},
		{".corp.example:443", KindHostPort, "corp.example", "443"},
		{"*.corp.example:443", KindHostPort, "corp.example", "443"},
		{"127.1", KindDomain, "127.1", ""},
		{"http://corp.example", KindInvalid, "", ""},
		{"corp.example/path", KindInvalid, "", ""},
		{"10.0.0.0/33", KindInvalid, "", ""},
		{"[::1]", KindInvalid, "", ""},
		{":8080", KindInvalid, "", ""},
		{"host:http", KindInvalid, "", ""},
		{"10.0.*", KindInvalid, "", ""},
		{"*corp", KindInvalid, "", ""},
		{"**", KindInvalid, "", ""},
		{"a b", KindInvalid, "", ""},
		{"fe80::1%eth0", KindInvalid, "", ""},
	}
	for _, tt := range tests {
		got := Parse(" " + tt.text + "\t")
		if len(got) != 1 {
			t.Fatalf("Parse(%q) = %d entries", tt.text, len(got))
		}
		e := got[0]
		if e.Text != tt.text || e.Kind != tt.kind || (tt.kind != KindInvalid && (e.Host != tt.host || e.Port != tt.port)) {
			t.Errorf("Parse(%q) = %+v (%v), want kind %v host %q port %q", tt.text, e, e.Kind, tt.kind, tt.host, tt.port)
		}
		if (e.Kind == KindInvalid) != (e.Problem != "") {
			t.Errorf("Parse(%q): Problem %q does not fit kind %v", tt.text, e.Problem, e.Kind)
		}
	}
}

func TestParseKeepsOrderAndDuplicates(t *testing.T) {
	got := Parse(" b ,,a, ,b,\t")
	var texts []string
	for _, e := range got {
		texts = append(texts, e.Text)
	}
	if len(texts) != 3 || texts[0] != "b" || texts[1] != "a" || texts[2] != "b" {
		t.Errorf("Parse order/duplicates = %q", texts)
	}
	if Parse("") != nil || Parse(" , ") != nil {
		t.Error("an empty list has no entries")
	}
}

func TestKindString(t *testing.T) {
	want := map[Kind]string{
		KindInvalid: "invalid", KindWildcard: "wildcard", KindCIDR: "cidr", KindIP: "ip", KindIPPort: "ip:port",
		KindDomain: "domain", KindDotDomain: ".domain", KindStarDomain: "*.domain", KindHostPort: "host:port", Kind(99): "invalid",
	}
	for k, s := range want {
		if k.String() != s {
			t.Errorf("Kind(%d).String() = %q, want %q", int(k), k.String(), s)
		}
	}
}
