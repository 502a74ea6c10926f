package bot

import (
	"strings"
	"testing"
	"time"
)

// Seed 000 on a HostedCluster paused with spec.pausedUntil "true"
// (support/util/pausereconcile.go:31-48 at openshift/hypershift 3ee9615):
// HyperShift rolls nothing out, so the approved fix neither rolls out nor
// fails while paused, however long; it says it waits for the pause, with
// the command that lifts it. Once lifted, the heal deadline counts from
// then.
func TestSeed000FixWaitsForPause(t *testing.T) {
	cfg := Config{GroupWait: 5 * time.Second, GroupInterval: time.Minute, ResolveTimeout: 5 * time.Minute, HealDeadline: 30 * time.Minute}
	s := newSeed000(t, cfg)
	s.hc.PausedUntil = "true"
	s.event(s.hcEv.Object, s.hc, "rv:paused", t0.Add(time.Second))
	d, fixedAt := s.fixed()
	lift := `oc patch -n clusters hostedclusters/hc-0 --type=merge -p '{"spec":{"pausedUntil":null}}'`
	if len(d.Paused) != 1 || d.Fix == nil || !strings.Contains(d.Fix.Waits, "The rollout waits for the pause") || !strings.Contains(d.Fix.Waits, lift) {
		t.Fatalf("the diagnosis of a paused cluster: paused %+v, fix %+v", d.Paused, d.Fix)
	}
	said := false
	for _, at := range []time.Duration{3 * time.Minute, 45 * time.Minute, 3 * time.Hour} {
		m, ok := s.flushAt(fixedAt.Add(at))
		said = said || (ok && strings.Contains(shown(m), "the rollout waits for the pause"))
		if ok && (strings.Contains(m.Text, "ROLLING OUT") || !strings.Contains(m.Text, "WAITING FOR THE PAUSE")) {
			t.Errorf("%s after the fix, headline %q: want it waiting for the pause, never rolling out", at, m.Text)
		}
		rem := s.incident().Remedy
		if rem == nil || rem.Status != StatusPaused || !strings.Contains(rem.Why, lift) {
			t.Fatalf("%s after the fix: remedy %+v, want it waiting for the pause", at, rem)
		}
	}
	if !said {
		t.Error("no rendering said the rollout waits for the pause")
	}
	// Lifted: rolling out, and the deadline counts from the resume.
	resumed := fixedAt.Add(3*time.Hour + time.Minute)
	s.hc.PausedUntil = ""
	s.event(s.hcEv.Object, s.hc, "rv:resumed", resumed)
	s.flushAt(resumed)
	if rem := s.incident().Remedy; rem == nil || rem.Status != StatusRollingOut || !rem.Resumed.Equal(resumed) {
		t.Fatalf("after the lift: %+v", rem)
	}
	s.flushAt(resumed.Add(29 * time.Minute))
	if rem := s.incident().Remedy; rem.Status != StatusRollingOut {
		t.Fatalf("29m after the lift: %s (%s), want still rolling out", rem.Status, rem.Why)
	}
	s.flushAt(resumed.Add(31 * time.Minute))
	if rem := s.incident().Remedy; rem.Status != StatusNotHealed {
		t.Fatalf("31m after the lift: %s, want not healed", rem.Status)
	}
}
