package diagnose

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/event"
)

func summaryFact(t testing.TB, s event.NodeSummary, when time.Time) fact {
	t.Helper()
	return hosted(t, event.ObjectRef{Kind: "HostedCluster", Namespace: hcRef.Namespace, Name: hcRef.Name}, s,
		fmt.Sprintf("nodes:%+v", s), when)
}

func notJoiningFact(t testing.TB, name string, created, when time.Time) fact {
	t.Helper()
	p := event.NodeReadiness{Node: name, Ready: event.ConditionUnknown, NotJoining: true, Created: created, ProviderID: "kubevirt://" + name}
	return hosted(t, event.ObjectRef{Kind: "Node", Name: name, UID: "uid-" + name, Hosted: true}, p,
		event.TransitionAt("NotJoining", created), when)
}

// The grading of nodes-notready by fraction and by absolute numbers.
func TestNodeSeverity(t *testing.T) {
	for _, tc := range []struct {
		affected, total int
		want            Severity
		why             string
	}{
		{1, 2000, SeverityWarning, "1 of 2,000 nodes (0.05%) is less than half"},
		{49, 2000, SeverityWarning, "fewer than 50 nodes"},
		{50, 2000, SeverityCritical, "is at least 50 nodes"},
		{500, 2000, SeverityCritical, "500 of 2,000 nodes (25%) is at least 50 nodes"},
		{1000, 2000, SeverityCritical, "at least half"},
		{1, 3, SeverityWarning, "1 of 3 nodes (33%)"},
		{2, 3, SeverityCritical, "at least half"},
		{1, 1, SeverityCritical, "no node is Ready"},
		{3, 0, SeverityCritical, "no node is Ready"}, // a total that lags is never below the affected
	} {
		sev, why := NodeSeverity(tc.affected, tc.total)
		if sev != tc.want || !strings.Contains(why, tc.why) {
			t.Errorf("NodeSeverity(%d, %d) = %s %q, want %s containing %q", tc.affected, tc.total, sev, why, tc.want, tc.why)
		}
	}
}

// With the agent's summary, M is the cluster's real node count: one
// NotReady node of 2,000 is "1 of 2,000" and a warning, not "1 of 1" and
// critical; 500 of 2,000 is critical.
func TestNodesNotReadyUsesSummaryTotal(t *testing.T) {
	direct := hcFact(t, seedHC(seedNoProxy+",kubernetes"), at(0))
	one := []fact{direct, summaryFact(t, event.NodeSummary{Total: 2000, Ready: 1999, NotReady: 1}, at(20)),
		nodeFact(t, nodeA, event.ConditionFalse, at(20), at(20))}
	// Without a summary (an older agent): only the nodes it heard of.
	if d, ok := find(Diagnose(build(t, one[0], one[2]), at(60)), RuleNodesNotReady); !ok || !strings.HasPrefix(d.Title, "1 of 1 node NotReady") {
		t.Fatalf("without a summary: %+v", d)
	}
	d, ok := find(Diagnose(build(t, one...), at(60)), RuleNodesNotReady)
	if !ok || !strings.HasPrefix(d.Title, "1 of 2,000 nodes NotReady in ") || d.Severity != SeverityWarning {
		t.Fatalf("title %q severity %s, want \"1 of 2,000 nodes NotReady in …\" warning", d.Title, d.Severity)
	}
	if !strings.Contains(d.RootCause, "1 of 2,000 nodes are NotReady") || !strings.Contains(d.RootCause, "Warning: 1 of 2,000 nodes (0.05%)") {
		t.Errorf("root cause: %s", d.RootCause)
	}

	storm := []fact{direct, summaryFact(t, event.NodeSummary{Total: 2000, Ready: 1500, NotReady: 500}, at(20))}
	for i := range 500 {
		storm = append(storm, nodeFact(t, fmt.Sprintf("w-%03d", i), event.ConditionFalse, at(20), at(20)))
	}
	d, ok = find(Diagnose(build(t, storm...), at(60)), RuleNodesNotReady)
	if !ok || !strings.HasPrefix(d.Title, "500 of 2,000 nodes NotReady in ") || d.Severity != SeverityCritical {
		t.Fatalf("title %q severity %s, want \"500 of 2,000 nodes NotReady in …\" critical", d.Title, d.Severity)
	}
	if len(d.Symptoms) != 500 || len(d.Evidence) > maxEvidencePerKind+1 {
		t.Errorf("%d symptoms, %d evidence lines: want every node a symptom and the evidence capped", len(d.Symptoms), len(d.Evidence))
	}

	// A summary older than a burst of node events never yields N > M.
	lag := build(t, direct, summaryFact(t, event.NodeSummary{Total: 0}, at(1)), nodeFact(t, nodeA, event.ConditionFalse, at(20), at(20)))
	if n := lag.Nodes(); n.Total != 1 || !n.Summary {
		t.Errorf("lagging summary: %+v, want total 1", n)
	}
}

// A node that never posted status past the agent's grace is "not joining":
// its own diagnosis without a proxy cause, and one of seed 000's symptoms
// when the spec tunnels.
func TestNodesNotJoining(t *testing.T) {
	direct := hcFact(t, seedHC(seedNoProxy+",kubernetes"), at(0))
	sum := summaryFact(t, event.NodeSummary{Total: 10, Ready: 8, NotJoining: 2, JoinGrace: 10 * time.Minute}, at(20))
	facts := []fact{direct, sum, notJoiningFact(t, nodeA, at(5), at(16)), notJoiningFact(t, nodeB, at(5), at(16))}
	d, ok := find(Diagnose(build(t, facts...), at(60)), RuleNodesNotReady)
	if !ok || !strings.HasPrefix(d.Title, "2 of 10 nodes not joining in ") || d.Severity != SeverityWarning {
		t.Fatalf("title %q severity %s", d.Title, d.Severity)
	}
	for _, want := range []string{"2 of 10 nodes are not joining", nodeA + " has had no Ready condition since its creation at " + at(5).Format(time.RFC3339), "more than 10m0s after the Node was created"} {
		if !strings.Contains(d.RootCause, want) {
			t.Errorf("root cause lacks %q:\n%s", want, d.RootCause)
		}
	}
	if !strings.Contains(d.Evidence[0].Text, "not joining") {
		t.Errorf("evidence: %+v", d.Evidence)
	}

	tunnel := hcFact(t, seedHC(tunnelNoProxy), at(0))
	ds := Diagnose(build(t, tunnel, sum, notJoiningFact(t, nodeA, at(5), at(16))), at(60))
	d, ok = find(ds, RuleProxyTunnel)
	if !ok || !strings.Contains(d.RootCause, "1 of 10 nodes are not joining") {
		t.Fatalf("proxy-tunnel with a node not joining:\n%s", render(ds))
	}
	if _, ok := find(ds, RuleNodesNotReady); ok {
		t.Errorf("the tunnel explains the node, yet nodes-notready fired:\n%s", render(ds))
	}
}
