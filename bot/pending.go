package bot

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/bot/notify"
)

// Pending resolutions. An incident replaced by its cluster's next one
// before its resolution was sent waits in Bot.pending: a new leader (or a
// restarted bot) must still update to "resolved" a message the previous
// leader posted and did not resolve, and only its lookup (takeover.go)
// can tell which have one. A leader's flush empties the list; a follower
// and a replaying bot never flush, so what it holds is bounded here:
//
//   - compact: a pending incident is resolved for good (nothing records it
//     any more), so it keeps only what its resolved rendering, its thread's
//     "Resolved" reply and the storm stages read — the main diagnosis'
//     title and the proxy change it names — not its evidence, texts or
//     fingerprint. That is ~10 times less per incident.
//   - horizon: a resolution older than PendingHorizon (the events stream's
//     retention) by the stream's own clock is dropped. A replica started
//     now replays only that much of the stream, so it would not know the
//     incident either: a follower that ran for weeks promises no more and
//     no less than a fresh one.
//   - sweep: a replica that sends nothing (a follower, or one replaying
//     the stream) asks the notifier about its pending resolutions, as the
//     leader's flush does, and lets go of those nothing will send: one
//     whose incident never had a message (nobody was told it opened), and
//     one whose message shows the resolution already, its reply posted
//     (the leader sent it). It keeps what a takeover must still send. So
//     the list holds what the leader's holds, not the history: during a
//     replay the history's every replaced incident (118 per cluster over
//     72 h in make bench's B6) would otherwise wait for the first flush.

// addPending queues the resolution of inc, replaced by a newer incident
// of its cluster; observed is the time of the event that replaced it.
func (b *Bot) addPending(inc *Incident, observed time.Time) {
	compactResolved(inc)
	b.pending = append(b.pending, inc)
	// Amortised: a scan each time the list doubled since the last one.
	if len(b.pending) >= 2*max(b.pendingScanned, minPendingScan) {
		cutoff := observed.Add(-b.cfg.PendingHorizon)
		b.pending = slices.DeleteFunc(b.pending, func(p *Incident) bool { return p.Resolved.Before(cutoff) })
		b.pendingScanned = len(b.pending)
	}
}

// minPendingScan is the list's length below which it is never scanned.
const minPendingScan = 64

// compactResolved drops what a resolved, replaced incident no longer
// needs: Render shows its main diagnosis' title, storm.CausesOf reads the
// first proxy change among its diagnoses, the thread's reply only times.
func compactResolved(inc *Incident) {
	if len(inc.Diagnoses) > 0 {
		d := diagnose.Diagnosis{Rule: inc.Diagnoses[0].Rule, Severity: inc.Diagnoses[0].Severity, Title: inc.Diagnoses[0].Title}
		for _, o := range inc.Diagnoses {
			if o.Trigger != nil {
				d.Trigger = o.Trigger
				break
			}
		}
		inc.Diagnoses = []diagnose.Diagnosis{d}
	}
	inc.lazy = lazyDiagnoses{}
	inc.n.state = ""
	inc.n.evidence = nil
	inc.rules = nil // its steps stay: its resolution posts the timeline
	if inc.Remedy != nil {
		inc.Remedy.Rollout = diagnose.Rollout{}
	}
}

// pendingSettle is how long after its resolution an incident's message
// may still be claimed: by a leader whose notifier had its open
// rendering queued (behind Slack's rate limits) when it applied the
// resolution, or lost the lease. A replica that sends nothing lets go of
// an unrooted resolution only once it is older than that; the leader's
// own flush, which takes over from nobody, does not wait.
const pendingSettle = 10 * time.Minute

// pendingResweep is how long a swept resolution that is still owed (or
// too recent to tell) waits before it is asked about again: the leader
// sends one within seconds.
const pendingResweep = time.Minute

// sweepBatch bounds the lookups of one flush, so that a replica that
// becomes the leader is not kept waiting by a long sweep; sweepWorkers
// run at once (each is a round trip to the store).
const (
	sweepBatch   = 4096
	sweepWorkers = 16
)

// sweepMin is how many pending resolutions make a sweep before
// maxFlush passed since the last one: a replay adds thousands a second,
// a follower a few an hour.
const sweepMin = 512

