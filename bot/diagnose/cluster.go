package diagnose

import (
	"slices"
	"strings"
	"time"

	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/noproxy"
)

// Key identifies the scope a Cluster models: one hosted cluster of one
// source, or, with a zero Cluster, the management cluster itself.
type Key struct {
	Source  string
	Cluster event.ClusterRef
}

// KeyOf returns the scope an event belongs to.
func KeyOf(e event.Event) Key {
	k := Key{Source: e.Source}
	if e.Cluster != nil {
		k.Cluster = *e.Cluster
	}
	return k
}

// Management reports whether k is the management scope of its source.
func (k Key) Management() bool { return k.Cluster == event.ClusterRef{} }

// String returns "source/namespace/name", or "source" for the management
// scope.
func (k Key) String() string {
	if k.Management() {
		return k.Source
	}
	return k.Source + "/" + k.Cluster.String()
}

// maxProxyChanges bounds the proxy change history of a Cluster: enough to
// find the edit that removed the bypass, even after a few follow-up edits.
const maxProxyChanges = 10

// maxTombstones bounds the tombstones of one table; beyond it the oldest
// go, and a very late copy of a fact about them could reappear until the
// next snapshot clears it again.
const maxTombstones = 64

// maxLine bounds the termination message line kept per crashlooping pod.
const maxLine = 512

// Cluster is the state of one Key, built from events only. It is not safe
// for concurrent use; the correlator owns it.
type Cluster struct {
	key Key

	hc         hcState
	changes    []proxyChange // oldest first, at most maxProxyChanges
	nodePools  table[nodePoolRec]
	nodes      table[nodeRec]
	crashes    table[crashRec]
	apiProxies table[apiProxyRec] // by node name
	launchers  table[launcherRec]
	reach      table[reachRec] // one entry, key ""
	ocp        table[ocpRec]   // one entry, key ""; management scope only
	// summary is the agent's count of every node (one entry, key ""):
	// nodes holds only those that were once a problem.
	summary table[event.NodeSummary]
	// apiServices are the hosted cluster's aggregated APIServices that
	// are not Available, by name; connectivity is its
	// control-plane-connectivity-check record (one entry, key "").
	apiServices  table[apiServiceRec]
	connectivity table[connectivityRec]
	// clientsOf chooses the workloads' client families (SetClients).
	clientsOf ClientsFunc

	memo memo
}

// NewCluster returns an empty Cluster for k.
func NewCluster(k Key) *Cluster { return &Cluster{key: k} }

// ClientsFunc returns the NO_PROXY client families the workloads of a
// hosted cluster use, from its key and labels.
type ClientsFunc func(k Key, labels map[string]string) []noproxy.Client

// SetClients sets how c finds its workloads' client families; nil (the
// default) means noproxy.DefaultClients.
func (c *Cluster) SetClients(f ClientsFunc) { c.clientsOf = f }

// clients are the client families c's workloads use.
func (c *Cluster) clients() []noproxy.Client {
	if c.clientsOf != nil {
		if cl := c.clientsOf(c.key, c.hc.p.Labels); len(cl) > 0 {
			return cl
		}
	}
	return noproxy.DefaultClients()
}

// Key returns the scope of c.
func (c *Cluster) Key() Key { return c.key }

// hcState is the newest HostedClusterState.
type hcState struct {
	present bool
	st      stamp
	ref     objRef
	p       event.HostedClusterState
	// proxySince is when the current proxy spec was first observed.
	proxySince time.Time
}

// proxyChange is one ProxyChange event.
type proxyChange struct {
	st             stamp
	target         event.ProxyTarget
	object         string // namespace/name or name of the edited object
	old, new       event.ProxySpec
	added, removed []string
}

type nodeRec struct {
	name    string
	ready   event.ConditionStatus
	reason  string
	message string
	ltt     time.Time
	ip      string
	// notJoining: no Ready condition for longer than the agent's join
	// grace since created.
	notJoining bool
	created    time.Time
}

func (r nodeRec) notReady() bool { return r.ready != event.ConditionTrue }

type crashRec struct {
	namespace, pod, container string
	restarts, exitCode        int32
	waiting                   string
	finished                  time.Time
	sig                       event.Signature
	line                      string // the line of the termination message that matters
}

type apiProxyRec struct {
	pod, node      string
	mode           event.ProxyMode
	connectFailure bool
	connectMessage string
}

type launcherRec struct {
	namespace, pod, vmi, node, ip, phase, nodePool string
}

type reachRec struct {
	endpoint  string
	reachable bool
	unwatched bool // the agent does not watch the cluster; err says why
	err       string
	since     time.Time
}

type nodePoolRec struct {
	namespace, name string
	replicas        int32
	autoscaled      bool
	current         int32
	conds           []event.Condition
	pausedUntil     string // spec.pausedUntil as written
}

