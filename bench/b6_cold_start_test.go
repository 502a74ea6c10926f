package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/slack-go/slack"

	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/bot"
	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/bot/checkpoint"
	"github.com/hcpbot/hcpbot/bot/command"
	"github.com/hcpbot/hcpbot/bot/notify"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/configs"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
)

// B6 — cold start. A bot is started on an events stream that already holds
// a fleet's 72 hours: 100,000 and 1,000,000 events. The fleet grows with
// the stream (500 events per hosted cluster over 72 h, 24 nodes each:
// 200 hosted clusters for 100,000 events, 2,000 — B7's 48,000 nodes — for
// 1,000,000), and its history is the realistic mix an agent publishes:
// the start-up snapshot and a restatement every 12 h (HostedClusters,
// node summaries, SnapshotDones), node flaps (Unknown, then Ready three
// minutes later, each with its node summary), a noProxy edit per cluster
// (HostedCluster + proxychange) and a crashlooping pod per cluster that
// recovers. The stream is filled fast — asynchronous publishes of the real
// event encoding straight into the embedded JetStream (file storage, the
// shipped bounds of bus.EventsStream) — and only the bot's start is timed:
// bot.New + Run (production timers) until it logs that the replay caught
// up, and until `/hcp status` through the signed HTTP slash-command
// endpoint (chatops.Server + command.Handler) accounts for every hosted
// cluster in one message (command.StatusAccounted).
//
// Two starts are timed on the same fleet: without a checkpoint (the whole
// stream replayed), and from a checkpoint (bot/checkpoint) at most an
// hour old. The bot of the first start writes a checkpoint once current;
// the fleet's next hour is appended; a new bot restores the checkpoint
// and replays that hour: the start after a rollout of every replica with
// the shipped hourly checkpoints, at its worst. The run also measures the
// replay split into JetStream delivery alone and delivery + decoding
// (references on the same stream), and the bot started on the stream's
// last 12 hours only (the tail after the agents' last restatement, which
// holds every current fact).
const (
	b6EventsPerCluster = 500
	b6Nodes            = 24
	b6Span             = 72 * time.Hour
	b6Restate          = 12 * time.Hour // watchers.DefaultRestateInterval
	b6Secret           = "b6-signing-secret"
	// b6StatusEvery is how often a user asks `/hcp status` during the
	// replay: each answer diagnoses every cluster, so asking often would
	// slow the replay it measures.
	b6StatusEvery = 2 * time.Second
	// b6Drain bounds the wait for the leader's first flush.
	b6Drain = 5 * time.Minute
	// b6Goal is the target for 1,000,000 events.
	b6Goal = 10 * time.Second
	// b6CheckpointAge is how old the checkpoint of the second start is
	// (bot.DefaultCheckpointEvery: the oldest a shipped bot restores),
	// and b6CheckpointGoal the target for that start (issue 30).
	b6CheckpointAge  = time.Hour
	b6CheckpointGoal = 2 * time.Second
)

func BenchmarkB6ColdStart(b *testing.B) {
	ran := false
	for b.Loop() {
		if !ran {
			ran = true
			for _, n := range pick([]int{100_000, 1_000_000}, []int{10_000, 50_000}) {
				b6Run(b, n)
			}
		}
	}
}

