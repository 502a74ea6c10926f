package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"sort"
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
	"github.com/hcpbot/hcpbot/bot/notify"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/configs"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
)

// B3 — Storm: 500 hosted clusters × 10 nodes NotReady plus a crashlooping
// service-ca-operator each, published within about a second, all routed to
// one channel. The agents' events go straight into JetStream
// (scenario.Storm + scenario.Publish): 500 hosted API servers do not fit on
// one machine. Everything after the stream is the product: bot.New/Run with
// the production defaults of configs (group wait/interval, resolve
// timeout, storm threshold/window/page), the real Slack notifier with its
// NATS KV store, against the Slack recorder with Slack's posting limits.
//
// Physical references in the same run: the same events published to and
// consumed from JetStream alone (no bot), and the Slack floor — what the
// recorder's per-channel post limit allows and how soon the storm's thread
// could be complete under it.
const (
	b3Channel = "C0B3STORM"
	b3Source  = "mgmt-b3"
	b3NS      = "clusters"
	b3Nodes   = 10
	// Slack's limits as the recorder enforces them (its defaults, spelled
	// out so the floor below is computed from the same numbers):
	// chat.postMessage 1/s per channel with a burst of 3, chat.update
	// Tier 3 (50/min, burst 10) per workspace.
	b3PostRate    = 1.0
	b3PostBurst   = 3
	b3UpdateRate  = 50.0 / 60
	b3UpdateBurst = 10
	// b3Observe is how long Slack calls are counted: the first minute.
	b3Observe = time.Minute
	// b3Deadline bounds the wait for the storm's thread to list everyone.
	b3Deadline = 3 * time.Minute
)

var b3Once sync.Once

func BenchmarkB3Storm(b *testing.B) {
	// One run, whatever b.N: the scenario is minutes of wall time, and a
	// second storm on the same process would measure a warm bot.
	ran := false
	b3Once.Do(func() { ran = true; b3Storm(b) })
	if !ran {
		b.Log("B3 runs once per process; see the first run's result")
	}
}

