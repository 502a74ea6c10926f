package bot_test

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hcpbot/hcpbot/bot"
	"github.com/hcpbot/hcpbot/bot/checkpoint"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
	"github.com/hcpbot/hcpbot/internal/testenv/syncbuf"
)

// Attacks on the bot's checkpoints (issue 30), each naming its attacker
// of docs/security.md, on the product's embedded server (bus.StartLocal:
// each role with the shipped permission split).

// shipped is a NATS server with the bot's and one agent's users as
// deployed, and a connection of each.
type shipped struct {
	bot, agent *bus.Conn
	kv         jetstream.KeyValue // the checkpoints bucket, as the bot's user
}

func startShipped(t *testing.T, source string) *shipped {
	t.Helper()
	return startShippedWith(t, source, bus.EventsStream(0, 0))
}

// startShippedWith is startShipped with the events stream the bot
// creates as spec says.
func startShippedWith(t *testing.T, source string, spec bus.StreamSpec) *shipped {
	t.Helper()
	ctx := context.Background()
	l, err := bus.StartLocal(ctx, bus.LocalConfig{StoreDir: t.TempDir(), Agents: []string{source}}, natstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Shutdown)
	s := &shipped{}
	for role, c := range map[bus.Role]**bus.Conn{bus.BotRole(): &s.bot, bus.AgentRole(source): &s.agent} {
		if *c, err = l.Connect(ctx, role, bus.Config{Name: t.Name() + "-" + role.String()}, natstest.Logger(t)); err != nil {
			t.Fatal(err)
		}
		t.Cleanup((*c).Close)
	}
	// The bot creates the events stream and its buckets while absent.
	if _, err := bus.EnsureStream(ctx, s.bot.JS, spec); err != nil {
		t.Fatal(err)
	}
	if s.kv, err = bus.EnsureKV(ctx, s.bot.JS, bus.CheckpointsKV(0)); err != nil {
		t.Fatal(err)
	}
	return s
}

