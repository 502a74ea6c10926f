package diagnose

import (
	"bytes"
	"encoding/gob"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"time"

	"github.com/hcpbot/hcpbot/event"
)

// A Model's checkpoint: every Cluster's facts, tables and tombstones as
// they are, so that a Model rebuilt from it and then fed the events after
// it is the Model a replay of the whole stream builds (bot/checkpoint has
// the design). The memo is a cache and is not kept; ClientsFunc is the
// configuration's, given again on restore.
//
// The records live in unexported types; the checkpoint holds copies in
// mirror types with exported fields for encoding/gob, which writes no
// field names per value (the checkpoint of 2,000 clusters is tens of MB,
// and its decoding is most of a restart from it). Entries are sorted by
// key, so two equal Models give equal checkpoints. Pointers the
// diagnoses tell apart from a zero value (an endpoint, a CA summary) get
// a presence flag: gob does not keep a pointer to a zero value.

// ModelCheckpoint is a copy of a Model's state, taken under the owner's
// lock (Model.Checkpoint) and encoded or compared outside it.
type ModelCheckpoint struct {
	clusters []clusterCP
}

// Checkpoint copies m's state. The copy shares strings and the records'
// slices with m, which m replaces on change and never writes in place.
func (m *Model) Checkpoint() *ModelCheckpoint {
	keys := m.Keys()
	out := &ModelCheckpoint{clusters: make([]clusterCP, 0, len(keys))}
	for _, k := range keys {
		out.clusters = append(out.clusters, m.clusters[k].checkpoint())
	}
	return out
}

// Len is the number of Clusters in the checkpoint.
func (cp *ModelCheckpoint) Len() int { return len(cp.clusters) }

// Encode writes the checkpoint to enc.
func (cp *ModelCheckpoint) Encode(enc *gob.Encoder) error {
	if err := enc.Encode(len(cp.clusters)); err != nil {
		return fmt.Errorf("diagnose: encode model checkpoint: %w", err)
	}
	for i := range cp.clusters {
		if err := enc.Encode(&cp.clusters[i]); err != nil {
			return fmt.Errorf("diagnose: encode cluster %s: %w", cp.clusters[i].Key, err)
		}
	}
	return nil
}

// maxCheckpointClusters bounds what DecodeModelCheckpoint believes a
// count says before it allocates: the checkpoint's digest is verified
// before decoding, this only keeps a decoder bug from asking for the
// machine's memory.
const maxCheckpointClusters = 10_000_000

// DecodeModelCheckpoint reads a checkpoint Encode wrote.
func DecodeModelCheckpoint(dec *gob.Decoder) (*ModelCheckpoint, error) {
	var n int
	if err := dec.Decode(&n); err != nil {
		return nil, fmt.Errorf("diagnose: decode model checkpoint: %w", err)
	}
	if n < 0 || n > maxCheckpointClusters {
		return nil, fmt.Errorf("diagnose: decode model checkpoint: %d clusters", n)
	}
	cp := &ModelCheckpoint{clusters: make([]clusterCP, n)}
	for i := range cp.clusters {
		if err := dec.Decode(&cp.clusters[i]); err != nil {
			return nil, fmt.Errorf("diagnose: decode cluster %d of %d: %w", i, n, err)
		}
	}
	return cp, nil
}

// Model builds the Model the checkpoint holds; clients is as for
// Model.SetClients.
func (cp *ModelCheckpoint) Model(clients ClientsFunc) *Model {
	m := &Model{clusters: make(map[Key]*Cluster, len(cp.clusters)), clients: clients}
	for i := range cp.clusters {
		c := cp.clusters[i].cluster()
		c.SetClients(clients)
		m.clusters[c.key] = c
	}
	return m
}

// Diff lists the Clusters in which cp and o differ, each with both
// versions, field by field as the checkpoint holds them; nil when they
// are equal. A nil slice and an empty one are the same (the checkpoint
// does not tell them apart, nor does any rule).
func (cp *ModelCheckpoint) Diff(o *ModelCheckpoint) []string {
	index := func(c *ModelCheckpoint) map[Key]*clusterCP {
		out := make(map[Key]*clusterCP, len(c.clusters))
		for i := range c.clusters {
			out[c.clusters[i].Key] = &c.clusters[i]
		}
		return out
	}
	a, b := index(cp), index(o)
	var out []string
	for _, k := range unionKeys(a, b) {
		x, y := gobCanonical(a[k]), gobCanonical(b[k])
		if !reflect.DeepEqual(x, y) {
			jx, _ := json.Marshal(x)
			jy, _ := json.Marshal(y)
			out = append(out, fmt.Sprintf("cluster %s:\n  %s\n  %s", k, jx, jy))
		}
	}
	return out
}