// sweepDue returns the pending resolutions to ask about at now, and
// whether more wait after them. Called with b.mu held.
func (b *Bot) sweepDue(now time.Time) (due []*Incident, more bool) {
	if _, ok := b.out.(notify.RootChecker); !ok {
		return nil, false
	}
	if len(b.pending)-b.pendingSwept < sweepMin && now.Sub(b.sweptAt) < maxFlush {
		return nil, false
	}
	b.sweptAt = now
	for _, p := range b.pending {
		if !p.n.swept.IsZero() && now.Sub(p.n.swept) < pendingResweep {
			continue
		}
		if len(due) == sweepBatch {
			return due, true
		}
		due = append(due, p)
	}
	if len(due) == 0 {
		b.pendingSwept = len(b.pending)
	}
	return due, false
}

// sweepPending asks the notifier about due, without b.mu (the lookups
// are network calls), and releases what nothing will send. It takes
// b.mu to read what a delivered resolution shows and to release.
func (b *Bot) sweepPending(ctx context.Context, due []*Incident, more bool, now time.Time) {
	if len(due) == 0 {
		return
	}
	rooted := b.hasRoots(ctx, due)
	release := map[*Incident]bool{}
	var owed []*Incident
	for i, p := range due {
		switch r := rooted[i]; {
		case r.err:
		case !r.yes && p.Resolved.Before(now.Add(-pendingSettle)):
			release[p] = true
		case r.yes:
			owed = append(owed, p)
		}
	}
	if dc, ok := b.out.(notify.DeliveryChecker); ok && len(owed) > 0 {
		// What the resolution shows, as send would hand it over: the
		// rendering's digest and the thread replies of a message that
		// exists (its evidence was shown, its headline was not resolved).
		type shown struct {
			digest  string
			replies []string
		}
		b.mu.Lock()
		want := make([]shown, len(owed))
		for i, p := range owed {
			want[i].digest = digest(Render(p, p.Opened))
			for _, r := range incidentReplies(p, false, "", evidenceSet(p)) {
				want[i].replies = append(want[i].replies, r.ID)
			}
		}
		b.mu.Unlock()
		sent := lookupEach(ctx, len(owed), func(ctx context.Context, i int) (bool, bool) {
			d, err := dc.Delivered(ctx, owed[i].Key, want[i].digest, want[i].replies)
			return d, err == nil
		})
		for i, p := range owed {
			if sent[i].yes {
				release[p] = true
			}
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range due {
		p.n.swept = now
	}
	if len(release) > 0 {
		b.pending = slices.DeleteFunc(b.pending, func(p *Incident) bool { return release[p] && !p.n.checked })
		b.pendingScanned = min(b.pendingScanned, len(b.pending))
	}
	b.pendingSwept = len(b.pending)
	if more {
		b.pendingSwept = 0 // the next flush goes on
	}
}

// hasRoots asks the notifier whether each of due has a message: in one
// pass over its store when it can (a replay sweeps thousands of pending
// resolutions a second), else key by key. A pending incident's Key never
// changes: it is read without b.mu.
func (b *Bot) hasRoots(ctx context.Context, due []*Incident) []answer {
	if rc, ok := b.out.(notify.RootsChecker); ok {
		keys := make([]string, len(due))
		for i, p := range due {
			keys[i] = p.Key
		}
		out := make([]answer, len(due))
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		r, err := rc.HasRoots(lctx, keys)
		for i := range out {
			out[i] = answer{err: err != nil}
			if err == nil {
				out[i].yes = r[i]
			}
		}
		return out
	}
	rc := b.out.(notify.RootChecker) // sweepDue checked
	return lookupEach(ctx, len(due), func(ctx context.Context, i int) (bool, bool) {
		r, err := rc.HasRoot(ctx, due[i].Key)
		return r, err == nil
	})
}

// answer is one lookup's: yes, or err when it could not tell.
type answer struct{ yes, err bool }

// lookupEach asks about 0..n-1, sweepWorkers at a time, each within the
// timeout of lookupRoots.
func lookupEach(ctx context.Context, n int, ask func(ctx context.Context, i int) (yes, ok bool)) []answer {
	out := make([]answer, n)
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(sweepWorkers, n) {
		wg.Go(func() {
			for i := range next {
				lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				yes, ok := ask(lctx, i)
				cancel()
				out[i] = answer{yes: yes, err: !ok}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return out
}
