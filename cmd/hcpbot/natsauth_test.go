package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/configs"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/testenv"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
	"github.com/hcpbot/hcpbot/internal/testenv/syncbuf"
)

// nats.nkeySeedFile and nats.caFile take effect: `hcpbot bot` with only
// its config file reaches a server that requires TLS (with a private CA)
// and an nkey user, and creates the events stream there. Without either
// field the same connection fails.
func TestBotConfigNATSNkeyAndCA(t *testing.T) {
	srv := natstest.RunSecured(t)
	rec := slackrec.New(t)
	botAddr, opsAddr := freeAddr(t), freeAddr(t)
	natsSection := func(seed, ca string) string {
		s := fmt.Sprintf("nats:\n  urls: [%q]\n", srv.URL)
		if seed != "" {
			s += fmt.Sprintf("  nkeySeedFile: %s\n", seed)
		}
		if ca != "" {
			s += fmt.Sprintf("  caFile: %s\n", ca)
		}
		return s
	}
	rest := fmt.Sprintf(`bot:
  listen: %q
  opsListen: %q
  defaultChannel: C0NATSAUTH
slack:
  apiURL: %q
  botTokenEnv: TEST_SLACK_BOT_TOKEN
  signingSecretEnv: TEST_SLACK_SIGNING_SECRET
log: {level: info, format: json}
`, botAddr, opsAddr, rec.APIURL())
	path := configFile(t, natsSection(srv.User.SeedFile, srv.CAFile)+rest)
	vars := map[string]string{"TEST_SLACK_BOT_TOKEN": "xoxb-0000-test", "TEST_SLACK_SIGNING_SECRET": "s", "POD_NAME": "bot-0"}

	ctx, cancel := context.WithCancel(context.Background())
	var logs syncbuf.Buffer
	done := make(chan int, 1)
	go func() {
		c := &cli{stdin: strings.NewReader(""), stdout: &logs, stderr: &logs, getenv: func(k string) string { return vars[k] }}
		done <- c.main(ctx, []string{"bot", "--config", path})
	}()
	defer func() {
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("hcpbot bot exited %d:\n%s", code, logs.String())
			}
		case <-time.After(30 * time.Second):
			t.Errorf("hcpbot bot did not stop:\n%s", tail(logs.String(), 4000))
		}
		if strings.Contains(logs.String(), seedOf(t, srv.User.SeedFile)) {
			t.Error("the nkey seed reached the logs")
		}
	}()
	testenv.Eventually(t, natstest.Timeout, "the bot ready on the secured NATS", func() bool {
		code, _ := get("http://" + opsAddr + "/readyz")
		return code == 200
	})
	// The stream exists on that server: seen by a client of our own.
	check, err := bus.Connect(ctx, bus.Config{URLs: []string{srv.URL}, NkeySeedFile: srv.User.SeedFile, CAFile: srv.CAFile}, natstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer check.Close()
	if _, err := check.JS.Stream(ctx, event.StreamName); err != nil {
		t.Fatalf("events stream on the secured server: %v\n%s", err, tail(logs.String(), 4000))
	}

	// Each field is needed: without it, the same config cannot connect.
	for name, tc := range map[string]struct{ nats, want string }{
		"no caFile":       {natsSection(srv.User.SeedFile, ""), "certificate"},
		"no nkeySeedFile": {natsSection("", srv.CAFile), "authorization violation"},
	} {
		t.Run(name, func(t *testing.T) { botConnectFails(t, tc.nats+rest, tc.want) })
	}
}

