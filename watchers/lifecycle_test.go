package watchers_test

import (
	"bytes"
	"context"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/internal/controlplane"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/watchers"
)

// An edit of the proxy spec is reported with its old and new value and the
// noProxy entries it removed.
func TestProxyChangeEvent(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	s := newStream(t)
	ns := env.Namespace(t)
	spec := scenario.BehindProxy(ns, "edited")
	spec.NoProxy = "kubernetes,.corp.example,172.31.0.0/16"
	env.HostedCluster(t, spec)
	startReplica(t, s, "agent-a", "mgmt-"+ns)
	s.waitFor(t, "HostedCluster state", 1, isType[event.HostedClusterState](ns+"/edited"))

	if err := scenario.SetNoProxy(ctx, env.Dynamic, ns, "edited", ".corp.example,172.31.0.0/16"); err != nil {
		t.Fatal(err)
	}
	got := s.waitFor(t, "proxy change", 1, isType[event.ProxyChange](ns+"/edited"))
	p, _ := got[0].DecodePayload()
	pc := p.(event.ProxyChange)
	if pc.Target != event.ProxyTargetHostedCluster || len(pc.NoProxyRemoved) != 1 || pc.NoProxyRemoved[0] != "kubernetes" || len(pc.NoProxyAdded) != 0 {
		t.Errorf("proxy change: %+v", pc)
	}
	if pc.Old.NoProxy != "kubernetes,.corp.example,172.31.0.0/16" || pc.New.NoProxy != ".corp.example,172.31.0.0/16" {
		t.Errorf("old/new: %q -> %q", pc.Old.NoProxy, pc.New.NoProxy)
	}
	// The new state follows, also once.
	s.waitFor(t, "second HostedCluster state", 2, isType[event.HostedClusterState](ns+"/edited"))
}

