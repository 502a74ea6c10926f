package bot

import (
	"context"
	"slices"
	"time"

	"github.com/hcpbot/hcpbot/bot/notify"
)

// The flush decides what goes out; events only record (evaluate). It runs
// on the leader, once the stream is replayed, as two pipelines of named
// stages in the shape of Alertmanager's notify pipeline: each stage takes
// the incidents (or storms) still due and returns those it lets on; one
// it holds back or drops it names with a reason, which is logged and
// counted (hcpbot_bot_notifications_suppressed_total{reason}). The stages
// are in incidentStages and stormStages; the order and why is there.

// reason says why a flush stage held a notification back or dropped it.
type reason string

// The reasons. A held notification goes out later (group-wait,
// storm-brewing, clearing, group-interval, replaying, root-lookup) or
// never (storm-member, resolved-unposted, silenced until the silence
// ends). There is no inhibition here: bot/diagnose folds the symptoms a
// root cause explains into its diagnosis before an incident is formed.
const (
	reasonReplaying        reason = "replaying"         // the stream was not replayed yet: nothing is sent from a half-built picture
	reasonRootLookup       reason = "root-lookup"       // resolved before the notifier was asked whether it has a message
	reasonGroupWait        reason = "group-wait"        // a new incident gathers signals for GroupWait
	reasonStormBrewing     reason = "storm-brewing"     // a storm may still form around it and is growing: held, StormWindow at most
	reasonStormMember      reason = "storm-member"      // its storm's message speaks for it
	reasonResolvedUnposted reason = "resolved-unposted" // resolved before anyone was told: nothing to say
	reasonSilenced         reason = "silenced"          // a silence covers it (its message said so once)
	reasonClearing         reason = "clearing"          // its signals cleared: it waits for its resolution or their return
	reasonGroupInterval    reason = "group-interval"    // paced: folded into the next rendering
)

var reasons = []reason{reasonReplaying, reasonRootLookup, reasonGroupWait, reasonStormBrewing, reasonStormMember,
	reasonResolvedUnposted, reasonSilenced, reasonClearing, reasonGroupInterval}

// hold records that a stage holds back the incident or storm named kind
// and key for r. It is logged and counted when the notification starts
// being held for r, not at every flush, so the counter says how often
// notifications were held, not how often the loop looked; held is reset
// when a rendering goes out.
func (b *Bot) hold(held *reason, kind, key string, r reason) {
	if *held == r {
		return
	}
	*held = r
	b.metrics.suppressed.WithLabelValues(string(r)).Inc()
	b.log.Debug().Str(kind, key).Str("reason", string(r)).Msg("notification held")
}

// flushRun is what the stages of one flush share.
type flushRun struct {
	ctx  context.Context
	now  time.Time
	next time.Time // when the flush must look again
}

// lookAgain makes the flush look again at t at the latest.
func (f *flushRun) lookAgain(t time.Time) { f.next = earliest(f.next, t) }

// stage is one named step of a flush pipeline. It owns due (it may
// reorder or filter it in place) and returns what is still due.
type stage[T any] struct {
	name string
	run  func(f *flushRun, due []T) []T
}

// pipeline runs its stages in order, each on what the one before let on.
type pipeline[T any] []stage[T]

func (p pipeline[T]) run(f *flushRun, due []T) []T {
	for _, s := range p {
		if len(due) == 0 {
			return nil
		}
		due = s.run(f, due)
	}
	return due
}

