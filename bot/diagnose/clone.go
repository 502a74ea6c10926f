package diagnose

import "slices"

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
