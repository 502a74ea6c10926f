package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hcpbot/hcpbot/bot"
	"github.com/hcpbot/hcpbot/bot/notify"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/configs"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
	"github.com/hcpbot/hcpbot/watchers"
)

// B7 — fleet. 20 management clusters × 100 hosted clusters × 24 nodes
// (48,000 nodes) on a 3-node NATS cluster of real nats-server processes
// (JetStream R3, sync_interval: always as shipped). Each management
// cluster is a publisher of its own — its own NATS connection and the
// agent's publisher (watchers.JetStreamPublisher: in-flight window, per-
// object order, retries) — fed with the events the agent builds from its
// objects (fleet_test.go: 2,000 hosted API servers do not fit on one
// machine, so the objects are synthetic and their events are built from
// the event contract in the agent's shape). First every agent publishes
// its start-up snapshot; then a zone of the region fails: in every hosted
// cluster a quarter of the nodes (6 of 24) stop posting status (Ready
// Unknown), with the node summaries that follow. The bot (bot.New + Run,
// production timers, the real Slack notifier with its KV store, R3) runs
// against the Slack recorder with Slack's posting limits, as in B3.
//
// Scale: HCPBOT_BENCH_FLEET=sources x clusters x nodes (default 20x100x24,
// the fleet; quick runs 4x25x24).
const (
	b7Channel   = "C0B7FLEET"
	b7Observe   = time.Minute
	b7Deadline  = 4 * time.Minute
	b7Zones     = 4 // one of four zones fails: a quarter of the nodes
	b7PostRate  = 1.0
	b7PostBurst = 3
)

func BenchmarkB7Fleet(b *testing.B) {
	ran := false
	for b.Loop() {
		if !ran {
			ran = true
			b7Run(b)
		}
	}
}