func b6Run(b *testing.B, events int) {
	clusters := max(1, events/b6EventsPerCluster)
	f := fleet{sources: max(1, (clusters+99)/100), nodes: b6Nodes}
	f.clusters = (clusters + f.sources - 1) / f.sources
	id := fmt.Sprintf("B6-%dk", events/1000)
	r := newResult(id, fmt.Sprintf("Cold start on %d stored events (a fleet's 72 h)", events), map[string]any{
		"events_target": events, "fleet": f.String(), "hosted_clusters": f.hosted(), "nodes": f.hosted() * f.nodes,
		"history_h": b6Span.Hours(), "restate_every_h": b6Restate.Hours(), "storage": "file",
	})
	defer save(b, r)
	ctx := context.Background()
	log := natstest.Logger(b)

	srv := natstest.RunServer(b)
	defer srv.Shutdown()
	conn, err := bus.Connect(ctx, bus.Config{URLs: []string{srv.ClientURL()}, Name: "b6"}, log)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	spec := bus.EventsStream(0, 0)
	if _, err := bus.EnsureStream(ctx, conn.JS, spec); err != nil {
		b.Fatal(err)
	}

	// --- Fill (not timed as the bot's start): 72 h ending an hour ago;
	// the last hour is appended after the checkpoint.
	now := time.Now()
	end := now.Add(-b6CheckpointAge)
	t0 := time.Now()
	counts, err := b6Fill(ctx, conn.JS, f, events, end, nil)
	if err != nil {
		b.Fatal(err)
	}
	fill := time.Since(t0)
	info, err := conn.JS.Stream(ctx, event.StreamName)
	if err != nil {
		b.Fatal(err)
	}
	st := info.CachedInfo().State
	cfg := info.CachedInfo().Config
	r.Add("events_stored", float64(st.Msgs), "events")
	r.Add("stream_bytes", float64(st.Bytes), "B")
	r.Add("bytes_per_event", float64(st.Bytes)/float64(max(st.Msgs, 1)), "B/event")
	r.Add("fill_s", fill.Seconds(), "s")
	r.Add("fill_events_per_s", float64(st.Msgs)/fill.Seconds(), "events/s")
	r.Note("events by type: %s", b6Counts(counts))
	r.Note("stream bounds as shipped (bus.EventsStream): max age %v, max bytes %d, max msgs %d (-1/0: unlimited); the events are stored now, so max age drops none of them. The 1,000,000-event stream holds %.0f MB: the deploy's NATS caps file storage at 10 GiB (configs/deploy/nats/nats.conf max_file_store), which it fits %.0f times",
		cfg.MaxAge, cfg.MaxBytes, cfg.MaxMsgs, float64(st.Bytes)/float64(events)*1e6/1e6, 10*float64(1<<30)/(float64(st.Bytes)/float64(events)*1e6))

	// --- References on the same stream: delivery alone, delivery + decode.
	deliver := b6Consume(b, ctx, conn.JS, st.Msgs, false)
	decode := b6Consume(b, ctx, conn.JS, st.Msgs, true)
	r.Add("ref_deliver_s", deliver.Seconds(), "s")
	r.Add("ref_deliver_events_per_s", float64(st.Msgs)/deliver.Seconds(), "events/s")
	r.Add("ref_deliver_decode_s", decode.Seconds(), "s")

	// --- The bot's cold start, which writes the checkpoint once current.
	ckpt := checkpointStore(b, ctx, conn.JS, bus.CheckpointsKV(0))
	cs := b6Start(b, ctx, conn.JS, f, r, id, true, ckpt)
	r.Add("current_s", cs.current.Seconds(), "s")
	r.Add("status_complete_s", cs.status.Seconds(), "s")
	r.Add("replay_events_per_s", float64(st.Msgs)/cs.current.Seconds(), "events/s")
	r.Add("status_during_replay_max_ms", float64(cs.maxDuring.Microseconds())/1000, "ms")
	r.Add("status_during_replay_deferred", float64(cs.deferred), "requests")
	r.Add("status_after_current_ms", float64(cs.statusLatency.Microseconds())/1000, "ms")
	r.Add("heap_live_at_current", float64(cs.liveAtCurrent)-float64(cs.heap0), "B")
	r.Add("heap_process_growth", float64(cs.heapGrowth), "B")
	r.Add("pending_released_s", cs.drained.Seconds(), "s")
	r.Add("heap_bot_state", float64(cs.botHeap), "B")
	r.Add("heap_bot_per_hosted_cluster", float64(cs.botHeap)/float64(f.hosted()), "B/cluster")
	r.Add("heap_peak_per_hosted_cluster", (float64(cs.liveAtCurrent)-float64(cs.heap0))/float64(f.hosted()), "B/cluster")
	r.Add("heap_current_gc_per_hosted_cluster", (float64(cs.liveCurrentGC)-float64(cs.heap0))/float64(f.hosted()), "B/cluster")
	r.Add("rss_process", float64(cs.rss), "B")
	r.Add("rss_growth", float64(cs.rssGrowth), "B")
	r.Add("cpu_s", cs.cpu.Seconds(), "s")
	r.Add("slack_calls", float64(cs.slackCalls), "calls")
	if decode > 0 && cs.current > 0 {
		r.Add("share_deliver", deliver.Seconds()/cs.current.Seconds(), "of replay")
		r.Add("share_decode", (decode-deliver).Seconds()/cs.current.Seconds(), "of replay")
		r.Add("share_apply", (cs.current-decode).Seconds()/cs.current.Seconds(), "of replay (model, diagnose, incidents; lower bound: decode overlaps apply)")
	}

	// --- The start from the checkpoint, an hour of events after it.
	r.Add("checkpoint_write_s", cs.checkpointWrite.Seconds(), "s")
	r.Add("checkpoint_bytes", float64(cs.checkpoint.Size), "B")
	r.Add("checkpoint_bytes_per_hosted_cluster", float64(cs.checkpoint.Size)/float64(f.hosted()), "B/cluster")
	r.Add("checkpoint_chunks", float64(cs.checkpoint.Chunks), "chunks")
	hour, err := b6Fill(ctx, conn.JS, f, events, now, func(t time.Time) bool { return !t.Before(end) })
	if err != nil {
		b.Fatal(err)
	}
	ck := b6Start(b, ctx, conn.JS, f, NewResult(id+"-checkpoint", "", nil), "", false, ckpt)
	r.Add("checkpoint_age_s", b6CheckpointAge.Seconds(), "s")
	r.Add("checkpoint_tail_events", float64(b6Sum(hour)), "events")
	r.Add("checkpoint_restore_s", ck.restore.Seconds(), "s")
	r.Add("checkpoint_current_s", ck.current.Seconds(), "s")
	r.Add("checkpoint_status_complete_s", ck.status.Seconds(), "s")
	r.Add("checkpoint_cpu_s", ck.cpu.Seconds(), "s")
	r.Add("checkpoint_heap_live_at_current", float64(ck.liveAtCurrent)-float64(ck.heap0), "B")
	r.Add("checkpoint_slack_calls", float64(ck.slackCalls), "calls")
	if !ck.restored {
		r.Note("the second start did not restore the checkpoint: its figures are a full replay's")
	}
	r.Note("checkpoint_*: the first start's bot (the leader, current) writes a checkpoint (bot.WriteCheckpoint: checkpoint_write_s, checkpoint_bytes in checkpoint_chunks of the KV bucket %s on the same server); the fleet's next hour (checkpoint_tail_events, B6's mix) is appended; a new bot (the leader, production timers) restores the checkpoint (checkpoint_restore_s: read, verify, decode) and replays the events after it: checkpoint_current_s until it logs \"events replayed\", checkpoint_status_complete_s until `/hcp status` accounts for every hosted cluster", bus.CheckpointsBucket)

	// --- What a checkpoint at the last restatement would leave: the
	// stream's last 12 hours, on a server of its own.
	tail := b6Tail(b, ctx, f, events, end)
	r.Add("tail_events", float64(tail.events), "events")
	r.Add("tail_current_s", tail.current.Seconds(), "s")
	r.Add("tail_status_complete_s", tail.status.Seconds(), "s")
	if tail.current > 0 {
		r.Add("checkpoint_saving", 1-tail.current.Seconds()/cs.current.Seconds(), "of the cold start")
	}
	r.Note("current_s: bot.New + Run until it logs \"events replayed\" (its replay reached the stream's last sequence at start); status_complete_s: until a signed `/hcp status` to chatops.Server accounts for all %d hosted clusters in one message (its summary counts them all, each needing attention is listed, the healthy are counted per management cluster with the command that lists one's: command.StatusAccounted); during the replay `/hcp status` is asked every %v (max latency and deferred answers above)", f.hosted(), b6StatusEvery)
	r.Note("bot: the leader, production timers (configs defaults), the Slack notifier with its KV store against slackrec (Slack's limits); slack_calls = every call it made (the history ends healthy: nothing should be posted). heap_live_at_current = the live heap of the last GC before the replay caught up, minus before the start; heap_current_gc_* = the same after a collection forced at the catch-up (before the leader's first flush); both include the embedded nats-server's part (its block caches of the replay): the %s-current.heap.pprof profile splits them. The replay sweeps the incidents the history replaced as it goes (bot/pending.go: the Slack store has no message for them), so nothing waits for the first flush; pending_released_s = from the start until the heap fell below half of heap_live_at_current, or the note says it did not; heap_bot_state = then, live heap with the stopped bot referenced − without it; heap_process_growth and RSS include the embedded nats-server's caches", id)
	r.Note("shares: ref_deliver = an ordered consumer counting the stream (JetStream alone), ref_deliver_decode = the same decoding each event with event.DecodeAll; the rest of the bot's replay is the model, diagnosis and incidents")
	r.Note("tail_* = a bot without a checkpoint on a stream holding only the last 12 h (the events since the agents' last restatement): replaying from the last restatement without the checkpoint's incidents would give incidents open across it new keys (docs/capacity.md), so this is a reference, not a way to start")
	if events >= 1_000_000 {
		r.Want("current_s", "<=", b6Goal.Seconds())
		r.Want("checkpoint_current_s", "<=", b6CheckpointGoal.Seconds())
	}
	b.ReportMetric(cs.current.Seconds(), id+"_current_s")
	b.ReportMetric(ck.current.Seconds(), id+"_checkpoint_current_s")
}

