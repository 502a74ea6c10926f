package diagnose

import (
	"slices"
	"time"

	"github.com/hcpbot/hcpbot/event"
)

// stamp orders facts about one object.
type stamp struct {
	// at is the fact's own time where the object has one: a node's Ready
	// lastTransitionTime, set by the API server and the same for every
	// agent, so it orders facts even when a lagging agent observed the
	// older one later. Zero otherwise.
	at time.Time
	// obs is when the agent observed the fact (Event.Time).
	obs time.Time
	// id breaks ties, so that two facts with the same times end in the
	// same state whatever order they arrive in.
	id string
}

// after reports whether s is newer than o: by the facts' own times when
// both have one, else by observation.
func (s stamp) after(o stamp) bool {
	if !s.at.IsZero() && !o.at.IsZero() && !s.at.Equal(o.at) {
		return s.at.After(o.at)
	}
	if !s.obs.Equal(o.obs) {
		return s.obs.After(o.obs)
	}
	if !s.at.Equal(o.at) {
		return s.at.After(o.at)
	}
	return s.id > o.id
}

// objRef is the identity a snapshot lists problems by.
type objRef struct {
	kind, namespace, name, uid string
	hosted                     bool
}

func refOf(o event.ObjectRef) objRef {
	return objRef{kind: o.Kind, namespace: o.Namespace, name: o.Name, uid: o.UID, hosted: o.Hosted}
}

// matches reports whether a snapshot's problem entry names r: by UID when
// both have one (a recreated object with the same name is another object),
// else by kind, namespace, name and side.
func (r objRef) matches(p event.ObjectRef) bool {
	if r.uid != "" && p.UID != "" {
		return r.uid == p.UID
	}
	return r.kind == p.Kind && r.namespace == p.Namespace && r.name == p.Name && r.hosted == p.Hosted
}

// entry is the newest fact about one object.
type entry[R any] struct {
	st  stamp
	ref objRef
	// since is when the current content was first observed; evidence uses
	// it where the fact has no time of its own.
	since time.Time
	// gone marks a tombstone: the object was deleted or its problem
	// cleared. It stays so that late older facts cannot resurrect it.
	gone bool
	rec  R
}

// table holds the entries of one object type by key. Entries are pointers
// so that the map's empty slots stay small.
type table[R any] map[string]*entry[R]

// put applies a fact and reports whether the visible state changed.
func (t *table[R]) put(key string, st stamp, ref objRef, gone bool, rec R, same func(a, b R) bool) bool {
	if *t == nil {
		*t = make(table[R])
	}
	old, ok := (*t)[key]
	if !ok {
		(*t)[key] = &entry[R]{st: st, ref: ref, since: st.obs, gone: gone, rec: rec}
		if gone {
			t.prune()
		}
		return !gone
	}
	if !st.after(old.st) {
		// An older or the same fact. If it restates the current content,
		// it tells when that content was first seen.
		if !gone && !old.gone && same(old.rec, rec) && st.obs.Before(old.since) {
			old.since = st.obs
			return true
		}
		return false
	}
	changed := old.gone != gone || (!gone && !same(old.rec, rec))
	old.st, old.gone = st, gone
	if ref != (objRef{}) {
		old.ref = ref
	}
	if changed {
		old.since = st.obs
	}
	if gone {
		var zero R
		old.rec = zero // tombstones keep no payload
		t.prune()
	} else {
		old.rec = rec
	}
	return changed
}

// bury turns the visible entry under key into a tombstone as of st, if st
// is newer. It reports whether something visible disappeared.
func (t *table[R]) bury(key string, st stamp) bool {
	e, ok := (*t)[key]
	if !ok || e.gone || !st.after(e.st) {
		return false
	}
	var zero R
	e.st, e.gone, e.rec = st, true, zero
	t.prune()
	return true
}

// prune drops the oldest tombstones beyond maxTombstones.
func (t *table[R]) prune() {
	n := 0
	for _, e := range *t {
		if e.gone {
			n++
		}
	}
	for ; n > maxTombstones; n-- {
		oldest := ""
		for k, e := range *t {
			if e.gone && (oldest == "" || (*t)[oldest].st.after(e.st)) {
				oldest = k
			}
		}
		delete(*t, oldest)
	}
}

// visible returns the visible entries, sorted by key if sorted.
func (t table[R]) visible(sorted bool) []*entry[R] {
	if sorted {
		return t.live()
	}
	var out []*entry[R]
	for _, e := range t {
		if !e.gone {
			out = append(out, e)
		}
	}
	return out
}

// live returns the visible entries sorted by key.
func (t table[R]) live() []*entry[R] {
	keys := make([]string, 0, len(t))
	for k, e := range t {
		if !e.gone {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	out := make([]*entry[R], len(keys))
	for i, k := range keys {
		out[i] = t[k]
	}
	return out
}

func equal[R comparable](a, b R) bool { return a == b }

// norm makes times comparable with ==: UTC, no monotonic reading.
func norm(t time.Time) time.Time { return t.Round(0).UTC() }
