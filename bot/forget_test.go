package bot_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hcpbot/hcpbot/bot"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/bot/digest"
	"github.com/hcpbot/hcpbot/bot/notify"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
)

// Deleting a HostedCluster with an open incident: the agent publishes the
// deletion, the incident's message turns resolved saying the cluster was
// deleted, and after ForgetAfter the bot holds nothing of the cluster.
func TestDeletedClusterResolvedAndForgotten(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	hosted := env.HostedCluster(t, scenario.BehindProxy(ns, "gone"))
	nodes, err := scenario.Nodes(ctx, hosted.Kube, "gone-np", 1)
	if err != nil {
		t.Fatal(err)
	}
	const forget = 500 * time.Millisecond
	p := startPipeline(t, "mgmt-"+ns, func(c *bot.Config) { c.ForgetAfter = forget })
	if err := scenario.SetNodeReady(ctx, hosted.Kube, nodes[0], corev1.ConditionFalse, "KubeletNotReady", "x"); err != nil {
		t.Fatal(err)
	}
	var root slackrec.Message
	p.slack.WaitFor(t, 30*time.Second, func(r *slackrec.Recorder) bool {
		for _, m := range r.Messages(channel) {
			if m.ThreadTS == "" && strings.Contains(m.Text, ns+"/gone") && !strings.Contains(m.Text, "RESOLVED") {
				root = m
				return true
			}
		}
		return false
	})
	k := diagnose.Key{Source: "mgmt-" + ns, Cluster: event.ClusterRef{Namespace: ns, Name: "gone"}}
	if !slices.Contains(p.bot.Clusters(), k) {
		t.Fatalf("the bot does not know %s", k)
	}

	if err := env.Dynamic.Resource(hypershift.HostedClusterGVR).Namespace(ns).Delete(ctx, "gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	p.slack.WaitFor(t, 30*time.Second, func(r *slackrec.Recorder) bool {
		m, ok := r.Message(channel, root.TS)
		return ok && strings.Contains(m.Text, "RESOLVED") && strings.Contains(m.Text, "cluster deleted")
	})
	testenv.Eventually(t, 30*time.Second, "the cluster forgotten", func() bool {
		if slices.Contains(p.bot.Clusters(), k) {
			return false
		}
		for _, inc := range p.bot.Incidents() {
			if inc.Cluster == k {
				return false
			}
		}
		return true
	})
	if _, ok := p.bot.HostedCluster(k); ok {
		t.Error("the deleted cluster's state is still readable")
	}
}

// countingNotifier delivers nothing and remembers nothing: the heap test
// measures the bot, not a notifier's bookkeeping.
type countingNotifier struct{ upserts, replies atomic.Int64 }

func (n *countingNotifier) Upsert(context.Context, notify.Message) error {
	n.upserts.Add(1)
	return nil
}
func (n *countingNotifier) Reply(context.Context, notify.Reply) error { n.replies.Add(1); return nil }
func (n *countingNotifier) Run(ctx context.Context) error             { <-ctx.Done(); return nil }

