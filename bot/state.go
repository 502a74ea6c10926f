package bot

import (
	"bytes"
	"cmp"
	"encoding/gob"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/hcpbot/hcpbot/bot/checkpoint"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/bot/storm"
)

// The bot's side of a checkpoint (package bot/checkpoint has the design):
// what of the correlator's state goes into one, and how it comes back.
// Everything a replay of the stream up to the checkpoint's sequence would
// have built is kept as it is — incidents with their keys, notification
// state, lazy diagnoses, timeline steps, storms and their members, the
// deleted clusters waiting to be forgotten — so that restoring and then
// applying the later events is applying every event. Incidents are held
// once and referred to by index: a storm's member may be the current
// incident of its cluster, a pending resolution, or neither, and the
// flush tells them apart by identity.
//
// Not in it: the remediations (bot/command feeds them from the approval
// store before Run, restored or not), and what belongs to this replica's
// run (leader, caughtUp, stormsChecked, which messages were looked up:
// Checked is written, not restored): a restored bot starts as a
// follower still replaying, and takes over like any new leader
// (takeover.go), asking the notifier which messages exist.

// stateCP is the correlator's state in a checkpoint, after its model.
type stateCP struct {
	Format         int
	Seq            uint64
	Incidents      []incidentCP
	Current        []int // indices in Incidents of b.incidents
	Pending        []int
	PendingScanned int
	Storms         []stormCP
	Gone           []goneCP
}

type goneCP struct {
	Key   diagnose.Key
	Since time.Time
}

type incidentCP struct {
	Key              string
	Cluster          diagnose.Key
	Opened, Resolved time.Time
	Diagnoses        []diagnose.Diagnosis
	Storm            string
	Silence          SilenceInfo
	HasSilence       bool
	Channel          string
	Deleted          bool
	Remedy           Remedy
	HasRemedy        bool
	ClearAt          time.Time
	N                notifyCP
	LazyStale        bool
	LazyNow, LazyObs time.Time
	Steps            []stepCP
	Rules            []string
}

type stepCP struct {
	At          time.Time
	Text, Actor string
	Kind        string
}

type notifyCP struct {
	Seen, ClearSeen, First, Sent, Changed time.Time
	State                                 string
	Dirty                                 bool
	Held                                  string
	Version                               uint64
	Checked, Rooted                       bool
	Evidence                              []string // sorted
	HasEvidence                           bool
	Top                                   string
	Causes                                []storm.Cause
	HasCauses                             bool
}

type stormCP struct {
	Key              string
	Cause            storm.Cause
	Channel          string
	Opened, Resolved time.Time
	Members          []int
	Last, Sent       time.Time
	Dirty, Rooted    bool
	Version          uint64
	Listed           int
	Held             string
}

// snapshot is the bot's state at b.applied, copied under the lock so
// that it is encoded outside it.
type snapshot struct {
	model *diagnose.ModelCheckpoint
	state stateCP
}

// snapshot copies the state; b.mu is held. The copies share what the
// correlator replaces rather than changes in place (diagnoses, evidence,
// steps' texts).
func (b *Bot) snapshot() *snapshot {
	s := &snapshot{model: b.model.Checkpoint(), state: stateCP{Format: checkpoint.Format, Seq: b.applied, PendingScanned: b.pendingScanned}}
	index := map[*Incident]int{}
	add := func(inc *Incident) int {
		if i, ok := index[inc]; ok {
			return i
		}
		index[inc] = len(s.state.Incidents)
		s.state.Incidents = append(s.state.Incidents, inc.checkpoint())
		return index[inc]
	}
	for _, k := range slices.SortedFunc(maps.Keys(b.incidents), compareKeys) {
		s.state.Current = append(s.state.Current, add(b.incidents[k]))
	}
	for _, inc := range b.pending {
		s.state.Pending = append(s.state.Pending, add(inc))
	}
	for _, key := range slices.Sorted(maps.Keys(b.storms)) {
		st := b.storms[key]
		cp := stormCP{Key: st.Key, Cause: st.Cause, Channel: st.Channel, Opened: st.Opened, Resolved: st.Resolved,
			Last: st.last, Sent: st.sent, Dirty: st.dirty, Rooted: st.rooted, Version: st.version, Listed: st.listed, Held: string(st.held)}
		for _, m := range st.Members {
			cp.Members = append(cp.Members, add(m))
		}
		s.state.Storms = append(s.state.Storms, cp)
	}
	for _, k := range slices.SortedFunc(maps.Keys(b.gone), compareKeys) {
		s.state.Gone = append(s.state.Gone, goneCP{Key: k, Since: b.gone[k]})
	}
	return s
}

