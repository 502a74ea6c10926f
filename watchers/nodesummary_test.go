package watchers

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hcpbot/hcpbot/event"
)

// The summary counts every node as nodeFact classifies it, and its key
// changes when counts come back later, so a return to the same counts is
// news and not a duplicate.
func TestNodeSummaryFactCounts(t *testing.T) {
	a := &Agent{cfg: Config{NodeJoinGrace: DefaultNodeJoinGrace}}
	noStatus := func(name string, age time.Duration) *corev1.Node {
		return fxNode(name, corev1.ConditionTrue, factT0, func(n *corev1.Node) {
			n.Status.Conditions = nil
			n.CreationTimestamp = metav1.NewTime(factNow.Add(-age))
		})
	}
	nodes := []*corev1.Node{
		fxNode("r1", corev1.ConditionTrue, factT0), fxNode("r2", corev1.ConditionTrue, factT0),
		fxNode("f1", corev1.ConditionFalse, factT0), fxNode("u1", corev1.ConditionUnknown, factT0),
		noStatus("j1", time.Minute), noStatus("n1", time.Hour),
		// Cordoned (kubectl cordon sets spec.unschedulable): the Ready one
		// is counted in Ready and Cordoned, as HyperShift leaves it out of
		// its available workers (support/util/util.go:568-590); a
		// NotReady one is NotReady only.
		fxNode("c1", corev1.ConditionTrue, factT0, cordon), fxNode("c2", corev1.ConditionFalse, factT0, cordon),
	}
	f := a.nodeSummaryFact(nodes, factNow)
	p := f.payload.(event.NodeSummary)
	want := event.NodeSummary{Total: 8, Ready: 3, NotReady: 2, Unknown: 1, Joining: 1, NotJoining: 1, JoinGrace: DefaultNodeJoinGrace, Cordoned: 1}
	if p != want {
		t.Fatalf("summary = %+v, want %+v", p, want)
	}
	if !f.problem || p.Problems() != 4 || p.Available() != 2 {
		t.Errorf("problem = %v (restated in snapshots), Problems() = %d, Available() = %d, want 4 and 2", f.problem, p.Problems(), p.Available())
	}
	factEvent(t, summaryRef(*factCluster), f)

	// The same counts at a later resourceVersion: same state, new key.
	nodes[0] = fxNode("r1", corev1.ConditionTrue, factT0, func(n *corev1.Node) { n.ResourceVersion = "43" })
	g := a.nodeSummaryFact(nodes, factNow)
	if g.state != f.state || g.key == f.key {
		t.Errorf("state %q/%q, key %q/%q: want the same state under a new key", f.state, g.state, f.key, g.key)
	}
	// Uncordoned: the counts change, so the summary is news.
	nodes[6] = fxNode("c1", corev1.ConditionTrue, factT0)
	if u := a.nodeSummaryFact(nodes, factNow); u.state == f.state || u.payload.(event.NodeSummary).Cordoned != 0 {
		t.Errorf("uncordoned: state %q (was %q), %+v", u.state, f.state, u.payload)
	}
	// The joining node's grace runs out: the counts change.
	if h := a.nodeSummaryFact(nodes, factNow.Add(DefaultNodeJoinGrace)); h.payload.(event.NodeSummary).NotJoining != 2 {
		t.Errorf("after the grace: %+v, want 2 not joining", h.payload)
	}
}

func cordon(n *corev1.Node) { n.Spec.Unschedulable = true }

// The informer's transform keeps spec.unschedulable: without it every
// cordoned node would count as schedulable.
func TestTransformNodeKeepsUnschedulable(t *testing.T) {
	out, err := transformNode(fxNode("c1", corev1.ConditionTrue, factT0, cordon))
	if err != nil || !out.(*corev1.Node).Spec.Unschedulable {
		t.Fatalf("transformNode dropped spec.unschedulable: %+v, %v", out, err)
	}
}

// BenchmarkNodeSummary2000 is the agent's cost of one summary of a
// 2,000-node cluster: counting the cached Nodes (the coalescing bounds how
// often it runs to once per NodeSummaryInterval per cluster).
func BenchmarkNodeSummary2000(b *testing.B) {
	a := &Agent{cfg: Config{NodeJoinGrace: DefaultNodeJoinGrace}}
	nodes := make([]*corev1.Node, 2000)
	for i := range nodes {
		status := corev1.ConditionTrue
		if i%100 == 0 {
			status = corev1.ConditionFalse
		}
		nodes[i] = fxNode("w-"+itoa(i), status, factT0, func(n *corev1.Node) { n.ResourceVersion = itoa(1000 + i) })
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = a.nodeSummaryFact(nodes, factNow)
	}
}
