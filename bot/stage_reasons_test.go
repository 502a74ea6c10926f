package bot

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// Every stage holds for ONE reason at most, whatever it is given: each
// stage of both pipelines is driven, alone, on every combination of the
// states the stages read, twice (a second flush sees what the first
// left), and only the reason it declares is ever counted.
func TestStagesHoldForOneReason(t *testing.T) {
	cfg := Config{GroupWait: 10 * time.Second, GroupInterval: time.Minute, ResolveTimeout: 5 * time.Minute, StormThreshold: 3}
	member := func(inc *Incident) { inc.Storm = "storm-1" }
	checked := func(inc *Incident) { inc.n.checked = true }
	opts := []func(*Incident){handled, rooted, unchanged, resolved, clearing, silenced, told, sentAt(t0.Add(-time.Second)), member, checked}
	zoo := func() []*Incident {
		var out []*Incident
		for mask := range 1 << len(opts) {
			// Opened 0 s to 20 s ago: within the group wait and past it.
			inc := incident(fmt.Sprintf("c%04d", mask), t0.Add(-time.Duration(mask%3)*10*time.Second))
			for i, o := range opts {
				if mask&(1<<i) != 0 {
					o(inc)
				}
			}
			out = append(out, inc)
		}
		return out
	}
	b, _ := stageBot(t, cfg)
	for _, st := range b.incidentStages() {
		t.Run("incident/"+st.Name(), func(t *testing.T) {
			b, _ := stageBot(t, cfg)
			in := zoo()
			for _, inc := range in {
				b.incidents[inc.Cluster] = inc
			}
			b.storms["storm-1"] = &Storm{Key: "storm-1", Channel: "C1"}
			st := named(st.Name())(b)
			for range 2 {
				st.Exec(&flushRun{ctx: t.Context(), now: t0, next: t0.Add(maxFlush)}, slices.Clone(in))
			}
			heldOnlyFor(t, b, st.Name(), declared(st))
		})
	}
	stormOpts := []func(*Storm){
		func(s *Storm) { s.sent = t0.Add(-time.Second) },
		func(s *Storm) { s.sent = t0.Add(-time.Hour) },
		func(s *Storm) { s.Resolved = t0 },
		func(s *Storm) { s.rooted = true },
		func(s *Storm) { s.dirty = false },
		func(s *Storm) { s.listed = len(s.Members) },
	}
	memberOpts := [][]func(*Incident){nil, {clearing}, {resolved}}
	storms := func() []*Storm {
		var out []*Storm
		for mask := range 1 << len(stormOpts) {
			for i, mo := range memberOpts {
				s := stormOf(time.Time{}, members(3, t0.Add(-time.Duration(mask*3+i)*time.Hour), mo...))
				for j, o := range stormOpts {
					if mask&(1<<j) != 0 {
						o(s)
					}
				}
				out = append(out, s)
			}
		}
		return out
	}
	for _, st := range b.stormStages() {
		t.Run("storm/"+st.Name(), func(t *testing.T) {
			b, _ := stageBot(t, cfg)
			in := storms()
			var run stage[*Storm]
			for _, s := range b.stormStages() {
				if s.Name() == st.Name() {
					run = s
				}
			}
			for range 2 {
				run.Exec(&flushRun{ctx: t.Context(), now: t0, next: t0.Add(maxFlush)}, slices.Clone(in))
			}
			heldOnlyFor(t, b, st.Name(), declared(run))
		})
	}
}

// heldOnlyFor fails unless every suppression counted on b is for the one
// reason declared, if any, and that was (the cases reach the stage's hold).
func heldOnlyFor(t *testing.T, b *Bot, stage string, declared []reason) {
	t.Helper()
	if len(declared) > 1 {
		t.Errorf("stage %s declares %v: one reason a stage", stage, declared)
	}
	if len(declared) == 1 && counts(b)[declared[0]] == 0 {
		t.Errorf("stage %s never held for %s: no case reaches its hold", stage, declared[0])
	}
	for r := range counts(b) {
		if !slices.Contains(declared, r) {
			t.Errorf("stage %s held for %s; it declares %v", stage, r, declared)
		}
	}
}