func compareKeys(a, b diagnose.Key) int {
	return cmp.Or(cmp.Compare(a.Source, b.Source), cmp.Compare(a.Cluster.Namespace, b.Cluster.Namespace), cmp.Compare(a.Cluster.Name, b.Cluster.Name))
}

func (inc *Incident) checkpoint() incidentCP {
	n := &inc.n
	out := incidentCP{
		Key: inc.Key, Cluster: inc.Cluster, Opened: inc.Opened, Resolved: inc.Resolved, Diagnoses: inc.Diagnoses,
		Storm: inc.Storm, Channel: inc.Channel, Deleted: inc.Deleted, ClearAt: inc.clearAt,
		LazyStale: inc.lazy.stale, LazyNow: inc.lazy.now, LazyObs: inc.lazy.observed, Rules: slices.Clone(inc.rules),
		N: notifyCP{Seen: n.seen, ClearSeen: n.clearSeen, First: n.first, Sent: n.sent, Changed: n.changed,
			State: n.state, Dirty: n.dirty, Held: string(n.held), Version: n.version, Checked: n.checked, Rooted: n.rooted,
			HasEvidence: n.evidence != nil, Top: n.top, Causes: slices.Clone(n.causes), HasCauses: n.causes != nil},
	}
	if inc.Silence != nil {
		out.Silence, out.HasSilence = *inc.Silence, true
	}
	if inc.Remedy != nil {
		out.Remedy, out.HasRemedy = *inc.Remedy, true
	}
	for l := range n.evidence {
		out.N.Evidence = append(out.N.Evidence, l)
	}
	slices.Sort(out.N.Evidence)
	for _, s := range inc.steps {
		out.Steps = append(out.Steps, stepCP{At: s.At, Text: s.Text, Actor: s.Actor, Kind: s.kind})
	}
	return out
}

func (c *incidentCP) incident() *Incident {
	inc := &Incident{Key: c.Key, Cluster: c.Cluster, Opened: c.Opened, Resolved: c.Resolved, Diagnoses: c.Diagnoses,
		Storm: c.Storm, Channel: c.Channel, Deleted: c.Deleted, clearAt: c.ClearAt,
		lazy: lazyDiagnoses{stale: c.LazyStale, now: c.LazyNow, observed: c.LazyObs}, rules: c.Rules}
	if c.HasSilence {
		s := c.Silence
		inc.Silence = &s
	}
	if c.HasRemedy {
		r := c.Remedy
		inc.Remedy = &r
	}
	for _, s := range c.Steps {
		inc.steps = append(inc.steps, step{Step: Step{At: s.At, Text: s.Text, Actor: s.Actor}, kind: s.Kind})
	}
	m := c.N
	inc.n = notifyState{seen: m.Seen, clearSeen: m.ClearSeen, first: m.First, sent: m.Sent, changed: m.Changed,
		state: m.State, dirty: m.Dirty, held: reason(m.Held), version: m.Version, rooted: m.Rooted, top: m.Top}
	// Not checked: what the leader that wrote it knew of messages holds
	// while it leads; another may have posted since (an incident born
	// looked up, takeover.go liveSince), and one the replay replaces is to
	// wait as pending for the next takeover's look-up.
	if m.HasEvidence {
		inc.n.evidence = make(map[string]bool, len(m.Evidence))
		for _, l := range m.Evidence {
			inc.n.evidence[l] = true
		}
	}
	if m.HasCauses {
		inc.n.causes = m.Causes
		if inc.n.causes == nil {
			inc.n.causes = []storm.Cause{}
		}
	}
	return inc
}

