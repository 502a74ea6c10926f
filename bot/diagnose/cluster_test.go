package diagnose

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/event"
)

// history is a cluster's life: a risky edit, symptoms, one node recovering,
// the crash clearing, restated snapshot copies of some facts.
func history(t *testing.T) []fact {
	restated := func(f fact, when int) fact {
		t.Helper()
		// A snapshot restates a fact under the same ID with a later time.
		g := newFact(t, f.e.Cluster, f.e.Object, f.p, "unused", at(when), event.WithSnapshot("run-1"))
		g.e.ID = f.e.ID
		return g
	}
	tunnelPod := apiProxyFact(t, nodeA, event.ProxyModeTunnel, true, at(23))
	notReadyA := nodeFact(t, nodeA, event.ConditionFalse, at(20), at(21))
	return []fact{
		hcFact(t, seedHC(seedNoProxy), at(0)),
		changeFact(t, proxySpec(seedNoProxy), proxySpec(tunnelNoProxy), at(5)),
		hcFact(t, seedHC(tunnelNoProxy), at(5)),
		notReadyA,
		restated(notReadyA, 50),
		nodeFact(t, nodeB, event.ConditionUnknown, at(22), at(22)),
		nodeFact(t, nodeB, event.ConditionTrue, at(40), at(40)),
		nodeFact(t, nodeC, event.ConditionTrue, at(1), at(1)),
		seedCrash(t, at(25)),
		crashFact(t, "openshift-ingress-operator", "ingress-operator-1", "panic: boom", 4, at(26)),
		crashCleared(t, "openshift-ingress-operator", "ingress-operator-1", at(35)),
		tunnelPod,
		restated(tunnelPod, 50),
		poolFact(t, "np1", false, at(24), at(24)),
		launcherFact(t, nodeA, "Running", at(2)),
		reachFact(t, false, at(30), at(30)),
		reachFact(t, true, at(33), at(33)),
	}
}

func TestApplyIsIdempotent(t *testing.T) {
	facts := history(t)
	c := build(t, facts...)
	before := Diagnose(c, at(60))
	size := c.ApproxBytes()
	for _, f := range facts {
		if c.Apply(f.e, f.p) {
			t.Errorf("applying %v again reported a change", f)
		}
	}
	if after := Diagnose(c, at(60)); !reflect.DeepEqual(before, after) {
		t.Errorf("diagnoses changed:\n%s\n%s", render(before), render(after))
	}
	if c.ApproxBytes() != size {
		t.Errorf("state grew from %d to %d bytes", size, c.ApproxBytes())
	}
}

