package bot

import (
	"context"
	"strings"
	"time"

	"github.com/hcpbot/hcpbot/bot/storm"
)

// The flush clock: when the flush looks, and the stages that decide by
// time (ResolveTimeout, GroupWait, GroupInterval, the clearing holds).

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
type resolveStage struct{ timeout time.Duration }

func (resolveStage) Name() string { return "resolve" }

func (s resolveStage) Exec(f *flushRun, due []*Incident) []*Incident {
	for _, inc := range due {
		if !inc.Open() || inc.clearAt.IsZero() {
			continue
		}
		if at := inc.n.clearSeen.Add(s.timeout); f.now.Before(at) {
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

// newClearingStage holds an open incident the flush has not handled yet
// whose signals cleared: nothing is posted unless they come back (then it
// is due) or it resolves.
type newClearingStage struct{ holder }

func (newClearingStage) Name() string { return "new-clearing" }

func (s newClearingStage) Exec(_ *flushRun, due []*Incident) []*Incident {
	return s.holdIncidents(due, func(inc *Incident) bool {
		return inc.n.first.IsZero() && inc.Open() && !inc.clearAt.IsZero()
	})
}

// groupWaitStage holds an open incident the flush has not handled yet
// until its group wait is over, so that its first message has the whole
// picture. It lets on the incidents handled before and those now due,
// for the storm stage to handle.
type groupWaitStage struct {
	holder
	wait time.Duration
}

func (groupWaitStage) Name() string { return "group-wait" }

func (s groupWaitStage) Exec(f *flushRun, due []*Incident) []*Incident {
	return s.holdIncidents(due, func(inc *Incident) bool {
		if at := inc.n.seen.Add(s.wait); inc.n.first.IsZero() && f.now.Before(at) {
			f.lookAgain(at)
			return true
		}
		return false
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
type clearingStage struct{ holder }

func (clearingStage) Name() string { return "clearing" }

func (s clearingStage) Exec(_ *flushRun, due []*Incident) []*Incident {
	return s.holdIncidents(due, func(inc *Incident) bool { return inc.Open() && !inc.clearAt.IsZero() })
}

// groupIntervalStage paces an incident's renderings: none sooner than
// GroupInterval after the last; what changed meanwhile goes out with the
// next. The rendering saying an incident is silenced is not paced.
type groupIntervalStage struct {
	holder
	interval time.Duration
}

func (groupIntervalStage) Name() string { return "group-interval" }

func (s groupIntervalStage) Exec(f *flushRun, due []*Incident) []*Incident {
	return s.holdIncidents(due, func(inc *Incident) bool {
		return inc.Silence == nil && paced(f, inc.n.sent, s.interval)
	})
}

// paced reports whether a message last sent at sent is to wait for
// interval to pass, making f look again then.
func paced(f *flushRun, sent time.Time, interval time.Duration) bool {
	if sent.IsZero() || !f.now.Before(sent.Add(interval)) {
		return false
	}
	f.lookAgain(sent.Add(interval))
	return true
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
