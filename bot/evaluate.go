package bot

import (
	"time"

	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/event"
)

// Events only record: evaluate opens, changes or resolves a cluster's
// incident, and the flush decides what to send and when; the full
// diagnoses are built when someone looks (below).

// evaluate diagnoses a cluster and opens, changes or resolves its
// incident. It only records: the flush loop decides what to send and when.
// Per event it runs the first phase of the diagnosis (which rules fire);
// the full diagnoses are built when needed (below). before is the
// cluster as it was before the event, when settle may need it.
func (b *Bot) evaluate(k diagnose.Key, observed time.Time, before *diagnose.Prior, live bool) {
	if k.Management() {
		return
	}
	c := b.model.Cluster(k)
	now := b.cfg.Now()
	inc := b.incidents[k]
	if c != nil && c.Gone() {
		b.settleBefore(inc, before)
		b.clusterDeleted(k, inc, observed, now)
		return
	}
	var diags []diagnose.Diagnosis
	if c != nil {
		diags = diagnose.Brief(c, now)
	}
	if len(diags) == 0 {
		b.settleBefore(inc, before)
	}
	if inc != nil && inc.Open() && !inc.clearAt.IsZero() && len(diags) > 0 {
		if observed.Sub(inc.clearAt) < b.cfg.ResolveTimeout {
			inc.clearAt = time.Time{} // back within the timeout: the same incident
		} else {
			inc.Resolved = inc.clearAt
			inc.n.dirty = true
		}
	}
	switch {
	case len(diags) == 0 && (inc == nil || !inc.Open()):
		return
	case len(diags) == 0 && b.cfg.ResolveTimeout > 0:
		if inc.clearAt.IsZero() {
			inc.clearAt, inc.n.clearSeen = observed, now
			if !b.caughtUp {
				// Replayed: the signals cleared when the event says, not
				// when this replica reads it. Timing the resolution from
				// the replay would keep a cluster healed long ago open
				// for another ResolveTimeout.
				inc.n.clearSeen = earliest(now, observed)
			}
			b.wake()
		}
		return
	case len(diags) == 0:
		inc.Resolved = observed
	case inc == nil || !inc.Open():
		if inc != nil && inc.n.dirty && (inc.n.rooted || !inc.n.checked) {
			// The resolution of the previous incident still has to be
			// sent, if it has a message (unknown before the check: during
			// a replay, a message posted by the previous run).
			b.addPending(inc, observed)
		}
		inc = &Incident{Key: incidentKey(k, observed), Cluster: k, Opened: observed, Channel: b.channel(k, diags[0].Rule)}
		inc.n.seen = now
		// Opened by an event stored after this replica took the lead: no
		// other one can have posted it, so there is no message to look
		// for (takeover.go, liveSince).
		inc.n.checked = live
		b.incidents[k] = inc
	}
	if len(diags) > 0 {
		b.noteEvaluation(inc, c, diags, observed)
		inc.lazy = lazyDiagnoses{stale: true, now: now, observed: observed}
		if b.cfg.GroupWait == 0 || !inc.n.first.IsZero() {
			b.wake()
		}
		return
	}
	b.record(inc, observed)
}

// record notes a new state of inc for the flush if its rendering changed.
func (b *Bot) record(inc *Incident, observed time.Time) {
	if fp := fingerprint(inc); fp != inc.n.state {
		inc.n.state = fp
		inc.n.changed = observed
		inc.n.dirty = true
		if b.cfg.GroupWait == 0 || !inc.n.first.IsZero() {
			b.wake()
		}
	}
}

// clusterDeleted resolves the open incident of a deleted hosted cluster at
// once (its message says the cluster was deleted: nothing will clear its
// signals any more) and marks the cluster for forgetGone.
func (b *Bot) clusterDeleted(k diagnose.Key, inc *Incident, observed, now time.Time) {
	if _, ok := b.gone[k]; !ok {
		b.gone[k] = now
	}
	if inc == nil || !inc.Open() {
		return
	}
	inc.Resolved, inc.Deleted, inc.clearAt = observed, true, time.Time{}
	inc.n.state = fingerprint(inc)
	inc.n.changed = observed
	inc.n.dirty = true
	b.wake()
}

func (b *Bot) channel(k diagnose.Key, kind string) string {
	if b.cfg.Route != nil {
		var labels map[string]string
		if c := b.model.Cluster(k); c != nil {
			if hc, ok := c.HostedCluster(); ok {
				labels = hc.Labels
			}
		}
		if ch := b.cfg.Route(k, kind, labels); ch != "" {
			return ch
		}
	}
	return b.cfg.Channel
}

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
