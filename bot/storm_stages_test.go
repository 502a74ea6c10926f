package bot

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// The storm stage of the incident pipeline, the storm-member stage, and
// each stage of the storm pipeline, alone (helpers in stages_test.go).

// members are n incidents of one management cluster opened a second apart.
func members(n int, opened time.Time, opts ...func(*Incident)) []*Incident {
	var out []*Incident
	for i := range n {
		out = append(out, incident(fmt.Sprintf("m%02d", i), opened.Add(time.Duration(i)*time.Second), opts...))
	}
	return out
}

func TestStormStage(t *testing.T) {
	inStorm := func(want int) func(*testing.T, *Bot, []*Incident, *recorder) {
		return func(t *testing.T, b *Bot, in []*Incident, _ *recorder) {
			n := 0
			for _, inc := range in {
				if inc.Storm != "" {
					n++
					if b.storms[inc.Storm] == nil {
						t.Errorf("%s in an unknown storm", inc.Cluster)
					}
				}
			}
			if n != want || len(b.storms) != min(want, 1) {
				t.Errorf("%d in a storm (%d storms), want %d", n, len(b.storms), want)
			}
		}
	}
	m3 := members(3, t0.Add(-time.Minute))
	m2 := members(2, t0.Add(-5*time.Second))
	old2 := members(2, t0.Add(-time.Minute))
	off := members(3, t0.Add(-time.Minute))
	// Six incidents a second apart, each on a management cluster of its
	// own, no proxy: nothing in common.
	unrelated := members(6, t0.Add(-6*time.Second))
	for i, inc := range unrelated {
		inc.Cluster.Source = fmt.Sprintf("mgmt-%d", i)
	}
	stopped := members(6, t0.Add(-15*time.Second)) // newest seen 10 s ago
	growing := members(6, t0.Add(-6*time.Second))  // newest seen 1 s ago
	trickle := members(3, t0.Add(-20*time.Second), func(inc *Incident) {
		// 10 s apart: at that pace 17 more need 170 s of a 30 s window.
		step := inc.Opened.Sub(t0.Add(-20*time.Second)) * 10
		inc.Opened = t0.Add(-20*time.Second + step)
		inc.n.seen = inc.Opened
	})
	all6 := []string{"m00", "m01", "m02", "m03", "m04", "m05"}
	runStage(t, named("storm"), []stageCase{
		{name: "threshold reached: one storm, all let on (as members) and handled", cfg: Config{StormThreshold: 3},
			in: m3, out: []string{"m00", "m01", "m02"},
			check: func(t *testing.T, b *Bot, in []*Incident, r *recorder) {
				inStorm(3)(t, b, in, r)
				for _, inc := range in {
					if inc.n.first.IsZero() {
						t.Errorf("%s not handled", inc.Cluster)
					}
				}
			}},
		// Held until the group wait has passed since the newest of them
		// (seen 4 s ago), the storm window at most.
		{name: "a storm brewing: held while it grows", cfg: Config{StormThreshold: 8, GroupWait: 10 * time.Second},
			in: m2, held: map[reason]float64{reasonStormBrewing: 2}, check: inStorm(0)},
		{name: "unrelated incidents do not hold each other", cfg: Config{StormThreshold: 8, GroupWait: 10 * time.Second},
			in: unrelated, out: all6, check: inStorm(0)},
		{name: "a burst that stopped growing: each on its own", cfg: Config{StormThreshold: 20, GroupWait: 5 * time.Second},
			in: stopped, out: all6, check: inStorm(0)},
		{name: "a burst still growing: held for the group wait after its newest", cfg: Config{StormThreshold: 20, GroupWait: 5 * time.Second},
			in: growing, held: map[reason]float64{reasonStormBrewing: 6}, check: inStorm(0)},
		{name: "too slow to reach the threshold: each on its own", cfg: Config{StormThreshold: 20, GroupWait: 15 * time.Second},
			in: trickle, out: []string{"m00", "m01", "m02"}, check: inStorm(0)},
		{name: "group wait 0: nothing held", cfg: Config{StormThreshold: 8},
			in: members(2, t0.Add(-5*time.Second)), out: []string{"m00", "m01"}, check: inStorm(0)},
		{name: "storm window over: each on its own", cfg: Config{StormThreshold: 8},
			in: old2, out: []string{"m00", "m01"}, check: inStorm(0)},
		{name: "storms off", cfg: Config{StormThreshold: -1}, in: off, out: []string{"m00", "m01", "m02"}, check: inStorm(0)},
	})
	t.Run("joins an open storm", func(t *testing.T) {
		b, _ := stageBot(t, Config{StormThreshold: 3})
		f := &flushRun{ctx: t.Context(), now: t0, next: t0.Add(maxFlush)}
		three := members(3, t0.Add(-time.Minute))
		for _, inc := range three {
			b.incidents[inc.Cluster] = inc
		}
		named("storm")(b).Exec(f, slices.Clone(three))
		late := incident("late", t0.Add(-50*time.Second))
		b.incidents[late.Cluster] = late
		if got := names(named("storm")(b).Exec(f, []*Incident{late})); !slices.Equal(got, []string{"late"}) {
			t.Fatalf("let on %v", got)
		}
		if late.Storm != three[0].Storm || len(b.storms[late.Storm].Members) != 4 {
			t.Fatalf("late in storm %q, want %q with 4 members", late.Storm, three[0].Storm)
		}
	})
}

