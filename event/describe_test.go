package event

import (
	"strings"
	"testing"
)

// Describe never repeats what was in the bad data: Go's JSON and time
// errors quote the values they reject.
func TestDescribeLeavesContentOut(t *testing.T) {
	const secret = "hunter2-s3cr3t"
	good := `{"v":1,"id":"0123456789abcdef0123456789abcdef","source":"mgmt","type":"node","time":"2026-12-01T08:00:00Z","object":{"kind":"Node","name":"n1"},"payload":{"node":"n1","ready":"False"}}`
	for _, tc := range []struct{ name, data, want string }{
		{"time", strings.Replace(good, `"2026-12-01T08:00:00Z"`, `"`+secret+`"`, 1), "RFC 3339"},
		{"payload time", strings.Replace(good, `"ready":"False"`, `"ready":"False","lastTransitionTime":"`+secret+`"`, 1), "RFC 3339"},
		{"syntax", `{"v":1,"id":` + secret, "malformed"},
		{"not JSON", secret, "syntax error"},
		{"type", strings.Replace(good, `"v":1`, `"v":"`+secret+`"`, 1), "field"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode([]byte(tc.data))
			if err == nil {
				t.Fatal("decoded")
			}
			got := Describe(err)
			if strings.Contains(got, secret) {
				t.Errorf("Describe(%v) = %q repeats the content", err, got)
			}
			if !strings.Contains(got, tc.want) {
				t.Errorf("Describe = %q, want it to mention %q", got, tc.want)
			}
		})
	}
}