func sameNodePool(a, b nodePoolRec) bool {
	return a.namespace == b.namespace && a.name == b.name && a.replicas == b.replicas &&
		a.autoscaled == b.autoscaled && a.current == b.current && slices.Equal(a.conds, b.conds) &&
		a.pausedUntil == b.pausedUntil
}

// apiServiceRec is an aggregated APIService that is not Available.
type apiServiceRec struct {
	name, service   string
	available       event.ConditionStatus
	reason, message string
	ltt             time.Time
}

// connectivityRec is the control-plane-connectivity-check record.
type connectivityRec struct {
	lastSucceeded time.Time
	raw           string
	missing       bool
	stale         bool
	staleAfter    time.Duration
	observedAt    time.Time
}

// problem: the record says the workers do not reach the API server now.
func (r connectivityRec) problem() bool { return r.stale || r.missing }

// problem mirrors the agent: a NodePool condition other than UpdatingConfig
// that is False.
func (r nodePoolRec) problem() bool {
	for _, c := range r.conds {
		if c.Type != "UpdatingConfig" && c.Status == event.ConditionFalse {
			return true
		}
	}
	return false
}

func (r nodePoolRec) cond(t string) (event.Condition, bool) {
	for _, c := range r.conds {
		if c.Type == t {
			return c, true
		}
	}
	return event.Condition{}, false
}

type ocpRec struct {
	spec   event.ProxySpec
	status event.ProxyStatus
}

func sameOCP(a, b ocpRec) bool { return sameSpec(a.spec, b.spec) && a.status == b.status }

func sameSpec(a, b event.ProxySpec) bool {
	return a.HTTPProxy == b.HTTPProxy && a.HTTPSProxy == b.HTTPSProxy && a.NoProxy == b.NoProxy &&
		a.TrustedCA == b.TrustedCA && slices.Equal(a.ReadinessEndpoints, b.ReadinessEndpoints)
}

func sameHC(a, b event.HostedClusterState) bool {
	return a.Platform == b.Platform && a.InfraID == b.InfraID && a.Version == b.Version &&
		sameSpec(a.Proxy, b.Proxy) && a.NetworkType == b.NetworkType &&
		slices.Equal(a.ClusterNetwork, b.ClusterNetwork) && slices.Equal(a.ServiceNetwork, b.ServiceNetwork) &&
		slices.Equal(a.MachineNetwork, b.MachineNetwork) && sameEndpoint(a.APIServer, b.APIServer) &&
		sameEndpoint(a.ControlPlaneEndpoint, b.ControlPlaneEndpoint) && a.KubeconfigSecret == b.KubeconfigSecret &&
		slices.Equal(a.Conditions, b.Conditions) && a.Deleted == b.Deleted &&
		a.IgnitionEndpoint == b.IgnitionEndpoint && a.KonnectivityEndpoint == b.KonnectivityEndpoint &&
		sameCA(a.TrustedCA, b.TrustedCA) && a.PausedUntil == b.PausedUntil
}

func sameCA(a, b *event.CABundle) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// cloneCA copies the CA summary with a normalised NotAfter.
func cloneCA(b *event.CABundle) *event.CABundle {
	if b == nil {
		return nil
	}
	c := *b
	c.NotAfter = norm(c.NotAfter)
	return &c
}

func sameEndpoint(a, b *event.Endpoint) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// normConds copies conditions with normalised times, so that they compare
// with ==; the caller's slice is not kept.
func normConds(cs []event.Condition) []event.Condition {
	if len(cs) == 0 {
		return nil
	}
	out := make([]event.Condition, len(cs))
	for i, c := range cs {
		c.LastTransitionTime = norm(c.LastTransitionTime)
		out[i] = c
	}
	return out
}

func cloneEndpoint(e *event.Endpoint) *event.Endpoint {
	if e == nil {
		return nil
	}
	c := *e
	return &c
}

func cloneSpec(s event.ProxySpec) event.ProxySpec {
	s.ReadinessEndpoints = slices.Clone(s.ReadinessEndpoints)
	return s
}

