package bot

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/hcpbot/hcpbot/bot/storm"
)

// The flush clock: when the flush looks, and the stages that decide by
// time (ResolveTimeout, GroupWait, GroupInterval, the clearing hold).

// notifyState is what the correlator remembers of an incident's
// notifications on this replica.
type notifyState struct {
	// The clock: this replica's wall times, unless said otherwise.
	seen      time.Time // saw the incident open
	clearSeen time.Time // saw its signals clear (replayed: the event's time)
	first     time.Time // the flush first handled it (its wait is over); zero before
	sent      time.Time // the last rendering was handed to the notifier
	changed   time.Time // the newest change's own time (for latency)

	// What is due.
	state string // fingerprint of the newest state
	dirty bool   // the newest state is not sent yet
	held  reason // why a stage holds it back (logged and counted once); "" after a rendering went out

	// Its message.
	version  uint64
	checked  bool            // the notifier was asked whether a message exists
	rooted   bool            // the incident has a message of its own
	evidence map[string]bool // evidence lines already shown
	top      string          // main diagnosis last shown

	causes []storm.Cause // what it could share with other incidents

	// swept is when a replica that sends nothing last asked whether this
	// pending resolution is still owed (pending.go); zero: never. Not
	// state: a restarted replica asks again.
	swept time.Time
}

// The flush looks again after minFlush at the soonest (a burst of events
// is sent as one flush) and maxFlush at the latest.
const (
	minFlush = 10 * time.Millisecond
	maxFlush = time.Second
)

func (b *Bot) flushLoop(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.kick:
		case <-t.C:
		}
		next := b.flush(ctx)
		t.Reset(min(max(time.Until(next), minFlush), maxFlush))
	}
}

// resolveStage resolves the incidents whose signals stayed clear for
// ResolveTimeout; it holds nothing.
func (b *Bot) resolveStage(f *flushRun, due []*Incident) []*Incident {
	for _, inc := range due {
		if !inc.Open() || inc.clearAt.IsZero() {
			continue
		}
		if at := inc.n.clearSeen.Add(b.cfg.ResolveTimeout); f.now.Before(at) {
			f.lookAgain(at)
			continue
		}
		inc.Resolved = inc.clearAt
		inc.n.state = fingerprint(inc)
		inc.n.changed = inc.clearAt
		inc.n.dirty = true
	}
	return due
}

// groupWaitStage decides when flush first handles an incident: an open
// one once its group wait is over (and it is neither silenced nor
// clearing), a resolved one at once after its root was looked up (the
// previous run may have posted it). It lets on the incidents handled
// before, the resolved ones it handles, and the open ones now due, for the
// storm stage to handle.
func (b *Bot) groupWaitStage(f *flushRun, due []*Incident) []*Incident {
	return slices.DeleteFunc(due, func(inc *Incident) bool {
		n := &inc.n
		var r reason
		switch {
		case !n.first.IsZero():
			return false
		case !inc.Open() && !n.checked:
			r = reasonRootLookup
		case !inc.Open():
			n.first = f.now
			if n.rooted {
				return false
			}
			// Resolved before anyone was told: nothing to say.
			n.dirty = false
			r = reasonResolvedUnposted
		case inc.Silence != nil:
			r = reasonSilenced
		case !inc.clearAt.IsZero():
			// Its signals cleared: nothing to post unless they come back
			// (then it is due) or it resolves.
			r = reasonClearing
		default:
			at := n.seen.Add(b.cfg.GroupWait)
			if !f.now.Before(at) {
				return false
			}
			f.lookAgain(at)
			r = reasonGroupWait
		}
		b.hold(&n.held, "incident", inc.Key, r)
		return true
	})
}

// compareOpened orders incidents oldest first, then by key.
func compareOpened(x, y *Incident) int {
	if c := x.Opened.Compare(y.Opened); c != 0 {
		return c
	}
	return strings.Compare(x.Key, y.Key)
}

// clearingStage holds an open incident whose signals cleared: a rendering
// now would show a problem that is gone (after a restart, one its message
// no longer shows). It waits for the resolution, or for the signals to
// come back.
func (b *Bot) clearingStage(_ *flushRun, due []*Incident) []*Incident {
	return slices.DeleteFunc(due, func(inc *Incident) bool {
		if !inc.Open() || inc.clearAt.IsZero() {
			return false
		}
		b.hold(&inc.n.held, "incident", inc.Key, reasonClearing)
		return true
	})
}

// groupIntervalStage paces an incident's renderings: none sooner than
// GroupInterval after the last; what changed meanwhile goes out with the
// next. The rendering saying an incident is silenced is not paced.
func (b *Bot) groupIntervalStage(f *flushRun, due []*Incident) []*Incident {
	return slices.DeleteFunc(due, func(inc *Incident) bool {
		n := &inc.n
		if inc.Silence != nil || n.sent.IsZero() || !f.now.Before(n.sent.Add(b.cfg.GroupInterval)) {
			return false
		}
		f.lookAgain(n.sent.Add(b.cfg.GroupInterval))
		b.hold(&n.held, "incident", inc.Key, reasonGroupInterval)
		return true
	})
}

// nextVersion orders renderings across restarts and replicas: wall time,
// strictly increasing.
func nextVersion(prev uint64, now time.Time) uint64 {
	return max(prev+1, uint64(now.UnixNano()))
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