// The bot's NATS user, its seed stolen without the signing key, cannot
// publish an event: it cannot make the bot diagnose anything. It can
// write the checkpoints bucket, and a checkpoint is the bot's whole
// state, read at start. The attacker builds one on a NATS server of its
// own — seed 000 invented for a hosted cluster that does not exist, on a
// management cluster that does — and plants it, naming the victim's
// events stream, in the size and digest the manifest asks for. Before
// the seal, the starting bot restored it: it posted the invented
// incident with its "Proposed fix" and Approve button, and the button's
// handler (command.Handler.approveIncidentFix, reading Bot.Diagnose)
// would have proposed the invented noProxy change. Now the checkpoint is
// refused (not sealed by the bot's key), the stream replayed in full,
// the real incident posted and nothing about the invented cluster.
func TestI30AttackBotSeedPlantsCheckpoint(t *testing.T) {
	ctx := context.Background()
	const source = "mgmt-ckpt-victim"
	victim := startShipped(t, source)
	now := time.Now()

	// The victim's stream: the agent's facts of a real cluster with a
	// node down, published with the agent's own user.
	realEvents := nodeEvents(t, source, "clusters", "real", now, restartNodes-1)
	if err := scenario.Publish(ctx, victim.agent.JS, realEvents); err != nil {
		t.Fatal(err)
	}

	// The attacker's own server, stream and bot; its checkpoint sealed
	// with a key of its own (any would do: nobody trusts it).
	aJS := natsJS(t)
	invented, err := scenario.Storm(source, "payments", 1, 3, now)
	if err != nil {
		t.Fatal(err)
	}
	fake := diagnose.Key{Source: source, Cluster: event.ClusterRef{Namespace: "payments", Name: "hc-0"}}
	for n := range 3 {
		e, err := scenario.APIServerProxy(source, fake.Cluster, n, event.ProxyModeTunnel, now.Add(time.Duration(n)*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		invented = append(invented, e)
	}
	if len(invented) > len(realEvents) {
		t.Fatalf("the invented stream (%d events) must fit under the victim's (%d)", len(invented), len(realEvents))
	}
	if err := scenario.Publish(ctx, aJS, invented); err != nil {
		t.Fatal(err)
	}
	aKV, err := bus.EnsureKV(ctx, aJS, bus.CheckpointsKV(0))
	if err != nil {
		t.Fatal(err)
	}
	aStore, _ := checkpointStore(t, aKV)
	aCfg := restartConfig()
	aCfg.Checkpoints, aCfg.CheckpointEvery = aStore, -1
	aCfg.Leader = func() bool { return false }
	attackerBot := startBot(t, aJS, slackrec.New(t), aCfg)
	waitApplied(t, aJS, attackerBot.bot)
	if diags, _ := attackerBot.bot.Diagnose(fake); !hasFix(diags) {
		t.Fatalf("the invented cluster has no fix to propose: %+v", diags)
	}
	if _, err := attackerBot.bot.WriteCheckpoint(ctx); err != nil {
		t.Fatal(err)
	}
	m, body, err := aStore.Load(ctx, bot.DefaultCheckpointName)
	if err != nil {
		t.Fatal(err)
	}
	attackerBot.cancel()

	// Planted as the victim bot's user: the content in chunks, a manifest
	// naming the victim's stream, its size and digest.
	stream, err := victim.bot.JS.Stream(ctx, event.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	m.Stream, m.StreamCreated = event.StreamName, stream.CachedInfo().Created
	for i := 0; i*checkpoint.ChunkSize < len(body); i++ {
		chunk := body[i*checkpoint.ChunkSize : min(len(body), (i+1)*checkpoint.ChunkSize)]
		if _, err := victim.kv.Put(ctx, bot.DefaultCheckpointName+"."+m.Generation+"."+strconv.Itoa(i), chunk); err != nil {
			t.Fatalf("the bot's user writes a chunk: %v", err)
		}
	}
	manifest, _ := json.Marshal(m)
	if _, err := victim.kv.Put(ctx, bot.DefaultCheckpointName, manifest); err != nil {
		t.Fatalf("the bot's user writes the manifest: %v", err)
	}

	// The victim bot starts, leader, with its own key.
	rec := slackrec.New(t)
	cfg := restartConfig()
	cfg.Checkpoints, _ = checkpointStore(t, victim.kv)
	cfg.CheckpointEvery = -1
	log, buf := capturedLog(t, "victim")
	b := runBotLogged(t, victim.bot.JS, rec, cfg, nil, nil, log)
	waitApplied(t, victim.bot.JS, b.bot)
	rec.WaitFor(t, 30*time.Second, func(r *slackrec.Recorder) bool {
		_, realPosted := rootOf(r, "clusters/real")
		_, fakePosted := rootOf(r, "payments/hc-0")
		return realPosted || fakePosted
	})
	testenv.Eventually(t, 30*time.Second, "the victim's notifications delivered", func() bool {
		return metricSum(t, b.reg, "hcpbot_slack_queue_depth") == 0
	})
	if m, ok := rootOf(rec, "payments/hc-0"); ok {
		t.Errorf("the bot posted the incident the planted checkpoint invented: %.300s", m.Text)
	}
	if diags, ok := b.bot.Diagnose(fake); ok || hasFix(diags) {
		t.Errorf("the bot diagnoses the invented cluster (its Approve button would propose this fix): %+v", diags)
	}
	if _, ok := rootOf(rec, "clusters/real"); !ok {
		t.Error("the real incident was not posted")
	}
	if logged(buf, "info", "checkpoint restored") {
		t.Error("the planted checkpoint was restored")
	}
	if !logged(buf, "error", "not sealed by the bot's key") {
		t.Error("no error saying the checkpoint was not sealed by the bot's key")
	}
}

func hasFix(diags []diagnose.Diagnosis) bool {
	for _, d := range diags {
		if d.Fix != nil {
			return true
		}
	}
	return false
}

// Anyone who reads NATS traffic (or the bucket, as the bot's user) reads
// a checkpoint whole. An agent (its user stolen, or a hostile cluster)
// that sends proxy credentials in clear, skipping its own redaction, does
// not get them into it: the bot redacts every payload as it decodes it
// (event.DecodeAll), before the model holds it, and the checkpoint holds
// the model. (No Slack token or key is in the bot's state at all.)
func TestI30AttackCheckpointHoldsNoProxyCredentials(t *testing.T) {
	ctx := context.Background()
	const source = "mgmt-ckpt-secret"
	s := startShipped(t, source)
	ref := event.ClusterRef{Namespace: "clusters", Name: "behind-proxy"}
	e, err := event.New(source, &ref, event.ObjectRef{Kind: "HostedCluster", Namespace: ref.Namespace, Name: ref.Name, UID: "uid-behind-proxy"},
		event.HostedClusterState{Platform: "KubeVirt", Version: "4.18.12"}, "rv:1", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// The payload as a hostile agent writes it: credentials in the proxy
	// URLs and in a condition's message, in the shapes of
	// event/event_test.go:136-147 (HyperShift's spec.configuration.proxy
	// is the URL as the admin wrote it, userinfo included).
	raw := []byte(`{"platform":"KubeVirt","version":"4.18.12",` +
		`"proxy":{"httpProxy":"http://svc-user:s3cr3t@proxy.corp.example:3128","httpsProxy":"http://svc-user:s3cr3t@proxy.corp.example:3128","noProxy":".cluster.local"},` +
		`"conditions":[{"type":"Available","status":"False","reason":"ProxyFailed","message":"dial via \"http://svc-user:s3cr3t@proxy.corp.example:3128\" failed"}]}`)
	e.Payload = raw
	if err := scenario.Publish(ctx, s.agent.JS, []event.Event{e}); err != nil {
		t.Fatal(err)
	}
	cfg := restartConfig()
	cfg.Checkpoints, _ = checkpointStore(t, s.kv)
	cfg.CheckpointEvery = -1
	cfg.Leader = func() bool { return false }
	b := startBot(t, s.bot.JS, slackrec.New(t), cfg)
	waitApplied(t, s.bot.JS, b.bot)
	m, err := b.bot.WriteCheckpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var stored []byte
	keys := []string{bot.DefaultCheckpointName}
	for i := range m.Chunks {
		keys = append(keys, bot.DefaultCheckpointName+"."+m.Generation+"."+strconv.Itoa(i))
	}
	for _, k := range keys {
		v, err := s.kv.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		stored = append(stored, v.Value()...)
	}
	if bytes.Contains(stored, []byte("s3cr3t")) {
		t.Error("the checkpoint holds the proxy password")
	}
	if !bytes.Contains(stored, []byte("proxy.corp.example:3128")) {
		t.Error("the checkpoint holds no proxy address: the test checks nothing")
	}
}

// firstSeq is the events stream's first sequence.
func firstSeq(t *testing.T, js jetstream.JetStream) uint64 {
	t.Helper()
	s, err := js.Stream(context.Background(), event.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	return s.CachedInfo().State.FirstSeq
}

// A checkpoint the events stream has aged past. The bot's NATS user can
// keep a genuine checkpoint and put it back later (or the bot was down
// long). While every event after it is still in the stream, it is the
// bot's own state at its sequence: restored, the events after it
// replayed — its incidents kept although the events that opened them
// aged out (a full replay would have them again only once the agents
// restate). Once an event after it aged out, it is refused, the stream
// replayed in full: never a state with a hole in it.
func TestI30AttackCheckpointPastTheStreamsAge(t *testing.T) {
	ctx := context.Background()
	const source = "mgmt-ckpt-aged"
	// The stream keeps 40 KiB of events: publishing more ages the oldest
	// out, one by one, whatever the clock.
	spec := bus.EventsStream(0, 0)
	spec.MaxBytes = 40 << 10
	s := startShippedWith(t, source, spec)
	now := time.Now()
	if err := scenario.Publish(ctx, s.agent.JS, nodeEvents(t, source, "clusters", "early", now, restartNodes-1)); err != nil {
		t.Fatal(err)
	}
	if first := firstSeq(t, s.bot.JS); first != 1 {
		t.Fatalf("the first cluster's events do not fit in the stream (first sequence %d)", first)
	}
	store, _ := checkpointStore(t, s.kv)
	cfg := restartConfig()
	cfg.Checkpoints, cfg.CheckpointEvery = store, -1
	cfg.Leader = func() bool { return false } // writes and sends nothing by itself
	writer := startBot(t, s.bot.JS, slackrec.New(t), cfg)
	waitApplied(t, s.bot.JS, writer.bot)
	m, err := writer.bot.WriteCheckpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	writer.cancel()
	early := diagnose.Key{Source: source, Cluster: event.ClusterRef{Namespace: "clusters", Name: "early"}}

	// publishUntil publishes the facts of healthy clusters, one event at
	// a time, until the stream's first sequence passes after.
	fleet := 0
	var queue []event.Event
	publishUntil := func(after uint64) {
		t.Helper()
		for firstSeq(t, s.bot.JS) <= after {
			if len(queue) == 0 {
				queue = nodeEvents(t, source, "clusters", "late-"+strconv.Itoa(fleet), now)
				fleet++
			}
			if err := scenario.Publish(ctx, s.agent.JS, queue[:1]); err != nil {
				t.Fatal(err)
			}
			queue = queue[1:]
		}
	}
	start := func(name string) (*botRun, *syncbuf.Buffer) {
		log, buf := capturedLog(t, name)
		b := runBotLogged(t, s.bot.JS, slackrec.New(t), cfg, nil, nil, log)
		waitApplied(t, s.bot.JS, b.bot)
		return b, buf
	}

	// The events it covers aged out, not one after it.
	publishUntil(1)
	if first := firstSeq(t, s.bot.JS); first > m.Seq+1 {
		t.Fatalf("the stream aged past the checkpoint at once (first sequence %d, checkpoint %d)", first, m.Seq)
	}
	b, buf := start("restored")
	if !logged(buf, "info", "checkpoint restored") {
		t.Error("a checkpoint with every event after it in the stream was not restored")
	}
	if !slices.ContainsFunc(b.bot.Incidents(), func(inc bot.Incident) bool { return inc.Cluster == early && inc.Open() }) {
		t.Error("restored, the bot lost the incident whose events aged out")
	}
	b.cancel()

	// An event after it aged out.
	publishUntil(m.Seq + 1)
	b, buf = start("refused")
	if logged(buf, "info", "checkpoint restored") || !logged(buf, "warn", "checkpoint older than the events stream ignored") {
		t.Error("a checkpoint whose next events aged out was not refused as older than the stream")
	}
	if b.bot.Applied() != lastSeq(t, s.bot.JS) {
		t.Errorf("applied %d, the stream ends at %d", b.bot.Applied(), lastSeq(t, s.bot.JS))
	}
}
