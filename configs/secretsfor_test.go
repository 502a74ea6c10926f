package configs

import (
	"errors"
	"io/fs"
	"strings"
	"testing"
)

// Each process resolves only what it reads: the agent the NATS
// references, not Slack's or the signing key; problems are located.
func TestSecretsForRole(t *testing.T) {
	c, err := Parse([]byte("nats:\n  urls: [tls://127.0.0.1:4222]\n  caFile: /etc/ca.crt\nagent:\n  source: m\n"+botBase+
		"approvals:\n  approvers: [U01234ABCD, U05678EFGH]\n  signingKeyFile: /etc/seed\n"), "r.yaml")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"/etc/ca.crt": "not a certificate\n"}
	read := func(p string) ([]byte, error) {
		if v, ok := files[p]; ok {
			return []byte(v), nil
		}
		return nil, &fs.PathError{Op: "open", Path: p, Err: fs.ErrNotExist}
	}
	none := func(string) string { return "" }

	_, err = c.SecretsFor(RoleAgent, none, read)
	var e *Error
	if !errors.As(err, &e) || len(e.Problems) != 1 || e.Problems[0].Field != "nats.caFile" || e.Problems[0].Line != 3 ||
		!strings.Contains(e.Problems[0].Message, "/etc/ca.crt holds no PEM certificate") {
		t.Fatalf("agent: %v", err)
	}
	_, err = c.SecretsFor(RoleBot, none, read)
	if !errors.As(err, &e) || len(e.Problems) != 4 {
		t.Fatalf("bot: want the CA, both Slack variables and the signing key:\n%v", err)
	}
	for i, want := range []string{"nats.caFile", "slack.botTokenEnv", "slack.signingSecretEnv", "approvals.signingKeyFile"} {
		if e.Problems[i].Field != want || e.Problems[i].Line != c.Line(want) || e.Problems[i].Line == 0 {
			t.Errorf("problem %d: %+v, want field %s on line %d", i, e.Problems[i], want, c.Line(want))
		}
	}
}
