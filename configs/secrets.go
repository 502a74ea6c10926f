package configs

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nkeys"
)

// Secrets are the credentials a configuration refers to, resolved. They
// are never part of Config, so a Config can be logged, printed by
// `config check` or put in a support bundle without leaking anything.
type Secrets struct {
	SlackBotToken      string // empty without a slack section
	SlackSigningSecret string // empty with Socket Mode unless configured
	SlackAppToken      string // empty without Socket Mode
	// NATSCreds is the content of the .creds file, when credsEnv is used.
	// With credsFile it is empty: the NATS client reads the file itself
	// (and re-reads it on reconnect, so rotation works), Secrets only
	// checks that it is readable.
	NATSCreds []byte
	// SigningKey is the approvals' signing seed (an nkeys user seed);
	// empty when not configured.
	SigningKey []byte
}

// String never shows the values: Secrets printed by mistake (%v in a log
// line) must not leak them.
func (s Secrets) String() string { return "configs.Secrets{redacted}" }

// GoString covers %#v the same way.
func (s Secrets) GoString() string { return s.String() }

// Secrets resolves every configured secret through getenv and readFile
// (os.Getenv and os.ReadFile in production; fakes in tests). All missing
// or malformed secrets are reported in one error, naming the field and
// the variable or file, never the value.
func (c *Config) Secrets(getenv func(string) string, readFile func(string) ([]byte, error)) (*Secrets, error) {
	var out Secrets
	var errs []error
	get := func(field string, ref SecretRef) ([]byte, bool) {
		switch {
		case ref.Env != "":
			v := getenv(ref.Env)
			if v == "" {
				errs = append(errs, fmt.Errorf("%s: environment variable %s (%sEnv) is not set or empty", c.File, ref.Env, field))
				return nil, false
			}
			return []byte(v), true
		case ref.File != "":
			b, err := readFile(ref.File)
			if err != nil {
				// The error of os.ReadFile names the path and the cause,
				// never the content.
				errs = append(errs, fmt.Errorf("%s: %sFile: %w", c.File, field, err))
				return nil, false
			}
			// Files written by `echo` or mounted from a Kubernetes
			// Secret often end with a newline that is not part of the
			// token.
			b = bytes.TrimRight(b, "\r\n")
			if len(bytes.TrimSpace(b)) == 0 {
				errs = append(errs, fmt.Errorf("%s: %sFile: %s is empty", c.File, field, ref.File))
				return nil, false
			}
			return b, true
		}
		return nil, false
	}
	// token checks a Slack token's prefix: a bot token where an app token
	// belongs (or a user token) fails later with an opaque "invalid_auth".
	token := func(field string, ref SecretRef, prefix, what string) string {
		b, ok := get(field, ref)
		if !ok {
			return ""
		}
		s := string(b)
		if !strings.HasPrefix(s, prefix) || strings.ContainsAny(s, " \t\r\n") {
			errs = append(errs, fmt.Errorf("%s: %s (%s) does not hold %s (%s…)", c.File, field, ref, what, prefix))
			return ""
		}
		return s
	}
	if s := c.Slack; s != nil {
		out.SlackBotToken = token("slack.botToken", s.BotToken, "xoxb-", "a bot token")
		if s.AppToken.IsSet() {
			out.SlackAppToken = token("slack.appToken", s.AppToken, "xapp-", "an app-level token")
		}
		if s.SigningSecret.IsSet() {
			if b, ok := get("slack.signingSecret", s.SigningSecret); ok {
				if bytes.ContainsAny(b, " \t\r\n") {
					errs = append(errs, fmt.Errorf("%s: slack.signingSecret (%s) contains whitespace", c.File, s.SigningSecret))
				} else {
					out.SlackSigningSecret = string(b)
				}
			}
		}
	}
	if ref := c.NATS.Creds; ref.IsSet() {
		if b, ok := get("nats.creds", ref); ok {
			if !bytes.Contains(b, []byte("BEGIN NATS USER JWT")) || !bytes.Contains(b, []byte("NKEY SEED")) {
				errs = append(errs, fmt.Errorf("%s: nats.creds (%s) is not a NATS .creds file (a user JWT and an NKey seed block)", c.File, ref))
			} else if ref.Env != "" {
				out.NATSCreds = b
			}
		}
	}
	if a := c.Approvals; a != nil && a.SigningKey.IsSet() {
		if b, ok := get("approvals.signingKey", a.SigningKey); ok {
			b = bytes.TrimSpace(b)
			if kp, err := nkeys.FromSeed(b); err != nil || !isUserSeed(kp) {
				errs = append(errs, fmt.Errorf("%s: approvals.signingKey (%s) is not an nkeys user seed (SU…; create one with `hcpbot keygen`)", c.File, a.SigningKey))
			} else {
				out.SigningKey = b
			}
		}
	}
	if f := c.NATS.NkeySeedFile; f != "" {
		// Checked here so that a wrong file fails at start with its field
		// named; the NATS client reads it again itself. Never quoted.
		if b, ok := get("nats.nkeySeed", SecretRef{File: f}); ok {
			if kp, err := nkeys.FromSeed(bytes.TrimSpace(b)); err != nil {
				errs = append(errs, fmt.Errorf("%s: nats.nkeySeedFile (%s) does not hold an nkey seed", c.File, f))
			} else if !isUserSeed(kp) {
				errs = append(errs, fmt.Errorf("%s: nats.nkeySeedFile (%s) holds a seed of another kind than a user's (SU...)", c.File, f))
			} else {
				kp.Wipe()
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &out, nil
}

func isUserSeed(kp nkeys.KeyPair) bool {
	pub, err := kp.PublicKey()
	return err == nil && nkeys.IsValidPublicUserKey(pub)
}