func unionKeys(a, b map[Key]*clusterCP) []Key {
	var keys []Key
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if a[k] == nil {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, compareKeys)
	return keys
}

// gobCanonical passes c through the checkpoint's encoding, so that what it
// cannot tell apart compares equal.
func gobCanonical(c *clusterCP) *clusterCP {
	if c == nil {
		return nil
	}
	var buf bytes.Buffer
	out := &clusterCP{}
	if err := gob.NewEncoder(&buf).Encode(c); err != nil {
		return c
	}
	if err := gob.NewDecoder(&buf).Decode(out); err != nil {
		return c
	}
	return out
}

// The mirror types.

type stampCP struct {
	At, Obs time.Time
	ID      string
}

func (s stamp) cp() stampCP    { return stampCP{At: s.at, Obs: s.obs, ID: s.id} }
func (s stampCP) st() stamp    { return stamp{at: s.At, obs: s.Obs, id: s.ID} }
func (r objRef) cp() refCP     { return refCP{r.kind, r.namespace, r.name, r.uid, r.hosted} }
func (r refCP) objRef() objRef { return objRef{r.Kind, r.Namespace, r.Name, r.UID, r.Hosted} }

type refCP struct {
	Kind, Namespace, Name, UID string
	Hosted                     bool
}

type entryCP[C any] struct {
	Key   string
	St    stampCP
	Ref   refCP
	Since time.Time
	Gone  bool
	Rec   C
}

func saveTable[R, C any](t table[R], conv func(R) C) []entryCP[C] {
	if len(t) == 0 {
		return nil
	}
	keys := make([]string, 0, len(t))
	for k := range t {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]entryCP[C], len(keys))
	for i, k := range keys {
		e := t[k]
		out[i] = entryCP[C]{Key: k, St: e.st.cp(), Ref: e.ref.cp(), Since: e.since, Gone: e.gone, Rec: conv(e.rec)}
	}
	return out
}

func loadTable[R, C any](es []entryCP[C], conv func(C) R) table[R] {
	if len(es) == 0 {
		return nil
	}
	t := make(table[R], len(es))
	entries := make([]entry[R], len(es)) // one allocation for all, as cloneTable
	for i, e := range es {
		entries[i] = entry[R]{st: e.St.st(), ref: e.Ref.objRef(), since: e.Since, gone: e.Gone, rec: conv(e.Rec)}
		t[e.Key] = &entries[i]
	}
	return t
}

func identity[T any](v T) T { return v }

type clusterCP struct {
	Key          Key
	HC           hcCP
	Changes      []changeCP
	NodePools    []entryCP[nodePoolCP]
	Nodes        []entryCP[nodeCP]
	Crashes      []entryCP[crashCP]
	APIProxies   []entryCP[apiProxyCP]
	Launchers    []entryCP[launcherCP]
	Reach        []entryCP[reachCP]
	OCP          []entryCP[ocpCP]
	Summary      []entryCP[event.NodeSummary]
	APIServices  []entryCP[apiServiceCP]
	Connectivity []entryCP[connectivityCP]
}

func (c *Cluster) checkpoint() clusterCP {
	out := clusterCP{
		Key:          c.key,
		HC:           c.hc.cp(),
		NodePools:    saveTable(c.nodePools, nodePoolRec.cp),
		Nodes:        saveTable(c.nodes, nodeRec.cp),
		Crashes:      saveTable(c.crashes, crashRec.cp),
		APIProxies:   saveTable(c.apiProxies, apiProxyRec.cp),
		Launchers:    saveTable(c.launchers, launcherRec.cp),
		Reach:        saveTable(c.reach, reachRec.cp),
		OCP:          saveTable(c.ocp, ocpRec.cp),
		Summary:      saveTable(c.summary, identity[event.NodeSummary]),
		APIServices:  saveTable(c.apiServices, apiServiceRec.cp),
		Connectivity: saveTable(c.connectivity, connectivityRec.cp),
	}
	if len(c.changes) > 0 {
		out.Changes = make([]changeCP, len(c.changes))
		for i, ch := range c.changes {
			out.Changes[i] = ch.cp()
		}
	}
	return out
}

