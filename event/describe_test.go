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

// Loggable keeps an ID or type only when it has the syntax this package
// gives it.
func TestLoggable(t *testing.T) {
	for _, tc := range []struct {
		e       Event
		id, typ string
	}{
		{Event{ID: "0123456789abcdef0123456789abcdef", Type: "node"}, "0123456789abcdef0123456789abcdef", "node"},
		{Event{ID: "hunter2 s3cr3t", Type: "Bad Type!"}, "", ""},
		{Event{ID: "0123456789ABCDEF0123456789ABCDEF", Type: "widget"}, "", "widget"},
	} {
		id, typ := Loggable(tc.e)
		if id != tc.id || string(typ) != tc.typ {
			t.Errorf("Loggable(%q, %q) = %q, %q, want %q, %q", tc.e.ID, tc.e.Type, id, typ, tc.id, tc.typ)
		}
	}
}
