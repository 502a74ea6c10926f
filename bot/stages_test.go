package bot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/bot/notify"
	"github.com/hcpbot/hcpbot/event"
)

// Each flush stage alone, on constructed incidents: what it lets on, what
// it holds and for which reason (hcpbot_bot_notifications_suppressed_total).

var t0 = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

// recorder is a notifier that keeps what it is handed.
type recorder struct {
	msgs    []notify.Message
	replies []notify.Reply
	err     error
}

func (r *recorder) Upsert(_ context.Context, m notify.Message) error {
	if r.err != nil {
		return r.err
	}
	r.msgs = append(r.msgs, m)
	return nil
}

func (r *recorder) Reply(_ context.Context, rp notify.Reply) error {
	if r.err != nil {
		return r.err
	}
	r.replies = append(r.replies, rp)
	return nil
}

func (r *recorder) Run(ctx context.Context) error { <-ctx.Done(); return nil }

func stageBot(t *testing.T, cfg Config) (*Bot, *recorder) {
	t.Helper()
	if cfg.Channel == "" {
		cfg.Channel = "C1"
	}
	if cfg.Now == nil {
		cfg.Now = func() time.Time { return t0 }
	}
	rec := &recorder{}
	return New(cfg, nil, rec, nil, zerolog.Nop()), rec
}

// incident is an open incident of cluster name, opened (and seen) at
// opened, with something new to show.
func incident(name string, opened time.Time, opts ...func(*Incident)) *Incident {
	k := diagnose.Key{Source: "mgmt-1", Cluster: event.ClusterRef{Namespace: "clusters", Name: name}}
	inc := &Incident{Key: incidentKey(k, opened), Cluster: k, Opened: opened, Channel: "C1",
		Diagnoses: []diagnose.Diagnosis{{Rule: "node-not-ready", Severity: diagnose.SeverityWarning, Title: name + ": nodes NotReady",
			Evidence: []diagnose.Evidence{{At: opened, Kind: "node", Object: "node/" + name + "-0", Text: "Ready=False"}}}}}
	inc.n.seen, inc.n.changed, inc.n.dirty = opened, opened, true
	inc.n.state = fingerprint(inc)
	for _, o := range opts {
		o(inc)
	}
	return inc
}

// Options of incident.
var (
	handled   = func(inc *Incident) { inc.n.first, inc.n.checked = inc.Opened, true }
	rooted    = func(inc *Incident) { inc.n.rooted, inc.n.checked = true, true }
	unchanged = func(inc *Incident) { inc.n.dirty = false }
	resolved  = func(inc *Incident) { inc.Resolved = inc.Opened.Add(time.Minute) }
	clearing  = func(inc *Incident) {
		inc.clearAt, inc.n.clearSeen = inc.Opened.Add(time.Minute), inc.Opened.Add(time.Minute)
	}
	silenced = func(inc *Incident) { inc.Silence = &SilenceInfo{ID: "sil-1", By: "U1", Until: t0.Add(time.Hour)} }
	told     = func(inc *Incident) { inc.n.held = reasonSilenced }
)

func sentAt(at time.Time) func(*Incident) {
	return func(inc *Incident) { inc.n.sent = at }
}

func names(incs []*Incident) []string {
	out := []string{}
	for _, inc := range incs {
		out = append(out, inc.Cluster.Cluster.Name)
	}
	return out
}

// counts returns the suppression counter by reason, without zeros.
func counts(b *Bot) map[reason]float64 {
	out := map[reason]float64{}
	for _, r := range reasons {
		if v := testutil.ToFloat64(b.metrics.suppressed.WithLabelValues(string(r))); v != 0 {
			out[r] = v
		}
	}
	return out
}

// stageCase is one row of a stage's table: the incidents going in, those
// expected out (by cluster name, in order: stages keep it) and the
// suppressions counted.
type stageCase struct {
	name  string
	cfg   Config
	in    []*Incident
	out   []string
	held  map[reason]float64
	next  time.Time // zero: the flush need not look sooner than maxFlush
	check func(t *testing.T, b *Bot, in []*Incident, rec *recorder)
}

// named picks the stage called name of a Bot's incident pipeline, wired
// as the flush wires it.
func named(name string) func(*Bot) stage[*Incident] {
	return func(b *Bot) stage[*Incident] {
		for _, s := range b.incidentStages() {
			if s.Name() == name {
				return s
			}
		}
		panic("no incident stage " + name)
	}
}

