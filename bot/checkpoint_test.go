package bot_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/bot"
	"github.com/hcpbot/hcpbot/bot/checkpoint"
	"github.com/hcpbot/hcpbot/bot/notify"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
	"github.com/hcpbot/hcpbot/internal/testenv/syncbuf"
)

// checkpointStore is a checkpoint store on kv sealing with a key made
// for the test, as cmd/hcpbot's with the bot's signing key.
func checkpointStore(t *testing.T, kv jetstream.KeyValue) (*checkpoint.Store, checkpoint.Signer) {
	t.Helper()
	key, err := approval.NewEphemeralSigner()
	if err != nil {
		t.Fatal(err)
	}
	signer := key.ForCheckpoints()
	s, err := checkpoint.New(kv, signer)
	if err != nil {
		t.Fatal(err)
	}
	return s, signer
}

// capturedLog is a bot's log, kept for the test to read and shown when it
// fails.
func capturedLog(t *testing.T, name string) (zerolog.Logger, *syncbuf.Buffer) {
	t.Helper()
	var buf syncbuf.Buffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s's log:\n%s", name, buf.String())
		}
	})
	return zerolog.New(&buf).Level(zerolog.DebugLevel).With().Timestamp().Str("replica", name).Logger(), &buf
}

// logged reports whether log has a line of level with msg in it.
func logged(log *syncbuf.Buffer, level, msg string) bool {
	for l := range strings.Lines(log.String()) {
		var line struct{ Level, Message string }
		if json.Unmarshal([]byte(l), &line) == nil && line.Level == level && strings.Contains(line.Message, msg) {
			return true
		}
	}
	return false
}

