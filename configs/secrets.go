package configs

import (
	"bytes"
	"crypto/x509"
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

// Role is the process a configuration is resolved for; each resolves only
// the references it reads, so an agent's host needs no Slack token.
type Role string

const (
	RoleAgent Role = "agent" // hcpbot agent: the NATS references
	RoleBot   Role = "bot"   // hcpbot bot: NATS, Slack and approvals
	RoleAll   Role = "all"   // hcpbot all: everything
)

// Secrets resolves every configured secret through getenv and readFile
// (os.Getenv and os.ReadFile in production; fakes in tests), as the bot
// and `hcpbot all` read them.
func (c *Config) Secrets(getenv func(string) string, readFile func(string) ([]byte, error)) (*Secrets, error) {
	return c.SecretsFor(RoleAll, getenv, readFile)
}

// SecretsFor resolves the secrets role reads. All missing or malformed
// ones are reported in one *Error, each Problem naming the field (its
// line in the file) and the variable or file, never the value. Files with
// a format are parsed as the process will: a .creds file, an nkey seed,
// the CA's PEM certificates.
func (c *Config) SecretsFor(role Role, getenv func(string) string, readFile func(string) ([]byte, error)) (*Secrets, error) {
	var out Secrets
	var problems []Problem
	bad := func(field, format string, a ...any) {
		problems = append(problems, c.Problem(field, format, a...))
	}
	get := func(field string, ref SecretRef) ([]byte, bool) {
		switch {
		case ref.Env != "":
			v := getenv(ref.Env)
			if v == "" {
				bad(field+"Env", "environment variable %s is not set or empty", ref.Env)
				return nil, false
			}
			return []byte(v), true
		case ref.File != "":
			b, err := readFile(ref.File)
			if err != nil {
				// The error of os.ReadFile names the path and the cause,
				// never the content.
				bad(field+"File", "%v", err)
				return nil, false
			}
			// Files written by `echo` or mounted from a Kubernetes
			// Secret often end with a newline that is not part of the
			// token.
			b = bytes.TrimRight(b, "\r\n")
			if len(bytes.TrimSpace(b)) == 0 {
				bad(field+"File", "%s is empty", ref.File)
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
			bad(ref.Field(field), "%s does not hold %s (%s…)", ref, what, prefix)
			return ""
		}
		return s
	}
	if s := c.Slack; s != nil && role != RoleAgent {
		out.SlackBotToken = token("slack.botToken", s.BotToken, "xoxb-", "a bot token")
		if s.AppToken.IsSet() {
			out.SlackAppToken = token("slack.appToken", s.AppToken, "xapp-", "an app-level token")
		}
		if s.SigningSecret.IsSet() {
			if b, ok := get("slack.signingSecret", s.SigningSecret); ok {
				if bytes.ContainsAny(b, " \t\r\n") {
					bad(s.SigningSecret.Field("slack.signingSecret"), "%s contains whitespace", s.SigningSecret)
				} else {
					out.SlackSigningSecret = string(b)
				}
			}
		}
	}
	if ref := c.NATS.Creds; ref.IsSet() {
		if b, ok := get("nats.creds", ref); ok {
			if !bytes.Contains(b, []byte("BEGIN NATS USER JWT")) || !bytes.Contains(b, []byte("NKEY SEED")) {
				bad(ref.Field("nats.creds"), "%s is not a NATS .creds file (a user JWT and an NKey seed block)", ref)
			} else if ref.Env != "" {
				out.NATSCreds = b
			}
		}
	}
	if a := c.Approvals; a != nil && a.SigningKey.IsSet() && role != RoleAgent {
		if b, ok := get("approvals.signingKey", a.SigningKey); ok {
			b = bytes.TrimSpace(b)
			if kp, err := nkeys.FromSeed(b); err != nil || !isUserSeed(kp) {
				bad(a.SigningKey.Field("approvals.signingKey"), "%s is not an nkeys user seed (SU…; create one with `hcpbot keygen`)", a.SigningKey)
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
				bad("nats.nkeySeedFile", "%s does not hold an nkey seed", f)
			} else if !isUserSeed(kp) {
				bad("nats.nkeySeedFile", "%s holds a seed of another kind than a user's (SU...)", f)
			} else {
				kp.Wipe()
			}
		}
	}
	if f := c.NATS.CAFile; f != "" {
		// What the NATS client does with it (nats.RootCAs): a file
		// without a certificate fails every connection.
		if b, err := readFile(f); err != nil {
			bad("nats.caFile", "%v", err)
		} else if !x509.NewCertPool().AppendCertsFromPEM(b) {
			bad("nats.caFile", "%s holds no PEM certificate", f)
		}
	}
	if len(problems) > 0 {
		sortProblems(problems)
		return nil, &Error{Problems: problems}
	}
	return &out, nil
}

// Field is the YAML path the reference was written as, from the path
// without its suffix: Field("slack.botToken") is "slack.botTokenEnv" or
// "slack.botTokenFile".
func (r SecretRef) Field(prefix string) string {
	if r.Env != "" {
		return prefix + "Env"
	}
	return prefix + "File"
}

func isUserSeed(kp nkeys.KeyPair) bool {
	pub, err := kp.PublicKey()
	return err == nil && nkeys.IsValidPublicUserKey(pub)
}