// span is the stages from..to of an incident pipeline run as one, for a
// test of what they decide together.
type span struct {
	stages pipeline[*Incident]
}

func (span) Name() string { return "span" }

func (s span) Exec(f *flushRun, due []*Incident) []*Incident { return s.stages.run(f, due) }

func spanOf(from, to string) func(*Bot) stage[*Incident] {
	return func(b *Bot) stage[*Incident] {
		var sp span
		in := false
		for _, s := range b.incidentStages() {
			in = in || s.Name() == from
			if in {
				sp.stages = append(sp.stages, s)
			}
			if s.Name() == to {
				break
			}
		}
		return sp
	}
}

// declared are the reasons a stage may hold for: its one reason, none, or
// for a span those of its stages.
func declared(s any) []reason {
	switch s := s.(type) {
	case interface{ Reason() reason }:
		return []reason{s.Reason()}
	case span:
		var out []reason
		for _, st := range s.stages {
			out = append(out, declared(st)...)
		}
		return out
	}
	return nil
}

// runStage runs the stage of a fresh Bot that pick returns on each case,
// and checks that it held for no reason but its own.
func runStage(t *testing.T, pick func(*Bot) stage[*Incident], cases []stageCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, rec := stageBot(t, c.cfg)
			for _, inc := range c.in {
				b.incidents[inc.Cluster] = inc
			}
			f := &flushRun{ctx: t.Context(), now: t0, next: t0.Add(maxFlush)}
			st := pick(b)
			got := names(st.Exec(f, slices.Clone(c.in)))
			if want := append([]string{}, c.out...); !slices.Equal(got, want) {
				t.Errorf("let on %v, want %v", got, want)
			}
			held := c.held
			if held == nil {
				held = map[reason]float64{}
			}
			if got := counts(b); fmt.Sprint(got) != fmt.Sprint(held) {
				t.Errorf("suppressed %v, want %v", got, held)
			}
			for r := range counts(b) {
				if !slices.Contains(declared(st), r) {
					t.Errorf("stage %s held for %s; it declares %v", st.Name(), r, declared(st))
				}
			}
			next := c.next
			if next.IsZero() {
				next = t0.Add(maxFlush)
			}
			if !f.next.Equal(next) {
				t.Errorf("looks again at %v, want %v", f.next, next)
			}
			if c.check != nil {
				c.check(t, b, c.in, rec)
			}
		})
	}
}

func TestIncidentStagesOrder(t *testing.T) {
	b, _ := stageBot(t, Config{})
	var got []string
	for _, s := range b.incidentStages() {
		got = append(got, s.Name())
	}
	want := []string{"resolve", "remedy", "silence", "root-lookup", "new-resolved", "new-silenced", "new-clearing", "group-wait",
		"storm", "unchanged", "storm-member", "resolved-unposted", "silenced", "clearing", "group-interval", "send"}
	if !slices.Equal(got, want) {
		t.Fatalf("incident stages %v, want %v", got, want)
	}
	got = nil
	for _, s := range b.stormStages() {
		got = append(got, s.Name())
	}
	want = []string{"settle", "unchanged", "clearing", "group-interval", "resolved-unposted", "send"}
	if !slices.Equal(got, want) {
		t.Fatalf("storm stages %v, want %v", got, want)
	}
}

func TestHoldCountsOnce(t *testing.T) {
	b, _ := stageBot(t, Config{})
	var held reason
	b.holds.hold(&held, "incident", "inc-1", reasonGroupWait)
	b.holds.hold(&held, "incident", "inc-1", reasonGroupWait)
	b.holds.hold(&held, "incident", "inc-1", reasonGroupInterval)
	if want := map[reason]float64{reasonGroupWait: 1, reasonGroupInterval: 1}; fmt.Sprint(counts(b)) != fmt.Sprint(want) {
		t.Fatalf("suppressed %v, want %v", counts(b), want)
	}
	if held != reasonGroupInterval {
		t.Fatalf("held %q", held)
	}
}

