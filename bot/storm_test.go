package bot_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/hcpbot/hcpbot/bot"
	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/bot/command"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/bot/notify"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv"
	"github.com/hcpbot/hcpbot/internal/testenv/chaosreport"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
)

// botRun is one bot process: the correlator and its Slack notifier.
type botRun struct {
	bot    *bot.Bot
	reg    *prometheus.Registry
	cancel func()
	slack  *notify.Slack
}

// startBot runs a bot with its own notifier on js, like one `hcpbot bot`.
func startBot(t *testing.T, js jetstream.JetStream, rec *slackrec.Recorder, cfg bot.Config) *botRun {
	t.Helper()
	return startBotWith(t, js, rec, cfg, nil)
}

// startBotWith is startBot with before run on the bot before it starts
// replaying the stream (cmd/hcpbot feeds it the approval store's fixes).
func startBotWith(t *testing.T, js jetstream.JetStream, rec *slackrec.Recorder, cfg bot.Config, before func(*bot.Bot)) *botRun {
	t.Helper()
	return runBot(t, js, rec, cfg, before, nil)
}

// runBot is startBotWith with the bot handing its notifications to
// wrap(notifier) when wrap is not nil (the notifier still delivers them).
func runBot(t *testing.T, js jetstream.JetStream, rec *slackrec.Recorder, cfg bot.Config, before func(*bot.Bot), wrap func(notify.Notifier) notify.Notifier) *botRun {
	t.Helper()
	return runBotLogged(t, js, rec, cfg, before, wrap, natstest.Logger(t))
}

// runBotLogged is runBot logging to log.
func runBotLogged(t *testing.T, js jetstream.JetStream, rec *slackrec.Recorder, cfg bot.Config, before func(*bot.Bot), wrap func(notify.Notifier) notify.Notifier, log zerolog.Logger) *botRun {
	t.Helper()
	return runBotSlack(t, js, rec, cfg, before, wrap, log, nil)
}

// runBotSlack is runBotLogged with the notifier's configuration adjusted
// by slackCfg when it is not nil.
func runBotSlack(t *testing.T, js jetstream.JetStream, rec *slackrec.Recorder, cfg bot.Config, before func(*bot.Bot), wrap func(notify.Notifier) notify.Notifier, log zerolog.Logger, slackCfg func(*notify.SlackConfig)) *botRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	store, err := notify.NewKVStore(ctx, js, notify.KVConfig{})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	sc := notify.SlackConfig{Client: notify.NewSlackClient("xoxb-test", rec.APIURL(), nil), Store: store, Log: log, Registerer: reg}
	if slackCfg != nil {
		slackCfg(&sc)
	}
	n, err := notify.NewSlack(sc)
	if err != nil {
		t.Fatal(err)
	}
	var out notify.Notifier = n
	if wrap != nil {
		out = wrap(n)
	}
	b := bot.New(cfg, js, out, reg, log)
	if before != nil {
		before(b)
	}
	var wg sync.WaitGroup
	wg.Go(func() { _ = n.Run(ctx) })
	wg.Go(func() { _ = b.Run(ctx) })
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(stop)
	return &botRun{bot: b, reg: reg, cancel: stop, slack: n}
}

// logOnFailure logs, if t fails, the messages of the channel and the
// incidents r knows.
func logOnFailure(t *testing.T, rec *slackrec.Recorder, r *botRun) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, m := range rec.Messages(channel) {
			t.Logf("message %s thread=%q: %.200s", m.TS, m.ThreadTS, m.Text)
		}
		for _, inc := range r.bot.Incidents() {
			t.Logf("incident %s %s open=%v storm=%q", inc.Key, inc.Cluster, inc.Open(), inc.Storm)
		}
	})
}

