package event

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// TestDNSFastPathsAgree: the regexp-free checks accept exactly what the
// validation package accepts.
func TestDNSFastPathsAgree(t *testing.T) {
	cases := []string{"", "a", "-", "a-", "-a", "a-b", "A", "ab.cd", "ab..cd", ".a", "a.", "a_b", "hc-0", "clusters",
		"mgmt-bench", "x.y-z.0", "é", "a b", strings.Repeat("a", 63), strings.Repeat("a", 64),
		strings.Repeat("a.", 126) + "a", strings.Repeat("a.", 127) + "a", "0", "0-0", "a.-b", "a-.b"}
	for _, s := range cases {
		if got, want := isDNSSubdomain(s), len(validation.IsDNS1123Subdomain(s)) == 0; got != want {
			t.Errorf("isDNSSubdomain(%q) = %v, validation says %v", s, got, want)
		}
		if got, want := len(s) <= validation.DNS1123LabelMaxLength && isDNSLabel(s), len(validation.IsDNS1123Label(s)) == 0; got != want {
			t.Errorf("isDNSLabel(%q) = %v, validation says %v", s, got, want)
		}
	}
}

// TestBlankOutsideStrings: only blanks between tokens make a payload need
// compaction.
func TestBlankOutsideStrings(t *testing.T) {
	for in, want := range map[string]bool{
		`{"a":"b c"}`:         false,
		`{"a":"b\" c"}`:       false,
		`{"a":"b\\", "c":1}`:  true,
		`{"a": 1}`:            true,
		"{\"a\":1\n}":         true,
		`{"a":"x\\\" y"}`:     false,
		`{"m":"tab\there"}`:   false,
		`{"a":[1,2],"b":{}}`:  false,
		`{"a":"\\\\"} `:       true,
		`{"msg":"not ready"}`: false,
	} {
		if got := blankOutsideStrings([]byte(in)); got != want {
			t.Errorf("blankOutsideStrings(%s) = %v, want %v", in, got, want)
		}
	}
}
