package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"

	"github.com/hcpbot/hcpbot/approval"
)

// keygen writes a user seed that the bot can sign with (0600, never
// printed) and prints the public key that agents trust; it never
// overwrites a key.
func TestKeygen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "signing.seed")
	code, stdout, stderr := run(t, "keygen", "--out", path)
	if code != 0 {
		t.Fatalf("keygen exited %d: %s", code, stderr)
	}
	pub := strings.TrimSpace(stdout)
	if !nkeys.IsValidPublicUserKey(pub) {
		t.Fatalf("stdout %q is not a user public key", stdout)
	}
	seed, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stdout+stderr, strings.TrimSpace(string(seed))) {
		t.Error("the seed was printed")
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("seed file mode %v, %v", fi.Mode(), err)
	}
	s, err := approval.NewSigner(seed)
	if err != nil || s.PublicKey() != pub {
		t.Errorf("signer from the seed: %v, key %s, printed %s", err, s.PublicKey(), pub)
	}
	if code, _, stderr := run(t, "keygen", "--out", path); code == 0 || !strings.Contains(stderr, "not overwriting") {
		t.Errorf("second keygen to the same file: exit %d, %s", code, stderr)
	}
	if code, _, _ := run(t, "keygen"); code != 2 {
		t.Errorf("keygen without --out: exit %d, want 2", code)
	}
}

// config check says which action requests each side will sign and run.
func TestConfigCheckActionKeys(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"agent without trusted keys", "agent:\n  source: mgmt-1\n", "every action request is refused"},
		{"agent with a key", "agent:\n  source: mgmt-1\n  trustedKeys: [" + testPublicKey(t) + "]\n", "signed by 1 trusted key(s), two people required"},
		{"bot with a signing key file", "bot:\n  defaultChannel: C0123456789\nslack:\n  botTokenEnv: B\n  signingSecretEnv: S\napprovals:\n  approvers: [U01234ABCD, U05678EFGH]\n  signingKeyFile: /etc/hcpbot/signing/seed\n",
			"signed with the key from file /etc/hcpbot/signing/seed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The summary only: the key file is not on this machine.
			code, out, errOut := configRun(t, map[string]string{"B": "xoxb-1", "S": "s"}, "config", "check", "--secrets=false", "--config", configFile(t, tc.yaml))
			if !strings.Contains(out, tc.want) {
				t.Errorf("config check (exit %d) does not say %q:\n%s%s", code, tc.want, out, errOut)
			}
		})
	}
}

func testPublicKey(t *testing.T) string {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	return pub
}