// TestApplyOrderDoesNotMatter: at-least-once delivery in any order, with
// duplicates, ends in the same diagnoses.
func TestApplyOrderDoesNotMatter(t *testing.T) {
	facts := history(t)
	want := Diagnose(build(t, facts...), at(60))
	if got := rulesOf(want); !slices.Equal(got, []string{RuleProxyTunnel}) {
		t.Fatalf("in order: %v\n%s", got, render(want))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 200 {
		shuffled := slices.Clone(facts)
		// Some facts arrive twice.
		for range 3 {
			shuffled = append(shuffled, facts[rng.IntN(len(facts))])
		}
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		if got := Diagnose(build(t, shuffled...), at(60)); !reflect.DeepEqual(got, want) {
			t.Fatalf("permutation %d %v:\n%s\nwant\n%s", i, shuffled, render(got), render(want))
		}
	}
}

func TestOlderFactDoesNotOverwrite(t *testing.T) {
	tests := []struct {
		name          string
		newer, older  fact
		notReadyNodes int
		rules         []string
	}{
		{
			// Agent B lags: it publishes the old NotReady after agent A
			// published the recovery. The transition time decides.
			name:          "node: later observation of an older transition",
			newer:         nodeFact(t, nodeA, event.ConditionTrue, at(40), at(40)),
			older:         nodeFact(t, nodeA, event.ConditionFalse, at(20), at(45)),
			notReadyNodes: 0, rules: []string{},
		},
		{
			name:          "node: deleted, then a late NotReady",
			newer:         nodeDeleted(t, nodeA, at(30)),
			older:         nodeFact(t, nodeA, event.ConditionFalse, at(20), at(21)),
			notReadyNodes: 0, rules: []string{},
		},
		{
			name:  "crash cleared, then a late crash",
			newer: crashCleared(t, scaNamespace, scaPod, at(30)),
			older: seedCrash(t, at(25)),
			rules: []string{},
		},
		{
			name:  "HostedCluster: an older spec arrives late",
			newer: hcFact(t, seedHC(tunnelNoProxy+",kubernetes"), at(30)),
			older: hcFact(t, seedHC(tunnelNoProxy), at(5)),
			rules: []string{},
		},
		{
			name:  "reachability: an older failure arrives late",
			newer: reachFact(t, true, at(35), at(35)),
			older: reachFact(t, false, at(30), at(30)),
			rules: []string{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := build(t, hcFact(t, seedHC(tunnelNoProxy+",kubernetes"), at(1)))
			c.Apply(tt.newer.e, tt.newer.p)
			if c.Apply(tt.older.e, tt.older.p) {
				t.Errorf("the older fact reported a change")
			}
			if n := len(c.notReadyNodes(Explained{})); n != tt.notReadyNodes {
				t.Errorf("NotReady nodes = %d, want %d", n, tt.notReadyNodes)
			}
			if got := rulesOf(Diagnose(c, at(60))); !slices.Equal(got, tt.rules) {
				t.Errorf("rules = %v, want %v", got, tt.rules)
			}
		})
	}

	// A node first seen without a Ready condition (no transition time),
	// then with one that is a little older than that first observation:
	// the later observation wins.
	c0 := build(t, nodeFact(t, nodeA, event.ConditionUnknown, time.Time{}, at(10)))
	if f := nodeFact(t, nodeA, event.ConditionFalse, at(9), at(11)); !c0.Apply(f.e, f.p) || c0.nodes[nodeA].rec.ready != event.ConditionFalse {
		t.Error("a later observation without comparable transition times was ignored")
	}

	// A node recreated under the same name after its deletion is new.
	c := build(t, nodeDeleted(t, nodeA, at(30)), nodeFact(t, nodeA, event.ConditionFalse, at(31), at(31)))
	if n := len(c.notReadyNodes(Explained{})); n != 1 {
		t.Errorf("recreated node: NotReady = %d, want 1", n)
	}
}

func TestProxyChangeHistory(t *testing.T) {
	c := NewCluster(hcKey)
	spec := func(i int) event.ProxySpec { return proxySpec(".corp.example,e" + strconv.Itoa(i)) }
	apply := func(f fact) bool { return c.Apply(f.e, f.p) }

	first := changeFact(t, spec(0), spec(1), at(10))
	if !apply(first) || apply(first) {
		t.Fatal("a change must apply once")
	}
	// The same edit reported by a second agent that saw it earlier: one
	// entry, at the earlier time.
	second := changeFact(t, spec(0), spec(1), at(9))
	if !apply(second) || len(c.changes) != 1 || !c.changes[0].st.obs.Equal(at(9)) {
		t.Fatalf("second report: %d entries, first at %v", len(c.changes), c.changes[0].st.obs)
	}
	// Flip-flop: back and forth again is a new edit each time.
	apply(changeFact(t, spec(1), spec(0), at(11)))
	if !apply(changeFact(t, spec(0), spec(1), at(12))) || len(c.changes) != 3 {
		t.Fatalf("flip-flop: %d entries, want 3", len(c.changes))
	}
	// Bounded, oldest dropped, an edit older than everything kept ignored.
	for i := range 20 {
		apply(changeFact(t, spec(100+i), spec(101+i), at(20+i)))
	}
	if len(c.changes) != maxProxyChanges || !c.changes[0].st.obs.Equal(at(30)) {
		t.Fatalf("history: %d entries from %v", len(c.changes), c.changes[0].st.obs)
	}
	if apply(changeFact(t, spec(7), spec(8), at(1))) {
		t.Error("an edit older than the whole history was kept")
	}
	for i := 1; i < len(c.changes); i++ {
		if c.changes[i-1].st.after(c.changes[i].st) {
			t.Fatal("history not in time order")
		}
	}
}

func snapshotDone(t *testing.T, cluster *event.ClusterRef, started int, types []event.Type, problems ...event.ObjectRef) fact {
	t.Helper()
	e, err := event.NewSnapshotDone(source, "run-1", cluster, event.SnapshotDone{Started: at(started), Count: len(problems), Types: types, Problems: problems}, at(started+1))
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.DecodePayload()
	if err != nil {
		t.Fatal(err)
	}
	return fact{e, p}
}

func TestSnapshotClearing(t *testing.T) {
	ref := hcRef
	hostedTypes := []event.Type{event.TypeNode, event.TypeCrashLoop, event.TypeAPIServerProxy}
	nodeRef := func(name string) event.ObjectRef {
		return event.ObjectRef{Kind: "Node", Name: name, UID: "uid-" + name, Hosted: true}
	}
	base := func() *Cluster {
		return build(t,
			hcFact(t, seedHC(seedNoProxy), at(0)),
			nodeFact(t, nodeA, event.ConditionFalse, at(20), at(20)),
			nodeFact(t, nodeB, event.ConditionFalse, at(21), at(21)),
			nodeFact(t, nodeC, event.ConditionTrue, at(1), at(1)),
			nodeFact(t, "late", event.ConditionFalse, at(52), at(52)), // after the snapshot started
			seedCrash(t, at(25)),
			apiProxyFact(t, nodeA, event.ProxyModeTunnel, true, at(23)),
			reachFact(t, false, at(30), at(30)),
			poolFact(t, "np1", false, at(24), at(24)),
			poolFact(t, "np2", false, at(24), at(24)),
			launcherFact(t, nodeB, "Pending", at(19)),
		)
	}
	notReady := func(c *Cluster) []string {
		var out []string
		for _, e := range c.notReadyNodes(Explained{}) {
			out = append(out, e.rec.name)
		}
		return out
	}

	t.Run("hosted scope", func(t *testing.T) {
		c := base()
		done := snapshotDone(t, &ref, 50, hostedTypes, nodeRef(nodeA))
		if !c.Apply(done.e, done.p) {
			t.Fatal("snapshot reported no change")
		}
		if got := notReady(c); !slices.Equal(got, []string{nodeA, "late"}) {
			t.Errorf("NotReady after snapshot = %v, want the listed one and the one seen after it started", got)
		}
		if len(c.crashes.live()) != 0 || len(c.apiProxies.live()) != 0 {
			t.Errorf("unlisted crash and tunnel pod not cleared")
		}
		if len(c.reach.live()) != 1 || len(c.nodePools.live()) != 2 || len(c.launchers.live()) != 1 {
			t.Errorf("types the snapshot did not cover were cleared")
		}
		if c.Apply(done.e, done.p) {
			t.Error("the same snapshot twice reported a change")
		}
		// A late copy of an older fact does not bring the problem back; a
		// new transition does.
		if old := nodeFact(t, nodeB, event.ConditionFalse, at(21), at(21)); c.Apply(old.e, old.p) {
			t.Error("a cleared problem came back from a stale fact")
		}
		if fresh := nodeFact(t, nodeB, event.ConditionFalse, at(55), at(55)); !c.Apply(fresh.e, fresh.p) {
			t.Error("a fresh transition after the snapshot was ignored")
		}
	})

	t.Run("matching by name when the snapshot has no UID", func(t *testing.T) {
		c := base()
		done := snapshotDone(t, &ref, 50, []event.Type{event.TypeNode}, event.ObjectRef{Kind: "Node", Name: nodeB, Hosted: true})
		c.Apply(done.e, done.p)
		if got := notReady(c); !slices.Equal(got, []string{nodeB, "late"}) {
			t.Errorf("NotReady = %v", got)
		}
	})

	t.Run("management scope reaches the hosted cluster", func(t *testing.T) {
		c := base()
		hcObj := event.ObjectRef{Kind: "HostedCluster", Namespace: "clusters", Name: "example", UID: "hc-uid"}
		np1 := event.ObjectRef{Kind: "NodePool", Namespace: "clusters", Name: "np1", UID: "uid-np-np1"}
		done := snapshotDone(t, nil, 50, []event.Type{event.TypeHostedCluster, event.TypeNodePool, event.TypeVirtLauncher}, hcObj, np1)
		if !c.Apply(done.e, done.p) {
			t.Fatal("no change")
		}
		if pools := c.nodePools.live(); len(pools) != 1 || pools[0].rec.name != "np1" {
			t.Errorf("pools = %d", len(pools))
		}
		if len(c.launchers.live()) != 0 || c.Gone() {
			t.Errorf("launcher not cleared or cluster gone")
		}
	})

	t.Run("a HostedCluster missing from the management snapshot is gone", func(t *testing.T) {
		c := base()
		done := snapshotDone(t, nil, 50, []event.Type{event.TypeHostedCluster})
		c.Apply(done.e, done.p)
		if !c.Gone() || len(Diagnose(c, at(60))) != 0 {
			t.Errorf("gone = %v, diagnoses:\n%s", c.Gone(), render(Diagnose(c, at(60))))
		}
	})

	t.Run("other scopes are ignored", func(t *testing.T) {
		c := base()
		other := event.ClusterRef{Namespace: "clusters", Name: "other"}
		done := snapshotDone(t, &other, 50, hostedTypes)
		if c.Apply(done.e, done.p) || len(notReady(c)) != 3 {
			t.Error("a snapshot of another cluster was applied")
		}
	})
}

func TestApplyIgnoresOtherScopes(t *testing.T) {
	c := NewCluster(hcKey)
	other := event.ClusterRef{Namespace: "clusters", Name: "other"}
	f := newFact(t, &other, event.ObjectRef{Kind: "Node", Name: nodeA, Hosted: true}, event.NodeReadiness{Node: nodeA, Ready: event.ConditionFalse}, "k", at(1))
	if c.Apply(f.e, f.p) || c.nodeTotal() != 0 {
		t.Error("an event of another cluster was applied")
	}
	g := nodeFact(t, nodeA, event.ConditionFalse, at(1), at(1))
	if c.Apply(g.e, event.PodCrashLoop{}) {
		t.Error("a payload of the wrong type was applied")
	}
}

func TestModel(t *testing.T) {
	m := NewModel()
	for _, f := range []fact{
		hcFact(t, seedHC(seedNoProxy), at(0)),
		nodeFact(t, nodeA, event.ConditionFalse, at(20), at(20)),
		launcherFact(t, nodeA, "Pending", at(19)),
	} {
		if _, err := m.Apply(f.e); err != nil {
			t.Fatal(err)
		}
	}
	other := event.ClusterRef{Namespace: "clusters", Name: "other"}
	f := newFact(t, &other, event.ObjectRef{Kind: "Pod", Namespace: "clusters-other", Name: "virt-launcher-x"}, event.VirtLauncher{Pod: "virt-launcher-x", VMI: "x", Phase: "Pending"}, "k", at(1))
	if _, err := m.Apply(f.e); err != nil {
		t.Fatal(err)
	}
	done := snapshotDone(t, nil, 50, []event.Type{event.TypeVirtLauncher})
	changed, err := m.Apply(done.e)
	if err != nil {
		t.Fatal(err)
	}
	if want := []Key{hcKey, {Source: source, Cluster: other}}; !slices.Equal(changed, want) {
		t.Errorf("changed = %v, want %v", changed, want)
	}
	if want := []Key{mgmtKey, hcKey, {Source: source, Cluster: other}}; !slices.Equal(m.Keys(), want) {
		t.Errorf("keys = %v, want %v", m.Keys(), want)
	}
	if m.Cluster(hcKey).nodeTotal() != 1 {
		t.Error("node lost")
	}

	bad := nodeFact(t, nodeA, event.ConditionFalse, at(20), at(20)).e
	bad.Payload = []byte(`{"node": 5}`)
	if _, err := m.Apply(bad); !errors.Is(err, event.ErrMalformed) {
		t.Errorf("err = %v, want ErrMalformed", err)
	}
	m.Forget(hcKey)
	if m.Cluster(hcKey) != nil {
		t.Error("Forget kept the cluster")
	}
}

// tenNotReady is a seed cluster whose ten nodes are all NotReady.
func tenNotReady(t testing.TB) []fact {
	facts := []fact{hcFact(t, seedHC(tunnelNoProxy), at(5)), seedCrash(t, at(25)), poolFact(t, "np1", false, at(24), at(24))}
	for i := range 10 {
		name := "example-np1-" + strconv.Itoa(i)
		facts = append(facts,
			nodeFact(t, name, event.ConditionUnknown, at(20+i), at(20+i)),
			apiProxyFact(t, name, event.ProxyModeTunnel, i%2 == 0, at(20+i)),
		)
	}
	return facts
}

func TestApproxBytes(t *testing.T) {
	// Only the HostedCluster and ten NotReady nodes: "a few KB".
	facts := []fact{hcFact(t, seedHC(tunnelNoProxy), at(5))}
	for i := range 10 {
		facts = append(facts, nodeFact(t, "example-np1-"+strconv.Itoa(i), event.ConditionUnknown, at(20+i), at(20+i)))
	}
	c := build(t, facts...)
	n := c.ApproxBytes()
	t.Logf("HostedCluster + 10 NotReady nodes: ~%d bytes; with tunnel pods, crash and NodePool: ~%d bytes", n, build(t, tenNotReady(t)...).ApproxBytes())
	if n < 1<<10 || n > 8<<10 {
		t.Errorf("ApproxBytes = %d, want a few KB", n)
	}
	if empty := NewCluster(hcKey).ApproxBytes(); empty > 1<<10 {
		t.Errorf("an empty cluster costs %d bytes", empty)
	}
}

// TestApproxBytesTracksHeap compares the estimate with what the runtime
// reports for many clusters built from fresh events.
func TestApproxBytesTracksHeap(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates a few MB")
	}
	const n = 200
	clusters := make([]*Cluster, n)
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	before := ms.HeapAlloc
	estimate := 0
	for i := range clusters {
		c := NewCluster(hcKey)
		for _, f := range tenNotReady(t) {
			c.Apply(f.e, f.p)
		}
		clusters[i] = c
		estimate += c.ApproxBytes()
	}
	runtime.GC()
	runtime.ReadMemStats(&ms)
	measured := int(ms.HeapAlloc) - int(before)
	runtime.KeepAlive(clusters)
	ratio := float64(measured) / float64(estimate)
	t.Logf("per cluster: estimate %d bytes, heap %d bytes (ratio %.2f)", estimate/n, measured/n, ratio)
	if ratio < 0.5 || ratio > 2 {
		t.Errorf("heap/estimate = %.2f, want within a factor of 2", ratio)
	}
}

func BenchmarkApplyDiagnose(b *testing.B) {
	facts := tenNotReady(b)
	b.ReportAllocs()
	for b.Loop() {
		c := NewCluster(hcKey)
		for _, f := range facts {
			c.Apply(f.e, f.p)
		}
		if ds := Diagnose(c, at(60)); len(ds) != 1 {
			b.Fatal(render(ds))
		}
	}
}

func BenchmarkDiagnose(b *testing.B) {
	c := NewCluster(hcKey)
	for _, f := range tenNotReady(b) {
		c.Apply(f.e, f.p)
	}
	b.ReportAllocs()
	for b.Loop() {
		Diagnose(c, at(60))
	}
}

func BenchmarkApplyDuplicate(b *testing.B) {
	facts := tenNotReady(b)
	c := NewCluster(hcKey)
	for _, f := range facts {
		c.Apply(f.e, f.p)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		f := facts[i%len(facts)]
		c.Apply(f.e, f.p)
		i++
	}
}
