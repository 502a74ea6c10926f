package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hcpbot/hcpbot/bot"
	"github.com/hcpbot/hcpbot/bot/notify"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/watchers"
)

// BenchmarkB1B5Pipeline measures B1 (events/s from the agent's publisher
// through JetStream on disk into the bot's correlator, against a bare
// JetStream publish+consume of the same payloads) and B5 (the CPU those
// events cost: process-wide during B1, and the bot alone replaying them).
func BenchmarkB1B5Pipeline(b *testing.B) {
	clusters, rounds := pick(1000, 100), pick(20, 5)
	const nodes = 10
	events := steadyEvents(b, clusters, nodes, rounds)
	n := len(events)
	payloads := make([]*nats.Msg, n)
	for i, e := range events {
		subject, err := event.Subject(e)
		if err != nil {
			b.Fatal(err)
		}
		data, err := event.Encode(e)
		if err != nil {
			b.Fatal(err)
		}
		payloads[i] = &nats.Msg{Subject: subject, Data: data, Header: nats.Header{jetstream.MsgIDHeader: []string{e.ID}}}
	}
	var bytes int
	for _, m := range payloads {
		bytes += len(m.Data)
	}
	params := map[string]any{"events": n, "clusters": clusters, "nodes_per_cluster": nodes, "storage": "file", "avg_event_bytes": bytes / n}
	r1 := newResult("B1", "Pipeline throughput: publisher → JetStream (file) → correlator", withParam(params, "sync", "default (every 2 min)"))
	r5 := newResult("B5", "Bot CPU: events/s per core", params)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := natstest.Logger(b)
	connect := func(srv *bus.Embedded) *bus.Conn {
		conn, err := bus.Connect(ctx, bus.Config{URLs: []string{srv.ClientURL()}}, log)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(conn.Close)
		return conn
	}
	conn := connect(natstest.RunServer(b))
	cpu := pipeline(b, ctx, conn.JS, events, payloads, bot.Config{Channel: "C0BENCH", Leader: follower}, r1)
	r1.Want("events_per_s", ">=", 50000)
	r1.Want("ratio_to_reference", ">=", 0.5)
	r1.Note("agent side: watchers.JetStreamPublisher (the agent's publisher) fed with PublishWait; bot side: bot.Bot consuming the stream with its ordered consumer, a follower (correlates, does not notify); rate = events / time until the bot counted them all")
	r1.Note("embedded nats-server defaults: JetStream fsyncs every 2 minutes; B1-sync is the same run with every write fsynced")

	// B5: CPU per event of the whole process during B1, and of a bot that
	// replays the stored events alone (its own ordered consumer, the
	// server's delivery included since it runs in this process).
	r5.Add("pipeline_events_per_cpu_s", float64(n)/cpu.Seconds(), "events/s per core")
	reg2 := prometheus.NewRegistry()
	replay := bot.New(bot.Config{Channel: "C0BENCH", Leader: follower}, conn.JS, notify.NewConsole(io.Discard), reg2, log)
	rctx, rcancel := context.WithCancel(ctx)
	var rwg sync.WaitGroup
	stopCPU := cpuProfile(b, r5, "B5")
	cpu0, start := cpuTime(), time.Now()
	rwg.Go(func() { _ = replay.Run(rctx) })
	if err := waitConsumed(rctx, reg2, n, 5*time.Minute); err != nil {
		b.Fatal(err)
	}
	elapsed, cpu := time.Since(start), cpuTime()-cpu0
	stopCPU()
	rcancel()
	rwg.Wait()
	heapProfile(b, r5, "B5")
	r5.Add("bot_replay_events_per_s", float64(n)/elapsed.Seconds(), "events/s")
	r5.Add("bot_replay_events_per_cpu_s", float64(n)/cpu.Seconds(), "events/s per core")
	r5.Add("bot_replay_cpu_cores", cpu.Seconds()/elapsed.Seconds(), "cores")
	r5.Note("process CPU (getrusage) over the phase: pipeline = publisher + embedded nats-server + bot; replay = bot + the server delivering to it")

	// The same on a server that fsyncs every write before acknowledging
	// it, as the deploy's NATS does (sync_interval: always): what
	// durability on power loss costs.
	// An fsync per write makes it disk-bound (about a thousand events/s
	// here): the first syncEvents events tell as much as all of them,
	// in minutes less.
	ns := min(n, syncEvents)
	sp := withParam(params, "sync", "always")
	sp["events"] = ns
	rs := newResult("B1-sync", "Pipeline throughput, JetStream sync_interval: always (the deploy's NATS)", sp)
	pipeline(b, ctx, connect(natstest.RunServer(b, natstest.SyncAlways)).JS, events[:ns], payloads[:ns], bot.Config{Channel: "C0BENCH", Leader: follower}, rs)
	rs.Want("ratio_to_reference", ">=", 0.5)
	rs.Note("as B1 (its first %d events), on an embedded nats-server with SyncAlways (configs/deploy/nats/nats.conf: sync_interval: always); the reference is measured on that server too. Disk-bound: no events/s target, the pipeline must keep up with the bare JetStream", ns)

	// B1 with the bot as the leader: the same events, and the flush with
	// its full diagnoses and rendering on the production timers, into a
	// notifier that writes nowhere (Slack's own pace is B2/B3's).
	rl := newResult("B1-leader", "Pipeline throughput, the bot as leader (flush, diagnoses, rendering)", withParam(params, "sync", "default (every 2 min)"))
	lcfg := bot.Config{Channel: "C0BENCH", Leader: func() bool { return true }, GroupWait: bot.DefaultGroupWait, GroupInterval: bot.DefaultGroupInterval, ResolveTimeout: time.Minute}
	pipeline(b, ctx, connect(natstest.RunServer(b)).JS, events, payloads, lcfg, rl)
	rl.Want("ratio_to_reference", ">=", 0.8)
	rl.Note("as B1 on a server of its own, the bot the leader on the production timers (group wait %s, group interval %s), notifying a console that writes nowhere; rate = events / time until the bot applied them all, its flushes running meanwhile. The CPU profile (B1-leader.cpu.pprof) says where the time goes", bot.DefaultGroupWait, bot.DefaultGroupInterval)

	save(b, r1)
	save(b, rl)
	save(b, rs)
	save(b, r5)
}

