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

// beforeApply keeps what settle may need once e is applied: a copy of the
// cluster e is about, if its incident is open with stale diagnoses. An
// event of the management scope can change every hosted cluster of its
// source (a snapshot's end): their diagnoses are built now.
func (b *Bot) beforeApply(e event.Event) *diagnose.Cluster {
	k := diagnose.KeyOf(e)
	if k.Management() {
		for hk, inc := range b.incidents {
			if hk.Source == k.Source {
				b.settle(inc, b.model.Cluster(hk))
			}
		}
		return nil
	}
	if inc := b.incidents[k]; inc == nil || !inc.lazy.stale {
		return nil
	}
	if c := b.model.Cluster(k); c != nil {
		return c.Clone()
	}
	return nil
}

// settle builds inc's diagnoses from c, its cluster as of its newest
// evaluated state, if they are stale.
func (b *Bot) settle(inc *Incident, c *diagnose.Cluster) {
	if inc == nil || !inc.lazy.stale {
		return
	}
	l := inc.lazy
	inc.lazy = lazyDiagnoses{}
	if c == nil {
		return
	}
	if diags := diagnose.Diagnose(c, l.now); len(diags) > 0 {
		inc.Diagnoses = diags
	}
	b.record(inc, l.observed)
}

// settleAll builds every stale incident's diagnoses from the model.
func (b *Bot) settleAll() {
	for k, inc := range b.incidents {
		if inc.lazy.stale {
			b.settle(inc, b.model.Cluster(k))
		}
	}
}
