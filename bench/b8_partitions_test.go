package bench

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/hcpbot/hcpbot/bot"
	"github.com/hcpbot/hcpbot/bot/checkpoint"
	"github.com/hcpbot/hcpbot/bot/notify"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/configs"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
	"github.com/hcpbot/hcpbot/partition"
	"github.com/hcpbot/hcpbot/watchers"
)

// B8 — partitions. 50 management clusters × 400 hosted clusters × 24
// nodes (20,000 hosted clusters, 480,000 nodes) on 3 nats-server processes
// (JetStream R3, sync_interval: always, the subject mapping that tags each
// event with its group: partition.Set.NATSConf), read by P = 4 bot groups
// of two replicas each (one lease, one checkpoint and one Slack channel per
// group: channels per region, bot.routes). The agents are B7's publishers.
// In order:
//   - steady state: every agent's snapshot of a healthy fleet;
//   - a zone outage (a quarter of every cluster's nodes), during which,
//     once group 0 posted its first storm, group 0's leader is killed
//     (its NATS connection closed, then stopped: no lease released, no
//     checkpoint written) and its standby must go on within lease + 2 s,
//     with no duplicate post in any channel;
//   - a restart of every bot: each stops cleanly (the leader writes its
//     group's checkpoint), then the groups start again one after the
//     other, each timed until both its replicas are current and weighed
//     (live heap after a collection): memory per partition;
//   - after the restart nothing is posted again (no second root, no
//     repaint).
//
// The bare-JetStream reference of the same run reads the outage's events
// from an R3 stream of their own (B7's).
//
// Scale: HCPBOT_BENCH_PARTITIONS=sources x clusters x nodes (default
// 50x400x24; quick runs 8x50x24).
const (
	b8Groups    = 4
	b8Replicas  = 2
	b8Deadline  = 5 * time.Minute
	b8PostRate  = 1.0
	b8PostBurst = 3
	b8LeaseTTL  = bus.DefaultLeaseTTL
	b8Settle    = 10 * time.Second
)

func BenchmarkB8Partitions(b *testing.B) {
	ran := false
	for b.Loop() {
		if !ran {
			ran = true
			b8Run(b)
		}
	}
}

func b8Channel(k int) string { return fmt.Sprintf("C0B8G%d", k) }

// b8Replica is one bot replica of a group.
type b8Replica struct {
	group  int
	conn   *bus.Conn
	bot    *bot.Bot
	lease  *bus.Lease
	reg    *prometheus.Registry
	cancel context.CancelFunc
	wg     sync.WaitGroup
	caught chan struct{}
	watch  *b6LogWatch
}

// b8Fleet is what every replica shares.
type b8Fleet struct {
	b    *testing.B
	ctx  context.Context
	urls []string
	set  partition.Set
	cfg  bot.Config
	rec  *slackrec.Recorder
	ckpt *checkpoint.Store
	n    int // replicas started, for their names and server order
}

