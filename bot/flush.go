package bot

import (
	"context"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/hcpbot/hcpbot/bot/notify"
)

// The flush decides what goes out; events only record (evaluate). It is
// the gate, the takeover's work when there is some (takeover.go), the
// stages (stages.go lists them), and what is left over: forgotten
// incidents and storms, the gauges.

// flush sends what is due and returns when it next needs to look.
func (b *Bot) flush(ctx context.Context) time.Time {
	b.mu.Lock()
	if !b.gate() {
		return b.sweep(ctx) // unlocks
	}
	b.settleAll(nil) // the stages read full diagnoses (evaluate.go)
	if t := b.takeoverWork(); t.due() {
		b.mu.Unlock()
		roots := t.lookUp(ctx, b.lookupRoots) // network calls: outside the lock
		if t.live {
			roots.liveFrom = b.liveSince(ctx)
		}
		b.mu.Lock()
		b.settleAll(nil) // events applied while the lock was free
		b.learn(t, roots)
		if lost := b.lossSeen; !b.gate() || b.lossSeen != lost {
			// The lease was lost during the look-ups (gate stepped
			// down): another replica may send from now on, and needs no
			// look-up for what is opened since (liveSince). Taken back
			// meanwhile, the next flush takes over again.
			b.mu.Unlock()
			b.wake()
			return b.cfg.Now().Add(maxFlush)
		}
	}
	defer b.mu.Unlock()
	f := newFlushRun(ctx, b.cfg.Now())
	b.incidentStages().run(f, b.candidates())
	b.pending = slices.DeleteFunc(b.pending, func(inc *Incident) bool {
		if inc.n.dirty {
			return false
		}
		if inc.n.rooted {
			b.sentPending = append(b.sentPending, inc)
		}
		return true
	})
	storms := make([]*Storm, 0, len(b.storms))
	for _, s := range b.storms {
		storms = append(storms, s)
	}
	b.stormStages().run(f, storms)
	b.prune(f.now)
	b.updateMetrics()
	return f.next
}

// gate notes a change of leader (a new one takes over), forgets the
// deleted clusters due to go (forget.go), and tells whether the stages
// run: a follower or a replaying bot looks at no incident (a replay would
// be quadratic); what the replay held is counted once it is over
// (markCaughtUp). Called with b.mu held.
func (b *Bot) gate() bool {
	b.noteLoss()
	leader := b.cfg.Leader == nil || b.cfg.Leader()
	if leader != b.leader {
		if leader {
			b.leader, b.liveFrom = true, 0
			b.takeOver()
		} else {
			b.stepDown()
		}
	}
	b.forgetGone(b.cfg.Now(), leader)
	return leader && b.caughtUp
}

// sweep is a closed gate's flush: it only lets go of the resolutions
// nothing will send (pending.go). Called with b.mu held; it unlocks.
func (b *Bot) sweep(ctx context.Context) time.Time {
	now := b.cfg.Now()
	due, more := b.sweepDue(now)
	b.mu.Unlock()
	b.sweepPending(ctx, due, more, now)
	if more {
		return now
	}
	return now.Add(maxFlush)
}

// candidates are the incidents a flush looks at: every current one and
// the resolutions still to send of those replaced by a newer one. The
// slice is reused by the next call (the flush runs often, on every
// incident).
func (b *Bot) candidates() []*Incident {
	b.buf = b.buf[:0]
	for _, inc := range b.incidents {
		b.buf = append(b.buf, inc)
	}
	b.buf = append(b.buf, b.pending...)
	return b.buf
}

// rootLookupStage holds a resolved incident the flush has not handled
// yet until the notifier was asked whether it has a message (the
// previous run may have posted it): its resolution is to reach it.
type rootLookupStage struct{ holder }

func (rootLookupStage) Name() string { return "root-lookup" }

func (s rootLookupStage) Exec(_ *flushRun, due []*Incident) []*Incident {
	return s.holdIncidents(due, func(inc *Incident) bool {
		return inc.n.first.IsZero() && !inc.Open() && !inc.n.checked
	})
}

// newResolvedStage handles a resolved incident the flush has not handled
// yet, its root looked up, at once: one with a message (posted by the
// previous run) goes on to have it updated; one without is dropped:
// resolved before anyone was told, it has nothing to say.
type newResolvedStage struct{ holder }

func (newResolvedStage) Name() string { return "new-resolved" }