func TestResolveStage(t *testing.T) {
	cfg := Config{ResolveTimeout: 5 * time.Minute}
	runStage(t, named("resolve"), []stageCase{
		{name: "clear for the timeout: resolved at the clearing", cfg: cfg,
			in: []*Incident{incident("a", t0.Add(-time.Hour), clearing, unchanged)}, out: []string{"a"},
			check: func(t *testing.T, _ *Bot, in []*Incident, _ *recorder) {
				if inc := in[0]; inc.Open() || !inc.Resolved.Equal(inc.clearAt) || !inc.n.dirty {
					t.Errorf("resolved %v (clear at %v), dirty %v", inc.Resolved, inc.clearAt, inc.n.dirty)
				}
			}},
		{name: "clear for less: open, looks again when due", cfg: cfg,
			in: []*Incident{incident("a", t0.Add(-time.Hour), clearing, func(inc *Incident) {
				inc.n.clearSeen = t0.Add(-5*time.Minute + 500*time.Millisecond)
			})},
			out:  []string{"a"},
			next: t0.Add(500 * time.Millisecond),
			check: func(t *testing.T, _ *Bot, in []*Incident, _ *recorder) {
				if !in[0].Open() {
					t.Error("resolved before its timeout")
				}
			}},
		{name: "signals present: untouched", cfg: cfg, in: []*Incident{incident("a", t0.Add(-time.Hour))}, out: []string{"a"}},
	})
}

func TestSilenceStage(t *testing.T) {
	silencer := func(cluster, key string, _ time.Time) (SilenceInfo, bool) {
		if strings.HasSuffix(cluster, "/quiet") || key == "storm-1" {
			return SilenceInfo{ID: "sil-1", By: "U1", Until: t0.Add(time.Hour)}, true
		}
		return SilenceInfo{}, false
	}
	cfg := Config{Silenced: silencer}
	isSilenced := func(want ...bool) func(*testing.T, *Bot, []*Incident, *recorder) {
		return func(t *testing.T, _ *Bot, in []*Incident, _ *recorder) {
			for i, inc := range in {
				if got := inc.Silence != nil; got != want[i] {
					t.Errorf("%s silenced %v, want %v", inc.Cluster, got, want[i])
				}
			}
		}
	}
	runStage(t, named("silence"), []stageCase{
		{name: "its cluster silenced: marked, holds nothing", cfg: cfg,
			in: []*Incident{incident("quiet", t0, handled, unchanged), incident("loud", t0)}, out: []string{"quiet", "loud"},
			check: func(t *testing.T, b *Bot, in []*Incident, r *recorder) {
				isSilenced(true, false)(t, b, in, r)
				if !in[0].n.dirty {
					t.Error("a silence that starts is not due to be said")
				}
			}},
		{name: "its storm silenced", cfg: cfg,
			in: []*Incident{incident("a", t0, func(inc *Incident) { inc.Storm = "storm-1" })}, out: []string{"a"},
			check: isSilenced(true)},
		{name: "resolved: no silence", cfg: cfg,
			in: []*Incident{incident("quiet", t0, resolved, silenced)}, out: []string{"quiet"}, check: isSilenced(false)},
		{name: "silence ended", cfg: cfg,
			in: []*Incident{incident("loud", t0, silenced, unchanged)}, out: []string{"loud"},
			check: func(t *testing.T, b *Bot, in []*Incident, r *recorder) {
				isSilenced(false)(t, b, in, r)
				if !in[0].n.dirty {
					t.Error("a silence that ends is not due to be said")
				}
			}},
	})
}

// firstHandled checks which of the incidents the flush has handled.
func firstHandled(want ...bool) func(*testing.T, *Bot, []*Incident, *recorder) {
	return func(t *testing.T, _ *Bot, in []*Incident, _ *recorder) {
		for i, inc := range in {
			if got := !inc.n.first.IsZero(); got != want[i] {
				t.Errorf("%s handled %v, want %v", inc.Cluster, got, want[i])
			}
		}
	}
}