// encode writes the snapshot: the model, then the rest.
func (s *snapshot) encode(w io.Writer) error {
	enc := gob.NewEncoder(w)
	if err := enc.Encode(&s.state); err != nil {
		return fmt.Errorf("encode state: %w", err)
	}
	return s.model.Encode(enc)
}

// restored is a decoded checkpoint, checked for consistency.
type restored struct {
	model     *diagnose.Model
	seq       uint64
	incidents map[diagnose.Key]*Incident
	pending   []*Incident
	scanned   int
	storms    map[string]*Storm
	gone      map[diagnose.Key]time.Time
}

// decodeState decodes a checkpoint's content (verified by its digest: a
// failure here is a bug or a format change without a new Format).
func decodeState(body []byte, clients diagnose.ClientsFunc) (*restored, error) {
	dec := gob.NewDecoder(bytes.NewReader(body))
	var st stateCP
	if err := dec.Decode(&st); err != nil {
		return nil, fmt.Errorf("decode state: %w", err)
	}
	if st.Format != checkpoint.Format {
		return nil, fmt.Errorf("state of format %d, want %d", st.Format, checkpoint.Format)
	}
	mc, err := diagnose.DecodeModelCheckpoint(dec)
	if err != nil {
		return nil, err
	}
	incs := make([]*Incident, len(st.Incidents))
	for i := range st.Incidents {
		c := &st.Incidents[i]
		// What the flush and Render rely on, checked rather than trusted:
		// a checkpoint that breaks it is refused, not rendered.
		if !strings.HasPrefix(c.Key, IncidentKeyPrefix) || c.Opened.IsZero() || (len(c.Diagnoses) == 0 && !c.LazyStale) {
			return nil, fmt.Errorf("incident %d (%q of %s): no key, opening or diagnosis", i, c.Key, c.Cluster)
		}
		incs[i] = c.incident()
	}
	at := func(i int) (*Incident, error) {
		if i < 0 || i >= len(incs) {
			return nil, fmt.Errorf("incident %d of %d", i, len(incs))
		}
		return incs[i], nil
	}
	r := &restored{model: mc.Model(clients), seq: st.Seq, scanned: st.PendingScanned,
		incidents: make(map[diagnose.Key]*Incident, len(st.Current)), storms: make(map[string]*Storm, len(st.Storms)),
		gone: make(map[diagnose.Key]time.Time, len(st.Gone))}
	for _, i := range st.Current {
		inc, err := at(i)
		if err != nil {
			return nil, err
		}
		if r.incidents[inc.Cluster] != nil {
			return nil, fmt.Errorf("two current incidents of %s", inc.Cluster)
		}
		r.incidents[inc.Cluster] = inc
	}
	for _, i := range st.Pending {
		inc, err := at(i)
		if err != nil {
			return nil, err
		}
		r.pending = append(r.pending, inc)
	}
	for _, c := range st.Storms {
		s := &Storm{Key: c.Key, Cause: c.Cause, Channel: c.Channel, Opened: c.Opened, Resolved: c.Resolved,
			last: c.Last, sent: c.Sent, dirty: c.Dirty, rooted: c.Rooted, version: c.Version, listed: c.Listed, held: reason(c.Held)}
		for _, i := range c.Members {
			inc, err := at(i)
			if err != nil {
				return nil, err
			}
			s.Members = append(s.Members, inc)
		}
		r.storms[s.Key] = s
	}
	for _, g := range st.Gone {
		r.gone[g.Key] = g.Since
	}
	return r, nil
}