func natsJS(t *testing.T) jetstream.JetStream {
	t.Helper()
	srv := natstest.RunServer(t)
	conn, err := bus.Connect(context.Background(), bus.Config{URLs: []string{srv.ClientURL()}}, natstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	if _, err := bus.EnsureStream(context.Background(), conn.JS, bus.EventsStream(0, 0)); err != nil {
		t.Fatal(err)
	}
	return conn.JS
}

func stormConfig() bot.Config {
	cfg := testConfig()
	cfg.GroupWait = 2 * time.Second
	cfg.GroupInterval = 2 * time.Second
	cfg.StormThreshold = 20
	return cfg
}

func roots(rec *slackrec.Recorder) []slackrec.Message { return rootsIn(rec, channel) }

// rootsIn returns the messages of ch that are not thread replies.
func rootsIn(rec *slackrec.Recorder, ch string) []slackrec.Message {
	var out []slackrec.Message
	for _, m := range rec.Messages(ch) {
		if m.ThreadTS == "" {
			out = append(out, m)
		}
	}
	return out
}

// listed counts how often each storm member appears in the thread of ts.
func listed(rec *slackrec.Recorder, ts string) map[string]int {
	out := map[string]int{}
	for _, m := range rec.Messages(channel) {
		if m.ThreadTS != ts {
			continue
		}
		for _, line := range strings.Split(m.Text, "\n") {
			if i := strings.Index(line, "/hc-"); i >= 0 {
				name := line[i+1:]
				name = name[:strings.IndexAny(name, "`")]
				out[name]++
			}
		}
	}
	return out
}

// 200 hosted clusters with 10 NotReady nodes each behind the same proxy
// give ONE storm message naming the shared cause and the count, with every
// cluster listed in its thread, within the recorder's rate limit, and every
// incident reachable. A bot killed mid-storm and restarted posts no
// duplicate root.
func TestStormOneMessage(t *testing.T) {
	ctx := context.Background()
	js := natsJS(t)
	rec := slackrec.New(t)
	first := startBot(t, js, rec, stormConfig())

	const clusters = 200
	events, err := scenario.Storm("mgmt-storm", "clusters", clusters, 10, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// The first half, then the bot dies while the storm goes on.
	half := len(events) / 2
	if err := scenario.Publish(ctx, js, events[:half]); err != nil {
		t.Fatal(err)
	}
	var storm slackrec.Message
	rec.WaitFor(t, 30*time.Second, func(r *slackrec.Recorder) bool {
		for _, m := range roots(r) {
			if strings.Contains(m.Text, "STORM") {
				storm = m
				return true
			}
		}
		return false
	})
	if !strings.Contains(string(storm.Blocks), scenario.StormProxy) {
		t.Errorf("storm message does not name the shared proxy:\n%s", storm.Blocks)
	}
	first.cancel()

	if err := scenario.Publish(ctx, js, events[half:]); err != nil {
		t.Fatal(err)
	}
	second := startBot(t, js, rec, stormConfig())
	rec.WaitFor(t, 60*time.Second, func(r *slackrec.Recorder) bool {
		m, ok := r.Message(channel, storm.TS)
		return ok && strings.Contains(m.Text, fmt.Sprintf("%d hosted clusters", clusters)) && len(listed(r, storm.TS)) == clusters
	})

	if rs := roots(rec); len(rs) != 1 {
		for _, m := range rs {
			t.Logf("root: %s", m.Text)
		}
		t.Errorf("%d root messages, want the storm only", len(rs))
	}
	twice := 0
	for _, n := range listed(rec, storm.TS) {
		if n > 1 {
			twice++
		}
	}
	// A page cut short by the kill may be listed again; never more.
	if twice > bot.DefaultStormPage {
		t.Errorf("%d clusters listed more than once in the storm thread", twice)
	}
	if v := rec.Violations(); v != 0 {
		t.Errorf("%d rate-limit violations", v)
	}
	open := 0
	for _, inc := range second.bot.Incidents() {
		if inc.Open() && inc.Storm != "" {
			open++
		}
	}
	if open != clusters {
		t.Errorf("%d open incidents in the storm, want %d", open, clusters)
	}
	cmds := &command.Handler{Bot: second.bot}
	if r := cmds.HandleCommand(ctx, chatops.Request{Command: chatops.Incidents{}}); !strings.Contains(r.Text, fmt.Sprintf("storm of %d clusters", clusters)) {
		t.Errorf("/hcp incidents does not show the storm:\n%s", r.Text)
	}
	if r := cmds.HandleCommand(ctx, chatops.Request{Command: chatops.Diagnose{Cluster: chatops.ClusterRef{Namespace: "clusters", Name: "hc-137"}}}); !strings.Contains(r.Text, "tunnelled") {
		t.Errorf("/hcp diagnose of a storm member:\n%s", r.Text)
	}
	t.Logf("Slack calls: %d postMessage, %d update; %d clusters listed twice", len(rec.CallsTo("chat.postMessage")), len(rec.CallsTo("chat.update")), twice)
}

// Below the threshold incidents are posted one by one; a silence keeps a
// cluster quiet; resolution updates the message.
func TestGroupingSilenceAndResolution(t *testing.T) {
	ctx := context.Background()
	js := natsJS(t)
	rec := slackrec.New(t)
	var mu sync.Mutex
	silenced := map[string]bool{}
	cfg := stormConfig()
	cfg.Silenced = func(cluster, incident string, now time.Time) (bot.SilenceInfo, bool) {
		mu.Lock()
		defer mu.Unlock()
		if silenced[cluster] {
			return bot.SilenceInfo{ID: "sil-1", By: "U0OPS", Reason: "maintenance", Until: now.Add(time.Hour)}, true
		}
		return bot.SilenceInfo{}, false
	}
	mu.Lock()
	silenced["mgmt-few/clusters/hc-2"] = true
	mu.Unlock()
	r := startBot(t, js, rec, cfg)

	events, err := scenario.Storm("mgmt-few", "clusters", 3, 2, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := scenario.Publish(ctx, js, events); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, 30*time.Second, func(r *slackrec.Recorder) bool { return len(roots(r)) == 2 })
	for _, m := range roots(rec) {
		if strings.Contains(m.Text, "hc-2") || strings.Contains(m.Text, "STORM") {
			t.Errorf("unexpected message: %s", m.Text)
		}
	}
	testenv.Eventually(t, 10*time.Second, "three open incidents", func() bool {
		n := 0
		for _, inc := range r.bot.Incidents() {
			if inc.Open() {
				n++
			}
		}
		return n == 3
	})

	// Lifting the silence posts the cluster.
	mu.Lock()
	delete(silenced, "mgmt-few/clusters/hc-2")
	mu.Unlock()
	rec.WaitFor(t, 30*time.Second, func(r *slackrec.Recorder) bool { return len(roots(r)) == 3 })

	// hc-0 recovers: its message turns resolved, with a thread reply.
	recovered, err := recoverEvents("mgmt-few", "clusters", "hc-0", 2, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := scenario.Publish(ctx, js, recovered); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, 30*time.Second, func(r *slackrec.Recorder) bool {
		for _, m := range roots(r) {
			if strings.Contains(m.Text, "hc-0") && strings.Contains(m.Text, "RESOLVED") {
				return true
			}
		}
		return false
	})
	if v := rec.Violations(); v != 0 {
		t.Errorf("%d rate-limit violations", v)
	}
}

// recoverEvents are the facts of a Storm cluster that recovers: nodes
// Ready, the operator running, noProxy fixed.
func recoverEvents(source, namespace, name string, nodes int, at time.Time) ([]event.Event, error) {
	ref := event.ClusterRef{Namespace: namespace, Name: name}
	var out []event.Event
	for n := range nodes {
		node := fmt.Sprintf("%s-np-%d", name, n)
		e, err := event.New(source, &ref, event.ObjectRef{Kind: "Node", Name: node, UID: "uid-" + node, Hosted: true},
			event.NodeReadiness{Node: node, Ready: event.ConditionTrue, Reason: "KubeletReady", LastTransitionTime: at},
			event.TransitionAt("Ready=True", at), at)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	pod := "service-ca-operator-6d5f7b9c4-x2x9z"
	e, err := event.New(source, &ref, event.ObjectRef{Kind: "Pod", Namespace: "openshift-service-ca-operator", Name: pod, UID: "uid-sca-" + name, Hosted: true},
		event.PodCrashLoop{Namespace: "openshift-service-ca-operator", Pod: pod, Container: "service-ca-operator", RestartCount: 8, Cleared: true},
		"cleared:8", at)
	if err != nil {
		return nil, err
	}
	return append(out, e), nil
}

// Two replicas share one NATS: only the lease holder posts, so every
// incident and storm has one root; when the leader is killed the other
// replica carries on (here: resolves an incident) within the lease TTL.
func TestChaosTwoBotReplicas(t *testing.T) {
	ctx := context.Background()
	js := natsJS(t)
	rec := slackrec.New(t)
	replica := func(id string) (*botRun, *bus.Lease) {
		lease, err := bus.NewLease(ctx, js, "bot", id, natstest.Logger(t), bus.WithLeaseTTL(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		lctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() { _ = lease.Run(lctx) })
		cfg := stormConfig()
		cfg.Leader = lease.Leader
		r := startBot(t, js, rec, cfg)
		stopBot := r.cancel
		r.cancel = func() { stopBot(); cancel(); wg.Wait() }
		t.Cleanup(r.cancel)
		return r, lease
	}
	a, leaseA := replica("a")
	b, leaseB := replica("b")

	// The storm a minute ago, the two other incidents now: beyond its
	// window, so they stay on their own.
	stormEvents, err := scenario.Storm("mgmt-ha", "storm", 40, 3, time.Now().Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	few, err := scenario.Storm("mgmt-ha-2", "few", 2, 2, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := scenario.Publish(ctx, js, append(stormEvents, few...)); err != nil {
		t.Fatal(err)
	}
	logOnFailure(t, rec, b)
	rec.WaitFor(t, 30*time.Second, func(r *slackrec.Recorder) bool { return len(roots(r)) >= 3 })

	leader, follower := a, b
	if leaseB.Leader() {
		leader, follower = b, a
	} else if !leaseA.Leader() {
		t.Fatal("no leader after the first posts")
	}
	leader.cancel() // its lease is released on the way out, like a rolling update
	stopped := time.Now()
	recovered, err := recoverEvents("mgmt-ha-2", "few", "hc-0", 2, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := scenario.Publish(ctx, js, recovered); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, 30*time.Second, func(r *slackrec.Recorder) bool {
		for _, m := range roots(r) {
			if strings.Contains(m.Text, "few/hc-0") && strings.Contains(m.Text, "RESOLVED") {
				return true
			}
		}
		return false
	})
	if rs := roots(rec); len(rs) != 3 {
		for _, m := range rs {
			t.Logf("root: %s", m.Text)
		}
		t.Errorf("%d roots, want 3 (one storm, two incidents)", len(rs))
	}
	if v := rec.Violations(); v != 0 {
		t.Errorf("%d rate-limit violations", v)
	}
	if n := len(follower.bot.Incidents()); n != 42 {
		t.Errorf("the surviving replica knows %d incidents, want 42", n)
	}
	chaosreport.Log(t, "two-bot-replicas", map[string]any{
		"replicas": 2, "incidents": 42, "root_posts": len(roots(rec)), "want_roots": 3,
		"handover_to_update_s": time.Since(stopped).Seconds(), "rate_violations": rec.Violations(),
	})
}

// Routes by HostedCluster labels: a prod cluster's incident goes to the
// prod channel, the other one to the default channel.
func TestRouteByLabels(t *testing.T) {
	ctx := context.Background()
	js := natsJS(t)
	rec := slackrec.New(t)
	cfg := testConfig()
	cfg.Route = func(k diagnose.Key, _ string, labels map[string]string) string {
		if labels["env"] == "prod" {
			return "C0PROD"
		}
		return ""
	}
	startBot(t, js, rec, cfg)
	events, err := scenario.Storm("mgmt-route", "clusters", 2, 1, time.Now(), scenario.StormLabels(func(i int) map[string]string {
		if i == 0 {
			return map[string]string{"env": "prod"}
		}
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	if err := scenario.Publish(ctx, js, events); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, 30*time.Second, func(r *slackrec.Recorder) bool {
		return len(rootsIn(r, "C0PROD")) == 1 && len(rootsIn(r, channel)) == 1
	})
	if m := rootsIn(rec, "C0PROD")[0]; !strings.Contains(m.Text, "hc-0") {
		t.Errorf("prod channel got %q", m.Text)
	}
}

// A burst of six unrelated failures on six clusters, each on its own
// management cluster and all behind the fleet's proxy (scenario.Burst),
// published back to back as six agents reporting in the same second: far
// fewer than the storm threshold, so each is posted on its own once the
// group wait has passed, not after the storm window (30 s: the old rule
// held all six for it, five sharing the proxy being "a quarter of the
// threshold"). Measured from each cluster's publication to the bot
// handing its first message to the notifier, and to the recorder
// accepting it under Slack's per-channel post limit (1/s, burst 3): the
// notifier posts the six roots before their thread replies
// (notify.DefaultReplyPatience), so even the sixth, four seconds into
// the limit, is up within the group wait + 5 s.
func TestUnrelatedBurstPostsAfterGroupWait(t *testing.T) {
	ctx := context.Background()
	js := natsJS(t)
	rec := slackrec.New(t)
	cfg := stormConfig()
	cfg.GroupWait = time.Second
	handed := &handOff{first: map[string]time.Time{}}
	runBot(t, js, rec, cfg, nil, func(n notify.Notifier) notify.Notifier { handed.Notifier = n; return handed })

	const clusters = 6
	bound := cfg.GroupWait + 5*time.Second
	burst, err := scenario.Burst("mgmt-burst", clusters, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	published := make([]time.Time, clusters)
	for i, evs := range burst {
		published[i] = time.Now()
		if err := scenario.Publish(ctx, js, evs); err != nil {
			t.Fatal(err)
		}
	}
	var posted []time.Time
	rec.WaitFor(t, 45*time.Second, func(r *slackrec.Recorder) bool {
		posted = firstRoots(r, clusters)
		return !slices.Contains(posted, time.Time{})
	})
	for i := range clusters {
		toBot, toSlack := handed.at(fmt.Sprintf("/hc-%d", i)).Sub(published[i]), posted[i].Sub(published[i])
		t.Logf("hc-%d (mgmt-burst-%d): handed to the notifier %.2fs, posted %.2fs after publication (group wait %v)",
			i, i, toBot.Seconds(), toSlack.Seconds(), cfg.GroupWait)
		if toBot > bound {
			t.Errorf("hc-%d handed to the notifier %v after publication, want within group wait + 5s = %v", i, toBot, bound)
		}
		if toSlack > bound {
			t.Errorf("hc-%d posted %v after publication, want within group wait + 5s = %v", i, toSlack, bound)
		}
	}
	if rs := roots(rec); len(rs) != clusters {
		t.Errorf("%d root messages, want one per cluster", len(rs))
	}
	for _, m := range roots(rec) {
		if strings.Contains(m.Text, "STORM") {
			t.Errorf("unrelated failures made a storm: %s", m.Text)
		}
	}
}

// handOff records when the bot first handed a rendering naming each
// cluster to the notifier.
type handOff struct {
	notify.Notifier
	mu    sync.Mutex
	first map[string]time.Time // by rendering text
}

func (h *handOff) Upsert(ctx context.Context, m notify.Message) error {
	h.mu.Lock()
	if _, ok := h.first[m.Text]; !ok {
		h.first[m.Text] = time.Now()
	}
	h.mu.Unlock()
	return h.Notifier.Upsert(ctx, m)
}

// at is when a rendering whose text holds name was first handed over.
func (h *handOff) at(name string) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	var first time.Time
	for text, at := range h.first {
		if strings.Contains(text, name) && (first.IsZero() || at.Before(first)) {
			first = at
		}
	}
	return first
}

// firstRoots returns when the recorder first accepted a root message of
// each of the clusters hc-0 … hc-<n-1>; zero for one not posted yet.
func firstRoots(r *slackrec.Recorder, n int) []time.Time {
	out := make([]time.Time, n)
	for _, c := range r.CallsTo("chat.postMessage") {
		if c.Status != 200 || c.Form.Get("thread_ts") != "" {
			continue
		}
		for i := range out {
			if out[i].IsZero() && strings.Contains(c.Form.Get("text"), fmt.Sprintf("/hc-%d", i)) {
				out[i] = c.Time
			}
		}
	}
	return out
}