func b3Storm(b *testing.B) {
	clusters := pick(500, 60)
	cfg := bot.Config{
		Channel:        b3Channel,
		GroupWait:      configs.DefaultGroupWait,
		GroupInterval:  configs.DefaultGroupInterval,
		ResolveTimeout: configs.DefaultResolveTimeout,
		StormThreshold: configs.DefaultStormThreshold,
		StormWindow:    configs.DefaultStormWindow,
		StormPage:      bot.DefaultStormPage,
	}
	r := newResult("B3", "Storm: 500 clusters, one channel", map[string]any{
		"clusters": clusters, "nodes_per_cluster": b3Nodes, "channels": 1,
		"events":       clusters * (b3Nodes + 2),
		"group_wait_s": cfg.GroupWait.Seconds(), "group_interval_s": cfg.GroupInterval.Seconds(),
		"storm_threshold": cfg.StormThreshold, "storm_window_s": cfg.StormWindow.Seconds(), "storm_page": cfg.StormPage,
		"slack_post_rate_per_s": b3PostRate, "slack_post_burst": b3PostBurst,
		"slack_update_rate_per_min": b3UpdateRate * 60, "slack_update_burst": b3UpdateBurst,
	})
	defer save(b, r)
	ctx := context.Background()
	log := natstest.Logger(b)

	// --- Correlator memory alone: the same events straight into Handle,
	// no NATS and no Slack in the heap, at 1× and 2× the clusters.
	perInc1, heap1 := b3CorrelatorHeap(b, clusters)
	perInc2, heap2 := b3CorrelatorHeap(b, 2*clusters)
	r.Add("correlator_bytes_per_incident", perInc1, "B/incident")
	r.Add("correlator_bytes_per_incident_2x", perInc2, "B/incident")
	r.Add("correlator_heap", float64(heap1), "B")
	r.Add("correlator_heap_2x", float64(heap2), "B")
	if perInc1 > 0 {
		r.Add("correlator_memory_2x_vs_1x", perInc2/perInc1, "x (per incident; 1 = linear)")
	}

	// --- Physical reference: JetStream alone, same events, same publisher.
	refEvents := b3Events(b, clusters, time.Now())
	refPub, refAll := b3JetStreamAlone(b, refEvents)
	r.Add("ref_jetstream_publish_s", refPub.Seconds(), "s")
	r.Add("ref_jetstream_publish_consume_s", refAll.Seconds(), "s")

	// --- The product: NATS on disk, bot, notifier, recorder.
	srv := natstest.RunServer(b)
	conn, err := bus.Connect(ctx, bus.Config{URLs: []string{srv.ClientURL()}, Name: "b3"}, log)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(conn.Close)
	if _, err := bus.EnsureStream(ctx, conn.JS, bus.EventsStream(0, 0)); err != nil {
		b.Fatal(err)
	}
	rec, n, reg := b3Slack(ctx, b, conn.JS, log)
	bt := bot.New(cfg, conn.JS, n, reg, log)
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = n.Run(runCtx) })
	wg.Go(func() { _ = bt.Run(runCtx) })
	// Registered after the server and the recorder: runs before them.
	b.Cleanup(func() { cancel(); wg.Wait() })

	events := b3Events(b, clusters, time.Now())
	heapBefore := heapInUse()
	stopCPU := cpuProfile(b, r, "B3")
	cpuStopped := false
	defer func() {
		if !cpuStopped {
			stopCPU()
		}
	}()

	t0 := time.Now()
	if err := scenario.Publish(ctx, conn.JS, events); err != nil {
		b.Fatal(err)
	}
	published := time.Since(t0)
	r.Add("publish_s", published.Seconds(), "s")

	// All events consumed and every incident open: the correlator's peak.
	var consumed time.Duration
	openAt := time.Duration(0)
	for deadline := t0.Add(b3Deadline); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if consumed == 0 && counterSum(reg, "hcpbot_bot_events_consumed_total") >= float64(len(events)) {
			consumed = time.Since(t0)
		}
		if openAt == 0 && b3Open(bt) >= clusters {
			openAt = time.Since(t0)
		}
		if consumed > 0 && openAt > 0 {
			break
		}
	}
	if consumed == 0 || openAt == 0 {
		r.Note("not all events consumed (%v) or incidents open (%d of %d) within %v", consumed, b3Open(bt), clusters, b3Deadline)
	}
	r.Add("bot_consume_s", consumed.Seconds(), "s")
	r.Add("all_incidents_open_s", openAt.Seconds(), "s")
	if refAll > 0 {
		r.Add("bot_consume_vs_jetstream", consumed.Seconds()/refAll.Seconds(), "x")
	}
	heapPeak := heapInUse()
	open := b3Open(bt)
	heapProfile(b, r, "B3")
	r.Add("heap_before", float64(heapBefore), "B")
	r.Add("heap_all_open", float64(heapPeak), "B")
	if open > 0 {
		r.Add("process_bytes_per_open_incident", (float64(heapPeak)-float64(heapBefore))/float64(open), "B/incident")
	}
	r.Add("rss_all_open", float64(rss()), "B")

	// The storm's root, then its thread listing everyone; Slack calls are
	// counted over the whole first minute whatever happens.
	stormTS := ""
	want := fmt.Sprintf("%d hosted clusters", clusters)
	complete := func() bool {
		if stormTS == "" {
			for _, m := range rec.Messages(b3Channel) {
				if m.ThreadTS == "" && strings.Contains(m.Text, "STORM") {
					stormTS = m.TS
					break
				}
			}
		}
		if stormTS == "" {
			return false
		}
		m, ok := rec.Message(b3Channel, stormTS)
		return ok && strings.Contains(m.Text, want) && len(b3Listed(rec, stormTS)) >= clusters
	}
	for deadline := t0.Add(b3Deadline); !complete() && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
	}
	stopCPU()
	cpuStopped = true
	if d := time.Until(t0.Add(b3Observe)); d > 0 {
		time.Sleep(d)
	}
	// A moment for calls answered right at the minute to be recorded.
	time.Sleep(200 * time.Millisecond)

	calls := rec.Calls()
	firstMinute, byMethod := 0, map[string]int{}
	for _, c := range calls {
		if !c.Time.Before(t0) && c.Time.Before(t0.Add(b3Observe)) {
			firstMinute++
			byMethod[c.Method]++
		}
	}
	r.Add("slack_calls_first_minute", float64(firstMinute), "calls")
	r.Note("Slack calls in the first minute by method: %s", b3Counts(byMethod))

	// Storm timings from the recorded calls (their arrival at "Slack").
	stormPosted, threadDone, countDone := b3StormTimes(rec, calls, stormTS, want, clusters, t0)
	if stormTS == "" {
		r.Note("no storm message within %v", b3Deadline)
	} else {
		root, _ := rec.Message(b3Channel, stormTS)
		names := strings.Contains(string(root.Blocks), scenario.StormProxy) || strings.Contains(root.Text, scenario.StormProxy)
		r.Add("storm_names_shared_cause", b3Bool(names), "bool")
		r.Add("storm_names_count", b3Bool(strings.Contains(root.Text, want)), "bool")
		if !names {
			r.Note("the storm message does not name the shared proxy %s", scenario.StormProxy)
		}
		r.Note("storm message: %q; sections: %q", root.Text, b3BlockTexts(root.Blocks))
	}
	r.Add("storm_message_s", b3OrMissing(r, stormPosted, "storm_message_s"), "s")
	r.Add("storm_count_complete_s", b3OrMissing(r, countDone, "storm_count_complete_s"), "s")
	r.Add("thread_complete_s", b3OrMissing(r, threadDone, "thread_complete_s"), "s")
	listedN := b3Listed(rec, stormTS)
	r.Add("clusters_listed_in_thread", float64(len(listedN)), "clusters")
	if stormTS != "" {
		// What one page costs in text, to size pages against Slack's limits.
		maxChars, lines, chars := 0, 0, 0
		for _, m := range rec.Messages(b3Channel) {
			if m.ThreadTS != stormTS || m.TS == stormTS {
				continue
			}
			maxChars = max(maxChars, len(m.Text))
			for _, l := range strings.Split(m.Text, "\n") {
				if len(b3ListedIn(l)) > 0 {
					lines++
					chars += len(l) + 1
				}
			}
		}
		r.Add("storm_page_chars_max", float64(maxChars), "B")
		if lines > 0 {
			r.Add("storm_member_line_chars", float64(chars)/float64(lines), "B/cluster")
		}
		var at []string
		for _, c := range calls {
			if c.Method == "chat.postMessage" && c.Status == 200 && (c.Form.Get("thread_ts") == stormTS || strings.Contains(c.Form.Get("text"), "STORM")) {
				at = append(at, fmt.Sprintf("%.2f", c.Time.Sub(t0).Seconds()))
			}
		}
		r.Note("storm posts (root, then member pages) at s from first publish: %s", strings.Join(at, " "))
	}

	// Slack: rate limits and duplicates.
	r.Add("rate_limited_answers", float64(rec.RateLimited()), "429s")
	r.Add("rate_limit_violations", float64(rec.Violations()), "calls")
	dupRoots, dupReplies, roots, incRoots := b3Duplicates(rec)
	twice := 0
	for _, k := range listedN {
		if k > 1 {
			twice++
		}
	}
	r.Add("root_posts", float64(roots), "posts")
	r.Add("incident_root_posts", float64(incRoots), "posts")
	r.Add("duplicate_root_posts", float64(dupRoots), "posts")
	r.Add("duplicate_thread_posts", float64(dupReplies), "posts")
	r.Add("clusters_listed_twice", float64(twice), "clusters")
	r.Add("duplicates", float64(dupRoots+dupReplies+twice), "count")

	// Incidents lost: every cluster must have an open incident in the bot,
	// be counted by `/hcp incidents` (its storm's line with the full count,
	// or a line of its own) and answer `/hcp diagnose`.
	inBot, listed, diagnosed, reachable := b3Reachable(ctx, b, bt, clusters)
	r.Add("incidents_open_in_bot", float64(inBot), "incidents")
	r.Add("incidents_counted_by_command", float64(listed), "incidents")
	r.Add("incidents_diagnosable_by_command", float64(diagnosed), "incidents")
	r.Add("incidents_lost", float64(clusters-reachable), "incidents")

	// The Slack floor: what the recorder's limit allows per minute, and
	// the earliest the storm's thread could be complete under it.
	postsPerMin := 60*b3PostRate + b3PostBurst
	r.Add("slack_floor_posts_per_minute", postsPerMin, "calls/min")
	r.Add("slack_floor_calls_per_minute", postsPerMin+60*b3UpdateRate+b3UpdateBurst, "calls/min")
	posts := 1 + (clusters+cfg.StormPage-1)/cfg.StormPage
	floor := cfg.GroupWait.Seconds() + max(0, float64(posts-b3PostBurst))/b3PostRate
	r.Add("storm_posts_needed", float64(posts), "posts")
	r.Add("thread_floor_s", floor, "s")
	if v, ok := r.Value("thread_complete_s"); ok && v > 0 {
		r.Add("thread_complete_vs_floor", v/floor, "x")
	}
	r.Add("slack_calls_vs_floor", float64(firstMinute)/postsPerMin, "x (of the per-channel post budget)")
	r.Note("thread_floor_s = group wait %v + (%d posts − burst %d) / %.0f per s: 1 storm root + %d member pages of %d",
		cfg.GroupWait, posts, b3PostBurst, b3PostRate, posts-1, cfg.StormPage)
	r.Note("process_bytes_per_open_incident includes the embedded nats-server, the notifier's queues and the recorder's store; correlator_bytes_per_incident is the bot alone (Handle, no NATS, no Slack)")
	r.Note("bot metrics: %s", b3BotMetrics(b, reg))

	r.Want("storm_message_s", "<=", 10)
	r.Want("thread_complete_s", "<=", 10)
	r.Want("slack_calls_first_minute", "<=", 60)
	r.Want("rate_limit_violations", "<=", 0)
	r.Want("duplicates", "<=", 0)
	r.Want("incidents_lost", "<=", 0)

	for _, f := range []string{"storm_message_s", "thread_complete_s", "slack_calls_first_minute", "incidents_lost"} {
		if v, ok := r.Value(f); ok {
			b.ReportMetric(v, f)
		}
	}
}