// start starts replica r of group k: its own NATS connection (servers in
// its own order), lease, Slack notifier and bot, as `hcpbot bot
// --partition k` wires them.
func (h *b8Fleet) start(k int) *b8Replica {
	b := h.b
	b.Helper()
	h.n++
	order := append(append([]string{}, h.urls[h.n%len(h.urls):]...), h.urls[:h.n%len(h.urls)]...)
	id := fmt.Sprintf("b8-g%d-r%d", k, h.n)
	conn, err := bus.Connect(h.ctx, bus.Config{URLs: order, Name: id}, natstest.Logger(b))
	if err != nil {
		b.Fatal(err)
	}
	r := &b8Replica{group: k, conn: conn, caught: make(chan struct{})}
	var once sync.Once
	r.watch = &b6LogWatch{on: func() { once.Do(func() { close(r.caught) }) }}
	log := zerolog.New(r.watch).Level(zerolog.InfoLevel)
	group := h.set.ID(k)
	var woken atomic.Pointer[bot.Bot]
	r.lease, err = bus.NewLease(h.ctx, conn.JS, group.Suffix("bot"), id, log, bus.WithReplicas(3), bus.WithLeaseTTL(b8LeaseTTL),
		bus.OnLeaderChange(func(leader bool) {
			if b := woken.Load(); b != nil {
				b.LeaderChanged(leader)
			}
		}))
	if err != nil {
		b.Fatal(err)
	}
	store, err := notify.NewKVStore(h.ctx, conn.JS, notify.KVConfig{}, bus.WithReplicas(3))
	if err != nil {
		b.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	n, err := notify.NewSlack(notify.SlackConfig{Client: notify.NewSlackClient("xoxb-bench", h.rec.APIURL(), nil), Store: store, Log: log, Registerer: reg})
	if err != nil {
		b.Fatal(err)
	}
	cfg := h.cfg
	cfg.Channel = b8Channel(k)
	cfg.Partitions, cfg.Partition = h.set, k
	cfg.Leader = r.lease.Leader
	cfg.Checkpoints = h.ckpt
	cfg.CheckpointEvery = -1 // at a clean shutdown: the restart's
	r.bot = bot.New(cfg, conn.JS, n, reg, log)
	woken.Store(r.bot)
	r.reg = reg
	ctx, cancel := context.WithCancel(h.ctx)
	r.cancel = cancel
	r.wg.Go(func() { _ = r.lease.Run(ctx) })
	r.wg.Go(func() { _ = n.Run(ctx) })
	r.wg.Go(func() { _ = r.bot.Run(ctx) })
	return r
}

// stop stops r cleanly: the leader writes its checkpoint, the lease is
// let go.
func (r *b8Replica) stop() {
	r.cancel()
	r.wg.Wait()
	r.conn.Close()
}

// kill stops r as a crash would: its NATS connection goes first, so it
// neither lets its lease go nor writes a checkpoint.
func (r *b8Replica) kill() {
	r.conn.Close()
	r.cancel()
	r.wg.Wait()
}

func b8Run(b *testing.B) {
	f, err := fleetFromEnv("HCPBOT_BENCH_PARTITIONS", pick(fleet{sources: 50, clusters: 400, nodes: 24}, fleet{sources: 8, clusters: 50, nodes: 24}))
	if err != nil {
		b.Fatal(err)
	}
	set := partition.Set{Count: b8Groups}
	perGroup := make([]int, b8Groups) // hosted clusters per group
	sourcesOf := make([]int, b8Groups)
	for s := range f.sources {
		perGroup[set.Of(fleetSource(s))] += f.clusters
		sourcesOf[set.Of(fleetSource(s))]++
	}
	down := f.nodes / b7Zones
	cfg := bot.Config{
		GroupWait:      configs.DefaultGroupWait,
		GroupInterval:  configs.DefaultGroupInterval,
		ResolveTimeout: configs.DefaultResolveTimeout,
		StormThreshold: configs.DefaultStormThreshold,
		StormWindow:    configs.DefaultStormWindow,
		StormPage:      bot.DefaultStormPage,
	}
	r := newResult("B8", "Partitions: management clusters × hosted clusters × nodes in P bot groups on a 3-node NATS cluster: a zone fails, a group's leader dies, every bot restarts", map[string]any{
		"fleet": f.String(), "management_clusters": f.sources, "hosted_clusters": f.hosted(), "nodes": f.hosted() * f.nodes,
		"groups": b8Groups, "replicas_per_group": b8Replicas, "nats_servers": 3, "replicas": 3, "sync": "always",
		"hosted_clusters_per_group": fmt.Sprint(perGroup), "sources_per_group": fmt.Sprint(sourcesOf),
		"group_wait_s": cfg.GroupWait.Seconds(), "lease_ttl_s": b8LeaseTTL.Seconds(),
		"slack_post_rate_per_s_per_channel": b8PostRate, "slack_post_burst": b8PostBurst,
	})
	defer save(b, r)
	ctx := context.Background()
	log := natstest.Logger(b)

	procs := startNATSCluster(b, 3, set.NATSConf())
	urls := make([]string, len(procs))
	for i, p := range procs {
		urls[i] = p.url
	}
	conn, err := bus.Connect(ctx, bus.Config{URLs: urls, Name: "b8"}, log)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(conn.Close)
	if _, err := bus.EnsureStream(ctx, conn.JS, bus.EventsStream(0, 0, bus.WithReplicas(3))); err != nil {
		b.Fatal(err)
	}
	ckpt := checkpointStore(b, ctx, conn.JS, bus.CheckpointsKV(0, bus.WithReplicas(3)))
	rec := slackrec.New(b, slackrec.WithRate(b8PostRate, b8PostBurst), slackrec.WithUpdateRate(50.0/60, 10))
	h := &b8Fleet{b: b, ctx: ctx, urls: urls, set: set, cfg: cfg, rec: rec, ckpt: ckpt}

	// The agents: B7's, one connection and publisher per management
	// cluster.
	pubs := make([]*watchers.JetStreamPublisher, f.sources)
	pctx, pcancel := context.WithCancel(ctx)
	var pwg sync.WaitGroup
	var agentConns []*bus.Conn
	for s := range f.sources {
		order := append(append([]string{}, urls[s%len(urls):]...), urls[:s%len(urls)]...)
		c, err := bus.Connect(ctx, bus.Config{URLs: order, Name: fleetSource(s)}, log)
		if err != nil {
			b.Fatal(err)
		}
		agentConns = append(agentConns, c)
		p := watchers.NewJetStreamPublisher(c.JS, configs.DefaultBufferEvents, watchers.NewMetrics(nil), log)
		pwg.Go(func() { p.Run(pctx) })
		pubs[s] = p
	}
	b.Cleanup(func() {
		pcancel()
		pwg.Wait()
		for _, c := range agentConns {
			c.Close()
		}
	})
	publishAll := func(gen func(g *fleetGen, s int, emit func(event.Event) error) error) int {
		var mu sync.Mutex
		total := 0
		var firstErr error
		var w sync.WaitGroup
		for s := range f.sources {
			w.Go(func() {
				g := &fleetGen{f: f, rv: uint64(s) << 40}
				k := 0
				err := gen(g, s, func(e event.Event) error { k++; return pubs[s].PublishWait(ctx, e) })
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
		return total
	}

	heap0 := heapInUse()
	var replicas []*b8Replica
	for k := range b8Groups {
		for range b8Replicas {
			replicas = append(replicas, h.start(k))
		}
	}
	b.Cleanup(func() {
		for _, rp := range replicas {
			rp.cancel()
			rp.wg.Wait()
			rp.conn.Close()
		}
	})
	leaderOf := func(k int) *b8Replica {
		for _, rp := range replicas {
			if rp.group == k && rp.lease.Leader() {
				return rp
			}
		}
		return nil
	}
	b8Eventually(b, b8Deadline, "a leader in every group", func() bool {
		for k := range b8Groups {
			if leaderOf(k) == nil {
				return false
			}
		}
		return true
	})

	// --- Steady state: every agent's snapshot of a healthy fleet, until
	// every replica holds its group's clusters (and only those).
	t := time.Now()
	base := publishAll(func(g *fleetGen, s int, emit func(event.Event) error) error {
		return g.snapshot(s, 0, func(int) string { return fleetNoProxy }, time.Now(), false, emit)
	})
	b8Eventually(b, b8Deadline, "every replica holds its group's clusters", func() bool {
		for _, rp := range replicas {
			if len(rp.bot.Clusters()) != perGroup[rp.group] {
				return false
			}
		}
		return true
	})
	steady := time.Since(t)
	r.Add("snapshot_events", float64(base), "events")
	r.Add("snapshot_consumed_s", steady.Seconds(), "s")
	heapHealthy := heapInUse()
	perReplica := (float64(heapHealthy) - float64(heap0)) / float64(len(replicas))
	r.Add("bot_heap_per_replica_healthy", perReplica, "B")
	r.Add("bot_heap_per_hosted_cluster_healthy", perReplica*float64(b8Groups)/float64(f.hosted()), "B/cluster")

	// --- The outage, and the kill of group 0's leader once it posted its
	// first storm.
	stormRoots := func(k int) map[string]time.Time {
		out := map[string]time.Time{}
		for _, c := range rec.Calls() {
			if c.Method == "chat.postMessage" && c.Status == 200 && c.Form.Get("channel") == b8Channel(k) && c.Form.Get("thread_ts") == "" && strings.Contains(c.Form.Get("text"), "STORM") {
				key, _ := b3Meta([]byte(c.Form.Get("metadata")))
				if _, ok := out[key]; !ok {
					out[key] = c.Time
				}
			}
		}
		return out
	}
	outageOf := func(g *fleetGen, s int, emit func(event.Event) error) error { return g.zoneOutage(s, down, emit) }
	stopCPU := cpuProfile(b, r, "B8")
	t0 := time.Now()
	outage := publishAll(outageOf)
	r.Add("outage_events", float64(outage), "events")
	b8Eventually(b, b8Deadline, "every replica's incidents open", func() bool {
		for _, rp := range replicas {
			if b3Open(rp.bot) < perGroup[rp.group] {
				return false
			}
		}
		return true
	})
	outAll := time.Since(t0)
	r.Add("outage_consumed_s", outAll.Seconds(), "s")
	// Mid-delivery: group 0 has posted its first storm and has the rest
	// (roots, then pages, at a post per second) still to send.
	b8Eventually(b, b8Deadline, "group 0's first storm", func() bool { return len(stormRoots(0)) > 0 })
	victim := leaderOf(0)
	if victim == nil {
		b.Fatal("group 0 has no leader")
	}
	postsBefore := len(rec.Calls())
	killed := time.Now()
	victim.kill()
	// What reaches Slack once the victim has stopped is the standby's.
	stopped := time.Now()
	var takeover time.Duration
	b8Eventually(b, b8Deadline, "group 0's standby posts", func() bool {
		for _, c := range rec.Calls()[postsBefore:] {
			if c.Status == 200 && c.Form.Get("channel") == b8Channel(0) && c.Time.After(stopped) {
				takeover = c.Time.Sub(killed)
				return true
			}
		}
		return false
	})
	r.Add("leader_kill_to_standby_post_s", takeover.Seconds(), "s")
	b8Eventually(b, b8Deadline, "every group's storms posted", func() bool {
		for k := range b8Groups {
			if len(stormRoots(k)) < sourcesOf[k] {
				return false
			}
		}
		return true
	})
	stopCPU()
	var worstFirst, worstLast time.Duration
	for k := range b8Groups {
		var first, last time.Duration
		for _, at := range stormRoots(k) {
			d := at.Sub(t0)
			if first == 0 || d < first {
				first = d
			}
			last = max(last, d)
		}
		r.Add(fmt.Sprintf("storm_message_s_group_%d", k), first.Seconds(), "s")
		r.Add(fmt.Sprintf("last_storm_message_s_group_%d", k), last.Seconds(), "s")
		worstFirst, worstLast = max(worstFirst, first), max(worstLast, last)
	}
	r.Add("storm_message_after_group_wait_s", (worstFirst - cfg.GroupWait).Seconds(), "s")
	r.Add("last_storm_message_after_group_wait_s", (worstLast - cfg.GroupWait).Seconds(), "s")
	heapOutage := heapInUse()
	r.Add("bot_heap_per_replica_outage", (float64(heapOutage)-float64(heap0))/float64(len(replicas)-1), "B")
	// What is still queued goes out (the storms' member pages, at a post
	// per second per channel) before the restart: Slack quiet for
	// b8Settle.
	b8Eventually(b, b8Deadline, "Slack quiet before the restart", func() bool {
		calls := rec.Calls()
		return len(calls) > 0 && time.Since(calls[len(calls)-1].Time) >= b8Settle
	})
	dups := 0
	for k := range b8Groups {
		dr, dp, _, _ := duplicatesIn(rec, b8Channel(k))
		dups += dr + dp
	}
	r.Add("duplicate_posts", float64(dups), "posts")
	r.Add("rate_limit_violations", float64(rec.Violations()), "calls")

	// --- A restart of every bot: a clean stop (each leader writes its
	// group's checkpoint), then the groups one after the other.
	for _, rp := range replicas {
		if rp != victim {
			rp.stop()
		}
	}
	replicas = nil
	callsBefore := len(rec.Calls())
	var worstCurrent time.Duration
	restored := 0
	for k := range b8Groups {
		heapBefore := heapInUse()
		t := time.Now()
		var group []*b8Replica
		for range b8Replicas {
			rp := h.start(k)
			group = append(group, rp)
			replicas = append(replicas, rp)
		}
		for _, rp := range group {
			select {
			case <-rp.caught:
			case <-time.After(b8Deadline):
				b.Fatalf("group %d: a replica did not catch up within %v", k, b8Deadline)
			}
			if ok, _ := rp.watch.restored(); ok {
				restored++
			}
		}
		current := time.Since(t)
		worstCurrent = max(worstCurrent, current)
		r.Add(fmt.Sprintf("restart_current_s_group_%d", k), current.Seconds(), "s")
		r.Add(fmt.Sprintf("bot_heap_group_%d", k), float64(heapInUse())-float64(heapBefore), "B")
	}
	r.Add("restart_current_s", worstCurrent.Seconds(), "s")
	r.Add("restarts_from_checkpoint", float64(restored), "replicas")
	time.Sleep(b8Settle + cfg.GroupWait)
	reposts := 0
	for _, c := range rec.Calls()[callsBefore:] {
		if c.Method == "chat.postMessage" || c.Method == "chat.update" {
			reposts++
		}
	}
	r.Add("slack_posts_after_restart", float64(reposts), "calls")
	dups = 0
	for k := range b8Groups {
		dr, dp, _, _ := duplicatesIn(rec, b8Channel(k))
		dups += dr + dp
	}
	r.Add("duplicate_posts_whole_run", float64(dups), "posts")

	var disk uint64
	for _, p := range procs {
		d := p.disk()
		disk += d
		r.Add("nats_disk_"+p.name, float64(d), "B")
		r.Add("nats_rss_"+p.name, float64(p.rss()), "B")
	}
	r.Add("nats_disk_per_event", float64(disk)/float64(3*(base+outage)), "B/event/replica")

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

	r.Note("groups: partition.Set{Count: %d} by the hash of the source (the NATS mapping tags each event, partition.Set.NATSConf); per group %v hosted clusters from %v management clusters; each group posts to its own channel (Slack's 1 post/s per channel)", b8Groups, perGroup, sourcesOf)
	r.Note("the kill: group 0's leader, once the group posted its first storm root, loses its NATS connection and stops (no lease release, no checkpoint); leader_kill_to_standby_post_s = from the kill to the next successful Slack call in group 0's channel, by the standby once the lease (TTL %v) expired; target lease + 2 s", b8LeaseTTL)
	r.Note("memory: bot_heap_per_replica_* = live heap growth of this process (bots, notifiers, recorder, publishers) over the replicas; bot_heap_group_k = the growth while group k's two replicas restarted from its checkpoint and caught up: memory per partition (two replicas)")
	r.Note("restart: every replica stopped cleanly (the leaders write their group's checkpoint), then the groups start one after the other; restart_current_s_group_k until both replicas of group k logged the replay caught up; slack_posts_after_restart counts chat.postMessage and chat.update in the %v after the last group: no second root and no repaint means 0", b8Settle+cfg.GroupWait)
	r.Want("storm_message_after_group_wait_s", "<=", 10)
	r.Want("leader_kill_to_standby_post_s", "<=", (b8LeaseTTL + 2*time.Second).Seconds())
	r.Want("duplicate_posts", "<=", 0)
	r.Want("duplicate_posts_whole_run", "<=", 0)
	r.Want("restart_current_s", "<=", 2)
	r.Want("slack_posts_after_restart", "<=", 0)
	r.Want("rate_limit_violations", "<=", 0)
	b.ReportMetric(worstFirst.Seconds(), "storm_message_s")
}

// b8Eventually polls cond every 100 ms (a poll may copy a group's
// incidents) until it holds, failing after d.
func b8Eventually(b *testing.B, d time.Duration, what string, cond func() bool) {
	b.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("B8: %s: not within %v", what, d)
		}
	}
}