func b7Run(b *testing.B) {
	f, err := fleetFromEnv("HCPBOT_BENCH_FLEET", pick(fleet{sources: 20, clusters: 100, nodes: 24}, fleet{sources: 4, clusters: 25, nodes: 24}))
	if err != nil {
		b.Fatal(err)
	}
	down := f.nodes / b7Zones
	cfg := bot.Config{
		Channel:        b7Channel,
		GroupWait:      configs.DefaultGroupWait,
		GroupInterval:  configs.DefaultGroupInterval,
		ResolveTimeout: configs.DefaultResolveTimeout,
		StormThreshold: configs.DefaultStormThreshold,
		StormWindow:    configs.DefaultStormWindow,
		StormPage:      bot.DefaultStormPage,
	}
	r := newResult("B7", "Fleet: management clusters × hosted clusters × nodes on a 3-node NATS cluster, a zone fails", map[string]any{
		"fleet": f.String(), "management_clusters": f.sources, "hosted_clusters": f.hosted(), "nodes": f.hosted() * f.nodes,
		"nodes_down": f.hosted() * down, "nats_servers": 3, "replicas": 3, "sync": "always", "channels": 1,
		"group_wait_s": cfg.GroupWait.Seconds(), "storm_threshold": cfg.StormThreshold,
		"slack_post_rate_per_s": b7PostRate, "slack_post_burst": b7PostBurst,
	})
	defer save(b, r)
	ctx := context.Background()
	log := natstest.Logger(b)

	procs := startNATSCluster(b, 3)
	urls := make([]string, len(procs))
	for i, p := range procs {
		urls[i] = p.url
	}
	natsRSS := func(name string) {
		var sum uint64
		for _, p := range procs {
			v := p.rss()
			sum += v
			r.Add(fmt.Sprintf("nats_rss_%s_%s", name, p.name), float64(v), "B")
		}
		r.Add("nats_rss_"+name+"_sum", float64(sum), "B")
	}
	natsRSS("empty")

	conn, err := bus.Connect(ctx, bus.Config{URLs: urls, Name: "b7-bot"}, log)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(conn.Close)
	if _, err := bus.EnsureStream(ctx, conn.JS, bus.EventsStream(0, 0, bus.WithReplicas(3))); err != nil {
		b.Fatal(err)
	}
	rec := slackrec.New(b, slackrec.WithRate(b7PostRate, b7PostBurst), slackrec.WithUpdateRate(50.0/60, 10))
	store, err := notify.NewKVStore(ctx, conn.JS, notify.KVConfig{}, bus.WithReplicas(3))
	if err != nil {
		b.Fatal(err)
	}

	// The agents: one connection and publisher per management cluster,
	// each connecting to the servers in its own order.
	type agent struct {
		pub  *watchers.JetStreamPublisher
		conn *bus.Conn
	}
	agents := make([]agent, f.sources)
	pctx, pcancel := context.WithCancel(ctx)
	var pwg sync.WaitGroup
	for s := range f.sources {
		order := append(append([]string{}, urls[s%len(urls):]...), urls[:s%len(urls)]...)
		c, err := bus.Connect(ctx, bus.Config{URLs: order, Name: fleetSource(s)}, log)
		if err != nil {
			b.Fatal(err)
		}
		p := watchers.NewJetStreamPublisher(c.JS, configs.DefaultBufferEvents, watchers.NewMetrics(nil), log)
		pwg.Go(func() { p.Run(pctx) })
		agents[s] = agent{pub: p, conn: c}
	}
	b.Cleanup(func() {
		pcancel()
		pwg.Wait()
		for _, a := range agents {
			a.conn.Close()
		}
	})

	reg := prometheus.NewRegistry()
	n, err := notify.NewSlack(notify.SlackConfig{Client: notify.NewSlackClient("xoxb-bench", rec.APIURL(), nil), Store: store, Log: log, Registerer: reg})
	if err != nil {
		b.Fatal(err)
	}
	heap0 := heapInUse()
	bt := bot.New(cfg, conn.JS, n, reg, log)
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = n.Run(runCtx) })
	wg.Go(func() { _ = bt.Run(runCtx) })
	b.Cleanup(func() { cancel(); wg.Wait() })

	// publishAll runs one goroutine per agent, each publishing what gen
	// yields for its source through its publisher, and returns the
	// events published.
	publishAll := func(gen func(g *fleetGen, s int, emit func(event.Event) error) error) (int, time.Duration) {
		var mu sync.Mutex
		total := 0
		var firstErr error
		var w sync.WaitGroup
		t := time.Now()
		for s := range f.sources {
			w.Go(func() {
				g := &fleetGen{f: f, rv: uint64(s) << 40}
				k := 0
				err := gen(g, s, func(e event.Event) error { k++; return agents[s].pub.PublishWait(ctx, e) })
				mu.Lock()
				total += k
				if err != nil && firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			})
		}
		w.Wait()
		if firstErr != nil {
			b.Fatal(firstErr)
		}
		return total, time.Since(t)
	}
	consumed := func(n int, since time.Time) time.Duration {
		if err := waitConsumed(ctx, reg, n, b7Deadline); err != nil {
			b.Fatal(err)
		}
		return time.Since(since)
	}

	// --- Start-up: every agent's snapshot of a healthy fleet.
	t := time.Now()
	base, basePub := publishAll(func(g *fleetGen, s int, emit func(event.Event) error) error {
		return g.snapshot(s, 0, func(int) string { return fleetNoProxy }, time.Now(), false, emit)
	})
	baseAll := consumed(base, t)
	r.Add("snapshot_events", float64(base), "events")
	r.Add("snapshot_publish_s", basePub.Seconds(), "s")
	r.Add("snapshot_consumed_s", baseAll.Seconds(), "s")
	r.Add("snapshot_events_per_s", float64(base)/baseAll.Seconds(), "events/s")
	heapHealthy := heapInUse()
	r.Add("bot_heap_healthy", float64(heapHealthy)-float64(heap0), "B")
	r.Add("bot_heap_per_hosted_cluster_healthy", (float64(heapHealthy)-float64(heap0))/float64(f.hosted()), "B/cluster")
	natsRSS("healthy")

	// --- The outage: a quarter of every cluster's nodes, each agent
	// publishing its clusters' node events and then their summaries (the
	// agent coalesces a cluster's summary over 5 s: one per cluster).
	stopCPU := cpuProfile(b, r, "B7")
	cpuStopped := false
	defer func() {
		if !cpuStopped {
			stopCPU()
		}
	}()
	outageOf := func(g *fleetGen, s int, emit func(event.Event) error) error { return g.zoneOutage(s, down, emit) }
	t0 := time.Now()
	outage, outPub := publishAll(outageOf)
	outAll := consumed(base+outage, t0)
	r.Add("outage_events", float64(outage), "events")
	r.Add("outage_publish_s", outPub.Seconds(), "s")
	r.Add("outage_consumed_s", outAll.Seconds(), "s")
	r.Add("outage_events_per_s", float64(outage)/outAll.Seconds(), "events/s")

	// Every cluster's incident open: the bot's peak.
	for deadline := time.Now().Add(b7Deadline); b3Open(bt) < f.hosted() && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
	}
	open := b3Open(bt)
	r.Add("incidents_open", float64(open), "incidents")
	heapOutage := heapInUse()
	r.Add("bot_heap_outage", float64(heapOutage)-float64(heap0), "B")
	r.Add("bot_heap_per_hosted_cluster_outage", (float64(heapOutage)-float64(heap0))/float64(f.hosted()), "B/cluster")
	if open > 0 {
		r.Add("bot_heap_per_open_incident", (float64(heapOutage)-float64(heapHealthy))/float64(open), "B/incident")
	}
	r.Add("rss_process", float64(rss()), "B")
	heapProfile(b, r, "B7")

	// The storms: one per management cluster (their clusters share it and
	// its proxy); each root's first post, by the notifier's key.
	roots := func() map[string]time.Time {
		out := map[string]time.Time{}
		for _, c := range rec.Calls() {
			if c.Method == "chat.postMessage" && c.Status == 200 && c.Form.Get("thread_ts") == "" && strings.Contains(c.Form.Get("text"), "STORM") {
				key, _ := b3Meta(json.RawMessage(c.Form.Get("metadata")))
				if _, ok := out[key]; !ok {
					out[key] = c.Time
				}
			}
		}
		return out
	}
	for deadline := t0.Add(b7Deadline); len(roots()) < f.sources && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
	}
	stopCPU()
	cpuStopped = true
	if d := time.Until(t0.Add(b7Observe)); d > 0 {
		time.Sleep(d)
	}
	time.Sleep(200 * time.Millisecond)
	var first, last time.Duration
	for _, at := range roots() {
		d := at.Sub(t0)
		if first == 0 || d < first {
			first = d
		}
		last = max(last, d)
	}
	incidentRoots := 0
	for _, c := range rec.Calls() {
		if c.Method == "chat.postMessage" && c.Status == 200 && c.Form.Get("thread_ts") == "" {
			if text := c.Form.Get("text"); !strings.Contains(text, "STORM") {
				incidentRoots++
			} else if first > 0 && c.Time.Sub(t0) == first {
				r.Note("first storm message: %q", text)
			}
		}
	}
	r.Add("incident_root_posts", float64(incidentRoots), "posts")
	calls, byMethod := 0, map[string]int{}
	for _, c := range rec.Calls() {
		if !c.Time.Before(t0) && c.Time.Before(t0.Add(b7Observe)) {
			calls++
			byMethod[c.Method]++
		}
	}
	r.Add("storms_posted", float64(len(roots())), "storms")
	r.Add("storms_open_in_bot", float64(len(bt.Storms())), "storms")
	r.Add("storm_message_s", b7OrDeadline(r, first, "storm_message_s"), "s")
	r.Add("last_storm_message_s", b7OrDeadline(r, last, "last_storm_message_s"), "s")
	r.Add("slack_calls_first_minute", float64(calls), "calls")
	r.Add("rate_limited_answers", float64(rec.RateLimited()), "429s")
	r.Add("rate_limit_violations", float64(rec.Violations()), "calls")
	r.Note("Slack calls in the first minute by method: %s", b3Counts(byMethod))
	natsRSS("outage")
	var disk uint64
	for _, p := range procs {
		d := p.disk()
		disk += d
		r.Add("nats_disk_"+p.name, float64(d), "B")
	}
	r.Add("nats_disk_sum", float64(disk), "B")
	r.Add("nats_disk_per_event", float64(disk)/float64(3*(base+outage)), "B/event/replica")

	// Physical references in the same run: the outage's events through
	// bare JetStream on the same cluster (a stream of their own, R3,
	// async publishes from one connection, an ordered consumer), and
	// Slack's floor: the group wait, then one post per second.
	var refEvents []event.Event
	for s := range f.sources {
		if err := outageOf(&fleetGen{f: f, rv: uint64(s) << 40}, s, func(e event.Event) error { refEvents = append(refEvents, e); return nil }); err != nil {
			b.Fatal(err)
		}
	}
	ref := b7BareJetStream(b, ctx, conn.JS, refEvents)
	r.Add("ref_jetstream_outage_s", ref.Seconds(), "s")
	if ref > 0 {
		r.Add("outage_consumed_vs_jetstream", outAll.Seconds()/ref.Seconds(), "x")
	}
	posts := 2 * f.sources // a root and one page (≤ StormPage clusters) per storm
	r.Add("storm_message_floor_s", cfg.GroupWait.Seconds(), "s")
	r.Add("last_storm_message_floor_s", cfg.GroupWait.Seconds()+max(0, float64(f.sources-b7PostBurst))/b7PostRate, "s")
	r.Add("all_storm_posts_floor_s", cfg.GroupWait.Seconds()+max(0, float64(posts-b7PostBurst))/b7PostRate, "s")
	r.Add("slack_floor_posts_per_minute", 60*b7PostRate+b7PostBurst, "calls/min")
	r.Note("floors: no storm root before the group wait; at %.0f post/s after a burst of %d, the last of %d roots no earlier than group wait + (roots − burst) / rate (roots before pages), and all %d posts (a root and a page each) no earlier than group wait + (posts − burst) / rate", b7PostRate, b7PostBurst, f.sources, posts)

	r.Note("bot heap: live heap after GC of this process (bot, notifier, recorder, 20 publishers' connections; not the nats-servers) minus before bot.New; per hosted cluster over all %d, per open incident the growth from the healthy fleet to the outage", f.hosted())
	r.Note("agents: %d publishers (goroutines, each with its own NATS connection and watchers.JetStreamPublisher with agent.bufferEvents %d) publishing with PublishWait; the events are built from synthetic objects in the agent's shape (fleet_test.go), since %d hosted API servers do not fit on one machine; per-node informer memory of a real agent is B4's", f.sources, configs.DefaultBufferEvents, f.hosted())
	r.Note("NATS: 3 nats-server processes (natstest.ServerBinary, go.mod's release) on loopback, JetStream settings of configs/deploy/nats/nats.conf (max_file_store 10G, sync_interval: always), events stream and Slack KV with 3 replicas; RSS from /proc/<pid>/status, disk = size of each store_dir")
	r.Note("the outage: in every hosted cluster nodes %d..%d of %d turn Ready=Unknown (a zone of %d down), then one node summary per cluster; storm_message_s is the first storm root at the recorder from the first outage publish", f.nodes-down, f.nodes-1, f.nodes, b7Zones)
	r.Want("storm_message_s", "<=", 10)
	r.Want("slack_calls_first_minute", "<=", 60)
	r.Want("rate_limit_violations", "<=", 0)
	b.ReportMetric(first.Seconds(), "storm_message_s")
}