func (s newResolvedStage) Exec(f *flushRun, due []*Incident) []*Incident {
	return s.holdIncidents(due, func(inc *Incident) bool {
		if !inc.n.first.IsZero() || inc.Open() {
			return false
		}
		inc.n.first = f.now
		return unposted(inc)
	})
}

// unposted reports whether a resolved incident never had a message; if
// so, it has nothing to say.
func unposted(inc *Incident) bool {
	if inc.Open() || inc.n.rooted {
		return false
	}
	inc.n.dirty = false
	return true
}

// unchangedStage lets on only what has something new to show, and only
// once flush handled it (the stages up to storm decide that). Having
// nothing to say is not a suppression: it is not counted.
type unchangedStage struct{}

func (unchangedStage) Name() string { return "unchanged" }

func (unchangedStage) Exec(_ *flushRun, due []*Incident) []*Incident {
	return slices.DeleteFunc(due, func(inc *Incident) bool { return inc.n.first.IsZero() || !inc.n.dirty })
}

// resolvedUnpostedStage drops a resolved incident that never had a
// message: nobody was told it opened.
type resolvedUnpostedStage struct{ holder }

func (resolvedUnpostedStage) Name() string { return "resolved-unposted" }

func (s resolvedUnpostedStage) Exec(_ *flushRun, due []*Incident) []*Incident {
	return s.holdIncidents(due, unposted)
}

// sender hands renderings and thread replies to the notifier, and counts
// them.
type sender struct {
	out     notify.Notifier
	sent    *prometheus.CounterVec
	latency prometheus.Histogram
	log     zerolog.Logger
}

func (b *Bot) sender() sender {
	return sender{out: b.out, sent: b.metrics.sent, latency: b.metrics.latency, log: b.log}
}

// sendStage hands each incident's rendering and the thread replies it
// warrants to the notifier; one that said it is silenced is from then on
// held for the silence.
type sendStage struct {
	holder
	sender
}

func (sendStage) Name() string { return "send" }

func (s sendStage) Exec(f *flushRun, due []*Incident) []*Incident {
	for _, inc := range due {
		s.send(f.ctx, inc, f.now)
		if inc.Silence != nil {
			// Said once, even if it was not queued: from now on the
			// silence holds it.
			inc.n.dirty = false
			s.hold(&inc.n.held, "incident", inc.Key)
		}
	}
	return due
}

// send hands the incident's rendering and the thread replies it warrants
// to the notifier.
func (s sendStage) send(ctx context.Context, inc *Incident, now time.Time) {
	n := &inc.n
	n.version = nextVersion(n.version, now)
	// Leader-only: queued behind Slack's pace, it must not be posted
	// once another replica leads (bot/notify doc.go).
	msg := notify.Message{Key: inc.Key, Channel: inc.Channel, Version: n.version, LeaderOnly: true}
	msg.Text, msg.Blocks = Render(inc, now)
	msg.Digest = digest(Render(inc, inc.Opened))
	if err := s.out.Upsert(ctx, msg); err != nil {
		s.log.Error().Err(err).Str("incident", inc.Key).Msg("notification not queued")
		return
	}
	s.sent.WithLabelValues("incident").Inc()
	s.latency.Observe(now.Sub(n.changed).Seconds())
	first := !n.rooted
	n.rooted, n.sent, n.dirty, n.held = true, now, false, ""
	replies := incidentReplies(inc, first, n.top, n.evidence)
	n.top = topOf(inc)
	if n.evidence == nil {
		n.evidence = map[string]bool{}
	}
	for _, l := range evidenceLines(inc) {
		n.evidence[l] = true
	}
	for _, r := range replies {
		if err := s.out.Reply(ctx, r); err != nil {
			s.log.Warn().Err(err).Str("incident", inc.Key).Msg("thread reply not queued")
			continue
		}
		s.sent.WithLabelValues("reply").Inc()
	}
}

func (b *Bot) updateMetrics() {
	b.metrics.open.Reset()
	for _, inc := range b.incidents {
		if inc.Open() && len(inc.Diagnoses) > 0 {
			b.metrics.open.WithLabelValues(inc.Diagnoses[0].Rule).Inc()
		}
	}
	n := 0
	for _, s := range b.storms {
		if s.Open() {
			n++
		}
	}
	b.metrics.storms.Set(float64(n))
}