// heapAlloc is the live heap after a full collection.
func heapAlloc() uint64 {
	var m runtime.MemStats
	for range 3 { // finalizers may free more on a second pass
		runtime.GC()
	}
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// 500 hosted clusters with incidents (a storm), then all 500 deleted: the
// bot's heap returns to where it was before they existed, and the digest's
// view (ClusterStates) and /hcp status's (Clusters) no longer list them.
//
// The events are handed to the running bot (Bot.Handle, the path of every
// consumed event) rather than through the stream: the embedded NATS server
// shares this process, and its block cache and de-duplication index (5 MB
// for these events) would hide what the bot holds. The bot's stream is
// empty; its flush loop runs as in production.
//
// Tolerance: 10% of what the 500 clusters cost, at least 1 MiB: what may
// stay is one-off growth (maps keep their buckets after deletes, the
// runtime its spans); a leak of the clusters' state would keep their cost.
func TestDeletedClustersReleaseMemory(t *testing.T) {
	ctx := context.Background()
	js := natsJS(t)
	const n = 500
	cfg := testConfig()
	cfg.GroupWait, cfg.ForgetAfter = 0, 200*time.Millisecond
	out := &countingNotifier{}
	b := bot.New(cfg, js, out, nil, natstest.Logger(t))
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { _ = b.Run(runCtx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	source := "mgmt-heap"
	// Warm up: one cluster created and deleted, so the baseline has every
	// code path's one-off allocations (consumer, timers, storm tables).
	handle := func(events []event.Event) {
		for _, e := range events {
			data, err := event.Encode(e)
			if err != nil {
				t.Fatal(err)
			}
			b.Handle(ctx, data)
		}
	}
	handle(stormClusters(t, source, "warm", 1, time.Now()))
	handle(deletedClusters(t, source, "warm", 1, time.Now()))
	testenv.Eventually(t, 30*time.Second, "the warm-up forgotten", func() bool { return len(b.Clusters()) == 0 })
	base := heapAlloc()

	handle(stormClusters(t, source, "clusters", n, time.Now()))
	testenv.Eventually(t, 60*time.Second, "500 clusters with open incidents", func() bool {
		open := 0
		for _, inc := range b.Incidents() {
			if inc.Open() {
				open++
			}
		}
		return len(b.ClusterStates()) == n && open == n
	})
	loaded := heapAlloc()
	if got := digestClusters(b); got != n {
		t.Fatalf("the digest lists %d clusters, want %d", got, n)
	}

	handle(deletedClusters(t, source, "clusters", n, time.Now()))
	testenv.Eventually(t, 60*time.Second, "every deleted cluster forgotten", func() bool {
		return len(b.Clusters()) == 0 && len(b.ClusterStates()) == 0 && len(b.Incidents()) == 0 && len(b.Storms()) == 0
	})
	after := heapAlloc()
	if got := digestClusters(b); got != 0 {
		t.Errorf("the digest still lists %d deleted clusters", got)
	}

	cost := int64(loaded) - int64(base)
	left := int64(after) - int64(base)
	tolerance := max(cost/10, 1<<20)
	t.Logf("heap: base %d KiB, 500 clusters %d KiB (+%d KiB), after deletion %d KiB (%+d KiB, tolerance %d KiB); %d renderings, %d replies",
		base>>10, loaded>>10, cost>>10, after>>10, left>>10, tolerance>>10, out.upserts.Load(), out.replies.Load())
	if cost < 2<<20 {
		t.Fatalf("500 clusters cost only %d KiB: the measurement cannot tell a leak", cost>>10)
	}
	if left > tolerance {
		t.Errorf("after deleting 500 clusters the heap is %d KiB above the baseline (tolerance %d KiB)", left>>10, tolerance>>10)
	}
}

// stormClusters are the agent's events of n clusters hc-<i> in namespace
// with two NotReady nodes each behind one proxy (scenario.Storm).
func stormClusters(t *testing.T, source, namespace string, n int, at time.Time) []event.Event {
	t.Helper()
	events, err := scenario.Storm(source, namespace, n, 2, at)
	if err != nil {
		t.Fatal(err)
	}
	return events
}

// deletedClusters are the agent's deletions of those clusters: a
// HostedClusterState with Deleted, transition key "deleted".
func deletedClusters(t *testing.T, source, namespace string, n int, at time.Time) []event.Event {
	t.Helper()
	var events []event.Event
	for i := range n {
		ref := event.ClusterRef{Namespace: namespace, Name: fmt.Sprintf("hc-%d", i)}
		e, err := event.New(source, &ref, event.ObjectRef{Kind: "HostedCluster", Namespace: namespace, Name: ref.Name, UID: "uid-" + ref.Name},
			event.HostedClusterState{Deleted: true}, "deleted", at.Add(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, e)
	}
	return events
}

// digestClusters is how many clusters a digest built from the bot's state
// lists (as digest.Runner feeds digest.Build).
func digestClusters(b *bot.Bot) int {
	var in digest.Input
	for _, s := range b.ClusterStates() {
		in.Clusters = append(in.Clusters, digest.Cluster{Key: s.Key, HostedCluster: s.HostedCluster, Diagnoses: s.Diagnoses})
	}
	n := 0
	for _, src := range digest.Build(time.Now(), in).Sources {
		n += len(src.Clusters)
	}
	return n
}