// lastSeq is the events stream's last sequence.
func lastSeq(t *testing.T, js jetstream.JetStream) uint64 {
	t.Helper()
	s, err := js.Stream(context.Background(), event.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	return s.CachedInfo().State.LastSeq
}

// waitApplied waits until b applied every event of the stream.
func waitApplied(t *testing.T, js jetstream.JetStream, b *bot.Bot) {
	t.Helper()
	want := lastSeq(t, js)
	testenv.Eventually(t, 60*time.Second, fmt.Sprintf("events applied up to %d", want), func() bool { return b.Applied() >= want })
}

// incidentDiff compares two replicas' incidents field by field (what the
// /hcp answers and the messages show, and the key that finds its Slack
// message), and lists the differences.
func incidentDiff(want, got []bot.Incident) []string {
	byKey := func(incs []bot.Incident) map[string]bot.Incident {
		m := map[string]bot.Incident{}
		for _, inc := range incs {
			m[inc.Key] = inc
		}
		return m
	}
	w, g := byKey(want), byKey(got)
	var out []string
	for k, a := range w {
		b, ok := g[k]
		if !ok {
			out = append(out, fmt.Sprintf("%s (%s): missing", k, a.Cluster))
			continue
		}
		diff := func(field string, x, y any) {
			if !reflect.DeepEqual(x, y) {
				out = append(out, fmt.Sprintf("%s (%s) %s:\n  want %+v\n  got  %+v", k, a.Cluster, field, x, y))
			}
		}
		diff("Cluster", a.Cluster, b.Cluster)
		diff("Opened", a.Opened.UTC(), b.Opened.UTC())
		diff("Resolved", a.Resolved.UTC(), b.Resolved.UTC())
		diff("Storm", a.Storm, b.Storm)
		diff("Channel", a.Channel, b.Channel)
		diff("Deleted", a.Deleted, b.Deleted)
		diff("Silence", a.Silence, b.Silence)
		diff("Remedy", a.Remedy, b.Remedy)
		diff("Diagnoses", a.Diagnoses, b.Diagnoses)
		diff("Timeline", a.Timeline(), b.Timeline())
	}
	for k, b := range g {
		if _, ok := w[k]; !ok {
			out = append(out, fmt.Sprintf("%s (%s): not expected", k, b.Cluster))
		}
	}
	slices.Sort(out)
	return out
}

// replayInFull runs a bot like cfg's without checkpoints, the leader,
// until it applied the whole stream and its incidents are want's (what
// the leader's flush decides after the replay, silences and resolutions,
// included), or 30 s passed; it returns the bot and the differences left.
func replayInFull(t *testing.T, js jetstream.JetStream, rec *slackrec.Recorder, cfg bot.Config, log zerolog.Logger, want []bot.Incident) (*botRun, []string) {
	t.Helper()
	cfg.Checkpoints, cfg.Leader = nil, nil
	replayed := runBotLogged(t, js, rec, cfg, nil, nil, log)
	waitApplied(t, js, replayed.bot)
	deadline := time.Now().Add(30 * time.Second)
	for {
		diff := incidentDiff(want, replayed.bot.Incidents())
		if len(diff) == 0 || time.Now().After(deadline) {
			return replayed, diff
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// stormDiff compares two replicas' storms.
func stormDiff(want, got []bot.StormState) []string {
	norm := func(ss []bot.StormState) map[string]string {
		m := map[string]string{}
		for _, s := range ss {
			members := slices.Sorted(slices.Values(s.Members))
			m[s.Key] = fmt.Sprintf("%+v %s %s %s %s %v", s.Cause, s.Channel, s.Opened.UTC(), s.Resolved.UTC(), strings.Join(members, ","), len(members))
		}
		return m
	}
	w, g := norm(want), norm(got)
	var out []string
	for k, v := range w {
		if g[k] != v {
			out = append(out, fmt.Sprintf("storm %s:\n  want %s\n  got  %s", k, v, g[k]))
		}
	}
	for k, v := range g {
		if _, ok := w[k]; !ok {
			out = append(out, fmt.Sprintf("storm %s not expected: %s", k, v))
		}
	}
	return out
}

// rootOf finds the root message naming cluster (namespace/name).
func rootOf(r *slackrec.Recorder, cluster string) (slackrec.Message, bool) {
	for _, m := range roots(r) {
		if strings.Contains(m.Text, cluster) {
			return m, true
		}
	}
	return slackrec.Message{}, false
}

// A bot restarted from a checkpoint is the bot a full replay of the same
// stream builds: the same incidents (keys, so Slack messages; diagnoses,
// silences, timelines), storms and model, field by field. Between the two
// it posts no second root and updates no message whose incident did not
// change. On a 3-node NATS cluster (R3 stream and checkpoint bucket), with
// the node that led the checkpoint bucket down when the bot restarts.
func TestCheckpointRestartEqualsFullReplay(t *testing.T) {
	ctx := context.Background()
	cl := natstest.RunCluster(t, 3)
	conn, err := bus.Connect(ctx, bus.Config{URLs: cl.URLs()}, natstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	js := conn.JS
	if _, err := bus.EnsureStream(ctx, js, bus.EventsStream(0, 0, bus.WithReplicas(3))); err != nil {
		t.Fatal(err)
	}
	kv, err := bus.EnsureKV(ctx, js, bus.CheckpointsKV(0, bus.WithReplicas(3)))
	if err != nil {
		t.Fatal(err)
	}
	// The Slack message store too, as deployed: it must outlive a node.
	if _, err := notify.NewKVStore(ctx, js, notify.KVConfig{}, bus.WithReplicas(3)); err != nil {
		t.Fatal(err)
	}
	rec := slackrec.New(t)
	const source, ns = "mgmt-ckpt", "fleet"
	var silenced atomic.Bool
	until := time.Now().Add(4 * time.Hour).Truncate(time.Second)
	cfg := stormConfig()
	cfg.ResolveTimeout = 2 * time.Second
	cfg.Checkpoints, _ = checkpointStore(t, kv)
	cfg.CheckpointEvery = -1 // at shutdown only: the test says when
	cfg.Silenced = func(cluster, _ string, _ time.Time) (bot.SilenceInfo, bool) {
		if silenced.Load() && cluster == source+"/"+ns+"/silenced" {
			return bot.SilenceInfo{ID: "sil-1", By: "U0SRE", Reason: "maintenance", Until: until}, true
		}
		return bot.SilenceInfo{}, false
	}

	// The first run: a storm of 20 clusters, four incidents of their own,
	// one of them silenced once posted.
	logA, _ := capturedLog(t, "first")
	first := runBotLogged(t, js, rec, cfg, nil, nil, logA)
	now := time.Now()
	// Another management cluster: its incidents share no cause with the
	// own clusters', which stay incidents of their own.
	events, err := scenario.Storm(source+"-storm", "storm", 20, 2, now)
	if err != nil {
		t.Fatal(err)
	}
	own := []string{"steady", "silenced", "heals", "grows"}
	for _, name := range own {
		events = append(events, nodeEvents(t, source, ns, name, now, 7)...)
	}
	if err := scenario.Publish(ctx, js, events); err != nil {
		t.Fatal(err)
	}
	ts := map[string]string{} // cluster name or "storm" → root ts
	rec.WaitFor(t, 60*time.Second, func(r *slackrec.Recorder) bool {
		for _, name := range own {
			if m, ok := rootOf(r, ns+"/"+name); ok {
				ts[name] = m.TS
			}
		}
		for _, m := range roots(r) {
			if strings.Contains(m.Text, "STORM") && len(listed(r, m.TS)) == 20 {
				ts["storm"] = m.TS
			}
		}
		return len(ts) == len(own)+1
	})
	silenced.Store(true)
	rec.WaitFor(t, 30*time.Second, func(r *slackrec.Recorder) bool {
		m, ok := r.Message(channel, ts["silenced"])
		return ok && strings.Contains(m.Text+string(m.Blocks), "Silenced by")
	})
	testenv.Eventually(t, 30*time.Second, "the first run's notifications delivered", func() bool {
		return metricSum(t, first.reg, "hcpbot_slack_queue_depth") == 0
	})
	first.cancel() // a clean shutdown: it writes a checkpoint
	// A KV read may be served by a replica a moment behind the write.
	var m checkpoint.Manifest
	testenv.Eventually(t, 10*time.Second, "the checkpoint of the clean shutdown readable", func() bool {
		m, _, err = cfg.Checkpoints.Load(ctx, bot.DefaultCheckpointName)
		return err == nil
	})
	if want := lastSeq(t, js); m.Seq != want {
		t.Errorf("checkpoint at sequence %d, the stream ends at %d", m.Seq, want)
	}

	// While no bot runs: one incident heals, one grows, one cluster
	// fails; the node leading the checkpoint bucket goes down.
	down := cl.WaitForStreamLeader("KV_" + bus.CheckpointsBucket)
	cl.Stop(down)
	t.Cleanup(func() { cl.Restart(down) })
	cl.WaitForStreamLeader("KV_" + bus.CheckpointsBucket)
	cl.WaitForStreamLeader(event.StreamName)
	later := time.Now()
	tail := append(nodeEvents(t, source, ns, "fresh", later, 3),
		nodeEvent(t, source, ns, "heals", 7, true, later),
		nodeEvent(t, source, ns, "grows", 8, false, later))
	if err := scenario.Publish(ctx, js, tail); err != nil {
		t.Fatal(err)
	}

	// The restart from the checkpoint.
	mark := len(rec.Calls())
	logB, bufB := capturedLog(t, "restored")
	restored := runBotLogged(t, js, rec, cfg, nil, nil, logB)
	rec.WaitFor(t, 60*time.Second, func(r *slackrec.Recorder) bool {
		healed, _ := r.Message(channel, ts["heals"])
		grown, _ := r.Message(channel, ts["grows"])
		_, fresh := rootOf(r, ns+"/fresh")
		return fresh && strings.Contains(healed.Text, "RESOLVED") && strings.Contains(grown.Text, "2 of 30 nodes NotReady")
	})
	testenv.Eventually(t, 30*time.Second, "the restored run's notifications delivered, the unchanged ones found so", func() bool {
		return metricSum(t, restored.reg, "hcpbot_slack_queue_depth") == 0 && metricSum(t, restored.reg, "hcpbot_slack_unchanged_total") >= 1
	})
	if !logged(bufB, "info", "checkpoint restored") {
		t.Error("the restarted bot did not restore the checkpoint")
	}
	for _, c := range rec.Calls()[mark:] {
		target := c.Form.Get("ts") + c.Form.Get("thread_ts")
		if c.Method == "chat.postMessage" && c.Form.Get("thread_ts") == "" && !strings.Contains(c.Form.Get("text"), ns+"/fresh") {
			t.Errorf("after the restart, a second root: %.200s", c.Form.Get("text"))
		}
		for _, name := range []string{"storm", "steady", "silenced"} {
			if target == ts[name] {
				t.Errorf("after the restart, %s touched %s, which did not change: %.200s", c.Method, name, c.Form.Get("text"))
			}
		}
	}
	wantIncidents, wantStorms, wantModel := restored.bot.Incidents(), restored.bot.Storms(), restored.bot.ModelCheckpoint()
	restored.cancel()

	// The same stream replayed in full, by a bot without checkpoints.
	mark = len(rec.Calls())
	logC, bufC := capturedLog(t, "replayed")
	replayed, diff := replayInFull(t, js, rec, cfg, logC, wantIncidents)
	if len(diff) > 0 {
		t.Errorf("restored and replayed incidents differ:\n%s", strings.Join(diff, "\n"))
	}
	if d := stormDiff(wantStorms, replayed.bot.Storms()); len(d) > 0 {
		t.Errorf("restored and replayed storms differ:\n%s", strings.Join(d, "\n"))
	}
	if d := wantModel.Diff(replayed.bot.ModelCheckpoint()); len(d) > 0 {
		t.Errorf("restored and replayed models differ:\n%s", strings.Join(d, "\n"))
	}
	if wantModel.Len() == 0 || len(wantIncidents) < len(own)+21 {
		t.Errorf("%d clusters, %d incidents: the comparison compares little", wantModel.Len(), len(wantIncidents))
	}
	if logged(bufC, "info", "checkpoint restored") {
		t.Error("the bot without checkpoints restored one")
	}
	// Both found every Slack message by the incidents' keys.
	for _, inc := range wantIncidents {
		if inc.Storm != "" {
			continue
		}
		if ok, err := replayed.slack.HasRoot(ctx, inc.Key); err != nil || !ok {
			t.Errorf("%s (%s): no Slack message under its key (%v)", inc.Key, inc.Cluster, err)
		}
	}
	testenv.Eventually(t, 30*time.Second, "the replayed run's notifications delivered", func() bool {
		return metricSum(t, replayed.reg, "hcpbot_slack_queue_depth") == 0
	})
	for _, c := range rec.Calls()[mark:] {
		if c.Method == "chat.postMessage" && c.Form.Get("thread_ts") == "" {
			t.Errorf("the full replay posted a second root: %.200s", c.Form.Get("text"))
		}
	}
}

// A checkpoint that is corrupt, truncated, of another format, of another
// stream or that does not decode is ignored with a warning, and the bot
// replays the whole stream: the incidents are those of the run that wrote
// it, never a wrong one.
func TestCheckpointRefusedReplaysInFull(t *testing.T) {
	ctx := context.Background()
	js := natsJS(t)
	kv, err := bus.EnsureKV(ctx, js, bus.CheckpointsKV(0))
	if err != nil {
		t.Fatal(err)
	}
	rec := slackrec.New(t)
	cfg := restartConfig()
	var signer checkpoint.Signer
	cfg.Checkpoints, signer = checkpointStore(t, kv)
	cfg.CheckpointEvery = -1
	const source, ns = "mgmt-ckpt-bad", "clusters"
	first := startBot(t, js, rec, cfg)
	var events []event.Event
	names := []string{"one", "two", "three"}
	for _, name := range names {
		events = append(events, nodeEvents(t, source, ns, name, time.Now(), 3)...)
	}
	if err := scenario.Publish(ctx, js, events); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, 30*time.Second, func(r *slackrec.Recorder) bool { return len(roots(r)) == len(names) })
	want := first.bot.Incidents()
	first.cancel()

	manifest, err := kv.Get(ctx, bot.DefaultCheckpointName)
	if err != nil {
		t.Fatal(err)
	}
	m, _, err := cfg.Checkpoints.Load(ctx, bot.DefaultCheckpointName)
	if err != nil {
		t.Fatal(err)
	}
	chunk := func(i int) string { return bot.DefaultCheckpointName + "." + m.Generation + "." + strconv.Itoa(i) }
	pristine := map[string][]byte{bot.DefaultCheckpointName: manifest.Value()}
	for i := range m.Chunks {
		e, err := kv.Get(ctx, chunk(i))
		if err != nil {
			t.Fatal(err)
		}
		pristine[chunk(i)] = e.Value()
	}
	put := func(t *testing.T, key string, v []byte) {
		t.Helper()
		if _, err := kv.Put(ctx, key, v); err != nil {
			t.Fatal(err)
		}
	}
	putManifest := func(t *testing.T, edit func(*checkpoint.Manifest)) {
		mm := m
		edit(&mm)
		// Sealed with the bot's key: what the bot refuses here is what
		// the manifest says, not who wrote it.
		data, err := checkpoint.SealManifest(signer, bot.DefaultCheckpointName, mm)
		if err != nil {
			t.Fatal(err)
		}
		put(t, bot.DefaultCheckpointName, data)
	}
	last := m.Chunks - 1
	for _, tc := range []struct {
		name     string
		corrupt  func(t *testing.T)
		restored bool
	}{
		{"intact", func(*testing.T) {}, true},
		{"bytes flipped", func(t *testing.T) {
			v := bytes.Clone(pristine[chunk(0)])
			for i := len(v) / 3; i < len(v)/3+8; i++ {
				v[i] ^= 0xff
			}
			put(t, chunk(0), v)
		}, false},
		{"truncated", func(t *testing.T) { put(t, chunk(last), pristine[chunk(last)][:len(pristine[chunk(last)])/2]) }, false},
		{"a chunk missing", func(t *testing.T) {
			if err := kv.Purge(ctx, chunk(last)); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"a foreign format version", func(t *testing.T) {
			putManifest(t, func(mm *checkpoint.Manifest) { mm.Format, mm.Build = checkpoint.Format+1, "hcpbot v9.9.9" })
		}, false},
		{"another events stream", func(t *testing.T) {
			putManifest(t, func(mm *checkpoint.Manifest) { mm.StreamCreated = mm.StreamCreated.Add(-time.Hour) })
		}, false},
		{"ahead of the stream", func(t *testing.T) {
			putManifest(t, func(mm *checkpoint.Manifest) { mm.Seq += 1000 })
		}, false},
		{"content that does not decode, with its digest", func(t *testing.T) {
			junk := bytes.Repeat([]byte("not a gob "), 100)
			sum := sha256.Sum256(junk)
			put(t, chunk(0), junk)
			putManifest(t, func(mm *checkpoint.Manifest) {
				mm.Chunks, mm.Size, mm.SHA256 = 1, int64(len(junk)), hex.EncodeToString(sum[:])
			})
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range pristine {
				put(t, k, v)
			}
			tc.corrupt(t)
			c := cfg
			c.Leader = func() bool { return false } // sends nothing, writes nothing
			log, buf := capturedLog(t, "restarted")
			b := runBotLogged(t, js, rec, c, nil, nil, log)
			defer b.cancel()
			waitApplied(t, js, b.bot)
			if got := logged(buf, "info", "checkpoint restored"); got != tc.restored {
				t.Errorf("checkpoint restored: %v, want %v", got, tc.restored)
			}
			if !tc.restored && !logged(buf, "warn", "replaying the whole") {
				t.Error("no warning that the checkpoint was ignored")
			}
			if d := incidentDiff(want, b.bot.Incidents()); len(d) > 0 {
				t.Errorf("incidents differ from the run that wrote the checkpoint:\n%s", strings.Join(d, "\n"))
			}
		})
	}
}

// The leader writes a checkpoint every CheckpointEvery while it runs, not
// only at shutdown: each write covers the events applied by then, and a
// later one the events after it.
func TestCheckpointWrittenOnSchedule(t *testing.T) {
	ctx := context.Background()
	js := natsJS(t)
	kv, err := bus.EnsureKV(ctx, js, bus.CheckpointsKV(0))
	if err != nil {
		t.Fatal(err)
	}
	store, _ := checkpointStore(t, kv)
	cfg := stormConfig()
	cfg.Checkpoints, cfg.CheckpointEvery = store, 200*time.Millisecond
	rec := slackrec.New(t)
	runBot(t, js, rec, cfg, nil, nil)

	// covered waits for a checkpoint, written while the bot runs, whose
	// sequence reaches the stream's last event.
	covered := func(what string) checkpoint.Manifest {
		t.Helper()
		s, err := js.Stream(ctx, event.StreamName)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var m checkpoint.Manifest
		testenv.Eventually(t, 30*time.Second, what, func() bool {
			got, _, err := store.Load(ctx, bot.DefaultCheckpointName)
			m = got
			return err == nil && got.Seq >= info.State.LastSeq
		})
		return m
	}
	now := time.Now()
	if err := scenario.Publish(ctx, js, nodeEvents(t, "mgmt-sched", "clusters", "a", now, 3)); err != nil {
		t.Fatal(err)
	}
	first := covered("a checkpoint covering the first events")
	if err := scenario.Publish(ctx, js, nodeEvents(t, "mgmt-sched", "clusters", "b", now.Add(time.Second), 3)); err != nil {
		t.Fatal(err)
	}
	second := covered("a later checkpoint covering the events after it")
	if second.Seq <= first.Seq || !second.Written.After(first.Written) {
		t.Errorf("second checkpoint %d written %s, want past the first %d written %s", second.Seq, second.Written, first.Seq, first.Written)
	}
}