// b3Slack is the notifier of B3's bots: the real Slack notifier with its
// NATS KV store on js, against a recorder of its own with Slack's posting
// limits (b3PostRate, b3UpdateRate), its metrics in reg.
func b3Slack(ctx context.Context, b *testing.B, js jetstream.JetStream, log zerolog.Logger) (*slackrec.Recorder, *notify.Slack, *prometheus.Registry) {
	b.Helper()
	rec := slackrec.New(b, slackrec.WithRate(b3PostRate, b3PostBurst), slackrec.WithUpdateRate(b3UpdateRate, b3UpdateBurst))
	store, err := notify.NewKVStore(ctx, js, notify.KVConfig{})
	if err != nil {
		b.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	n, err := notify.NewSlack(notify.SlackConfig{Client: notify.NewSlackClient("xoxb-bench", rec.APIURL(), nil), Store: store, Log: log, Registerer: reg})
	if err != nil {
		b.Fatal(err)
	}
	return rec, n, reg
}

// b3Events are the storm's events for clusters clusters.
func b3Events(b *testing.B, clusters int, start time.Time) []event.Event {
	b.Helper()
	evs, err := scenario.Storm(b3Source, b3NS, clusters, b3Nodes, start)
	if err != nil {
		b.Fatal(err)
	}
	return evs
}

// b3CorrelatorHeap feeds the storm's events to a bot of its own through
// Handle and returns the live heap it added per open incident, and in all.
func b3CorrelatorHeap(b *testing.B, clusters int) (float64, uint64) {
	b.Helper()
	evs := b3Events(b, clusters, time.Now())
	data := make([][]byte, len(evs))
	for i, e := range evs {
		d, err := event.Encode(e)
		if err != nil {
			b.Fatal(err)
		}
		data[i] = d
	}
	before := heapInUse()
	bt := bot.New(bot.Config{Channel: b3Channel}, nil, b3Discard{}, nil, zerolog.Nop())
	for _, d := range data {
		bt.Handle(context.Background(), d)
	}
	after := heapInUse()
	open := b3Open(bt)
	runtime.KeepAlive(data)
	runtime.KeepAlive(bt)
	if open == 0 || after < before {
		return 0, 0
	}
	return float64(after-before) / float64(open), after - before
}

// b3Discard is a notifier that drops everything (Handle never sends anyway).
type b3Discard struct{}

func (b3Discard) Upsert(context.Context, notify.Message) error { return nil }
func (b3Discard) Reply(context.Context, notify.Reply) error    { return nil }
func (b3Discard) Run(ctx context.Context) error                { <-ctx.Done(); return nil }

// b3JetStreamAlone publishes evs like the agents do to a JetStream of its
// own and consumes them with an ordered consumer, as the bot does, without
// doing anything with them: the time to publish, and to have consumed all.
func b3JetStreamAlone(b *testing.B, evs []event.Event) (publish, all time.Duration) {
	b.Helper()
	ctx := context.Background()
	srv := natstest.RunServer(b)
	defer srv.Shutdown()
	conn, err := bus.Connect(ctx, bus.Config{URLs: []string{srv.ClientURL()}, Name: "b3-ref"}, natstest.Logger(b))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	if _, err := bus.EnsureStream(ctx, conn.JS, bus.EventsStream(0, 0)); err != nil {
		b.Fatal(err)
	}
	cons, err := conn.JS.OrderedConsumer(ctx, event.StreamName, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{event.EventsStreamSubjects}, DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		b.Fatal(err)
	}
	want := int64(len(evs))
	done, got, cc := countTo(b, cons, want)
	defer cc.Stop()
	t0 := time.Now()
	if err := scenario.Publish(ctx, conn.JS, evs); err != nil {
		b.Fatal(err)
	}
	publish = time.Since(t0)
	select {
	case <-done:
	case <-time.After(time.Minute):
		b.Fatalf("JetStream alone: %d of %d events consumed within a minute", got.Load(), want)
	}
	return publish, time.Since(t0)
}

func b3Open(bt *bot.Bot) int {
	n := 0
	for _, inc := range bt.Incidents() {
		if inc.Open() {
			n++
		}
	}
	return n
}

// b3BotMetrics summarises the notifier's and the correlator's counters.
func b3BotMetrics(b *testing.B, reg *prometheus.Registry) string {
	b.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	var parts []string
	for _, mf := range mfs {
		switch mf.GetName() {
		case "hcpbot_slack_calls_total", "hcpbot_bot_notifications_total", "hcpbot_slack_coalesced_total",
			"hcpbot_slack_deduplicated_total", "hcpbot_slack_duplicate_roots_total", "hcpbot_bot_events_dead_lettered_total":
		default:
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			parts = append(parts, fmt.Sprintf("%s{%s}=%g", strings.TrimPrefix(mf.GetName(), "hcpbot_"), strings.Join(labels, ","), m.GetCounter().GetValue()))
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// b3Listed counts how often each cluster appears in the thread of ts.
func b3Listed(rec *slackrec.Recorder, ts string) map[string]int {
	out := map[string]int{}
	if ts == "" {
		return out
	}
	for _, m := range rec.Messages(b3Channel) {
		if m.ThreadTS == ts && m.TS != ts {
			for _, name := range b3ListedIn(m.Text) {
				out[name]++
			}
		}
	}
	return out
}

// b3ListedIn returns the clusters a storm page lists ("• `src/ns/hc-1` — …").
func b3ListedIn(text string) []string {
	var out []string
	prefix := "/" + b3NS + "/hc-"
	for _, line := range strings.Split(text, "\n") {
		i := strings.Index(line, prefix)
		if i < 0 {
			continue
		}
		name := line[i+len("/"+b3NS+"/"):]
		if j := strings.IndexAny(name, "` "); j >= 0 {
			name = name[:j]
		}
		out = append(out, name)
	}
	return out
}

// b3StormTimes reads, from the recorded calls, when the storm's root was
// first posted, when its thread listed every cluster, and when its root
// first showed the full count; each from t0, 0 when it did not happen.
func b3StormTimes(rec *slackrec.Recorder, calls []slackrec.Call, ts, want string, clusters int, t0 time.Time) (posted, thread, count time.Duration) {
	if ts == "" {
		return
	}
	root, _ := rec.Message(b3Channel, ts)
	seen := map[string]bool{}
	for _, c := range calls {
		if c.Status != 200 || c.Channel != b3Channel {
			continue
		}
		text := c.Form.Get("text")
		switch {
		case c.Method == "chat.postMessage" && c.Form.Get("thread_ts") == "" && posted == 0 && strings.Contains(text, "STORM") && b3SameMeta(c, root):
			posted = c.Time.Sub(t0)
			if strings.Contains(text, want) && count == 0 {
				count = posted
			}
		case c.Method == "chat.update" && c.Form.Get("ts") == ts && count == 0 && strings.Contains(text, want):
			count = c.Time.Sub(t0)
		case c.Method == "chat.postMessage" && c.Form.Get("thread_ts") == ts && thread == 0:
			for _, name := range b3ListedIn(text) {
				seen[name] = true
			}
			if len(seen) >= clusters {
				thread = c.Time.Sub(t0)
			}
		}
	}
	return
}

// b3SameMeta reports whether a post call carried the metadata of m.
func b3SameMeta(c slackrec.Call, m slackrec.Message) bool {
	k1, _ := b3Meta(json.RawMessage(c.Form.Get("metadata")))
	k2, _ := b3Meta(m.Metadata)
	return k1 == k2
}

// b3Meta returns the notifier's key and reply id from message metadata.
func b3Meta(raw json.RawMessage) (key, reply string) {
	var md struct {
		Payload map[string]any `json:"event_payload"`
	}
	if len(raw) == 0 || json.Unmarshal(raw, &md) != nil {
		return "", ""
	}
	key, _ = md.Payload["key"].(string)
	reply, _ = md.Payload["reply"].(string)
	return key, reply
}

// b3Duplicates counts second top-level posts of one key and second thread
// posts of one key and reply id (by metadata, else by text), the
// top-level posts, and those that are incidents rather than the storm.
func b3Duplicates(rec *slackrec.Recorder) (dupRoots, dupReplies, roots, incidentRoots int) {
	return duplicatesIn(rec, b3Channel)
}

// duplicatesIn is b3Duplicates for the messages of channel.
func duplicatesIn(rec *slackrec.Recorder, channel string) (dupRoots, dupReplies, roots, incidentRoots int) {
	rootSeen, replySeen := map[string]int{}, map[string]int{}
	for _, m := range rec.Messages(channel) {
		if m.Ephemeral {
			continue
		}
		key, reply := b3Meta(m.Metadata)
		if m.ThreadTS == "" || m.ThreadTS == m.TS {
			roots++
			if !strings.Contains(m.Text, "STORM") {
				incidentRoots++
			}
			id := "key:" + key
			if key == "" {
				id = "text:" + m.Text
			}
			if rootSeen[id]++; rootSeen[id] > 1 {
				dupRoots++
			}
			continue
		}
		id := m.ThreadTS + "|key:" + key + "|reply:" + reply
		if key == "" || reply == "" {
			id = m.ThreadTS + "|text:" + m.Text
		}
		if replySeen[id]++; replySeen[id] > 1 {
			dupReplies++
		}
	}
	return
}

// b3Reachable checks every cluster through the bot and the command path:
// an open incident, counted by `/hcp incidents`, and `/hcp diagnose`
// answering with its diagnosis.
func b3Reachable(ctx context.Context, b *testing.B, bt *bot.Bot, clusters int) (inBot, listed, diagnosed, reachable int) {
	b.Helper()
	byKey := map[string]string{} // incident key → cluster name
	open := map[string]bool{}
	for _, inc := range bt.Incidents() {
		if inc.Open() && inc.Cluster.Source == b3Source && inc.Cluster.Cluster.Namespace == b3NS {
			byKey[inc.Key] = inc.Cluster.Cluster.Name
			open[inc.Cluster.Cluster.Name] = true
		}
	}
	inBot = len(open)
	cmds := &command.Handler{Bot: bt}
	text := cmds.HandleCommand(ctx, chatops.Request{Command: chatops.Incidents{}}).Text
	counted := map[string]bool{}
	for _, s := range bt.Storms() {
		// The storm's line must be there with its full count: the line is
		// how the command reaches its members.
		if strings.Contains(text, s.Key) && strings.Contains(text, fmt.Sprintf("storm of %d clusters", len(s.Members))) {
			for _, k := range s.Members {
				if name, ok := byKey[k]; ok {
					counted[name] = true
				}
			}
		}
	}
	for k, name := range byKey {
		if strings.Contains(text, k) {
			counted[name] = true
		}
	}
	listed = len(counted)
	for i := range clusters {
		name := fmt.Sprintf("hc-%d", i)
		reply := cmds.HandleCommand(ctx, chatops.Request{Command: chatops.Diagnose{Cluster: chatops.ClusterRef{Namespace: b3NS, Name: name}}}).Text
		ok := reply != "" && !strings.HasPrefix(reply, "Unknown") && !strings.HasPrefix(reply, "Ambiguous") && !strings.Contains(reply, "no problem found")
		if ok {
			diagnosed++
		}
		if ok && open[name] && counted[name] {
			reachable++
		}
	}
	return
}

// b3BlockTexts returns the texts of a message's header and section blocks.
func b3BlockTexts(raw json.RawMessage) []string {
	var blocks []struct {
		Type string `json:"type"`
		Text *struct {
			Text string `json:"text"`
		} `json:"text"`
	}
	if json.Unmarshal(raw, &blocks) != nil {
		return nil
	}
	var out []string
	for _, bl := range blocks {
		if bl.Text != nil && (bl.Type == "header" || bl.Type == "section") {
			out = append(out, bl.Text.Text)
		}
	}
	return out
}

func b3Counts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	return strings.Join(parts, " ")
}

// b3OrMissing returns d in seconds; a duration that never came is recorded
// as the deadline, with a note, so the target is judged missed.
func b3OrMissing(r *Result, d time.Duration, name string) float64 {
	if d > 0 {
		return d.Seconds()
	}
	r.Note("%s: did not happen within %v (recorded as the deadline)", name, b3Deadline)
	return b3Deadline.Seconds()
}

func b3Bool(v bool) float64 {
	if v {
		return 1
	}
	return 0
}