// b7OrDeadline returns d in seconds, or the deadline with a note when it
// never came.
func b7OrDeadline(r *Result, d time.Duration, name string) float64 {
	if d > 0 {
		return d.Seconds()
	}
	r.Note("%s: did not happen within %v (recorded as the deadline)", name, b7Deadline)
	return b7Deadline.Seconds()
}

// b7BareJetStream publishes evs asynchronously to an R3 stream of their
// own on the cluster behind js and returns how long until an ordered
// consumer had read them all.
func b7BareJetStream(b *testing.B, ctx context.Context, js jetstream.JetStream, evs []event.Event) time.Duration {
	b.Helper()
	const stream, prefix = "B7REF", "b7ref"
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{prefix + ".>"}, Storage: jetstream.FileStorage, Replicas: 3}); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = js.DeleteStream(context.WithoutCancel(ctx), stream) }()
	msgs := make([]*nats.Msg, len(evs))
	for i, e := range evs {
		subject, err := event.Subject(e)
		if err != nil {
			b.Fatal(err)
		}
		data, err := event.Encode(e)
		if err != nil {
			b.Fatal(err)
		}
		msgs[i] = &nats.Msg{Subject: prefix + "." + subject, Data: data, Header: nats.Header{jetstream.MsgIDHeader: []string{e.ID}}}
	}
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		b.Fatal(err)
	}
	done, got, cc := countTo(b, cons, int64(len(msgs)))
	defer cc.Stop()
	start := time.Now()
	for _, m := range msgs {
		for {
			_, err := js.PublishMsgAsync(m)
			if errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
				continue
			}
			if err != nil {
				b.Fatal(err)
			}
			break
		}
	}
	select {
	case <-done:
	case <-time.After(b7Deadline):
		b.Fatalf("B7 reference: %d of %d consumed", got.Load(), len(msgs))
	}
	return time.Since(start)
}