// firstStages are the stages that decide when the flush first handles an
// incident, in order, each with its cases.
func firstStages() []struct {
	stage string
	cases []stageCase
} {
	cfg := Config{GroupWait: 10 * time.Second}
	return []struct {
		stage string
		cases []stageCase
	}{
		{"root-lookup", []stageCase{
			{name: "resolved, root not looked up: held", cfg: cfg, in: []*Incident{incident("a", t0, resolved)},
				held: map[reason]float64{reasonRootLookup: 1}, check: firstHandled(false)},
		}},
		{"new-resolved", []stageCase{
			{name: "resolved, no message: dropped", cfg: cfg,
				in:   []*Incident{incident("a", t0, resolved, func(inc *Incident) { inc.n.checked = true })},
				held: map[reason]float64{reasonResolvedUnposted: 1},
				check: func(t *testing.T, b *Bot, in []*Incident, r *recorder) {
					firstHandled(true)(t, b, in, r)
					if in[0].n.dirty {
						t.Error("nothing to say, still dirty")
					}
				}},
			{name: "resolved with a message (previous run): handled at once", cfg: cfg,
				in: []*Incident{incident("a", t0, resolved, rooted)}, out: []string{"a"}, check: firstHandled(true)},
		}},
		{"new-silenced", []stageCase{
			{name: "silenced: held", cfg: cfg, in: []*Incident{incident("a", t0.Add(-time.Minute), silenced)},
				held: map[reason]float64{reasonSilenced: 1}},
		}},
		{"new-clearing", []stageCase{
			{name: "clearing: held", cfg: cfg, in: []*Incident{incident("a", t0.Add(-time.Minute), clearing)},
				held: map[reason]float64{reasonClearing: 1}},
		}},
		{"group-wait", []stageCase{
			{name: "within its wait: held, looks again when over", cfg: cfg,
				in: []*Incident{incident("a", t0.Add(-9500*time.Millisecond))}, held: map[reason]float64{reasonGroupWait: 1},
				next: t0.Add(500 * time.Millisecond)},
			{name: "wait over: due, not yet handled (the storm stage does)", cfg: cfg,
				in:  []*Incident{incident("b", t0.Add(-10*time.Second)), incident("a", t0.Add(-time.Minute))},
				out: []string{"b", "a"}, check: firstHandled(false, false)},
			{name: "handled before: let on", cfg: cfg, in: []*Incident{incident("a", t0, handled)}, out: []string{"a"}},
		}},
	}
}

// firstStageCases runs the cases of the first-handling stage named stage
// on it alone.
func firstStageCases(t *testing.T, stage string) {
	t.Helper()
	for _, s := range firstStages() {
		if s.stage == stage {
			runStage(t, named(stage), s.cases)
			return
		}
	}
	t.Fatalf("no cases for %s", stage)
}

func TestRootLookupStage(t *testing.T)  { firstStageCases(t, "root-lookup") }
func TestNewResolvedStage(t *testing.T) { firstStageCases(t, "new-resolved") }
func TestNewSilencedStage(t *testing.T) { firstStageCases(t, "new-silenced") }
func TestNewClearingStage(t *testing.T) { firstStageCases(t, "new-clearing") }

// The group-wait stage alone, then every case of the stages root-lookup to
// group-wait run through all of them: together they decide what the one
// group-wait stage did before it was split, one reason a stage.
func TestGroupWaitStage(t *testing.T) {
	firstStageCases(t, "group-wait")
	var all []stageCase
	for _, s := range firstStages() {
		all = append(all, s.cases...)
	}
	t.Run("root-lookup to group-wait", func(t *testing.T) { runStage(t, spanOf("root-lookup", "group-wait"), all) })
}

func TestUnchangedStage(t *testing.T) {
	runStage(t, named("unchanged"), []stageCase{
		{name: "nothing new: dropped, uncounted",
			in:  []*Incident{incident("a", t0, handled, unchanged), incident("b", t0, handled), incident("c", t0)},
			out: []string{"b"}},
	})
}

func TestResolvedUnpostedStage(t *testing.T) {
	runStage(t, named("resolved-unposted"), []stageCase{
		{name: "resolved, never posted: dropped",
			in:   []*Incident{incident("a", t0, handled, resolved), incident("b", t0, handled, resolved, rooted), incident("c", t0, handled)},
			out:  []string{"b", "c"},
			held: map[reason]float64{reasonResolvedUnposted: 1},
			check: func(t *testing.T, _ *Bot, in []*Incident, _ *recorder) {
				if in[0].n.dirty {
					t.Error("still dirty")
				}
			}},
	})
}

