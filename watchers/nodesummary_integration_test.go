package watchers_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hcpbot/hcpbot/configs"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/watchers"
)

// startAgent runs one agent (no leader election) publishing to s.
func startAgent(t *testing.T, s *stream, cfg watchers.Config) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	log := natstest.Logger(t)
	m := watchers.NewMetrics(prometheus.NewRegistry())
	pub := watchers.NewJetStreamPublisher(s.js, 10000, m, log)
	agent := newAgent(t, ctx, cfg, env.Kube, env.Dynamic, pub, m, log)
	pub.OnResync(agent.Resync)
	var wg sync.WaitGroup
	wg.Go(func() { pub.Run(ctx) })
	wg.Go(func() { _ = agent.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
}

func summaryIs(cluster string, match func(event.NodeSummary) bool) func(event.Event, event.Payload) bool {
	return func(e event.Event, p event.Payload) bool {
		s, ok := p.(event.NodeSummary)
		return ok && e.Cluster != nil && e.Cluster.String() == cluster && match(s)
	}
}

// The node summary of a 500-node hosted cluster on a real API server:
// restated by the start-up snapshot, and coalesced during churn, so that
// hundreds of node transitions cost a handful of summaries (at most one
// per NodeSummaryInterval) on top of the per-node events.
func TestNodeSummaryCoalescesChurn(t *testing.T) {
	env.Need(t)
	if testing.Short() {
		t.Skip("creates 500 Nodes")
	}
	ctx := context.Background()
	s := newStream(t)
	ns := env.Namespace(t)
	hosted := env.HostedCluster(t, scenario.Healthy(ns, "churn"))
	cluster := ns + "/churn"
	nodes, err := scenario.CreateNodes(ctx, hosted.Kube, "churn-np", 500, corev1.ConditionTrue)
	if err != nil {
		t.Fatal(err)
	}
	interval := time.Second
	startAgent(t, s, watchers.Config{Source: "mgmt-" + ns, Identity: "churn", SnapshotWait: 30 * time.Second, NodeSummaryInterval: interval})
	s.waitFor(t, "the snapshot's summary of 500 Ready nodes", 1, summaryIs(cluster, func(n event.NodeSummary) bool {
		return n.Total == 500 && n.Ready == 500
	}))
	isSummary := isType[event.NodeSummary](cluster)
	isNode := isType[event.NodeReadiness](cluster)
	summaries0, nodeEvents0 := len(s.matching(isSummary)), len(s.matching(isNode))

	const rounds, flip = 3, 100
	start := time.Now()
	for range rounds {
		if err := scenario.PostKubeletStatus(ctx, hosted.Kube, nodes[:flip], corev1.ConditionFalse); err != nil {
			t.Fatal(err)
		}
		if err := scenario.PostKubeletStatus(ctx, hosted.Kube, nodes[:flip], corev1.ConditionTrue); err != nil {
			t.Fatal(err)
		}
	}
	churn := time.Since(start)
	// The last summary is the truth again.
	testenv.Eventually(t, 30*time.Second, "a final summary of 500 Ready nodes", func() bool {
		all := s.matching(isSummary)
		p, _ := all[len(all)-1].DecodePayload()
		n := p.(event.NodeSummary)
		return len(all) > summaries0 && n.Total == 500 && n.Ready == 500
	})
	// Let the node events drain before counting.
	testenv.Eventually(t, 30*time.Second, "the node events of the churn", func() bool {
		return len(s.matching(isNode))-nodeEvents0 >= 2*rounds*flip
	})
	all := s.matching(isSummary)[summaries0:]
	summaries := len(all)
	nodeEvents := len(s.matching(isNode)) - nodeEvents0
	// However far the agent lags behind the API server, two summaries of
	// one cluster are at least an interval apart (10% slack for the time
	// between scheduling and stamping an event).
	span := all[len(all)-1].Time.Sub(all[0].Time)
	limit := int(float64(span)/(0.9*float64(interval))) + 1
	t.Logf("churn: %d node transitions in %s → %d node events, %d summaries over %s (at most %d at one per %s); summaries add %.1f%% events",
		2*rounds*flip, churn.Round(time.Millisecond), nodeEvents, summaries, span.Round(time.Millisecond), limit, interval, 100*float64(summaries)/float64(nodeEvents))
	if summaries > limit {
		t.Errorf("%d summaries within %s, want at most %d (one per %s)", summaries, span, limit, interval)
	}
	if summaries >= nodeEvents/10 {
		t.Errorf("%d summaries for %d node events: not coalesced", summaries, nodeEvents)
	}
}

// agent.nodeJoinGrace from the config file takes effect in the agent: a
// Node that never gets status is reported "not joining" once the grace is
// over (published as a NodeReadiness with NotJoining and counted in the
// summary), and Ready once its kubelet posts status.
func TestNodeNotJoiningAfterGrace(t *testing.T) {
	env.Need(t)
	cfg, err := configs.Parse([]byte("agent:\n  source: mgmt-1\n  nodeJoinGrace: 10s\n"), "agent.yaml")
	if err != nil {
		t.Fatal(err)
	}
	grace := cfg.Agent.NodeJoinGrace
	ctx := context.Background()
	s := newStream(t)
	ns := env.Namespace(t)
	hosted := env.HostedCluster(t, scenario.Healthy(ns, "join"))
	cluster := ns + "/join"
	if _, err := scenario.CreateNodes(ctx, hosted.Kube, "join-ok", 2, corev1.ConditionTrue); err != nil {
		t.Fatal(err)
	}
	startAgent(t, s, watchers.Config{Source: "mgmt-" + ns, Identity: "join", SnapshotWait: 30 * time.Second,
		NodeJoinGrace: grace, NodeSummaryInterval: 200 * time.Millisecond})
	s.waitFor(t, "a summary of 2 Ready nodes", 1, summaryIs(cluster, func(n event.NodeSummary) bool { return n.Total == 2 && n.Ready == 2 }))

	created := time.Now()
	stuck, err := scenario.CreateNodes(ctx, hosted.Kube, "join-stuck", 1, "")
	if err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "the new node counted as joining", 1, summaryIs(cluster, func(n event.NodeSummary) bool {
		return n.Total == 3 && n.Joining == 1 && n.JoinGrace == grace
	}))
	notJoining := s.waitFor(t, "the node reported not joining", 1, func(e event.Event, p event.Payload) bool {
		n, ok := p.(event.NodeReadiness)
		return ok && e.Cluster != nil && e.Cluster.String() == cluster && n.Node == stuck[0] && n.NotJoining
	})
	if d := notJoining[0].Time.Sub(created); d < grace {
		t.Errorf("not joining reported %s after creation, before the %s grace", d, grace)
	}
	if early := s.matching(func(e event.Event, p event.Payload) bool {
		n, ok := p.(event.NodeReadiness)
		return ok && n.Node == stuck[0] && !n.NotJoining
	}); len(early) != 0 {
		t.Errorf("the joining node was published before its grace ran out: %+v", early)
	}
	s.waitFor(t, "the summary counts it not joining", 1, summaryIs(cluster, func(n event.NodeSummary) bool { return n.Total == 3 && n.NotJoining == 1 }))

	if err := scenario.PostKubeletStatus(ctx, hosted.Kube, stuck, corev1.ConditionTrue); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "the node Ready", 1, nodeState(cluster, stuck[0], event.ConditionTrue))
	s.waitFor(t, "a summary of 3 Ready nodes", 1, summaryIs(cluster, func(n event.NodeSummary) bool { return n.Total == 3 && n.Ready == 3 }))

	// kubectl cordon / uncordon (a merge patch of spec.unschedulable): the
	// node stays Ready, which HyperShift no longer counts as an available
	// worker (support/util/util.go:568-590), so the summary says so.
	setUnschedulable := func(v bool) {
		t.Helper()
		patch := []byte(`{"spec":{"unschedulable":` + strconv.FormatBool(v) + `}}`)
		if _, err := hosted.Kube.CoreV1().Nodes().Patch(ctx, stuck[0], types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setUnschedulable(true)
	s.waitFor(t, "a summary with the node cordoned", 1, summaryIs(cluster, func(n event.NodeSummary) bool {
		return n.Total == 3 && n.Ready == 3 && n.Cordoned == 1 && n.Available() == 2
	}))
	setUnschedulable(false)
	testenv.Eventually(t, 30*time.Second, "a summary with the node uncordoned", func() bool {
		all := s.matching(isType[event.NodeSummary](cluster))
		p, _ := all[len(all)-1].DecodePayload()
		n := p.(event.NodeSummary)
		return n.Cordoned == 0 && n.Ready == 3
	})
}
