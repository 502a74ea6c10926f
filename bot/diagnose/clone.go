package diagnose

import (
	"slices"
	"time"

	"github.com/hcpbot/hcpbot/event"
)

// Clone returns a copy of c that later facts applied to c do not change.
// The correlator keeps one of the state before an event while it builds
// diagnoses lazily (RuleSet.Brief): if the event clears the cluster's
// signals, the incident keeps the diagnoses of the state before it.
// The memo is shared: it is a cache keyed by everything it depends on.
func (c *Cluster) Clone() *Cluster {
	cp := *c
	cp.changes = slices.Clone(c.changes)
	cp.nodePools = cloneTable(c.nodePools)
	cp.nodes = cloneTable(c.nodes)
	cp.crashes = cloneTable(c.crashes)
	cp.apiProxies = cloneTable(c.apiProxies)
	cp.launchers = cloneTable(c.launchers)
	cp.reach = cloneTable(c.reach)
	cp.ocp = cloneTable(c.ocp)
	cp.summary = cloneTable(c.summary)
	cp.apiServices = cloneTable(c.apiServices)
	cp.connectivity = cloneTable(c.connectivity)
	return &cp
}

// cloneTable copies the entries, which put and bury change in place; the
// records' slices are replaced on change, never written, so they are
// shared.
func cloneTable[R any](t table[R]) table[R] {
	if t == nil {
		return nil
	}
	out := make(table[R], len(t))
	entries := make([]entry[R], 0, len(t)) // one allocation for all
	for k, e := range t {
		entries = append(entries, *e)
		out[k] = &entries[len(entries)-1]
	}
	return out
}

// Prior is a Cluster's state before one event, kept so that the state
// can still be diagnosed once the event is applied (Cluster.Prior).
type Prior struct {
	clone *Cluster // a full copy, or:
	// c, with the one entry the event changes restored on demand: most
	// events are a node's or a node summary's, and copying one entry is
	// much cheaper than copying the cluster (make bench, B6: the clones of
	// summary events were a tenth of a cold start's CPU).
	c       *Cluster
	restore func() (undo func())
}

// Prior keeps what Prior.Diagnose needs to diagnose c as it is now, after
// e (with payload p) is applied to it. Nothing else may be applied to c
// in between.
func (c *Cluster) Prior(e event.Event, p event.Payload) *Prior {
	switch p := p.(type) {
	case event.NodeReadiness:
		if !p.Deleted {
			// Apply changes only c.nodes[name], in place, and prunes
			// nothing (see applyNode).
			return &Prior{c: c, restore: keepEntry(&c.nodes, firstNonEmpty(p.Node, e.Object.Name))}
		}
	case event.NodeSummary:
		// Apply changes only c.summary[""], in place, and prunes nothing.
		return &Prior{c: c, restore: keepEntry(&c.summary, "")}
	}
	return &Prior{clone: c.Clone()}
}

// keepEntry copies the entry under key of *t and returns what puts the
// copy back and then undoes that. t is the address of a Cluster's table,
// which Apply may allocate meanwhile.
func keepEntry[R any](t *table[R], key string) func() (undo func()) {
	old, had := (*t)[key]
	var kept entry[R]
	if had {
		kept = *old
	}
	return func() func() {
		cur, ok := (*t)[key]
		if had {
			if *t == nil {
				*t = table[R]{}
			}
			k := kept
			(*t)[key] = &k
		} else {
			delete(*t, key)
		}
		return func() {
			if ok {
				(*t)[key] = cur
			} else {
				delete(*t, key)
			}
		}
	}
}

// Diagnose diagnoses the state Prior kept.
func (p *Prior) Diagnose(now time.Time) []Diagnosis {
	if p.clone != nil {
		return Diagnose(p.clone, now)
	}
	defer p.restore()()
	return Diagnose(p.c, now)
}