func TestSilencedStage(t *testing.T) {
	runStage(t, named("silenced"), []stageCase{
		{name: "not silenced: let on", in: []*Incident{incident("a", t0, handled, rooted)}, out: []string{"a"}},
		{name: "silenced with a message: let on once, to say so",
			in: []*Incident{incident("a", t0, handled, rooted, silenced)}, out: []string{"a"}},
		{name: "said so: held, nothing left to show",
			in: []*Incident{incident("a", t0, handled, rooted, silenced, told)},
			check: func(t *testing.T, _ *Bot, in []*Incident, _ *recorder) {
				if in[0].n.dirty {
					t.Error("still dirty")
				}
			}},
		{name: "silenced, never posted: held, waits",
			in: []*Incident{incident("a", t0, handled, silenced)}, held: map[reason]float64{reasonSilenced: 1},
			check: func(t *testing.T, _ *Bot, in []*Incident, _ *recorder) {
				if !in[0].n.dirty {
					t.Error("what it waits to show was dropped")
				}
			}},
		{name: "silence over: let on, no longer held for it",
			in: []*Incident{incident("a", t0, handled, rooted, told)}, out: []string{"a"},
			check: func(t *testing.T, _ *Bot, in []*Incident, _ *recorder) {
				if in[0].n.held != "" {
					t.Errorf("held %q", in[0].n.held)
				}
			}},
	})
}

func TestClearingStage(t *testing.T) {
	runStage(t, named("clearing"), []stageCase{
		{name: "signals cleared: held until resolved or back",
			in:   []*Incident{incident("a", t0, handled, rooted, clearing), incident("b", t0, handled, rooted), incident("c", t0, handled, rooted, clearing, resolved)},
			out:  []string{"b", "c"},
			held: map[reason]float64{reasonClearing: 1},
			check: func(t *testing.T, _ *Bot, in []*Incident, _ *recorder) {
				if !in[0].n.dirty {
					t.Error("what it waits to show was dropped")
				}
			}},
	})
}

func TestGroupIntervalStage(t *testing.T) {
	cfg := Config{GroupInterval: time.Minute}
	runStage(t, named("group-interval"), []stageCase{
		{name: "sent within the interval: held, looks again when over", cfg: cfg,
			in:   []*Incident{incident("a", t0, handled, rooted, sentAt(t0.Add(-59*time.Second)))},
			held: map[reason]float64{reasonGroupInterval: 1}, next: t0.Add(time.Second)},
		{name: "held for less than a second: looks again then", cfg: cfg,
			in:   []*Incident{incident("a", t0, handled, rooted, sentAt(t0.Add(-59500*time.Millisecond)))},
			held: map[reason]float64{reasonGroupInterval: 1}, next: t0.Add(500 * time.Millisecond)},
		{name: "interval over, never sent, or saying it is silenced: let on", cfg: cfg,
			in: []*Incident{incident("a", t0, handled, rooted, sentAt(t0.Add(-time.Minute))), incident("b", t0, handled),
				incident("c", t0, handled, rooted, silenced, sentAt(t0.Add(-time.Second)))},
			out: []string{"a", "b", "c"}},
	})
}

func TestSendStage(t *testing.T) {
	runStage(t, named("send"), []stageCase{
		{name: "a new incident: its message, every evidence line in the thread",
			in: []*Incident{incident("a", t0, handled)}, out: []string{"a"},
			check: func(t *testing.T, _ *Bot, in []*Incident, r *recorder) {
				n := in[0].n
				if len(r.msgs) != 1 || r.msgs[0].Key != in[0].Key || r.msgs[0].Digest == "" ||
					len(r.replies) != 1 || r.replies[0].ID != "evidence-0" || !strings.Contains(r.replies[0].Text, "node/a-0") {
					t.Fatalf("messages %+v, replies %+v", r.msgs, r.replies)
				}
				if !n.rooted || n.dirty || !n.sent.Equal(t0) || n.held != "" {
					t.Errorf("after send: %+v", n)
				}
			}},
		{name: "an update: what changed goes to the thread",
			in: []*Incident{incident("a", t0, handled, rooted, resolved, func(inc *Incident) {
				inc.n.top = topOf(&Incident{Diagnoses: inc.Diagnoses})
				inc.n.held = reasonGroupInterval
			})},
			out: []string{"a"},
			check: func(t *testing.T, _ *Bot, in []*Incident, r *recorder) {
				if len(r.replies) != 1 || !strings.HasPrefix(r.replies[0].ID, "upd-0-") || !strings.Contains(r.replies[0].Text, "Resolved at") {
					t.Fatalf("replies %+v", r.replies)
				}
				if in[0].n.held != "" {
					t.Errorf("held %q after its rendering went out", in[0].n.held)
				}
			}},
		{name: "saying it is silenced: then held for the silence",
			in: []*Incident{incident("a", t0, handled, rooted, silenced)}, out: []string{"a"},
			held: map[reason]float64{reasonSilenced: 1},
			check: func(t *testing.T, _ *Bot, in []*Incident, r *recorder) {
				if len(r.msgs) != 1 || !strings.Contains(blocksJSON(t, r.msgs[0]), "Silenced by") || in[0].n.dirty {
					t.Fatalf("messages %+v, dirty %v", r.msgs, in[0].n.dirty)
				}
			}},
	})
	t.Run("not queued: still due", func(t *testing.T) {
		b, rec := stageBot(t, Config{})
		rec.err = errors.New("queue full")
		inc := incident("a", t0, handled)
		named("send")(b).Exec(&flushRun{ctx: t.Context(), now: t0, next: t0.Add(maxFlush)}, []*Incident{inc})
		if !inc.n.dirty || inc.n.rooted || !inc.n.sent.IsZero() {
			t.Fatalf("after a failed send: %+v", inc.n)
		}
	})
}