func TestStormMemberStage(t *testing.T) {
	member := func(inc *Incident) { inc.Storm = "storm-1" }
	runStage(t, func(b *Bot) stage[*Incident] {
		b.storms["storm-1"] = &Storm{Key: "storm-1"}
		return named("storm-member")(b)
	}, []stageCase{
		{name: "member without a message: its storm speaks",
			in:   []*Incident{incident("a", t0, handled, member), incident("b", t0, handled)},
			out:  []string{"b"},
			held: map[reason]float64{reasonStormMember: 1},
			check: func(t *testing.T, b *Bot, in []*Incident, _ *recorder) {
				if in[0].n.dirty || !b.storms["storm-1"].dirty {
					t.Errorf("member dirty %v, storm dirty %v", in[0].n.dirty, b.storms["storm-1"].dirty)
				}
			}},
		{name: "member posted before its storm: keeps its message", in: []*Incident{incident("a", t0, handled, member, rooted)},
			out: []string{"a"}},
	})
}

// stormOf returns a storm of members, posted (sent) at sent unless zero.
func stormOf(sent time.Time, ms []*Incident, opts ...func(*Storm)) *Storm {
	s := &Storm{Key: "storm-" + ms[0].Cluster.Cluster.Name, Channel: "C1", Opened: ms[0].Opened, sent: sent}
	for _, m := range ms {
		s.join(m)
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

func TestStormStagesEach(t *testing.T) {
	cfg := Config{GroupInterval: time.Minute}
	listed := func(s *Storm) { s.listed = len(s.Members) }
	clean := func(s *Storm) { s.dirty = false }
	cases := []struct {
		stage string
		name  string
		in    func() []*Storm
		out   int
		held  map[reason]float64
		check func(t *testing.T, in []*Storm, r *recorder)
	}{
		{stage: "settle", name: "no member open: resolved at the last resolution; new members listed",
			in: func() []*Storm {
				return []*Storm{stormOf(t0.Add(-time.Hour), members(3, t0.Add(-2*time.Hour), resolved), clean)}
			}, out: 1,
			check: func(t *testing.T, in []*Storm, r *recorder) {
				s := in[0]
				if s.Open() || !s.Resolved.Equal(s.Members[2].Resolved) || !s.dirty {
					t.Errorf("resolved %v, dirty %v", s.Resolved, s.dirty)
				}
				if len(r.replies) != 1 || r.replies[0].ID != "members-0-3" || s.listed != 3 {
					t.Errorf("replies %+v, listed %d", r.replies, s.listed)
				}
			}},
		{stage: "settle", name: "not posted yet: members wait for the message",
			in:  func() []*Storm { return []*Storm{stormOf(time.Time{}, members(3, t0))} },
			out: 1,
			check: func(t *testing.T, in []*Storm, r *recorder) {
				if len(r.replies) != 0 || !in[0].Open() {
					t.Errorf("replies %+v, open %v", r.replies, in[0].Open())
				}
			}},
		{stage: "unchanged", name: "nothing new: dropped, uncounted",
			in: func() []*Storm {
				return []*Storm{stormOf(t0, members(3, t0), clean, listed), stormOf(t0, members(3, t0.Add(time.Hour)))}
			}, out: 1},
		{stage: "clearing", name: "every open member clearing: held",
			in: func() []*Storm {
				return []*Storm{stormOf(t0, members(3, t0.Add(-time.Hour), clearing)), stormOf(t0, members(3, t0))}
			}, out: 1, held: map[reason]float64{reasonClearing: 1}},
		{stage: "group-interval", name: "posted within the interval: held; resolved: let on",
			in: func() []*Storm {
				return []*Storm{stormOf(t0.Add(-30*time.Second), members(3, t0)),
					stormOf(t0.Add(-30*time.Second), members(3, t0.Add(time.Hour)), func(s *Storm) { s.Resolved = t0 })}
			}, out: 1, held: map[reason]float64{reasonGroupInterval: 1}},
		{stage: "resolved-unposted", name: "resolved before its message: dropped",
			in: func() []*Storm {
				return []*Storm{stormOf(time.Time{}, members(3, t0), func(s *Storm) { s.Resolved = t0 }),
					stormOf(time.Time{}, members(3, t0.Add(time.Hour)), func(s *Storm) { s.Resolved, s.rooted = t0, true })}
			}, out: 1, held: map[reason]float64{reasonResolvedUnposted: 1},
			check: func(t *testing.T, in []*Storm, _ *recorder) {
				if in[0].dirty {
					t.Error("still dirty")
				}
			}},
		{stage: "send", name: "its message, then its members in the thread",
			in: func() []*Storm {
				return []*Storm{stormOf(time.Time{}, members(3, t0), func(s *Storm) { s.held = reasonGroupInterval })}
			},
			out: 1,
			check: func(t *testing.T, in []*Storm, r *recorder) {
				s := in[0]
				if len(r.msgs) != 1 || r.msgs[0].Key != s.Key || len(r.replies) != 1 || s.dirty || s.listed != 3 || s.held != "" {
					t.Errorf("messages %d, replies %+v, after: dirty %v listed %d held %q", len(r.msgs), r.replies, s.dirty, s.listed, s.held)
				}
			}},
	}
	for _, c := range cases {
		t.Run(c.stage+"/"+c.name, func(t *testing.T) {
			b, rec := stageBot(t, cfg)
			var st stage[*Storm]
			for _, s := range b.stormStages() {
				if s.Name() == c.stage {
					st = s
				}
			}
			in := c.in()
			f := &flushRun{ctx: t.Context(), now: t0, next: t0.Add(maxFlush)}
			if got := st.Exec(f, slices.Clone(in)); len(got) != c.out {
				t.Errorf("let on %d, want %d", len(got), c.out)
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
			if c.check != nil {
				c.check(t, in, rec)
			}
		})
	}
}