// Deleting a HostedCluster stops its informers and closes their
// connections; rotating its kubeconfig Secret reconnects to wherever the
// new kubeconfig points.
func TestHostedClusterLifecycle(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	s := newStream(t)
	ns := env.Namespace(t)
	source := "mgmt-" + ns
	r := startReplica(t, s, "agent-a", source)
	testenv.Eventually(t, 20*time.Second, "agent started", func() bool {
		return len(s.matching(func(_ event.Event, p event.Payload) bool { _, ok := p.(event.SnapshotDone); return ok })) > 0
	})
	// Reflectors are the informers' goroutines; the test's own clients have
	// none, so their count is the agent's. Earlier tests' HostedClusters
	// (their API servers gone) are watched too: count relative to now.
	baseline := reflectors()
	baseConns := r.metrics.HostedConnections()

	spec := scenario.Healthy(ns, "rotating")
	hosted := env.HostedCluster(t, spec)
	cluster := ns + "/rotating"
	nodes, err := scenario.Nodes(ctx, hosted.Kube, "rot", 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := scenario.SetNodeReady(ctx, hosted.Kube, nodes[0], corev1.ConditionFalse, "KubeletNotReady", "x"); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "NotReady on the first API server", 1, nodeState(cluster, nodes[0], event.ConditionFalse))

	// Rotate: the Secret now points at another API server.
	other := env.HostedCluster(t, scenario.Healthy(ns, "other"))
	kubeconfig, err := other.Server.Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	secret, err := env.Kube.CoreV1().Secrets(ns).Get(ctx, spec.KubeconfigSecretName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	secret.Data[hypershift.KubeconfigKey] = kubeconfig
	if _, err := env.Kube.CoreV1().Secrets(ns).Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	rotated, err := scenario.Nodes(ctx, other.Kube, "after-rotation", 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := scenario.SetNodeReady(ctx, other.Kube, rotated[0], corev1.ConditionFalse, "KubeletNotReady", "x"); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "NotReady seen through the rotated kubeconfig", 1, nodeState(cluster, rotated[0], event.ConditionFalse))

	// Delete both HostedClusters: their watches end, goroutines return.
	for _, name := range []string{"rotating", "other"} {
		if err := env.Dynamic.Resource(hypershift.HostedClusterGVR).Namespace(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	s.waitFor(t, "deleted state", 1, func(e event.Event, p event.Payload) bool {
		h, ok := p.(event.HostedClusterState)
		return ok && h.Deleted && e.Cluster.String() == cluster
	})
	var now int
	testenv.Eventually(t, 20*time.Second, "reflector goroutines back to the baseline", func() bool {
		now = reflectors()
		return now <= baseline
	})
	testenv.Eventually(t, 20*time.Second, "hosted connections closed", func() bool {
		return r.metrics.HostedConnections() <= baseConns
	})
	t.Logf("reflector goroutines: %d before, %d after deleting; hosted connections %v", baseline, now, r.metrics.HostedConnections())
}

// reflectors counts goroutines running a client-go Reflector.
func reflectors() int {
	var buf bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&buf, 2)
	return strings.Count(buf.String(), "k8s.io/client-go/tools/cache.(*Reflector).ListAndWatch")
}

// A hosted API server that goes away is reported unreachable once (not on
// every retry), then reachable again, and changes made after it returns are
// published by the same agent; the management API server restarting for 20s
// is survived too.
func TestAPIServerOutages(t *testing.T) {
	env.Need(t)
	if testing.Short() {
		t.Skip("slow: 20s management outage")
	}
	ctx := context.Background()
	s := newStream(t)
	ns := env.Namespace(t)
	spec := scenario.Healthy(ns, "flaky")
	hosted := env.HostedCluster(t, spec)
	cluster := ns + "/flaky"
	nodes, err := scenario.Nodes(ctx, hosted.Kube, "flaky", 1)
	if err != nil {
		t.Fatal(err)
	}
	startReplica(t, s, "agent-a", "mgmt-"+ns)
	s.waitFor(t, "hosted snapshot", 1, func(e event.Event, p event.Payload) bool {
		_, ok := p.(event.SnapshotDone)
		return ok && e.Cluster != nil && e.Cluster.String() == cluster
	})

	reach := func(reachable bool) func(event.Event, event.Payload) bool {
		return func(e event.Event, p event.Payload) bool {
			r, ok := p.(event.Reachability)
			return ok && e.Cluster != nil && e.Cluster.String() == cluster && r.Reachable == reachable
		}
	}
	hosted.Server.Stop()
	s.waitFor(t, "unreachable", 1, reach(false))
	time.Sleep(5 * time.Second) // several reflector retries happen meanwhile
	if n := len(s.matching(reach(false))); n != 1 {
		t.Errorf("unreachable reported %d times, want once", n)
	}
	if err := hosted.Server.Start(ctx); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "reachable again", 1, reach(true))
	if err := scenario.SetNodeReady(ctx, hosted.Kube, nodes[0], corev1.ConditionFalse, "KubeletNotReady", "after the outage"); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "NotReady after the outage", 1, nodeState(cluster, nodes[0], event.ConditionFalse))

	// The management API server is down for 20 s. Meanwhile the cluster
	// changes (through a twin API server on the same etcd, as in an HA
	// control plane) and so does the hosted cluster. Without its API server
	// the agent cannot renew its Lease, so it stops publishing (another
	// replica might lead); re-elected, its snapshot restates what changed.
	twin, err := env.CP.AddTwin(ctx, env.CP.Management)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.CP.RemoveAPIServer(twin.Name) })
	_, twinDyn, err := twin.Clients()
	if err != nil {
		t.Fatal(err)
	}
	env.CP.Management.Stop()
	if err := scenario.NodePool(ctx, twinDyn, spec, "flaky-np", 2, false); err != nil {
		t.Fatal(err)
	}
	if err := scenario.SetNodeReady(ctx, hosted.Kube, nodes[0], corev1.ConditionTrue, "KubeletReady", "during the management outage"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Second)
	if err := env.CP.Management.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// The management informers live for the process (a standby keeps warm
	// caches). Their lists wait for the server inside the attempt
	// (watchers.InformerConfig) instead of backing off to client-go's
	// [30 s, 60 s), so the change comes soon after the server is back.
	back := time.Now()
	s.waitFor(t, "NodePool change made during the outage, published after", 1, isType[event.NodePoolState](cluster))
	t.Logf("NodePool change published %s after the management API server was back", time.Since(back).Round(100*time.Millisecond))
	// The node that recovered meanwhile is no longer listed as a problem,
	// so a consumer clears it.
	done := s.waitFor(t, "snapshot of the hosted cluster after the outage", 2, func(e event.Event, p event.Payload) bool {
		_, ok := p.(event.SnapshotDone)
		return ok && e.Cluster != nil && e.Cluster.String() == cluster
	})
	last, _ := done[len(done)-1].DecodePayload()
	for _, o := range last.(event.SnapshotDone).Problems {
		if o.Name == nodes[0] {
			t.Errorf("node %s still listed as a problem after it recovered", nodes[0])
		}
	}
}

// An agent started against a cluster without the HyperShift CRDs waits and
// says so (log and metric) instead of exiting, and starts once they appear.
func TestWaitsForCRDs(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	bare, err := env.CP.AddAPIServer(ctx, "no-crds-"+strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.CP.RemoveAPIServer(bare.Name) })
	kube, dyn, err := bare.Clients()
	if err != nil {
		t.Fatal(err)
	}
	s := newStream(t)
	m := watchers.NewMetrics(prometheus.NewRegistry())
	log := natstest.Logger(t)
	pub := watchers.NewJetStreamPublisher(s.js, 100, m, log)
	actx, cancel := context.WithCancel(ctx)
	agent := newAgent(t, actx, watchers.Config{Source: "bare", SnapshotWait: time.Second}, kube, dyn, pub, m, log)
	done := make(chan error, 1)
	go pub.Run(actx)
	go func() { done <- agent.Run(actx) }()
	defer func() { cancel(); <-done }()

	testenv.Eventually(t, 10*time.Second, "crd_missing counted", func() bool {
		return m.SyncErrors("crd_missing") >= 1
	})
	select {
	case err := <-done:
		t.Fatalf("agent exited without CRDs: %v", err)
	default:
	}
	if err := controlplane.InstallCRDs(ctx, bare.RESTConfig(), hypershift.CRDs, "crds/*.yaml"); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "snapshot once the CRDs exist", 1, func(e event.Event, p event.Payload) bool {
		_, ok := p.(event.SnapshotDone)
		return ok && e.Source == "bare"
	})
}
