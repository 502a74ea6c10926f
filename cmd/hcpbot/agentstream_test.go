package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
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
	"github.com/hcpbot/hcpbot/internal/testenv/syncbuf"
)

// driftWarning is the message of agentStream's warning against an
// external NATS.
const driftWarning = "the events stream lacks settings of the agent's file"

// `hcpbot agent` against a 3-node NATS cluster whose events stream the
// bot made with 3 replicas, a max age of 2h and a duplicate window of 90s,
// from a file that writes other values for all three: the agent may not
// change the stream, so it says at start, in one warning, which of them
// the stream lacks, and publishes to the stream as it is (ready, its
// events stored, the stream unchanged). A file writing the stream's own
// values, or none, gives no warning: a setting left unset is the bot's.
func TestAgentChecksTheBotsEventsStream(t *testing.T) {
	env.Need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cluster := natstest.RunCluster(t, 3)
	conn, err := bus.Connect(ctx, bus.Config{URLs: cluster.URLs()}, natstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	bots := bus.EventsStream(2*time.Hour, 90*time.Second, bus.WithReplicas(3))
	if _, err := bus.EnsureStream(ctx, conn.JS, bots); err != nil { // the bot's part
		t.Fatal(err)
	}

	addr := freeAddr(t)
	const source = "mgmt-streamcheck"
	file := configFile(t, fmt.Sprintf(`nats:
  urls: [%s]
  streamReplicas: 1
  eventsMaxAge: 1h
  duplicateWindow: 2m
agent:
  source: %s
  kubeconfig: %s
  listen: %q
  leaderElection:
    enabled: false
log:
  format: json
`, strings.Join(cluster.URLs(), ", "), source, managementKubeconfig(t), addr))
	logs := startAgentCmd(t, "--config", file, "--identity", "streamcheck-0")
	waitReady(t, addr)
	want := []string{"replicas: 3 → 1", "max age: 2h0m0s → 1h0m0s", "duplicate window: 1m30s → 2m0s"}
	if got := driftLines(t, logs.String()); len(got) != 1 || !slices.Equal(got[0], want) {
		t.Errorf("warnings naming what the stream lacks: %q, want one with %q; logs:\n%s", got, want, tail(logs.String(), 4000))
	}
	testenv.Eventually(t, 60*time.Second, "the agent's events in the bot's stream", func() bool {
		events, _ := streamEvents(t, ctx, conn.JS)
		return slices.ContainsFunc(events, func(e event.Event) bool { return e.Source == source })
	})
	s, err := conn.JS.Stream(ctx, event.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	if d := bus.StreamDrift(s.CachedInfo().Config, bots); d != nil {
		t.Errorf("the agent changed the bot's stream: %q", d)
	}

	// agentStream alone (the same call agentRun makes at start).
	for _, set := range []bus.EventsSettings{{}, {Replicas: 3, MaxAge: 2 * time.Hour, Duplicates: 90 * time.Second}, {MaxAge: 2 * time.Hour}} {
		var logs syncbuf.Buffer
		if _, err := agentStream(ctx, conn, set, zerolog.New(&logs)); err != nil {
			t.Fatal(err)
		}
		if got := driftLines(t, logs.String()); len(got) != 0 {
			t.Errorf("settings %+v, which the stream has or leaves to the bot: warned %q", set, got)
		}
	}
}

// driftLines are the "differs" lists of agentStream's warnings in JSON
// logs.
func driftLines(t *testing.T, logs string) [][]string {
	t.Helper()
	var out [][]string
	for line := range strings.SplitSeq(logs, "\n") {
		if !strings.Contains(line, driftWarning) {
			continue
		}
		var rec struct {
			Level   string   `json:"level"`
			Differs []string `json:"differs"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec.Level != "warn" {
			t.Errorf("level %q, want warn: %s", rec.Level, line)
		}
		out = append(out, rec.Differs)
	}
	return out
}

// A standalone agent on its own embedded server: each start is a new
// process on the same store, from a file. The process creates the events
// stream with the settings the file writes (the defaults for the others),
// brings an existing stream to those it writes and keeps the others (here
// what a bot on the same store set): nobody else could change them there.
// The stream is updated, never re-created.
func TestAgentEventsStreamOnItsEmbeddedServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), natstest.Timeout)
	defer cancel()
	store := t.TempDir()
	var created time.Time
	// started reads the stream as the server has it after a start.
	started := func(t *testing.T, js jetstream.JetStream) jetstream.StreamConfig {
		t.Helper()
		s, err := js.Stream(ctx, event.StreamName)
		if err != nil {
			t.Fatal(err)
		}
		info := s.CachedInfo()
		if created.IsZero() {
			created = info.Created
		} else if !info.Created.Equal(created) {
			t.Errorf("the stream was re-created (%v, first %v)", info.Created, created)
		}
		return info.Config
	}
	agent := func(t *testing.T, nats string) (jetstream.StreamConfig, string) {
		t.Helper()
		f, err := agentSettingsFor(t, nil, "--config", configFile(t, "nats:\n  storeDir: "+store+"\n"+nats+"agent:\n  source: mgmt-own\n"))
		if err != nil {
			t.Fatal(err)
		}
		inbox, err := event.AgentInboxPrefix(f.source)
		if err != nil {
			t.Fatal(err)
		}
		var logs syncbuf.Buffer
		log := zerolog.New(&logs)
		conn, err := connectNATS(ctx, agentNATSClient(f, inbox), log)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := agentStream(ctx, conn, f.events, log); err != nil {
			t.Fatal(err)
		}
		return started(t, conn.JS), logs.String()
	}
	check := func(t *testing.T, have jetstream.StreamConfig, replicas int, maxAge, dup time.Duration) {
		t.Helper()
		if have.Replicas != replicas || have.MaxAge != maxAge || have.Duplicates != dup {
			t.Errorf("replicas %d, max age %v, duplicate window %v; want %d, %v, %v", have.Replicas, have.MaxAge, have.Duplicates, replicas, maxAge, dup)
		}
	}

	have, _ := agent(t, "  streamReplicas: 1\n  eventsMaxAge: 24h\n  duplicateWindow: 2m\n")
	check(t, have, 1, 24*time.Hour, 2*time.Minute)

	// A bot on the same store applies its own.
	botConn, err := connectNATS(ctx, natsClient{storeDir: store, name: "streamcheck-bot"}, natstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	bot := &configs.Config{NATS: configs.NATS{StreamReplicas: 1, EventsMaxAge: 5 * time.Hour, DuplicateWindow: 3 * time.Minute}}
	if err := botStream(ctx, bot, botConn, natstest.Logger(t)); err != nil {
		t.Fatal(err)
	}
	check(t, started(t, botConn.JS), 1, 5*time.Hour, 3*time.Minute)
	botConn.Close()

	// The agent's file writes the duplicate window only: that changes,
	// the bot's max age stays.
	have, logs := agent(t, "  duplicateWindow: 1m\n")
	check(t, have, 1, 5*time.Hour, time.Minute)
	if !strings.Contains(logs, "now has the settings of the agent's file") || !strings.Contains(logs, "duplicate window: 3m0s → 1m0s") {
		t.Errorf("no line saying what changed:\n%s", logs)
	}
	// A file writing none changes nothing.
	have, logs = agent(t, "")
	check(t, have, 1, 5*time.Hour, time.Minute)
	if strings.Contains(logs, "now has the settings") {
		t.Errorf("changed the stream with nothing written:\n%s", logs)
	}
	// A window beyond the bot's max age, which the file leaves to the
	// stream: JetStream caps it at the max age, and the agent says so,
	// at every start.
	for range 2 {
		have, logs = agent(t, "  duplicateWindow: 6h\n")
		check(t, have, 1, 5*time.Hour, 5*time.Hour)
		if !strings.Contains(logs, "the events stream cannot have these settings") || !strings.Contains(logs, "duplicate window: 5h0m0s → 6h0m0s") {
			t.Errorf("no warning for the capped window:\n%s", logs)
		}
	}
}

// `config check --for agent` prints, for each events stream setting, only
// what the agent acts on (agentStream), and `--for bot` or `all` what the
// bot creates the stream with; the embedded server's single node refuses
// more than one replica for every process.
func TestConfigCheckEventsStream(t *testing.T) {
	const (
		urls    = "  urls: [nats://127.0.0.1:4222]\n"
		written = "  eventsMaxAge: 24h\n  duplicateWindow: 2m\n"
		agent   = "agent:\n  source: mgmt-1\n"
		bot     = "bot:\n  defaultChannel: C0123456789\nslack:\n  botTokenEnv: SLACK_BOT_TOKEN\n  signingSecretEnv: SLACK_SIGNING_SECRET\n"
		none    = "the file writes no nats.streamReplicas, eventsMaxAge or duplicateWindow"
	)
	for _, tc := range []struct {
		name, file, role string
		want             string // the summary's events stream line, or with problem the problem's
		problem          bool
	}{
		{"bot: creates it with them", "nats:\n" + urls + "  streamReplicas: 3\n" + written + bot, "bot",
			"events stream: 3 replica(s), max age 24h, duplicate window 2m", false},
		{"all: the bot's, its agent uses it", "nats:\n" + written + agent + bot, "all",
			"events stream: 1 replica(s), max age 24h, duplicate window 2m", false},
		{"agent, embedded, nothing written: the defaults at creation", agent, "agent",
			"events stream: the agent's process creates it on its embedded server while absent with 1 replica(s), max age 72h, duplicate window 15m, and changes nothing of an existing one: " + none, false},
		{"agent, embedded, written: created with them, applied to an existing one", "nats:\n  streamReplicas: 1\n" + written + agent, "agent",
			"events stream: the agent's process creates it on its embedded server while absent with 1 replica(s), max age 24h, duplicate window 2m, and brings an existing one to 1 replica(s), max age 24h, duplicate window 2m", false},
		{"agent, URLs, nothing written: the bot's", "nats:\n" + urls + agent, "agent",
			"events stream: the bot's (the agent waits for it and may not change it); the agent checks none of its settings: " + none, false},
		{"agent, URLs, written: checked", "nats:\n" + urls + "  streamReplicas: 3\n  eventsMaxAge: 24h\n" + agent, "agent",
			"events stream: the bot's (the agent waits for it and may not change it); the agent warns at start unless it has 3 replica(s), max age 24h", false},
		{"agent, embedded, 3 replicas: refused", "nats:\n  streamReplicas: 3\n" + agent, "agent",
			":2: nats.streamReplicas: 3 replicas need a NATS cluster: the embedded server (nats.urls empty) is one node", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := configFile(t, tc.file)
			code, out, errOut := run(t, "config", "check", "--secrets=false", "--for", tc.role, "--config", p)
			if tc.problem {
				if code != 1 || out != p+tc.want+"\n" {
					t.Errorf("code %d, stdout %q; want 1 and the one problem %q\n%s", code, out, p+tc.want, errOut)
				}
				return
			}
			if code != 0 {
				t.Fatalf("code %d\n%s%s", code, out, errOut)
			}
			if !slices.Contains(strings.Split(out, "\n"), "  "+tc.want) {
				t.Errorf("summary lacks %q:\n%s", tc.want, out)
			}
		})
	}
}