func (cp *clusterCP) cluster() *Cluster {
	c := &Cluster{
		key:          cp.Key,
		hc:           cp.HC.hcState(),
		nodePools:    loadTable(cp.NodePools, nodePoolCP.rec),
		nodes:        loadTable(cp.Nodes, nodeCP.rec),
		crashes:      loadTable(cp.Crashes, crashCP.rec),
		apiProxies:   loadTable(cp.APIProxies, apiProxyCP.rec),
		launchers:    loadTable(cp.Launchers, launcherCP.rec),
		reach:        loadTable(cp.Reach, reachCP.rec),
		ocp:          loadTable(cp.OCP, ocpCP.rec),
		summary:      loadTable(cp.Summary, identity[event.NodeSummary]),
		apiServices:  loadTable(cp.APIServices, apiServiceCP.rec),
		connectivity: loadTable(cp.Connectivity, connectivityCP.rec),
	}
	if len(cp.Changes) > 0 {
		c.changes = make([]proxyChange, len(cp.Changes))
		for i, ch := range cp.Changes {
			c.changes[i] = ch.change()
		}
	}
	return c
}

type hcCP struct {
	Present    bool
	St         stampCP
	Ref        refCP
	P          event.HostedClusterState // without the pointers below
	ProxySince time.Time
	// The pointers of P, with their presence.
	APIServer, ControlPlaneEndpoint       event.Endpoint
	HasAPIServer, HasControlPlaneEndpoint bool
	TrustedCA                             event.CABundle
	HasTrustedCA                          bool
}

func (h hcState) cp() hcCP {
	out := hcCP{Present: h.present, St: h.st.cp(), Ref: h.ref.cp(), P: h.p, ProxySince: h.proxySince}
	out.P.APIServer, out.P.ControlPlaneEndpoint, out.P.TrustedCA = nil, nil, nil
	if h.p.APIServer != nil {
		out.APIServer, out.HasAPIServer = *h.p.APIServer, true
	}
	if h.p.ControlPlaneEndpoint != nil {
		out.ControlPlaneEndpoint, out.HasControlPlaneEndpoint = *h.p.ControlPlaneEndpoint, true
	}
	if h.p.TrustedCA != nil {
		out.TrustedCA, out.HasTrustedCA = *h.p.TrustedCA, true
	}
	return out
}

func (h hcCP) hcState() hcState {
	out := hcState{present: h.Present, st: h.St.st(), ref: h.Ref.objRef(), p: h.P, proxySince: h.ProxySince}
	if h.HasAPIServer {
		out.p.APIServer = &h.APIServer
	}
	if h.HasControlPlaneEndpoint {
		out.p.ControlPlaneEndpoint = &h.ControlPlaneEndpoint
	}
	if h.HasTrustedCA {
		out.p.TrustedCA = &h.TrustedCA
	}
	return out
}

type changeCP struct {
	St             stampCP
	Target         event.ProxyTarget
	Object         string
	Old, New       event.ProxySpec
	Added, Removed []string
}

func (p proxyChange) cp() changeCP {
	return changeCP{p.st.cp(), p.target, p.object, p.old, p.new, p.added, p.removed}
}

func (p changeCP) change() proxyChange {
	return proxyChange{p.St.st(), p.Target, p.Object, p.Old, p.New, p.Added, p.Removed}
}

type nodeCP struct {
	Name, Reason, Message, IP string
	Ready                     event.ConditionStatus
	LTT, Created              time.Time
	NotJoining                bool
}

func (r nodeRec) cp() nodeCP {
	return nodeCP{Name: r.name, Reason: r.reason, Message: r.message, IP: r.ip, Ready: r.ready, LTT: r.ltt, Created: r.created, NotJoining: r.notJoining}
}

