package watchers

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/hypershift"
)

// snapshot restates the current problem state, marked with a fresh run ID,
// and closes each scope (the management cluster, each hosted cluster) with a
// SnapshotDone listing its current problems, so a consumer that missed
// events converges and clears what is no longer a problem. Restated facts
// keep their IDs: JetStream drops those already on the stream.
//
// With fresh set (periodic and requested restatements) the facts get IDs
// of their own run (event.WithRestatement), so each is on the stream again
// however recently it was published: the stream then always holds a copy
// younger than its max age.
func (a *Agent) snapshot(ctx context.Context, fresh bool) {
	started := a.now()
	run := fmt.Sprintf("%s-%s-%d", a.cfg.Source, a.cfg.Identity, started.UnixNano())
	opt := event.WithSnapshot(run)
	if fresh {
		opt = event.WithRestatement(run)
	}
	type scope struct {
		ref      *event.ClusterRef
		types    []event.Type
		problems []event.ObjectRef
		count    int
	}
	emit := func(sc *scope, k key, ref *event.ClusterRef, obj event.ObjectRef, f fact) {
		a.record(k, f.state)
		if !f.problem {
			return
		}
		sc.problems = append(sc.problems, obj)
		e, err := event.New(a.cfg.Source, ref, obj, f.payload, f.key, a.now(), opt)
		if err != nil {
			a.metrics.publishErrors.WithLabelValues("invalid").Inc()
			return
		}
		if a.publish(ctx, e, true) {
			sc.count++
		}
	}

	mgmt := &scope{types: []event.Type{event.TypeHostedCluster, event.TypeNodePool, event.TypeVirtLauncher}}
	for _, o := range a.listHostedClusters() {
		k := key{kind: kindHostedCluster, namespace: o.GetNamespace(), name: o.GetName()}
		u, err := getUnstructured(a.hcLister, k.namespace, k.name)
		if err != nil {
			continue
		}
		hc, err := hypershift.FromUnstructured[hypershift.HostedCluster](u)
		if err != nil {
			continue
		}
		ca, err := readTrustedCA(a.cmLister, hc)
		if err != nil {
			continue
		}
		ref := event.ClusterRef{Namespace: k.namespace, Name: k.name}
		emit(mgmt, k, &ref, objectRef("HostedCluster", u), hostedClusterFact(hc, ca))
	}
	nps, _ := a.npLister.List(labels.Everything())
	for _, o := range nps {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		np, err := hypershift.FromUnstructured[hypershift.NodePool](u)
		if err != nil {
			continue
		}
		ref := event.ClusterRef{Namespace: np.Namespace, Name: np.Spec.ClusterName}
		emit(mgmt, key{kind: kindNodePool, namespace: np.Namespace, name: np.Name}, &ref, objectRef("NodePool", u), nodePoolFact(np))
	}
	vls, _ := a.vlLister.List(labels.Everything())
	for _, pod := range vls {
		emit(mgmt, key{kind: kindVirtLauncher, namespace: pod.Namespace, name: pod.Name}, a.clusterForControlPlaneNamespace(pod.Namespace), podRef(pod, false), virtLauncherFact(pod))
	}
	if a.proxyLister != nil {
		mgmt.types = append(mgmt.types, event.TypeOCPProxy)
		if u, err := getUnstructured(a.proxyLister, "", hypershift.ProxyName); err == nil {
			if p, err := hypershift.FromUnstructured[hypershift.Proxy](u); err == nil {
				emit(mgmt, key{kind: kindOCPProxy, name: p.Name}, nil, objectRef("Proxy", u), openShiftProxyFact(p))
			}
		} else if !apierrors.IsNotFound(err) {
			a.log.Warn().Err(err).Msg("snapshot: Proxy/cluster unreadable")
		}
	}
	scopes := []*scope{mgmt}

	// A hosted cluster whose caches do not sync in time is left out: no
	// SnapshotDone for it, so nothing of it is cleared. All connections are
	// started first and awaited together, so one dead cluster costs the
	// others nothing.
	hostedAll := a.hostedSnapshotList()
	for _, hc := range hostedAll {
		a.connectForSnapshot(ctx, hc)
	}
	deadline := time.Now().Add(a.cfg.SnapshotWait)
	skipped := 0
	for _, hc := range hostedAll {
		conn := a.waitHostedSynced(ctx, hc, deadline)
		if conn == nil {
			skipped++
			continue
		}
		ref := hc.ref
		sc := &scope{ref: &ref, types: []event.Type{event.TypeNode, event.TypeCrashLoop, event.TypeAPIServerProxy}}
		nodes, sca, apiProxy := conn.list()
		now := a.now()
		for _, n := range nodes {
			emit(sc, key{kind: kindNode, cluster: ref, name: n.Name}, &ref, nodeRef(n), nodeFact(n, now, a.cfg.NodeJoinGrace))
		}
		emit(sc, key{kind: kindNodeSummary, cluster: ref}, &ref, summaryRef(ref), a.nodeSummaryFact(nodes, now))
		for _, p := range sca {
			if f, ok := crashLoopFact(p); ok {
				emit(sc, key{kind: kindServiceCAPod, cluster: ref, namespace: p.Namespace, name: p.Name}, &ref, podRef(p, true), f)
			}
		}
		for _, p := range apiProxy {
			emit(sc, key{kind: kindAPIProxyPod, cluster: ref, namespace: p.Namespace, name: p.Name}, &ref, podRef(p, true), apiServerProxyFact(p))
		}
		sc.types = append(sc.types, event.TypeAPIService)
		for _, v := range conn.listAPIServices() {
			if f, ok := apiServiceFact(v); ok {
				emit(sc, key{kind: kindAPIService, cluster: ref, name: v.name}, &ref, apiServiceRef(v), f)
			}
		}
		// A record that cannot be judged now (the cluster is unreachable)
		// is neither restated nor cleared: its type is left out.
		if f, obj, ok := a.readConnectivity(hc, conn); ok {
			sc.types = append(sc.types, event.TypeConnectivity)
			emit(sc, connectivityKey(ref), &ref, obj, f)
		}
		scopes = append(scopes, sc)
	}
	total := 0
	for _, sc := range scopes {
		done, err := event.NewSnapshotDone(a.cfg.Source, run, sc.ref,
			event.SnapshotDone{Started: started, Count: sc.count, Types: sc.types, Problems: sc.problems}, a.now())
		if err != nil || !a.publish(ctx, done, true) {
			a.log.Warn().Err(err).Msg("snapshot scope not closed")
		}
		total += sc.count
	}
	a.log.Info().Str("run", run).Bool("fresh", fresh).Int("events", total).Int("hosted_skipped", skipped).Msg("snapshot published")
}

