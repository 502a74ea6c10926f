package bot

import (
	"slices"
	"time"

	"github.com/hcpbot/hcpbot/bot/diagnose"
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