func (r nodeCP) rec() nodeRec {
	return nodeRec{name: r.Name, ready: r.Ready, reason: r.Reason, message: r.Message, ltt: r.LTT, ip: r.IP, notJoining: r.NotJoining, created: r.Created}
}

type crashCP struct {
	Namespace, Pod, Container, Waiting, Line string
	Restarts, ExitCode                       int32
	Finished                                 time.Time
	Sig                                      event.Signature
}

func (r crashRec) cp() crashCP {
	return crashCP{r.namespace, r.pod, r.container, r.waiting, r.line, r.restarts, r.exitCode, r.finished, r.sig}
}

func (r crashCP) rec() crashRec {
	return crashRec{namespace: r.Namespace, pod: r.Pod, container: r.Container, restarts: r.Restarts, exitCode: r.ExitCode,
		waiting: r.Waiting, finished: r.Finished, sig: r.Sig, line: r.Line}
}

type apiProxyCP struct {
	Pod, Node      string
	Mode           event.ProxyMode
	ConnectFailure bool
	ConnectMessage string
}

func (r apiProxyRec) cp() apiProxyCP {
	return apiProxyCP{r.pod, r.node, r.mode, r.connectFailure, r.connectMessage}
}

func (r apiProxyCP) rec() apiProxyRec {
	return apiProxyRec{r.Pod, r.Node, r.Mode, r.ConnectFailure, r.ConnectMessage}
}

type launcherCP struct {
	Namespace, Pod, VMI, Node, IP, Phase, NodePool string
}

func (r launcherRec) cp() launcherCP {
	return launcherCP{r.namespace, r.pod, r.vmi, r.node, r.ip, r.phase, r.nodePool}
}

func (r launcherCP) rec() launcherRec {
	return launcherRec{r.Namespace, r.Pod, r.VMI, r.Node, r.IP, r.Phase, r.NodePool}
}

type reachCP struct {
	Endpoint             string
	Reachable, Unwatched bool
	Err                  string
	Since                time.Time
}

func (r reachRec) cp() reachCP { return reachCP{r.endpoint, r.reachable, r.unwatched, r.err, r.since} }
func (r reachCP) rec() reachRec {
	return reachRec{r.Endpoint, r.Reachable, r.Unwatched, r.Err, r.Since}
}
func (r ocpRec) cp() ocpCP  { return ocpCP{r.spec, r.status} }
func (r ocpCP) rec() ocpRec { return ocpRec{r.Spec, r.Status} }

type ocpCP struct {
	Spec   event.ProxySpec
	Status event.ProxyStatus
}

type nodePoolCP struct {
	Namespace, Name   string
	Replicas, Current int32
	Autoscaled        bool
	Conds             []event.Condition
	PausedUntil       string
}

func (r nodePoolRec) cp() nodePoolCP {
	return nodePoolCP{r.namespace, r.name, r.replicas, r.current, r.autoscaled, r.conds, r.pausedUntil}
}

func (r nodePoolCP) rec() nodePoolRec {
	return nodePoolRec{namespace: r.Namespace, name: r.Name, replicas: r.Replicas, autoscaled: r.Autoscaled,
		current: r.Current, conds: r.Conds, pausedUntil: r.PausedUntil}
}

type apiServiceCP struct {
	Name, Service, Reason, Message string
	Available                      event.ConditionStatus
	LTT                            time.Time
}

func (r apiServiceRec) cp() apiServiceCP {
	return apiServiceCP{r.name, r.service, r.reason, r.message, r.available, r.ltt}
}

func (r apiServiceCP) rec() apiServiceRec {
	return apiServiceRec{name: r.Name, service: r.Service, available: r.Available, reason: r.Reason, message: r.Message, ltt: r.LTT}
}

type connectivityCP struct {
	LastSucceeded, ObservedAt time.Time
	Raw                       string
	Missing, Stale            bool
	StaleAfter                time.Duration
}

func (r connectivityRec) cp() connectivityCP {
	return connectivityCP{r.lastSucceeded, r.observedAt, r.raw, r.missing, r.stale, r.staleAfter}
}

func (r connectivityCP) rec() connectivityRec {
	return connectivityRec{lastSucceeded: r.LastSucceeded, raw: r.Raw, missing: r.Missing, stale: r.Stale,
		staleAfter: r.StaleAfter, observedAt: r.ObservedAt}
}