// pipeline measures B1 on js into r: the bare JetStream reference, then
// the agent's publisher into the bot's correlator. It returns the process
// CPU the pipeline took.
func pipeline(b *testing.B, ctx context.Context, js jetstream.JetStream, events []event.Event, payloads []*nats.Msg, cfg bot.Config, r *Result) time.Duration {
	b.Helper()
	n := len(events)
	log := natstest.Logger(b)
	// Reference: the same payloads published asynchronously to a stream of
	// their own and consumed by an ordered consumer, nothing else.
	// Three times, the median: on a shared machine one run of a few
	// seconds varies by a third.
	var refs []float64
	for i := range 3 {
		refs = append(refs, bareJetStream(b, ctx, js, fmt.Sprintf("BENCHREF%d", i), payloads))
	}
	slices.Sort(refs)
	ref := refs[1]
	r.Add("reference_events_per_s", ref, "events/s")
	r.Add("reference_min_events_per_s", refs[0], "events/s")
	r.Add("reference_max_events_per_s", refs[2], "events/s")

	if _, err := bus.EnsureStream(ctx, js, bus.EventsStream(0, 0)); err != nil {
		b.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	out := notify.NewConsole(io.Discard)
	bt := bot.New(cfg, js, out, reg, log)
	m := watchers.NewMetrics(nil)
	pub := watchers.NewJetStreamPublisher(js, 10000, m, log)
	var wg sync.WaitGroup
	bctx, bcancel := context.WithCancel(ctx)
	wg.Go(func() { _ = out.Run(bctx) })
	wg.Go(func() { pub.Run(bctx) })
	wg.Go(func() { _ = bt.Run(bctx) })

	stopCPU := cpuProfile(b, r, r.ID)
	cpu0, start := cpuTime(), time.Now()
	go func() {
		for _, e := range events {
			if err := pub.PublishWait(bctx, e); err != nil {
				return
			}
		}
	}()
	if err := waitConsumed(bctx, reg, n, 5*time.Minute); err != nil {
		b.Fatal(err)
	}
	elapsed, cpu := time.Since(start), cpuTime()-cpu0
	stopCPU()
	bcancel()
	wg.Wait()

	rate := float64(n) / elapsed.Seconds()
	r.Add("events_per_s", rate, "events/s")
	r.Add("elapsed_s", elapsed.Seconds(), "s")
	r.Add("ratio_to_reference", rate/ref, "x")
	r.Add("process_cpu_s", cpu.Seconds(), "s")
	return cpu
}

// syncEvents bounds the events of B1-sync.
const syncEvents = 20000

// follower correlates only; Slack is B2/B3's.
func follower() bool { return false }

// withParam returns params with k set to v.
func withParam(params map[string]any, k string, v any) map[string]any {
	out := maps.Clone(params)
	out[k] = v
	return out
}

// steadyEvents is the agents' output at steady state: clusters hosted
// clusters of nodes nodes, whose nodes flap NotReady and Ready again
// rounds times — every event changes a cluster's state and makes the
// correlator diagnose it.
func steadyEvents(b *testing.B, clusters, nodes, rounds int) []event.Event {
	b.Helper()
	start := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	storm, err := scenario.Storm("mgmt-bench", "clusters", clusters, 0, start)
	if err != nil {
		b.Fatal(err)
	}
	out := make([]event.Event, 0, len(storm)+clusters*nodes*rounds)
	for _, e := range storm {
		if e.Type == event.TypeHostedCluster {
			out = append(out, e)
		}
	}
	for r := range rounds {
		status, reason := event.ConditionFalse, "KubeletNotReady"
		if r%2 == 1 {
			status, reason = event.ConditionTrue, "KubeletReady"
		}
		for c := range clusters {
			ref := event.ClusterRef{Namespace: "clusters", Name: fmt.Sprintf("hc-%d", c)}
			for i := range nodes {
				name := fmt.Sprintf("%s-np-%d", ref.Name, i)
				// A second apart per round: transition keys (and so event
				// IDs) are per second, and each flap must be a new event.
				at := start.Add(time.Duration(r+1)*time.Second + time.Duration(c*nodes+i)*time.Microsecond)
				p := event.NodeReadiness{Node: name, Ready: status, Reason: reason, Message: "container runtime network not ready",
					LastTransitionTime: at, ProviderID: "kubevirt://" + name, InternalIP: "10.132.0.10"}
				e, err := event.New("mgmt-bench", &ref, event.ObjectRef{Kind: "Node", Name: name, UID: "uid-" + name, Hosted: true}, p,
					event.TransitionAt("Ready="+string(status), at), at)
				if err != nil {
					b.Fatal(err)
				}
				out = append(out, e)
			}
		}
	}
	return out
}

// bareJetStream publishes payloads asynchronously (4,000 in flight, the
// client's default) to a file stream of their own while an ordered
// consumer reads them, and returns events/s until the last was consumed.
func bareJetStream(b *testing.B, ctx context.Context, js jetstream.JetStream, stream string, payloads []*nats.Msg) float64 {
	b.Helper()
	prefix := strings.ToLower(stream)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{prefix + ".>"}, Storage: jetstream.FileStorage}); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = js.DeleteStream(context.WithoutCancel(ctx), stream) }()
	cons, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		b.Fatal(err)
	}
	n := int64(len(payloads))
	done, got, cc := countTo(b, cons, n)
	defer cc.Stop()
	start := time.Now()
	for _, p := range payloads {
		m := &nats.Msg{Subject: prefix + "." + p.Subject, Data: p.Data, Header: p.Header}
		for {
			_, err := js.PublishMsgAsync(m)
			if errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
				// The window is full for longer than the client's stall
				// wait (acks come slower with every write fsynced): that
				// wait was the back-pressure, go on.
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
	case <-js.PublishAsyncComplete():
		select {
		case <-done:
		case <-time.After(time.Minute):
			b.Fatalf("reference: %d of %d consumed", got.Load(), n)
		}
	case <-time.After(time.Minute):
		b.Fatalf("reference: %d of %d consumed", got.Load(), n)
	}
	return float64(n) / time.Since(start).Seconds()
}

// waitConsumed polls the bot's consumed counter until it reaches n.
func waitConsumed(ctx context.Context, reg *prometheus.Registry, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		got := counterSum(reg, "hcpbot_bot_events_consumed_total")
		if got >= float64(n) {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("bot consumed %.0f of %d events", got, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// cpuTime is the CPU (user + system) this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