// incidentStages is the order an incident goes through; why this order:
//
//   - resolve first: an incident whose signals stayed clear long enough
//     (after a restart, one healed long ago) is handled as resolved from
//     the start, so it is never rendered open.
//   - remedy next: an incident whose fix ran shows the fix's root cause
//     and the rollout, and the heal deadline is checked, before anything
//     decides what its rendering shows.
//   - silence before anything decides to post: the group-wait stage must
//     not post an incident a silence covers.
//   - group-wait, then storm: only incidents past their group wait are
//     folded into storms, with the whole picture; a storm is formed before
//     any of its members could be posted on its own.
//   - unchanged: what has nothing new to show stops here, uncounted.
//   - storm-member and resolved-unposted drop what has no message of its
//     own to update, before any stage could hold it for later.
//   - silenced before clearing: an incident whose message says it is
//     silenced stays quiet whatever its signals do meanwhile.
//   - clearing before group-interval, and group-interval last: pacing
//     applies only to what would really go out; the one silenced
//     rendering is not paced (who silenced wants to see it said).
//   - send.
func (b *Bot) incidentStages() pipeline[*Incident] {
	return pipeline[*Incident]{
		{"resolve", b.resolveStage},
		{"remedy", b.remedyStage},
		{"silence", b.silenceStage},
		{"group-wait", b.groupWaitStage},
		{"storm", b.stormStage},
		{"unchanged", unchangedStage},
		{"storm-member", b.stormMemberStage},
		{"resolved-unposted", b.resolvedUnpostedStage},
		{"silenced", b.silencedStage},
		{"clearing", b.clearingStage},
		{"group-interval", b.groupIntervalStage},
		{"send", b.sendStage},
	}
}

// flush sends what is due and returns when it next needs to look.
func (b *Bot) flush(ctx context.Context) time.Time {
	leader := b.cfg.Leader == nil || b.cfg.Leader()
	b.mu.Lock()
	if leader != b.leader {
		b.leader = leader
		b.liveFrom = 0
		if leader {
			b.takeOver()
		}
	}
	b.forgetGone(b.cfg.Now(), leader)
	if !leader || !b.caughtUp {
		// The gate before every stage: a follower or a replaying bot
		// looks at no incident (a replay would be quadratic); what the
		// replay held is counted once it is over (markCaughtUp). It only
		// lets go of the resolutions nothing will send (pending.go).
		now := b.cfg.Now()
		due, more := b.sweepDue(now)
		b.mu.Unlock()
		b.sweepPending(ctx, due, more, now)
		if more {
			return now
		}
		return now.Add(maxFlush)
	}
	b.settleAll(nil) // the stages read full diagnoses (lazy.go)
	f := &flushRun{ctx: ctx, now: b.cfg.Now()}
	f.next = f.now.Add(maxFlush)
	// Resolved first, so that a replayed incident whose signals cleared
	// long ago is looked up (and handled) as resolved from the start.
	b.resolveStage(f, b.candidates())
	unchecked := b.uncheckedDue(f.now)
	var revived []*Storm
	if !b.stormsChecked {
		b.stormsChecked = true
		revived = b.replayedStorms()
	}
	readLive := b.liveFrom == 0 && !f.now.Before(b.liveAgain)
	b.mu.Unlock()

	// Lookups leave the lock: they are network calls.
	keys := make([]string, 0, len(unchecked))
	for _, inc := range unchecked {
		keys = append(keys, inc.Key)
	}
	roots := b.lookupRoots(ctx, keys, true)
	keys = keys[:0]
	for _, s := range revived {
		keys = append(keys, s.Key)
		if s.bare != "" {
			keys = append(keys, s.bare)
		}
	}
	// A storm whose lookup failed is not revived: reviving one without a
	// message would post a new root.
	stormRoots := b.lookupRoots(ctx, keys, false)
	var live uint64
	if readLive {
		live = b.liveSince(ctx)
	}

	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case live > 0 && b.leader:
		b.liveFrom = live
	case readLive:
		b.liveAgain = f.now.Add(liveRetry)
	}
	b.settleAll(nil) // events applied while the lock was free
	f = &flushRun{ctx: ctx, now: b.cfg.Now()}
	f.next = f.now.Add(maxFlush)
	for _, s := range revived {
		if !stormRoots[s.Key] && s.bare != "" && stormRoots[s.bare] {
			// Posted by the one group before a repartition: its key is
			// the group's own storm's without the suffix only in the
			// group holding the storm's first member (the key hashes
			// the cause and that member's opening), so one group takes
			// the message over and the others post their part.
			s.Key = s.bare
		}
		if stormRoots[s.Key] && b.storms[s.Key] == nil {
			b.revive(s)
		}
	}
	b.learnRoots(unchecked, roots)
	b.incidentStages().run(f, b.candidates())
	b.pending = slices.DeleteFunc(b.pending, func(inc *Incident) bool { return !inc.n.dirty })
	storms := make([]*Storm, 0, len(b.storms))
	for _, s := range b.storms {
		storms = append(storms, s)
	}
	b.stormStages().run(f, storms)
	b.prune(f.now)
	b.updateMetrics()
	return f.next
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

