package watchers_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"

	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/watchers"
)

// A replica that loses and regains the lease runs the same Agent again on
// informers that never stopped (watchers.New registers on factories the
// caller started): the second term snapshots the current state, including
// a NodePool that changed while nobody led, and then publishes live the
// changes made during it, so its queue gets what the warm informers see.
func TestAgentSecondTermOnWarmCaches(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	s := newStream(t)
	ns := env.Namespace(t)
	c := scenario.BehindProxy(ns, "terms")
	env.HostedCluster(t, c)
	cluster := ns + "/terms"
	if err := scenario.NodePool(ctx, env.Dynamic, c, "terms-np", 2, true); err != nil {
		t.Fatal(err)
	}

	log := natstest.Logger(t)
	m := watchers.NewMetrics(prometheus.NewRegistry())
	pctx, stopAll := context.WithCancel(ctx)
	t.Cleanup(stopAll)
	pub := watchers.NewJetStreamPublisher(s.js, 1000, m, log)
	go pub.Run(pctx)
	kf := informers.NewSharedInformerFactory(env.Kube, 0)
	df := dynamicinformer.NewDynamicSharedInformerFactory(env.Dynamic, 0)
	agent := runAgentOn(t, pctx, watchers.Config{Source: "mgmt-terms", Identity: "terms-0", SnapshotWait: 10 * time.Second},
		env.Kube, kf, df, pub, m, log)
	nodePools := df.ForResource(hypershift.NodePoolGVR).Lister().ByNamespace(ns)
	term := func() (stop func()) {
		tctx, cancel := context.WithCancel(pctx)
		done := make(chan error, 1)
		go func() { done <- agent.Run(tctx) }()
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		}
	}
	snapshotDone := func(e event.Event, p event.Payload) bool {
		_, ok := p.(event.SnapshotDone)
		return ok && e.Cluster != nil && e.Cluster.String() == cluster
	}

	stop := term()
	s.waitFor(t, "the first term's snapshot", 1, snapshotDone)
	stop()

	if err := scenario.SetNodePoolHealth(ctx, env.Dynamic, ns, "terms-np", false); err != nil {
		t.Fatal(err)
	}
	// The second term snapshots what its warm cache holds. Under load the
	// watch event may reach the cache after the term began, and the agent
	// then rightly publishes it live; this test is about the snapshot, so
	// it starts the term once the cache has the change.
	testenv.Eventually(t, 30*time.Second, "the warm cache to see the failed NodePool", func() bool {
		o, err := nodePools.Get("terms-np")
		if err != nil {
			return false
		}
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			return false
		}
		np, err := hypershift.FromUnstructured[hypershift.NodePool](u)
		if err != nil {
			return false
		}
		for _, c := range np.Status.Conditions {
			if c.Type == "AllNodesHealthy" {
				return c.Status == "False"
			}
		}
		return false
	})
	stop = term()
	t.Cleanup(stop)
	s.waitFor(t, "the NodePool that failed between terms, in the second term's snapshot", 1, func(e event.Event, p event.Payload) bool {
		np, ok := p.(event.NodePoolState)
		return ok && e.IsSnapshot() && np.Name == "terms-np" && !nodePoolHealthy(np)
	})
	s.waitFor(t, "the second term's snapshot", 2, snapshotDone)

	if err := scenario.SetNodePoolHealth(ctx, env.Dynamic, ns, "terms-np", true); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "the NodePool's recovery during the second term, published live", 1, func(e event.Event, p event.Payload) bool {
		np, ok := p.(event.NodePoolState)
		return ok && !e.IsSnapshot() && np.Name == "terms-np" && nodePoolHealthy(np)
	})
}

func nodePoolHealthy(np event.NodePoolState) bool {
	for _, c := range np.Conditions {
		if c.Status == event.ConditionFalse {
			return false
		}
	}
	return len(np.Conditions) > 0
}
