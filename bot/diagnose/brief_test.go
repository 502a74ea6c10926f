package diagnose

import (
	"slices"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/event"
)

// checkBrief fails t unless the first phase (Brief) finds the same rules
// on the same symptoms as Diagnose for c's state: build runs it after
// every fact of every test that builds a Cluster.
func checkBrief(t testing.TB, c *Cluster, now time.Time) {
	t.Helper()
	full, brief := Diagnose(c, now), Brief(c, now)
	if len(full) != len(brief) {
		t.Fatalf("Brief found %v, Diagnose %v", rulesOf(brief), rulesOf(full))
	}
	for i := range full {
		if full[i].Rule != brief[i].Rule || !slices.Equal(full[i].Symptoms, brief[i].Symptoms) {
			t.Fatalf("diagnosis %d: Brief %s on %v, Diagnose %s on %v", i, brief[i].Rule, brief[i].Symptoms, full[i].Rule, full[i].Symptoms)
		}
	}
}

// TestBriefMatchesDiagnoseOnFlaps: the correlator's per-event phase
// agrees with the full diagnosis while nodes of a tunnelling cluster and
// of a healthy one flap, as in make bench's B1.
func TestBriefMatchesDiagnoseOnFlaps(t *testing.T) {
	for _, hc := range []event.HostedClusterState{seedHC(""), noProxyState()} {
		c := build(t, hcFact(t, hc, at(0)))
		for r := range 4 {
			ready := event.ConditionFalse
			if r%2 == 1 {
				ready = event.ConditionTrue
			}
			for i := range 3 {
				f := nodeFact(t, "worker-"+string(rune('a'+i)), ready, at(r+1), at(r+1).Add(time.Duration(i)*time.Second))
				c.Apply(f.e, f.p)
				checkBrief(t, c, f.e.Time)
			}
		}
	}
}

// TestCloneIsIndependent: facts applied to a Cluster after Clone leave the
// clone, and so its diagnoses, as they were.
func TestCloneIsIndependent(t *testing.T) {
	c := build(t, hcFact(t, seedHC(""), at(0)), nodeFact(t, "worker-a", event.ConditionFalse, at(1), at(1)))
	before := render(Diagnose(c, at(2)))
	cp := c.Clone()
	for _, f := range []fact{nodeFact(t, "worker-a", event.ConditionTrue, at(3), at(3)), nodeFact(t, "worker-b", event.ConditionFalse, at(3), at(3)),
		changeFact(t, proxySpec(""), proxySpec("10.0.0.0/8"), at(4))} {
		c.Apply(f.e, f.p)
	}
	if got := render(Diagnose(cp, at(2))); got != before {
		t.Fatalf("the clone changed with its original:\nbefore: %s\nafter:  %s", before, got)
	}
	if render(Diagnose(c, at(5))) == before {
		t.Fatal("the original did not change")
	}
}

// TestPriorDiagnosesTheStateBefore: Prior, taken before a fact is applied,
// diagnoses the state before it — for a node's or a node summary's fact
// (one entry restored for the call) and any other (a clone) — and leaves
// the cluster as the fact made it.
func TestPriorDiagnosesTheStateBefore(t *testing.T) {
	c := build(t, hcFact(t, seedHC(""), at(0)), nodeFact(t, "worker-a", event.ConditionFalse, at(1), at(1)))
	for _, f := range []fact{
		nodeFact(t, "worker-a", event.ConditionTrue, at(2), at(2)),  // an existing node
		nodeFact(t, "worker-b", event.ConditionFalse, at(3), at(3)), // a new one
		nodeFact(t, "worker-b", event.ConditionTrue, at(4), at(4)),
		crashFact(t, "openshift-service-ca-operator", "service-ca-operator-abc", "E0101 failed checking apiserver connectivity", 3, at(5)),
		nodeDeleted(t, "worker-a", at(6)),
		// a node summary: the first, then one that changes the counts
		summaryFact(t, event.NodeSummary{Total: 24, Ready: 23, NotReady: 1}, at(7)),
		summaryFact(t, event.NodeSummary{Total: 24, Ready: 20, NotReady: 4}, at(8)),
		nodeFact(t, "worker-c", event.ConditionFalse, at(9), at(9)),
		summaryFact(t, event.NodeSummary{Total: 30, Ready: 29, NotReady: 1}, at(10)),
	} {
		want := render(Diagnose(c, at(7)))
		prior := c.Prior(f.e, f.p)
		c.Apply(f.e, f.p)
		after := render(Diagnose(c, at(7)))
		if got := render(prior.Diagnose(at(7))); got != want {
			t.Fatalf("%s: Prior diagnosed\n%s\nwant the state before\n%s", f, got, want)
		}
		if got := render(Diagnose(c, at(7))); got != after {
			t.Fatalf("%s: Prior.Diagnose left the cluster changed:\n%s\nwant\n%s", f, got, after)
		}
	}
}