// silenceStage refreshes which incidents are silenced; it holds nothing
// (silencedStage and groupWaitStage do).
func (b *Bot) silenceStage(f *flushRun, due []*Incident) []*Incident {
	if b.cfg.Silenced == nil {
		return due
	}
	for _, inc := range due {
		if !inc.Open() {
			inc.Silence = nil
			continue
		}
		info, ok := b.cfg.Silenced(inc.Cluster.String(), inc.Key, f.now)
		if !ok && inc.Storm != "" {
			info, ok = b.cfg.Silenced("", inc.Storm, f.now)
		}
		was := inc.Silence != nil
		inc.Silence = nil
		if ok {
			inc.Silence = &info
		}
		if was != ok {
			inc.n.dirty = true
		}
	}
	return due
}

// unchangedStage lets on only what has something new to show, and only
// once flush handled it (the group-wait and storm stages decide that).
// Having nothing to say is not a suppression: it is not counted.
func unchangedStage(_ *flushRun, due []*Incident) []*Incident {
	return slices.DeleteFunc(due, func(inc *Incident) bool { return inc.n.first.IsZero() || !inc.n.dirty })
}

// resolvedUnpostedStage drops a resolved incident that never had a
// message: nobody was told it opened.
func (b *Bot) resolvedUnpostedStage(_ *flushRun, due []*Incident) []*Incident {
	return slices.DeleteFunc(due, func(inc *Incident) bool {
		if inc.Open() || inc.n.rooted {
			return false
		}
		inc.n.dirty = false
		b.hold(&inc.n.held, "incident", inc.Key, reasonResolvedUnposted)
		return true
	})
}

// silencedStage keeps a silenced incident quiet: one with a message lets
// one rendering on to say it is silenced (sendStage then holds it), then
// holds everything until the silence ends; one without waits unposted.
func (b *Bot) silencedStage(_ *flushRun, due []*Incident) []*Incident {
	return slices.DeleteFunc(due, func(inc *Incident) bool {
		n := &inc.n
		switch {
		case inc.Silence == nil:
			if n.held == reasonSilenced {
				n.held = "" // the silence ended: nothing is held for it
			}
			return false
		case n.rooted && n.held != reasonSilenced:
			return false // its message is to say so
		}
		told := n.held == reasonSilenced && n.rooted
		b.hold(&n.held, "incident", inc.Key, reasonSilenced)
		if told {
			n.dirty = false // shown with the next rendering after the silence
		}
		return true
	})
}

// sendStage hands each incident's rendering and the thread replies it
// warrants to the notifier.
func (b *Bot) sendStage(f *flushRun, due []*Incident) []*Incident {
	for _, inc := range due {
		b.send(f.ctx, inc, f.now)
		if inc.Silence != nil {
			// Said once, even if it was not queued: from now on the
			// silence holds it.
			inc.n.dirty = false
			b.hold(&inc.n.held, "incident", inc.Key, reasonSilenced)
		}
	}
	return due
}

// send hands the incident's rendering and the thread replies it warrants
// to the notifier.
func (b *Bot) send(ctx context.Context, inc *Incident, now time.Time) {
	n := &inc.n
	n.version = nextVersion(n.version, now)
	msg := notify.Message{Key: inc.Key, Channel: inc.Channel, Version: n.version}
	msg.Text, msg.Blocks = Render(inc, now)
	msg.Digest = digest(Render(inc, inc.Opened))
	if err := b.out.Upsert(ctx, msg); err != nil {
		b.log.Error().Err(err).Str("incident", inc.Key).Msg("notification not queued")
		return
	}
	b.metrics.sent.WithLabelValues("incident").Inc()
	b.metrics.latency.Observe(now.Sub(n.changed).Seconds())
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
		if err := b.out.Reply(ctx, r); err != nil {
			b.log.Warn().Err(err).Str("incident", inc.Key).Msg("thread reply not queued")
			continue
		}
		b.metrics.sent.WithLabelValues("reply").Inc()
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
