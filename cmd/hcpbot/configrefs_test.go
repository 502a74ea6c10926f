package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"

	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
)

// lineOf is the 1-based line of the first line of content holding key.
func lineOf(t *testing.T, content, key string) int {
	t.Helper()
	i := strings.Index(content, key)
	if i < 0 {
		t.Fatalf("%q not in\n%s", key, content)
	}
	return 1 + strings.Count(content[:i], "\n")
}

// configRefsFixture is what the reference table resolves against: real
// files of every kind, and an environment holding good values.
type configRefsFixture struct {
	dir                                        string
	botToken, signingSecret, appToken, missing string
	userSeed, accountSeed, caFile, creds       string
	kubeconfig                                 string
	env                                        map[string]string
}

func newConfigRefsFixture(t *testing.T) configRefsFixture {
	t.Helper()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	natstest.WriteTLS(t, dir)
	account, _ := nkeys.CreateAccount()
	accountSeed, _ := account.Seed()
	return configRefsFixture{
		dir:           dir,
		botToken:      write("bot-token", "xoxb-1-2-BOTSECRET\n"),
		signingSecret: write("signing-secret", "SIGNINGSECRET0123\n"),
		appToken:      write("app-token", "xapp-1-A0-APPSECRET\n"),
		missing:       filepath.Join(dir, "missing"),
		userSeed:      natstest.NewUser(t).SeedFile,
		accountSeed:   write("account.seed", string(accountSeed)),
		caFile:        filepath.Join(dir, natstest.TLSCA),
		creds:         write("nats.creds", "-----BEGIN NATS USER JWT-----\neyJ0\n------END NATS USER JWT------\n-----BEGIN USER NKEY SEED-----\nSUAM\n------END USER NKEY SEED------\n"),
		kubeconfig: write("kubeconfig", "apiVersion: v1\nkind: Config\ncurrent-context: mgmt\ncontexts:\n- name: mgmt\n  context: {cluster: mgmt, user: admin}\n"+
			"clusters:\n- name: mgmt\n  cluster: {server: \"https://127.0.0.1:1\"}\nusers:\n- name: admin\n  user: {token: not-read}\n"),
		env: map[string]string{"SLACK_BOT_TOKEN": "xoxb-1-2-ENVSECRET", "SLACK_SIGNING_SECRET": "ENVSIGNING0123", "HCPBOT_SIGNING_KEY": seedOf(t, natstest.NewUser(t).SeedFile)},
	}
}