// The agent's flags: --nats-nkey-seed and --nats-ca reach the connection,
// whose reply subjects start with the agent's own inbox prefix; against
// that external server the agent waits for the bot's stream instead of
// creating it.
func TestAgentNATSFlags(t *testing.T) {
	srv := natstest.RunSecured(t)
	f := agentFlags{source: "mgmt-flags", natsURLs: srv.URL, natsNkeySeed: srv.User.SeedFile, natsCA: srv.CAFile}
	inbox, err := event.AgentInboxPrefix(f.source)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), natstest.Timeout)
	defer cancel()
	conn, err := connectNATS(ctx, agentNATSClient(f, inbox), natstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if got := conn.NC.NewInbox(); !strings.HasPrefix(got, inbox+".") {
		t.Errorf("inbox %q, want prefix %s", got, inbox)
	}
	var logs syncbuf.Buffer
	waited := make(chan error, 1)
	go func() { _, err := agentStream(ctx, conn, bus.EventsSettings{}, zerolog.New(&logs)); waited <- err }()
	testenv.Eventually(t, natstest.Timeout, "the waiting line", func() bool {
		return strings.Contains(logs.String(), "waiting for the bot to create stream "+event.StreamName)
	})
	if _, err := conn.JS.Stream(ctx, event.StreamName); err == nil {
		t.Fatal("the agent created the events stream")
	}
	if _, err := bus.EnsureStream(ctx, conn.JS, bus.EventsStream(time.Hour, 0)); err != nil { // the bot's part
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	if info, err := conn.JS.Stream(ctx, event.StreamName); err != nil || info.CachedInfo().Config.MaxAge != time.Hour {
		t.Errorf("stream after the agent's start: %v, %v (the bot's max age 1h must stay)", info, err)
	}
}

// With no URL the agent starts the embedded server without a listener,
// says so, connects in-process as its source's agent, and has the events
// stream created in the name of the process that runs the server: its
// own role may not create it.
func TestAgentEmbeddedNATSNoListener(t *testing.T) {
	var logs syncbuf.Buffer
	log := zerolog.New(&logs)
	ctx, cancel := context.WithTimeout(context.Background(), natstest.Timeout)
	defer cancel()
	f := agentFlags{source: "mgmt-emb", natsStore: t.TempDir(), identity: "emb-0"}
	inbox, err := event.AgentInboxPrefix(f.source)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := connectNATS(ctx, agentNATSClient(f, inbox), log)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if !strings.Contains(logs.String(), "no listener, in-process connections only; authentication required") || conn.Local().Listening() != nil {
		t.Errorf("listening on %v; start log:\n%s", conn.Local().Listening(), logs.String())
	}
	if got := conn.NC.NewInbox(); !strings.HasPrefix(got, inbox+".") {
		t.Errorf("inbox %q: want the agent's %s", got, inbox)
	}
	cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = conn.JS.CreateStream(cctx, jetstream.StreamConfig{Name: event.StreamName, Subjects: []string{event.EventsStreamSubjects}})
	ccancel()
	if err == nil {
		t.Fatal("the agent's role created the events stream")
	}
	if _, err := agentStream(ctx, conn, bus.EventsSettings{}, log); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.JS.Stream(ctx, event.StreamName); err != nil {
		t.Fatal(err)
	}
}

// seedOf is the seed's text, to look for it in logs.
func seedOf(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// `hcpbot agent` against an external NATS without the events stream:
// it serves /healthz (so a liveness probe does not restart it) but is not
// ready while it waits for the bot, and becomes ready once the stream
// exists, without having changed it.
func TestAgentCommandWaitsForStream(t *testing.T) {
	// The agent checks its management cluster before NATS
	// (TestAgentCommandUnusableKubeconfig): a real one.
	env.Need(t)
	srv := natstest.RunSecured(t)
	addr := freeAddr(t)
	ctx := context.Background()
	logs := startAgentCmd(t, "--kubeconfig", managementKubeconfig(t), "--source", "mgmt-wait", "--nats-url", srv.URL,
		"--nats-nkey-seed", srv.User.SeedFile, "--nats-ca", srv.CAFile, "--listen", addr, "--leader-elect=false", "--log-format", "json")
	testenv.Eventually(t, natstest.Timeout, "the waiting line and /healthz", func() bool {
		code, _ := get("http://" + addr + "/healthz")
		return code == 200 && strings.Contains(logs.String(), "waiting for the bot to create stream "+event.StreamName)
	})
	if code, body := get("http://" + addr + "/readyz"); code != 503 || !strings.Contains(body, "waiting for the events stream") {
		t.Errorf("/readyz while waiting: %d %q", code, body)
	}
	bot := createStreamThenReady(t, bus.Config{URLs: []string{srv.URL}, NkeySeedFile: srv.User.SeedFile, CAFile: srv.CAFile}, addr)
	if info, err := bot.JS.Stream(ctx, event.StreamName); err != nil || info.CachedInfo().Config.MaxAge != time.Hour {
		t.Errorf("stream: %v, %v (the bot's max age 1h must stay)", info, err)
	}
}

// nats.credsEnv and nats.credsFile take effect: `hcpbot bot` reaches a
// server in operator (JWT) mode as the user of the .creds content in the
// named variable, or of the named file, and creates the events stream
// there; without credentials the same server refuses the connection. The
// seed never reaches the logs.
func TestBotConfigNATSCreds(t *testing.T) {
	srv := natstest.RunOperator(t)
	for _, field := range []string{"credsEnv", "credsFile"} {
		t.Run(field, func(t *testing.T) { botNATSCreds(t, srv, field) })
	}
	t.Run("none", func(t *testing.T) {
		botConnectFails(t, fmt.Sprintf("nats:\n  urls: [%q]\nbot:\n  defaultChannel: C0NATSCRED\nslack:\n  botTokenEnv: T\n  signingSecretEnv: S\n", srv.URL), "authorization violation")
	})
}

// botNATSCreds runs `hcpbot bot` with nats.<field> (credsEnv or
// credsFile) against srv until its /readyz says it is connected, and
// checks the events stream it created as the .creds user.
func botNATSCreds(t *testing.T, srv natstest.Operator, field string) {
	t.Helper()
	opsAddr := freeAddr(t)
	vars := map[string]string{"TEST_SLACK_BOT_TOKEN": "xoxb-0000-test", "TEST_SLACK_SIGNING_SECRET": "test-signing-secret-creds", "POD_NAME": "bot-creds",
		"TEST_NATS_CREDS": string(srv.Creds)}
	ref := "credsEnv: TEST_NATS_CREDS"
	if field == "credsFile" {
		ref = "credsFile: " + srv.CredsFile
	}
	rec := slackrec.New(t)
	logs := startBot(t, fmt.Sprintf(`nats:
  urls: [%q]
  %s
  eventsMaxAge: 2h
bot:
  listen: %q
  opsListen: %q
  defaultChannel: C0NATSCRED
slack:
  apiURL: %q
  botTokenEnv: TEST_SLACK_BOT_TOKEN
  signingSecretEnv: TEST_SLACK_SIGNING_SECRET
`, srv.URL, ref, freeAddr(t), opsAddr, rec.APIURL()), vars)
	waitReady(t, opsAddr)
	ctx := context.Background()
	check, err := bus.Connect(ctx, bus.Config{URLs: []string{srv.URL}, Creds: srv.Creds}, natstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer check.Close()
	if s, err := check.JS.Stream(ctx, event.StreamName); err != nil || s.CachedInfo().Config.MaxAge != 2*time.Hour {
		t.Fatalf("events stream of the .creds user's account: %v, %v\n%s", s, err, tail(logs.String(), 4000))
	}
	if strings.Contains(logs.String(), srv.Seed) {
		t.Error("the .creds seed reached the logs")
	}
}

// `hcpbot agent --config` with nats.credsEnv connects as the user of the
// .creds content in that variable: it becomes ready once the bot's stream
// exists in that user's account. An unset variable is refused, naming it.
func TestAgentNATSCredsEnv(t *testing.T) {
	srv := natstest.RunOperator(t)
	file := configFile(t, "nats:\n  urls: ["+srv.URL+"]\n  credsEnv: AGENT_CREDS\nagent:\n  source: mgmt-creds\n")
	code, _, stderr := run(t, "agent", "--config", file)
	if code == 0 || !strings.Contains(stderr, "nats.credsEnv: environment variable AGENT_CREDS is not set") {
		t.Errorf("unset variable: exit %d, %q", code, stderr)
	}
	env.Need(t) // the agent checks its management cluster before NATS
	addr := freeAddr(t)
	logs := startAgentCmdEnv(t, map[string]string{"AGENT_CREDS": string(srv.Creds)}, "--config", file,
		"--kubeconfig", managementKubeconfig(t), "--listen", addr, "--leader-elect=false")
	testenv.Eventually(t, natstest.Timeout, "the agent waiting for the stream", func() bool {
		return strings.Contains(logs.String(), "waiting for the bot to create stream "+event.StreamName)
	})
	createStreamThenReady(t, bus.Config{URLs: []string{srv.URL}, CredsFile: srv.CredsFile}, addr)
	if strings.Contains(logs.String(), srv.Seed) {
		t.Error("the .creds seed reached the logs")
	}
}

// createStreamThenReady does the bot's part for a waiting agent: connects
// with cfg, creates the events stream (max age 1h), and waits for the
// agent's /readyz on addr.
func createStreamThenReady(t *testing.T, cfg bus.Config, addr string) *bus.Conn {
	t.Helper()
	ctx := context.Background()
	bot, err := bus.Connect(ctx, cfg, natstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bot.Close)
	if _, err := bus.EnsureStream(ctx, bot.JS, bus.EventsStream(time.Hour, 0)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, natstest.Timeout, "/readyz once the stream exists", func() bool {
		code, _ := get("http://" + addr + "/readyz")
		return code == 200
	})
	return bot
}

// botConnectFails checks that the bot's NATS connection from config fails
// with an error containing want (lower case).
func botConnectFails(t *testing.T, config, want string) {
	t.Helper()
	cfg, err := configs.Parse([]byte(config), "hcpbot.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(context.Background(), natstest.Timeout)
	defer cancel()
	c, err := connectNATS(cctx, botNATSClient(cfg, nil, "bot"), zerolog.Nop())
	if err == nil {
		c.Close()
		t.Fatal("connected")
	}
	if !strings.Contains(strings.ToLower(err.Error()), want) {
		t.Fatalf("error %v, want %q", err, want)
	}
}
