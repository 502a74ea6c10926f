package configs

import (
	"errors"
	"io/fs"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"
)

func userKey(t *testing.T) (seed, pub string) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	s, err := kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	p, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	return string(s), p
}

// The keys and four-eyes settings of the action path: problems name the
// field and line, a seed is never written in the file, and a bot that
// would send requests no agent can verify is refused.
func TestApprovalKeysRejected(t *testing.T) {
	_, pub := userKey(t)
	_, pub2 := userKey(t)
	_, pub3 := userKey(t)
	account, _ := nkeys.CreateAccount()
	accountPub, _ := account.PublicKey()
	const approvals = "approvals:\n  approvers: [U01234ABCD, U05678EFGH]\n"
	for _, tc := range []struct {
		name, yaml, field, msg string
		line                   int
	}{
		{"bot without a signing key", botBase + approvals, "approvals.signingKeyEnv", "required", 6},
		{"both env and file", botBase + approvals + "  signingKeyEnv: K\n  signingKeyFile: /k\n", "approvals.signingKeyFile", "not both", 9},
		{"signing key literal", botBase + approvals + "  signingKey: x\n", "approvals.signingKey", "use signingKeyEnv", 8},
		{"trusted key not a key", "agent:\n  source: m\n  trustedKeys: [bob]\n", "agent.trustedKeys[0]", "is not an nkeys user public key", 3},
		{"trusted key of an account", "agent:\n  source: m\n  trustedKeys: [" + accountPub + "]\n", "agent.trustedKeys[0]", "is not an nkeys user public key", 3},
		{"trusted key twice", "agent:\n  source: m\n  trustedKeys:\n    - " + pub + "\n    - " + pub + "\n", "agent.trustedKeys[1]", "listed twice", 5},
		{"three trusted keys", "agent:\n  source: m\n  trustedKeys: [" + pub + ", " + pub2 + ", " + pub3 + "]\n", "agent.trustedKeys", "at most two", 3},
		{"agent approver not a user", "agent:\n  source: m\n  approvers: [S01234ABCD]\n", "agent.approvers[0]", "is a user group ID", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml), "hcpbot.yaml")
			var perr *Error
			if !errors.As(err, &perr) {
				t.Fatalf("Parse: %v, want problems", err)
			}
			for _, p := range perr.Problems {
				if strings.HasPrefix(p.Field, tc.field) && strings.Contains(p.Message, tc.msg) {
					if tc.line > 0 && p.Line != tc.line {
						t.Errorf("line %d, want %d: %s", p.Line, tc.line, p)
					}
					return
				}
			}
			t.Fatalf("no problem on %q containing %q:\n%v", tc.field, tc.msg, err)
		})
	}
}

// Accepted: a bot with its key, an agent with two trusted keys (a
// rotation); requireFourEyes follows approvals.fourEyes in one file and
// is on by itself.
func TestApprovalKeysAccepted(t *testing.T) {
	_, pub := userKey(t)
	_, pub2 := userKey(t)
	c, err := Parse([]byte(botBase+"approvals:\n  approvers: [U01234ABCD, U05678EFGH]\n  signingKeyFile: /etc/hcpbot/signing/seed\n"), "b.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Approvals.SigningKey.File != "/etc/hcpbot/signing/seed" {
		t.Errorf("signing key %+v", c.Approvals.SigningKey)
	}
	c, err = Parse([]byte("agent:\n  source: m\n  trustedKeys: ["+pub+", "+pub2+"]\n  approvers: [U01234ABCD]\n"), "a.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Agent.TrustedKeys) != 2 || !c.Agent.RequireFourEyes || len(c.Agent.Approvers) != 1 {
		t.Errorf("agent %+v", *c.Agent)
	}
	c, err = Parse([]byte(botBase+"agent:\n  source: m\napprovals:\n  approvers: [U01234ABCD]\n  fourEyes: false\n"), "all.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Agent.RequireFourEyes {
		t.Error("requireFourEyes on although the file's approvals say fourEyes: false")
	}
	c, err = Parse([]byte(botBase+"agent:\n  source: m\n  requireFourEyes: true\napprovals:\n  approvers: [U01234ABCD]\n  fourEyes: false\n"), "all.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !c.Agent.RequireFourEyes {
		t.Error("requireFourEyes: true written, but off")
	}
}

// The signing key is resolved and checked at start; a wrong one is named
// by field, never quoted.
func TestSecretsSigningKey(t *testing.T) {
	seed, _ := userKey(t)
	account, _ := nkeys.CreateAccount()
	accountSeed, _ := account.Seed()
	c, err := Parse([]byte(botBase+"approvals:\n  approvers: [U01234ABCD, U05678EFGH]\n  signingKeyFile: /etc/seed\n"), "s.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, content, want string
	}{
		{"user seed", seed + "\n", ""},
		{"account seed", string(accountSeed), "is not an nkeys user seed"},
		{"garbage", "SUgarbage-seed-value", "is not an nkeys user seed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			read := func(p string) ([]byte, error) {
				if p == "/etc/seed" {
					return []byte(tc.content), nil
				}
				return nil, &fs.PathError{Op: "open", Path: p, Err: fs.ErrNotExist}
			}
			env := func(k string) string {
				return map[string]string{"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_SIGNING_SECRET": "s"}[k]
			}
			s, err := c.Secrets(env, read)
			switch {
			case tc.want == "" && err != nil:
				t.Fatal(err)
			case tc.want == "" && string(s.SigningKey) != seed:
				t.Errorf("signing key not resolved")
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want %q", err, tc.want)
			case err != nil && strings.Contains(err.Error(), strings.TrimSpace(tc.content)):
				t.Fatalf("error quotes the key: %v", err)
			}
		})
	}
}