func (fx configRefsFixture) credsContent(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(fx.creds)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// `config check` resolves every reference the process it checks for
// would read, and names each missing or broken one: the file and line,
// the field, and the variable or file. None of these files would start;
// each was "ok" before, or failed only at start.
func TestConfigCheckReferences(t *testing.T) {
	fx := newConfigRefsFixture(t)
	garbage := filepath.Join(fx.dir, "garbage")
	if err := os.WriteFile(garbage, []byte("not a credential of any kind\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(fx.dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	kcNoCA := filepath.Join(fx.dir, "kubeconfig-no-ca")
	kc, _ := os.ReadFile(fx.kubeconfig)
	if err := os.WriteFile(kcNoCA, []byte(strings.Replace(string(kc), `{server: "https://127.0.0.1:1"}`, `{server: "https://127.0.0.1:1", certificate-authority: `+fx.missing+`}`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	// slack and bot sections around the references under test.
	bot := func(slack string) string {
		return "bot:\n  defaultChannel: C0123456789\nslack:\n" + slack
	}
	okSlack := "  botTokenFile: " + fx.botToken + "\n  signingSecretFile: " + fx.signingSecret + "\n"
	external := func(nats string) string {
		return "nats:\n  urls: [tls://127.0.0.1:4222]\n" + nats + "agent:\n  source: mgmt-1\n"
	}

	for _, tc := range []struct {
		name    string
		file    string
		args    []string          // beyond --config
		env     map[string]string // nil: the fixture's
		key     string            // where the problem points: its line holds key
		field   string
		details []string // what the message names
	}{
		{"bot token variable unset", bot("  botTokenEnv: SLACK_BOT_TOKEN\n  signingSecretFile: " + fx.signingSecret + "\n"), nil, map[string]string{},
			"botTokenEnv", "slack.botTokenEnv", []string{"environment variable SLACK_BOT_TOKEN is not set or empty"}},
		{"bot token variable of another kind", bot("  botTokenEnv: SLACK_BOT_TOKEN\n  signingSecretFile: " + fx.signingSecret + "\n"), nil, map[string]string{"SLACK_BOT_TOKEN": "xoxp-1-2-USERSECRET"},
			"botTokenEnv", "slack.botTokenEnv", []string{"env SLACK_BOT_TOKEN does not hold a bot token (xoxb-…)"}},
		{"bot token file missing", bot("  botTokenFile: " + fx.missing + "\n  signingSecretFile: " + fx.signingSecret + "\n"), nil, nil,
			"botTokenFile", "slack.botTokenFile", []string{"open " + fx.missing, "no such file"}},
		{"bot token file empty", bot("  botTokenFile: " + empty + "\n  signingSecretFile: " + fx.signingSecret + "\n"), nil, nil,
			"botTokenFile", "slack.botTokenFile", []string{empty + " is empty"}},
		{"signing secret variable unset", bot("  botTokenFile: " + fx.botToken + "\n  signingSecretEnv: SLACK_SIGNING_SECRET\n"), nil, map[string]string{},
			"signingSecretEnv", "slack.signingSecretEnv", []string{"environment variable SLACK_SIGNING_SECRET"}},
		{"app token file holds a bot token", bot("  botTokenFile: " + fx.botToken + "\n  socketMode: true\n  appTokenFile: " + fx.botToken + "\n"), nil, nil,
			"appTokenFile", "slack.appTokenFile", []string{"file " + fx.botToken + " does not hold an app-level token (xapp-…)"}},
		{"signing key variable unset", bot(okSlack) + "approvals:\n  approvers: [U01234ABCD, U05678EFGH]\n  signingKeyEnv: HCPBOT_SIGNING_KEY\n", nil, map[string]string{},
			"signingKeyEnv", "approvals.signingKeyEnv", []string{"environment variable HCPBOT_SIGNING_KEY"}},
		{"signing key file is an account seed", bot(okSlack) + "approvals:\n  approvers: [U01234ABCD, U05678EFGH]\n  signingKeyFile: " + fx.accountSeed + "\n", nil, nil,
			"signingKeyFile", "approvals.signingKeyFile", []string{"file " + fx.accountSeed + " is not an nkeys user seed"}},
		{"no signing key for hcpbot bot", "agent:\n  source: mgmt-1\n" + bot(okSlack) + "approvals:\n  approvers: [U01234ABCD, U05678EFGH]\n", []string{"--for", "bot"}, nil,
			"approvals:", "approvals", []string{"approvals.signingKeyEnv or approvals.signingKeyFile"}},
		{"creds file missing", external("  credsFile: " + fx.missing + "\n"), nil, nil,
			"credsFile", "nats.credsFile", []string{"open " + fx.missing}},
		{"creds file is not a .creds file", external("  credsFile: " + garbage + "\n"), nil, nil,
			"credsFile", "nats.credsFile", []string{"file " + garbage + " is not a NATS .creds file"}},
		{"creds variable unset", external("  credsEnv: HCPBOT_NATS_CREDS\n") + bot(okSlack), nil, nil,
			"credsEnv", "nats.credsEnv", []string{"environment variable HCPBOT_NATS_CREDS"}},
		{"creds variable unset for the agent", external("  credsEnv: HCPBOT_NATS_CREDS\n"), []string{"--for", "agent"}, map[string]string{},
			"credsEnv", "nats.credsEnv", []string{"environment variable HCPBOT_NATS_CREDS"}},
		{"nkey seed file missing", external("  nkeySeedFile: " + fx.missing + "\n"), nil, nil,
			"nkeySeedFile", "nats.nkeySeedFile", []string{"open " + fx.missing}},
		{"nkey seed file is garbage", external("  nkeySeedFile: " + garbage + "\n"), nil, nil,
			"nkeySeedFile", "nats.nkeySeedFile", []string{garbage + " does not hold an nkey seed"}},
		{"nkey seed file is an account seed", external("  nkeySeedFile: " + fx.accountSeed + "\n"), nil, nil,
			"nkeySeedFile", "nats.nkeySeedFile", []string{fx.accountSeed + " holds a seed of another kind"}},
		{"CA file missing", external("  caFile: " + fx.missing + "\n"), nil, nil,
			"caFile", "nats.caFile", []string{"open " + fx.missing}},
		{"CA file without a certificate", external("  caFile: " + garbage + "\n"), nil, nil,
			"caFile", "nats.caFile", []string{garbage + " holds no PEM certificate"}},
		{"kubeconfig missing", "agent:\n  source: mgmt-1\n  kubeconfig: " + fx.missing + "\n", nil, nil,
			"kubeconfig", "agent.kubeconfig", []string{"open " + fx.missing}},
		{"kubeconfig naming a missing CA file", "agent:\n  source: mgmt-1\n  kubeconfig: " + kcNoCA + "\n", nil, nil,
			"kubeconfig", "agent.kubeconfig", []string{fx.missing}},
		{"embedded store under a file", "nats:\n  storeDir: " + garbage + "/nats\nagent:\n  source: mgmt-1\n", nil, nil,
			"storeDir", "nats.storeDir", []string{garbage + " is not a folder"}},
		{"hcpbot agent without an agent section", bot(okSlack), []string{"--for", "agent"}, nil,
			"", "agent", []string{"no agent section: hcpbot agent needs one"}},
		{"hcpbot all without a bot section", "agent:\n  source: mgmt-1\n", []string{"--for", "all"}, nil,
			"", "bot", []string{"no bot section: hcpbot all needs one"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := configFile(t, tc.file)
			env := tc.env
			if env == nil {
				env = fx.env
			}
			code, out, errOut := configRun(t, env, append([]string{"config", "check", "--config", p}, tc.args...)...)
			if code != 1 {
				t.Fatalf("code %d, want 1\n%s%s", code, out, errOut)
			}
			want := p + ": " + tc.field + ": "
			if tc.key != "" {
				want = p + ":" + strconv.Itoa(lineOf(t, tc.file, tc.key)) + ": " + tc.field + ": "
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if len(lines) != 1 || !strings.HasPrefix(lines[0], want) {
				t.Fatalf("want one problem starting %q, got:\n%s", want, out)
			}
			for _, d := range tc.details {
				if !strings.Contains(lines[0], d) {
					t.Errorf("problem does not name %q: %s", d, lines[0])
				}
			}
			for _, secret := range []string{"BOTSECRET", "ENVSECRET", "USERSECRET", "APPSECRET", "not-read", "SIGNING0123"} {
				if strings.Contains(out+errOut, secret) {
					t.Errorf("output holds a secret value (%s):\n%s%s", secret, out, errOut)
				}
			}
			t.Logf("%s", lines[0])
		})
	}

	// Every reference of every kind, all good: ok, values never printed.
	all := "nats:\n  urls: [tls://127.0.0.1:4222]\n  nkeySeedFile: " + fx.userSeed + "\n  caFile: " + fx.caFile + "\n" +
		"agent:\n  source: mgmt-1\n  kubeconfig: " + fx.kubeconfig + "\n" +
		bot("  botTokenEnv: SLACK_BOT_TOKEN\n  signingSecretEnv: SLACK_SIGNING_SECRET\n  socketMode: true\n  appTokenFile: "+fx.appToken+"\n") +
		"approvals:\n  approvers: [U01234ABCD, U05678EFGH]\n  signingKeyEnv: HCPBOT_SIGNING_KEY\n"
	p := configFile(t, all)
	if code, out, errOut := configRun(t, fx.env, "config", "check", "--config", p); code != 0 || !strings.HasPrefix(out, "ok: "+p) {
		t.Errorf("all good: code %d\n%s%s", code, out, errOut)
	}
	credsOK := configFile(t, external("  credsFile: "+fx.creds+"\n"))
	if code, out, errOut := configRun(t, nil, "config", "check", "--config", credsOK); code != 0 {
		t.Errorf("good .creds file: code %d\n%s%s", code, out, errOut)
	}
	// Each process reads its own references: an agent host needs no
	// Slack token, and --secrets=false checks the file alone (CI).
	for _, args := range [][]string{{"--for", "agent"}, {"--secrets=false"}} {
		if code, out, errOut := configRun(t, map[string]string{}, append([]string{"config", "check", "--config", p}, args...)...); code != 0 {
			t.Errorf("%v without the bot's environment: code %d\n%s%s", args, code, out, errOut)
		}
	}
	if code, out, _ := configRun(t, map[string]string{}, "config", "check", "--config", p, "--for", "bot"); code != 1 || strings.Count(out, "\n") != 3 {
		t.Errorf("--for bot without its environment: code %d, want 1 and 3 problems (bot token, signing secret, signing key):\n%s", code, out)
	}
	if code, _, errOut := configRun(t, nil, "config", "check", "--config", p, "--for", "nats"); code != 2 || !strings.Contains(errOut, `--for "nats": want agent, bot or all`) {
		t.Errorf("--for nats: code %d %s", code, errOut)
	}
}

// --online asks what only the network can answer, on loopback here: the
// management cluster's API server (the agent's start-up /version) and
// Slack's auth.test and apps.connections.open (slackrec).
func TestConfigCheckOnline(t *testing.T) {
	env.Need(t)
	fx := newConfigRefsFixture(t)
	good := slackrec.New(t)
	refusing := slackrec.New(t, slackrec.WithResponse("auth.test", map[string]any{"ok": false, "error": "invalid_auth"}))
	config := func(kubeconfig, apiURL string) string {
		return "agent:\n  source: mgmt-1\n  kubeconfig: " + kubeconfig + "\nbot:\n  defaultChannel: C0123456789\nslack:\n  apiURL: " + apiURL +
			"\n  botTokenEnv: SLACK_BOT_TOKEN\n  socketMode: true\n  appTokenFile: " + fx.appToken + "\n"
	}
	mgmt := managementKubeconfig(t)
	for name, kc := range unusableKubeconfigs(t) {
		if name == "missing" {
			continue // offline already (TestConfigCheckReferences)
		}
		t.Run("kubeconfig "+name, func(t *testing.T) {
			content := config(kc.path, good.APIURL())
			p := configFile(t, content)
			if code, out, _ := configRun(t, fx.env, "config", "check", "--config", p); code != 0 {
				t.Fatalf("offline: code %d, want 0 (nothing dialled)\n%s", code, out)
			}
			code, out, errOut := configRun(t, fx.env, "config", "check", "--online", "--config", p)
			want := p + ":" + strconv.Itoa(lineOf(t, content, "kubeconfig")) + ": agent.kubeconfig: kubeconfig " + kc.path + ": "
			if code != 1 || !strings.HasPrefix(out, want) || !strings.Contains(out, "GET /version") || !strings.Contains(out, kc.want) {
				t.Fatalf("code %d, want 1 and a problem starting %q saying %q:\n%s%s", code, want, kc.want, out, errOut)
			}
			if strings.Contains(out+errOut, "not-a-valid-token") {
				t.Error("kubeconfig credentials printed")
			}
			t.Logf("%s", strings.TrimSpace(out))
		})
	}
	t.Run("Slack refuses the bot token", func(t *testing.T) {
		content := config(mgmt, refusing.APIURL())
		p := configFile(t, content)
		code, out, errOut := configRun(t, fx.env, "config", "check", "--online", "--config", p)
		want := p + ":" + strconv.Itoa(lineOf(t, content, "botTokenEnv")) + ": slack.botTokenEnv: Slack auth.test at " + refusing.APIURL() + " with env SLACK_BOT_TOKEN: invalid_auth"
		if code != 1 || strings.TrimSpace(out) != want {
			t.Fatalf("code %d, want 1 and\n%s\ngot:\n%s%s", code, want, out, errOut)
		}
	})
	t.Run("all answer", func(t *testing.T) {
		good := slackrec.New(t) // its own: the calls above are not counted
		p := configFile(t, config(mgmt, good.APIURL()))
		code, out, errOut := configRun(t, fx.env, "config", "check", "--online", "--config", p)
		if code != 0 || !strings.HasPrefix(out, "ok: ") {
			t.Fatalf("code %d\n%s%s", code, out, errOut)
		}
		if len(good.CallsTo("auth.test")) != 1 || len(good.CallsTo("apps.connections.open")) != 1 {
			t.Errorf("calls: %v", good.Calls())
		}
		if strings.Contains(out+errOut, "ENVSECRET") || strings.Contains(out+errOut, "APPSECRET") {
			t.Errorf("token printed:\n%s%s", out, errOut)
		}
	})
}

// What `config check` reports is what the process says when it refuses
// to start, line for line: the check sees the same reasons, before.
func TestConfigCheckAgreesWithStart(t *testing.T) {
	fx := newConfigRefsFixture(t)
	okSlack := "slack:\n  botTokenFile: " + fx.botToken + "\n  signingSecretFile: " + fx.signingSecret + "\n"
	for _, tc := range []struct {
		name, command, file string
	}{
		{"hcpbot all, bot token variable unset", "all", "agent:\n  source: mgmt-1\nbot:\n  defaultChannel: C0123456789\nslack:\n  botTokenEnv: UNSET_TOKEN\n  signingSecretFile: " + fx.signingSecret + "\n"},
		{"hcpbot bot, creds file not a .creds file", "bot", "nats:\n  urls: [tls://127.0.0.1:4222]\n  credsFile: " + fx.botToken + "\nbot:\n  defaultChannel: C0123456789\n" + okSlack},
		{"hcpbot agent, nkey seed file missing", "agent", "nats:\n  urls: [tls://127.0.0.1:4222]\n  nkeySeedFile: " + fx.missing + "\nagent:\n  source: mgmt-1\n"},
		{"hcpbot agent, CA file not PEM", "agent", "nats:\n  urls: [tls://127.0.0.1:4222]\n  caFile: " + fx.botToken + "\nagent:\n  source: mgmt-1\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := configFile(t, tc.file)
			code, out, _ := configRun(t, fx.env, "config", "check", "--config", p)
			problem := strings.TrimSpace(out)
			if code != 1 || strings.Contains(problem, "\n") {
				t.Fatalf("config check: code %d, want one problem:\n%s", code, out)
			}
			code, _, errOut := configRun(t, fx.env, tc.command, "--config", p)
			if code == 0 || strings.TrimSpace(errOut) != "hcpbot "+tc.command+": "+problem {
				t.Errorf("hcpbot %s: exit %d\n%s\nwant the check's problem:\n%s", tc.command, code, errOut, problem)
			}
		})
	}
}
