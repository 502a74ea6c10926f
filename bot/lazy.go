package bot

import (
	"time"

	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/event"
)

// Diagnosis in two phases. Per event, evaluate runs only the first
// (diagnose.Brief: which rules fire, on which symptoms), which is all
// opening and resolving need. The full diagnoses — titles, evidence
// text, fixes, and the fingerprint of what a rendering shows — are built
// when someone looks: the flush on the leader, readers (Incidents,
// ClusterStates), and, from the state before the event, when an event
// clears or deletes the cluster. A follower, or a replica replaying the
// stream, builds them for none of the events in between (make bench, B1).
//
// The result is what building them on every event gave: the newest
// state's diagnoses, computed with the clock of the event that made it,
// and a fingerprint compared against the last one recorded. Only a state
// that changed and changed back between two looks is no longer noticed,
// and it renders the same.

// lazyDiagnoses marks an incident whose Diagnoses lag its cluster's state.
type lazyDiagnoses struct {
	stale bool
	// now is the clock evaluate ran the first phase with for the newest
	// state, observed that state's event time.
	now, observed time.Time
}

// beforeApply keeps what settle may need once e is applied: the state
// before it of the cluster e is about, if its incident is open with stale
// diagnoses. An event of the management scope can change every hosted
// cluster of its source (a snapshot's end): their diagnoses are built now.
func (b *Bot) beforeApply(e event.Event, p event.Payload) *diagnose.Prior {
	k := diagnose.KeyOf(e)
	if k.Management() {
		b.settleAll(func(hk diagnose.Key) bool { return hk.Source == k.Source })
		return nil
	}
	if inc := b.incidents[k]; inc == nil || !inc.lazy.stale {
		return nil
	}
	if c := b.model.Cluster(k); c != nil {
		return c.Prior(e, p)
	}
	return nil
}

// settle builds inc's diagnoses with diag, which diagnoses its cluster as
// of its newest evaluated state, if they are stale.
func (b *Bot) settle(inc *Incident, diag func(now time.Time) []diagnose.Diagnosis) {
	if inc == nil || !inc.lazy.stale {
		return
	}
	l := inc.lazy
	inc.lazy = lazyDiagnoses{}
	if diag == nil {
		return
	}
	if diags := diag(l.now); len(diags) > 0 {
		inc.Diagnoses = diags
	}
	b.record(inc, l.observed)
}

// settleBefore settles inc from the state before the event being applied.
func (b *Bot) settleBefore(inc *Incident, prior *diagnose.Prior) {
	if prior == nil {
		b.settle(inc, nil)
		return
	}
	b.settle(inc, prior.Diagnose)
}

// settleAll builds the stale diagnoses of the incidents whose key match
// accepts (every one when match is nil) from the model.
func (b *Bot) settleAll(match func(diagnose.Key) bool) {
	for k, inc := range b.incidents {
		if !inc.lazy.stale || (match != nil && !match(k)) {
			continue
		}
		if c := b.model.Cluster(k); c != nil {
			b.settle(inc, func(now time.Time) []diagnose.Diagnosis { return diagnose.Diagnose(c, now) })
		} else {
			b.settle(inc, nil)
		}
	}
}
