package configs

import (
	"errors"
	"strings"
	"testing"
)

// FuzzParse: no input panics, every failure is an *Error with at least
// one problem, and a token-shaped value is never echoed.
func FuzzParse(f *testing.F) {
	f.Add([]byte(Example))
	f.Add([]byte("agent:\n  source: mgmt-1\n"))
	f.Add([]byte("a: &x [*x]\n"))
	f.Add([]byte("bot: &b\n  defaultChannel: *b\n"))
	f.Add([]byte("slack:\n  botTokenEnv: xoxb-1-SECRET\n"))
	f.Add([]byte("digests: [{name: a, schedule: '@every 1h', timezone: UTC, channel: C0123456789}]\nbot: {defaultChannel: C0123456789}\n"))
	f.Add([]byte("agent: {source: m}\nidentities: {required: true, map: [{slack: U0ALICE123, user: &u alice, clusters: [m]}, {slack: U0ALICE123, emailPrefix: *u}]}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, "f.yaml")
		if err == nil {
			if c == nil {
				t.Fatal("nil Config without error")
			}
			return
		}
		var perr *Error
		if !errors.As(err, &perr) || len(perr.Problems) == 0 {
			t.Fatalf("error %T %v", err, err)
		}
		if strings.Contains(string(data), "xoxb-1-SECRET") && strings.Contains(err.Error(), "xoxb-1-SECRET") {
			t.Fatalf("token echoed: %v", err)
		}
	})
}