func (a *Agent) hostedSnapshotList() []*hostedCluster {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]*hostedCluster, 0, len(a.hosted))
	for _, hc := range a.hosted {
		out = append(out, hc)
	}
	return out
}

// connectForSnapshot makes sure the Secret's informer has synced and the
// hosted informers exist. Before the workers run nobody else drains the
// Secret's key, so the snapshot converges the connection itself.
func (a *Agent) connectForSnapshot(ctx context.Context, hc *hostedCluster) {
	hc.mu.Lock()
	conn := hc.conn
	hc.mu.Unlock()
	if conn != nil || hc.secretFactory == nil {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, a.cfg.SnapshotWait)
	defer cancel()
	hc.secretFactory.WaitForCacheSync(wctx.Done())
	_ = a.syncSecret(ctx, hc.ref)
}

// waitHostedSynced waits until the cluster's informers synced, or the
// deadline; a cluster without a usable kubeconfig is skipped at once.
func (a *Agent) waitHostedSynced(ctx context.Context, hc *hostedCluster, deadline time.Time) *hostedConn {
	for {
		hc.mu.Lock()
		conn := hc.conn
		hc.mu.Unlock()
		if conn == nil {
			return nil
		}
		if conn.hasSynced() {
			return conn
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(50 * time.Millisecond):
		}
	}
}