func blocksJSON(t *testing.T, m notify.Message) string {
	t.Helper()
	b, err := json.Marshal(m.Blocks)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestReplayHeldCounted(t *testing.T) {
	b, _ := stageBot(t, Config{})
	b.caughtUp = false
	for _, inc := range []*Incident{incident("a", t0), incident("b", t0), incident("c", t0, handled, rooted, unchanged)} {
		b.incidents[inc.Cluster] = inc
	}
	b.markCaughtUp()
	if want := map[reason]float64{reasonReplaying: 2}; fmt.Sprint(counts(b)) != fmt.Sprint(want) {
		t.Fatalf("suppressed %v, want %v", counts(b), want)
	}
}

// The whole flush: only what is due goes out, and what a stage holds is
// counted under its reason once, not at every flush.
func TestFlushCountsSuppressedByReason(t *testing.T) {
	reg := prometheus.NewRegistry()
	rec := &recorder{}
	b := New(Config{Channel: "C1", GroupWait: 10 * time.Second, StormThreshold: -1, Now: func() time.Time { return t0 }},
		nil, rec, reg, zerolog.Nop())
	waiting, due := incident("waiting", t0.Add(-time.Second)), incident("due", t0.Add(-time.Minute))
	b.incidents[waiting.Cluster], b.incidents[due.Cluster] = waiting, due
	for range 3 {
		b.flush(t.Context())
	}
	if len(rec.msgs) != 1 || rec.msgs[0].Key != due.Key {
		t.Fatalf("sent %+v, want only %s", rec.msgs, due.Key)
	}
	if n := testutil.CollectAndCount(reg, "hcpbot_bot_notifications_suppressed_total"); n != len(reasons) {
		t.Errorf("%d reasons exported, want all %d", n, len(reasons))
	}
	if want := map[reason]float64{reasonGroupWait: 1}; fmt.Sprint(counts(b)) != fmt.Sprint(want) {
		t.Errorf("suppressed %v, want %v", counts(b), want)
	}
}

// Why silenced comes before clearing: an incident whose message said it
// is silenced stays quiet while its signals clear and come back.
func TestSilencedStaysQuietThroughClearing(t *testing.T) {
	silence := SilenceInfo{ID: "sil-1", By: "U1", Until: t0.Add(time.Hour)}
	b, rec := stageBot(t, Config{ResolveTimeout: time.Hour, StormThreshold: -1,
		Silenced: func(string, string, time.Time) (SilenceInfo, bool) { return silence, true }})
	inc := incident("a", t0.Add(-time.Hour), handled, rooted, func(inc *Incident) {
		inc.n.evidence, inc.n.top = evidenceSet(inc), topOf(inc) // its message shows it
	})
	b.incidents[inc.Cluster] = inc
	flush := func() {
		f := &flushRun{ctx: t.Context(), now: t0, next: t0.Add(maxFlush)}
		b.incidentStages().run(f, b.candidates())
	}
	flush() // says it is silenced
	if len(rec.msgs) != 1 {
		t.Fatalf("%d renderings, want the silenced one", len(rec.msgs))
	}
	clearing(inc)
	inc.n.dirty = true // new evidence while its signals clear
	flush()
	inc.clearAt, inc.n.dirty = time.Time{}, true // and back
	flush()
	if len(rec.msgs) != 1 || len(rec.replies) != 0 {
		t.Fatalf("%d renderings and %d replies while silenced, want 1 and 0", len(rec.msgs), len(rec.replies))
	}
	if want := map[reason]float64{reasonSilenced: 1}; fmt.Sprint(counts(b)) != fmt.Sprint(want) {
		t.Errorf("suppressed %v, want %v", counts(b), want)
	}
}