func b6Sum(counts map[event.Type]int) int {
	n := 0
	for _, c := range counts {
		n += c
	}
	return n
}

// b6Fill publishes the fleet's 72 h into js: asynchronously, the real
// encoding and message IDs, waiting for every acknowledgement. keep, if
// set, selects the events to publish by their time.
func b6Fill(ctx context.Context, js jetstream.JetStream, f fleet, events int, end time.Time, keep func(time.Time) bool) (map[event.Type]int, error) {
	counts := map[event.Type]int{}
	emit := func(e event.Event) error {
		if keep != nil && !keep(e.Time) {
			return nil
		}
		subject, err := event.Subject(e)
		if err != nil {
			return err
		}
		data, err := event.Encode(e)
		if err != nil {
			return err
		}
		m := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{jetstream.MsgIDHeader: []string{e.ID}}}
		for {
			_, err := js.PublishMsgAsync(m)
			if errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
				continue
			}
			if err != nil {
				return err
			}
			break
		}
		counts[e.Type]++
		return nil
	}
	if err := b6History(f, events, end, emit); err != nil {
		return nil, err
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(5 * time.Minute):
		return nil, fmt.Errorf("fill: %d acknowledgements outstanding after 5 min", js.PublishAsyncPending())
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return counts, nil
}

