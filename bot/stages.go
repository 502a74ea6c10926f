package bot

import (
	"context"
	"time"
)

// The flush's stages, in order: the one place that lists them. Events only
// record (evaluate); the flush (flush.go) decides what goes out, on the
// leader once the stream is replayed, as two pipelines of named stages in
// the shape of Alertmanager's notify pipeline (notify.Stage,
// notify.MultiStage): each stage takes the incidents (or storms) still
// due and returns those it lets on. A stage is a small type holding what
// it needs (config values, the Silenced func, the notifier, a holder for
// its reason), built from the Bot for each flush; one that holds a
// notification back holds for one reason (hold.go).

// stage is one named step of a flush pipeline. Exec owns due (it may
// reorder or filter it in place) and returns what is still due.
type stage[T any] interface {
	Name() string
	Exec(f *flushRun, due []T) []T
}

// pipeline runs its stages in order, each on what the one before let on.
type pipeline[T any] []stage[T]

func (p pipeline[T]) run(f *flushRun, due []T) []T {
	for _, s := range p {
		if len(due) == 0 {
			return nil
		}
		due = s.Exec(f, due)
	}
	return due
}

// flushRun is what the stages of one flush share.
type flushRun struct {
	ctx  context.Context
	now  time.Time
	next time.Time // when the flush must look again
}

func newFlushRun(ctx context.Context, now time.Time) *flushRun {
	return &flushRun{ctx: ctx, now: now, next: now.Add(maxFlush)}
}

// lookAgain makes the flush look again at t at the latest.
func (f *flushRun) lookAgain(t time.Time) { f.next = earliest(f.next, t) }

// incidentStages is the order an incident goes through; why this order:
//
//   - resolve first: an incident whose signals stayed clear long enough
//     (after a restart, one healed long ago) is handled as resolved from
//     the start, so it is never rendered open.
//   - remedy next: an incident whose fix ran shows the fix's root cause
//     and the rollout, and the heal deadline is checked, before anything
//     decides what its rendering shows.
//   - silence before anything decides to post: no stage may post an
//     incident a silence covers.
//   - root-lookup to group-wait decide when the flush first handles an
//     incident (they pass what it handled before): a resolved one once
//     its root was looked up (new-resolved drops the one never posted),
//     an open one once its group wait is over, unless it is silenced
//     (new-silenced) or its signals cleared (new-clearing): then nothing
//     is posted until that changes.
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
	remedy := remedyStage{}
	if len(b.remediations) > 0 {
		remedy.check = b.checkRemedy
	}
	return pipeline[*Incident]{
		resolveStage{timeout: b.cfg.ResolveTimeout},
		remedy,
		silenceStage{silenced: b.cfg.Silenced},
		rootLookupStage{b.holds.holderFor(reasonRootLookup)},
		newResolvedStage{b.holds.holderFor(reasonResolvedUnposted)},
		newSilencedStage{b.holds.holderFor(reasonSilenced)},
		newClearingStage{b.holds.holderFor(reasonClearing)},
		groupWaitStage{b.holds.holderFor(reasonGroupWait), b.cfg.GroupWait},
		stormStage{holder: b.holds.holderFor(reasonStormBrewing), threshold: b.cfg.StormThreshold,
			window: b.cfg.StormWindow, groupWait: b.cfg.GroupWait, incidents: b.incidents, storms: b.storms,
			model: b.model, key: b.stormKey, log: b.log},
		unchangedStage{},
		stormMemberStage{b.holds.holderFor(reasonStormMember), b.storms},
		resolvedUnpostedStage{b.holds.holderFor(reasonResolvedUnposted)},
		silencedStage{b.holds.holderFor(reasonSilenced)},
		clearingStage{b.holds.holderFor(reasonClearing)},
		groupIntervalStage{b.holds.holderFor(reasonGroupInterval), b.cfg.GroupInterval},
		sendStage{b.holds.holderFor(reasonSilenced), b.sender()},
	}
}

// stormStages is the order a storm goes through, as incidentStages and
// for the same reasons: its state is settled (and members that joined
// since its message went out are listed in the thread at once, not when
// the group interval lets the message change), what has nothing new to
// show stops, a storm every open member of which is clearing waits, the
// message is paced, a storm resolved before its message was posted is
// dropped, and the rest is sent.
func (b *Bot) stormStages() pipeline[*Storm] {
	pages := stormPages{sender: b.sender(), page: b.cfg.StormPage}
	return pipeline[*Storm]{
		settleStormStage{pages},
		unchangedStormStage{},
		clearingStormStage{b.holds.holderFor(reasonClearing)},
		groupIntervalStormStage{b.holds.holderFor(reasonGroupInterval), b.cfg.GroupInterval},
		resolvedUnpostedStormStage{b.holds.holderFor(reasonResolvedUnposted)},
		sendStormStage{pages},
	}
}