// Apply records the fact an event carries and reports whether the state
// changed in a way a diagnosis can see. p is the event's decoded payload
// (Event.DecodePayload). Events of another scope are ignored, except that
// a management-scope SnapshotDone of the same source applies to every
// hosted cluster (see the package documentation). Applying a fact again,
// or an older fact after a newer one, changes nothing.
func (c *Cluster) Apply(e event.Event, p event.Payload) (changed bool) {
	if p == nil || p.EventType() != e.Type {
		return false
	}
	if done, ok := p.(event.SnapshotDone); ok {
		if e.Source != c.key.Source || (e.Cluster != nil && KeyOf(e) != c.key) {
			return false
		}
		return c.ApplySnapshotDone(done)
	}
	if KeyOf(e) != c.key {
		return false
	}
	obs := norm(e.Time)
	st := stamp{obs: obs, id: e.ID}
	ref := refOf(e.Object)
	switch p := p.(type) {
	case event.HostedClusterState:
		return c.applyHostedCluster(st, ref, p)
	case event.ProxyChange:
		return c.applyProxyChange(st, e.Object, p)
	case event.NodePoolState:
		name := firstNonEmpty(p.Name, e.Object.Name)
		rec := nodePoolRec{namespace: e.Object.Namespace, name: name, current: p.CurrentReplicas, conds: normConds(p.Conditions), pausedUntil: p.PausedUntil}
		if p.Replicas != nil {
			rec.replicas = *p.Replicas
		} else {
			rec.autoscaled = true
		}
		return c.nodePools.put(e.Object.Namespace+"/"+name, st, ref, p.Deleted, rec, sameNodePool)
	case event.NodeReadiness:
		return c.applyNode(st, ref, e.Object.Name, p)
	case event.PodCrashLoop:
		ns, pod := firstNonEmpty(p.Namespace, e.Object.Namespace), firstNonEmpty(p.Pod, e.Object.Name)
		rec := crashRec{
			namespace: ns, pod: pod, container: p.Container, restarts: p.RestartCount, exitCode: p.ExitCode,
			waiting: p.WaitingReason, finished: norm(p.FinishedAt), sig: p.Signature,
			line: keyLine(p.LastTerminationMessage, p.Signature),
		}
		return c.crashes.put(ns+"/"+pod, st, ref, p.Cleared, rec, equal[crashRec])
	case event.KubeAPIServerProxy:
		pod := firstNonEmpty(p.Pod, e.Object.Name)
		key := p.Node
		if key == "" {
			key = "pod:" + pod // a static pod always has a node; keep it apart anyway
		}
		rec := apiProxyRec{pod: pod, node: p.Node, mode: p.Mode, connectFailure: p.ConnectFailure, connectMessage: p.ConnectMessage}
		return c.apiProxies.put(key, st, ref, false, rec, equal[apiProxyRec])
	case event.VirtLauncher:
		pod := firstNonEmpty(p.Pod, e.Object.Name)
		rec := launcherRec{namespace: e.Object.Namespace, pod: pod, vmi: p.VMI, node: p.Node, ip: p.PodIP, phase: p.Phase, nodePool: p.NodePool}
		return c.launchers.put(e.Object.Namespace+"/"+pod, st, ref, p.Deleted, rec, equal[launcherRec])
	case event.Reachability:
		rec := reachRec{endpoint: p.Endpoint, reachable: p.Reachable, unwatched: p.Unwatched, err: p.Error, since: norm(p.Since)}
		return c.reach.put("", st, ref, false, rec, equal[reachRec])
	case event.OpenShiftProxy:
		rec := ocpRec{spec: cloneSpec(p.Spec), status: p.Status}
		return c.ocp.put("", st, ref, false, rec, sameOCP)
	case event.NodeSummary:
		return c.summary.put("", st, ref, false, p, equal[event.NodeSummary])
	case event.APIServiceState:
		name := firstNonEmpty(p.Name, e.Object.Name)
		rec := apiServiceRec{name: name, service: p.Service, available: p.Available, reason: p.Reason, message: p.Message, ltt: norm(p.LastTransitionTime)}
		return c.apiServices.put(name, st, ref, p.Cleared, rec, equal[apiServiceRec])
	case event.ConnectivityCheck:
		rec := connectivityRec{lastSucceeded: norm(p.LastSucceeded), raw: p.Raw, missing: p.Missing, stale: p.Stale,
			staleAfter: p.StaleAfter, observedAt: norm(p.ObservedAt)}
		return c.connectivity.put("", st, ref, false, rec, equal[connectivityRec])
	}
	return false
}

func (c *Cluster) applyHostedCluster(st stamp, ref objRef, p event.HostedClusterState) bool {
	p.Proxy = cloneSpec(p.Proxy)
	p.ClusterNetwork = slices.Clone(p.ClusterNetwork)
	p.ServiceNetwork = slices.Clone(p.ServiceNetwork)
	p.MachineNetwork = slices.Clone(p.MachineNetwork)
	p.APIServer = cloneEndpoint(p.APIServer)
	p.ControlPlaneEndpoint = cloneEndpoint(p.ControlPlaneEndpoint)
	p.Conditions = normConds(p.Conditions)
	p.TrustedCA = cloneCA(p.TrustedCA)
	h := &c.hc
	if h.present && !st.after(h.st) {
		if sameSpec(h.p.Proxy, p.Proxy) && st.obs.Before(h.proxySince) {
			h.proxySince = st.obs
			return true
		}
		return false
	}
	wasDeleted := h.present && h.p.Deleted
	changed := !h.present || !sameHC(h.p, p)
	if !h.present || !sameSpec(h.p.Proxy, p.Proxy) {
		h.proxySince = st.obs
	}
	h.present, h.st, h.ref, h.p = true, st, ref, p
	if p.Deleted && !wasDeleted {
		c.buryHosted(st)
	}
	return changed
}