// b6History emits about events events of fleet f over the 72 h ending at
// end, in time order per cluster: see B6's comment for the mix.
func b6History(f fleet, events int, end time.Time, emit func(event.Event) error) error {
	g := &fleetGen{f: f}
	start := end.Add(-b6Span)
	// Per cluster: 6 snapshots × (HostedCluster, summary, SnapshotDone),
	// a noProxy edit (2), a crash episode (4); the rest are flaps of 4.
	fixed := 6*3 + 2 + 4
	flaps := max(1, (events/f.hosted()-fixed)/4)
	step := b6Span / time.Duration(flaps)
	edited := fleetNoProxy + ",.apps.corp.example"
	noProxy := func(edit bool) func(int) string {
		return func(int) string {
			if edit {
				return edited
			}
			return fleetNoProxy
		}
	}
	nextRestate, restated := start, 0
	editAt, crashAt := flaps/3, flaps/2
	for j := range flaps {
		t := start.Add(time.Duration(j) * step)
		if !t.Before(nextRestate) && restated < 6 {
			for s := range f.sources {
				if err := g.snapshot(s, 0, noProxy(j > editAt), t, restated > 0, emit); err != nil {
					return err
				}
			}
			restated++
			nextRestate = nextRestate.Add(b6Restate)
		}
		for s := range f.sources {
			for c := range f.clusters {
				tc := t.Add(time.Duration(s*f.clusters+c) * time.Millisecond)
				n := (j*5 + c) % f.nodes
				var evs []func() (event.Event, error)
				evs = append(evs,
					func() (event.Event, error) { return g.node(s, c, n, false, tc) },
					func() (event.Event, error) { return g.summary(s, c, 1, tc.Add(time.Second)) },
					func() (event.Event, error) { return g.node(s, c, n, true, tc.Add(3*time.Minute)) },
					func() (event.Event, error) { return g.summary(s, c, 0, tc.Add(3*time.Minute+time.Second)) })
				if j == editAt {
					evs = append(evs,
						func() (event.Event, error) { return g.hostedCluster(s, c, edited, tc.Add(4*time.Minute)) },
						func() (event.Event, error) { return g.proxyChange(s, c, fleetNoProxy, edited, tc.Add(4*time.Minute)) })
				}
				if j == crashAt {
					for i := range int32(3) {
						evs = append(evs, func() (event.Event, error) {
							return g.crashLoop(s, c, i+1, false, tc.Add(time.Duration(i+1)*time.Minute))
						})
					}
					evs = append(evs, func() (event.Event, error) { return g.crashLoop(s, c, 3, true, tc.Add(8*time.Minute)) })
				}
				for _, mk := range evs {
					e, err := mk()
					if err != nil {
						return err
					}
					if err := emit(e); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

// b6Consume reads the whole stream with an ordered consumer, decoding each
// event if decode is set, and returns how long it took.
func b6Consume(b *testing.B, ctx context.Context, js jetstream.JetStream, n uint64, decode bool) time.Duration {
	b.Helper()
	cons, err := js.OrderedConsumer(ctx, event.StreamName, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{event.EventsStreamSubjects}, DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		b.Fatal(err)
	}
	var got atomic.Uint64
	done := make(chan struct{})
	start := time.Now()
	cc, err := cons.Consume(func(m jetstream.Msg) {
		if decode {
			_, _, _ = event.DecodeAll(m.Data())
		}
		if got.Add(1) == n {
			close(done)
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Stop()
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		b.Fatalf("reference consumer: %d of %d events in 5 min", got.Load(), n)
	}
	return time.Since(start)
}

// b6Started is what one cold start measured.
type b6Started struct {
	events                   int
	current, status          time.Duration
	maxDuring, statusLatency time.Duration
	deferred                 int
	heapGrowth, botHeap      int64
	heap0, liveAtCurrent     uint64 // the live heap of the last GC before the replay caught up
	liveCurrentGC            uint64 // the heap after a collection forced at the catch-up
	slackCalls               int
	drained                  time.Duration // from the start until the first flush let the replaced incidents go
	rss, rssGrowth           int64
	cpu                      time.Duration
	// With a checkpoint store: whether the start restored one and how
	// long that took (its log), and the checkpoint it wrote once current.
	restored        bool
	restore         time.Duration
	checkpoint      checkpoint.Manifest
	checkpointWrite time.Duration
}

// b6Start starts a bot on js's events stream and measures its cold start;
// profile names its CPU and heap profiles ("" for none). With ckpt, the
// bot restores the newest checkpoint, and writes one once current.
func b6Start(b *testing.B, ctx context.Context, js jetstream.JetStream, f fleet, r *Result, profile string, measureMemory bool, ckpt *checkpoint.Store) b6Started {
	b.Helper()
	var out b6Started
	caught := make(chan struct{})
	var once sync.Once
	logw := b6LogWatch{on: func() { once.Do(func() { close(caught) }) }}
	blog := zerolog.New(&logw).Level(zerolog.InfoLevel)
	cfg := bot.Config{
		Checkpoints:     ckpt,
		CheckpointEvery: -1, // written below, when measured
		Channel:         "C0B6",
		GroupWait:       configs.DefaultGroupWait,
		GroupInterval:   configs.DefaultGroupInterval,
		ResolveTimeout:  configs.DefaultResolveTimeout,
		StormThreshold:  configs.DefaultStormThreshold,
		StormWindow:     configs.DefaultStormWindow,
	}
	// The one bot of a restart: the leader, with the Slack notifier, its
	// KV store (on the same server) and the recorder with Slack's limits.
	rec := slackrec.New(b)
	store, err := notify.NewKVStore(ctx, js, notify.KVConfig{})
	if err != nil {
		b.Fatal(err)
	}
	n, err := notify.NewSlack(notify.SlackConfig{Client: notify.NewSlackClient("xoxb-bench", rec.APIURL(), nil), Store: store, Log: blog, Registerer: prometheus.NewRegistry()})
	if err != nil {
		b.Fatal(err)
	}
	debug.FreeOSMemory()
	heap0, rss0 := heapInUse(), rss()
	out.heap0 = heap0
	bt := bot.New(cfg, js, n, prometheus.NewRegistry(), blog)
	cmds := &command.Handler{Bot: bt}
	srv, err := chatops.NewServer(b6Secret, cmds, chatops.WithRegisterer(prometheus.NewRegistry()))
	if err != nil {
		b.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer func() {
		if hs != nil {
			hs.Close()
		}
	}()
	status := func() (lines int, deferred bool, took time.Duration) {
		t := time.Now()
		text, err := b6Status(ctx, hs.URL)
		took = time.Since(t)
		if err != nil {
			b.Logf("B6 /hcp status: %v", err)
			return 0, false, took
		}
		if strings.HasPrefix(text, "Working on it") {
			return 0, true, took
		}
		// Complete: the reply accounts for every hosted cluster, each
		// listed or counted with the command that lists it.
		total, accounted, ok := command.StatusAccounted(text)
		if !ok || accounted != total {
			return min(accounted, total), false, took
		}
		return total, false, took
	}

	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	stop := func() {}
	if profile != "" {
		stop = cpuProfile(b, r, profile)
	}
	cpu0 := cpuTime()
	start := time.Now()
	wg.Go(func() { _ = n.Run(rctx) })
	wg.Go(func() { _ = bt.Run(rctx) })
	// Users asking during the replay.
	pollDone := make(chan struct{})
	var pollWG sync.WaitGroup
	pollWG.Go(func() {
		for {
			select {
			case <-pollDone:
				return
			case <-time.After(b6StatusEvery):
			}
			_, d, took := status()
			if d {
				out.deferred++
			}
			out.maxDuring = max(out.maxDuring, took)
		}
	})
	select {
	case <-caught:
		out.current = time.Since(start)
		out.liveAtCurrent = heapLive()
		if profile != "" && measureMemory {
			// What heap_live_at_current counts: the last collection's.
			lastHeapProfile(b, r, profile+"-lastgc")
		}
	case <-time.After(10 * time.Minute):
		b.Fatalf("B6: the bot did not catch up within 10 min")
	}
	out.cpu = cpuTime() - cpu0
	stop()
	if measureMemory {
		// What the heap holds at the catch-up, collected (the figure
		// above is the last collection's, during the replay): the
		// leader's first flush has not let anything go yet.
		out.liveCurrentGC = heapInUse()
		if profile != "" {
			heapProfile(b, r, profile+"-current")
		}
	}
	close(pollDone)
	pollWG.Wait()
	for deadline := time.Now().Add(time.Minute); ; {
		lines, _, took := status()
		if lines >= f.hosted() {
			out.status, out.statusLatency = time.Since(start), took
			break
		}
		if time.Now().After(deadline) {
			r.Note("`/hcp status` accounted for %d of %d hosted clusters a minute after the replay caught up", lines, f.hosted())
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if measureMemory {
		// The leader's first flush looks up what the replay left pending
		// and lets go of what nothing will send: wait for the heap to
		// drop to half of its peak, or to what it held at the catch-up
		// when the replay's sweep left nothing to let go, or give up
		// after b6Drain.
		peak := int64(out.liveAtCurrent) - int64(heap0)
		atCurrent := int64(out.liveCurrentGC) - int64(heap0)
		for deadline := time.Now().Add(b6Drain); ; time.Sleep(time.Second) {
			if h := int64(heapInUse()) - int64(heap0); h < peak/2 || h <= atCurrent {
				out.drained = time.Since(start)
				break
			}
			if time.Now().After(deadline) {
				r.Note("the heap did not drop to half its peak within %v of the catch-up", b6Drain)
				break
			}
		}
		heap1 := heapInUse()
		debug.FreeOSMemory()
		out.rss, out.rssGrowth = int64(rss()), int64(rss())-int64(rss0)
		out.heapGrowth = int64(heap1) - int64(heap0)
		if profile != "" {
			heapProfile(b, r, profile)
		}
	}
	out.slackCalls = len(rec.Calls())
	out.restored, out.restore = logw.restored()
	if ckpt != nil {
		t := time.Now()
		if out.checkpoint, err = bt.WriteCheckpoint(ctx); err != nil {
			b.Fatal(err)
		}
		out.checkpointWrite = time.Since(t)
	}
	cancel()
	wg.Wait()
	hs.Close()
	hs.Config.Handler = nil
	if measureMemory {
		time.Sleep(100 * time.Millisecond) // the server's goroutines end
		withBot := heapInUse()
		_ = bt.Clusters() // bt stays live up to here
		// Nothing else holds the bot: the HTTP server is closed and
		// forgotten with its handler.
		hs, srv, cmds, bt, n, store = nil, nil, nil, nil, nil, nil
		out.botHeap = int64(withBot) - int64(heapInUse())
	}
	return out
}

// b6Status asks `/hcp status` the way Slack does (a signed slash command)
// and returns the reply's text.
func b6Status(ctx context.Context, base string) (string, error) {
	req, err := slackrec.CommandRequest(ctx, base+chatops.CommandsPath, b6Secret, slack.SlashCommand{
		Command: "/hcp", Text: "status", UserID: "U0B6", UserName: "oncall", ChannelID: "C0B6", ChannelName: "hcp",
	}, time.Now())
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(body))
	}
	var reply struct {
		Text string `json:"text"`
	}
	if len(body) > 0 {
		if err := json.Unmarshal(body, &reply); err != nil {
			return "", err
		}
	}
	return reply.Text, nil
}

// b6Tail fills a server of its own with the last restatement interval of
// the same history and starts a bot on it.
func b6Tail(b *testing.B, ctx context.Context, f fleet, events int, end time.Time) b6Started {
	b.Helper()
	srv := natstest.RunServer(b)
	defer srv.Shutdown()
	conn, err := bus.Connect(ctx, bus.Config{URLs: []string{srv.ClientURL()}, Name: "b6-tail"}, natstest.Logger(b))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	if _, err := bus.EnsureStream(ctx, conn.JS, bus.EventsStream(0, 0)); err != nil {
		b.Fatal(err)
	}
	// The last restatement is at start + 60 h, the first step at or after it.
	from := end.Add(-b6Span).Add(5 * b6Restate)
	counts, err := b6Fill(ctx, conn.JS, f, events, end, func(t time.Time) bool { return !t.Before(from) })
	if err != nil {
		b.Fatal(err)
	}
	n := b6Sum(counts)
	out := b6Start(b, ctx, conn.JS, f, NewResult("B6-tail", "", nil), "", false, nil)
	out.events = n
	return out
}

// heapLive is the live heap the last garbage collection marked: a figure
// without forcing one (runtime/metrics /gc/heap/live:bytes).
func heapLive() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// b6LogWatch calls on when the bot logs that its replay caught up, and
// keeps how long restoring a checkpoint took.
type b6LogWatch struct {
	on func()

	mu      sync.Mutex
	took    time.Duration
	restore bool
}

func (w *b6LogWatch) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(`"events replayed`)) {
		w.on()
	}
	if bytes.Contains(p, []byte(`"checkpoint restored`)) {
		var line struct {
			Took float64 `json:"took"` // zerolog: milliseconds
		}
		_ = json.Unmarshal(p, &line)
		w.mu.Lock()
		w.restore, w.took = true, time.Duration(line.Took*float64(time.Millisecond))
		w.mu.Unlock()
	}
	return len(p), nil
}

func (w *b6LogWatch) restored() (bool, time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.restore, w.took
}

func b6Counts(m map[event.Type]int) string {
	parts := make([]string, 0, len(m))
	for _, t := range event.Types() {
		if n := m[t]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", t, n))
		}
	}
	return strings.Join(parts, " ")
}

// checkpointStore ensures the checkpoints bucket spec and returns a store
// sealing with a key of its own (B6, B8).
func checkpointStore(b *testing.B, ctx context.Context, js jetstream.JetStream, spec bus.KVSpec) *checkpoint.Store {
	b.Helper()
	kv, err := bus.EnsureKV(ctx, js, spec)
	if err != nil {
		b.Fatal(err)
	}
	key, err := approval.NewEphemeralSigner()
	if err != nil {
		b.Fatal(err)
	}
	ckpt, err := checkpoint.New(kv, key.ForCheckpoints())
	if err != nil {
		b.Fatal(err)
	}
	return ckpt
}