// buryHosted tombstones everything that lives in or for a hosted cluster
// that is gone, so stale facts about it cannot come back.
func (c *Cluster) buryHosted(st stamp) {
	for k := range c.nodes {
		c.nodes.bury(k, st)
	}
	for k := range c.crashes {
		c.crashes.bury(k, st)
	}
	for k := range c.apiProxies {
		c.apiProxies.bury(k, st)
	}
	for k := range c.launchers {
		c.launchers.bury(k, st)
	}
	for k := range c.nodePools {
		c.nodePools.bury(k, st)
	}
	c.reach.bury("", st)
	c.summary.bury("", st)
	for k := range c.apiServices {
		c.apiServices.bury(k, st)
	}
	c.connectivity.bury("", st)
}

func (c *Cluster) applyNode(st stamp, ref objRef, objName string, p event.NodeReadiness) bool {
	name := firstNonEmpty(p.Node, objName)
	if p.Deleted {
		changed := c.nodes.put(name, st, ref, true, nodeRec{}, equal[nodeRec])
		// The agent publishes no deletion for the node's static pod.
		if c.apiProxies.bury(name, st) {
			changed = true
		}
		return changed
	}
	ltt := norm(p.LastTransitionTime)
	if !ltt.IsZero() {
		st.at = ltt
	}
	rec := nodeRec{name: name, ready: p.Ready, reason: p.Reason, message: p.Message, ltt: ltt, ip: p.InternalIP,
		notJoining: p.NotJoining, created: norm(p.Created)}
	return c.nodes.put(name, st, ref, false, rec, equal[nodeRec])
}

// applyProxyChange inserts a change into the history in time order. The
// same edit reported twice (by a second agent, or redelivered) has the
// same ID and sits next to itself in time; a later edit back to the same
// values is a new entry, since another edit lies between them.
func (c *Cluster) applyProxyChange(st stamp, obj event.ObjectRef, p event.ProxyChange) bool {
	ch := proxyChange{
		st: st, target: p.Target, object: obj.Name,
		old: cloneSpec(p.Old), new: cloneSpec(p.New),
		added: slices.Clone(p.NoProxyAdded), removed: slices.Clone(p.NoProxyRemoved),
	}
	if obj.Namespace != "" {
		ch.object = obj.Namespace + "/" + obj.Name
	}
	i, _ := slices.BinarySearchFunc(c.changes, st, func(x proxyChange, s stamp) int {
		switch {
		case s.after(x.st):
			return -1
		case x.st.after(s):
			return 1
		}
		return 0
	})
	if i > 0 && c.changes[i-1].st.id == st.id {
		return false // the same edit, already known from an earlier report
	}
	if i < len(c.changes) && c.changes[i].st.id == st.id {
		if !c.changes[i].st.after(st) {
			return false // this very report again
		}
		// The same edit, seen earlier by another agent: keep the
		// earliest time, which is when the edit happened.
		c.changes[i].st = st
		return true
	}
	if i == 0 && len(c.changes) >= maxProxyChanges {
		return false // older than everything kept
	}
	c.changes = slices.Insert(c.changes, i, ch)
	if len(c.changes) > maxProxyChanges {
		c.changes = slices.Delete(c.changes, 0, len(c.changes)-maxProxyChanges)
	}
	return true
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// keyLine picks the line of a termination message a human needs: the last
// one carrying the signature, else the last klog error or fatal line, else
// the last non-empty line. klog.Fatal dumps goroutine stacks after the
// fatal line, so "the last line" alone is often a stack frame. The line is
// cloned so the stored state does not pin the whole message.
func keyLine(msg string, sig event.Signature) string {
	lines := strings.Split(strings.TrimSpace(msg), "\n")
	pick := ""
	for i := len(lines) - 1; i >= 0 && pick == ""; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" && sig != event.SignatureNone && event.DetectSignature(l) == sig {
			pick = l
		}
	}
	for i := len(lines) - 1; i >= 0 && pick == ""; i-- {
		if l := strings.TrimSpace(lines[i]); len(l) > 5 && (l[0] == 'F' || l[0] == 'E') && isDigits(l[1:5]) {
			pick = l
		}
	}
	for i := len(lines) - 1; i >= 0 && pick == ""; i-- {
		pick = strings.TrimSpace(lines[i])
	}
	return strings.Clone(clip(pick, maxLine))
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}
