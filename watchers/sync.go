package watchers

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/hypershift"
)

func getUnstructured(l cache.GenericLister, namespace, name string) (*unstructured.Unstructured, error) {
	var obj any
	var err error
	if namespace == "" {
		obj, err = l.Get(name)
	} else {
		obj, err = l.ByNamespace(namespace).Get(name)
	}
	if err != nil {
		return nil, err
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("unexpected %T in cache", obj)
	}
	return u, nil
}

// cached reads the object of k from the management cache l and decodes
// it as a T: the preamble of every management sync. ok is false when there
// is nothing to sync: the object is gone (gone has run), or the schema
// accepted it but it cannot be read as a T (counted and logged, then
// skipped until it changes: retrying in a hot loop would fail the same
// way). err is a cache failure, to retry.
func cached[T any](a *Agent, l cache.GenericLister, k key, gone func()) (obj *T, u *unstructured.Unstructured, ok bool, err error) {
	u, err = getUnstructured(l, k.namespace, k.name)
	if apierrors.IsNotFound(err) {
		gone()
		return nil, nil, false, nil
	}
	if err != nil {
		return nil, nil, false, err
	}
	if obj, err = hypershift.FromUnstructured[T](u); err != nil {
		a.metrics.syncErrors.WithLabelValues("malformed_object").Inc()
		a.log.Error().Err(err).Str("kind", kindNames[k.kind]).Str("object", k.namespace+"/"+k.name).Msg(kindNames[k.kind] + " unreadable; skipped")
		return nil, nil, false, nil
	}
	return obj, u, true, nil
}

// forgetKey drops what was recorded about k alone.
func (a *Agent) forgetKey(k key) { a.forget(func(x key) bool { return x == k }) }

// proxySeen records cur as k's proxy spec and returns the one it replaces
// and whether it differs (false on a first sighting: no edit to report).
func (a *Agent) proxySeen(k key, cur hypershift.ProxySpec) (old hypershift.ProxySpec, changed bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	old, seen := a.proxies[k]
	a.proxies[k] = cur
	return old, seen && !equalProxy(old, cur)
}

func (a *Agent) syncHostedCluster(ctx context.Context, k key, quiet bool) error {
	ref := event.ClusterRef{Namespace: k.namespace, Name: k.name}
	hc, u, ok, err := cached[hypershift.HostedCluster](a, a.hcLister, k, func() {
		a.stopHosted(ref)
		obj := event.ObjectRef{Kind: "HostedCluster", Namespace: k.namespace, Name: k.name}
		a.emit(ctx, &ref, obj, fact{payload: event.HostedClusterState{Deleted: true}, key: "deleted", state: "deleted"})
		a.forget(func(x key) bool { return x == k || x.cluster == ref })
	})
	if !ok {
		return err
	}
	ca, err := readTrustedCA(a.cmLister, hc)
	if err != nil {
		return err
	}
	obj := objectRef("HostedCluster", u)
	f := hostedClusterFact(hc, ca)
	cur := hc.Proxy()
	if old, changed := a.proxySeen(k, cur); changed && !quiet {
		a.emit(ctx, &ref, obj, proxyChangeFact(event.ProxyTargetHostedCluster, old, cur, u.GetResourceVersion()))
	}
	if quiet {
		a.record(k, f.state)
	} else {
		a.emitIfChanged(ctx, k, &ref, obj, f)
	}
	a.ensureHosted(ctx, ref, hc)
	return nil
}

func equalProxy(a, b hypershift.ProxySpec) bool {
	if a.HTTPProxy != b.HTTPProxy || a.HTTPSProxy != b.HTTPSProxy || a.NoProxy != b.NoProxy || a.TrustedCA != b.TrustedCA {
		return false
	}
	if len(a.ReadinessEndpoints) != len(b.ReadinessEndpoints) {
		return false
	}
	for i := range a.ReadinessEndpoints {
		if a.ReadinessEndpoints[i] != b.ReadinessEndpoints[i] {
			return false
		}
	}
	return true
}

func (a *Agent) syncNodePool(ctx context.Context, k key) error {
	np, u, ok, err := cached[hypershift.NodePool](a, a.npLister, k, func() { a.forgetKey(k) })
	if !ok {
		return err
	}
	ref := event.ClusterRef{Namespace: np.Namespace, Name: np.Spec.ClusterName}
	a.emitIfChanged(ctx, k, &ref, objectRef("NodePool", u), nodePoolFact(np))
	return nil
}

func (a *Agent) syncVirtLauncher(ctx context.Context, k key) error {
	pod, err := a.vlLister.Pods(k.namespace).Get(k.name)
	if apierrors.IsNotFound(err) {
		a.forgetKey(k)
		return nil
	}
	if err != nil {
		return err
	}
	ref := a.clusterForControlPlaneNamespace(k.namespace)
	a.emitIfChanged(ctx, k, ref, podRef(pod, false), virtLauncherFact(pod))
	return nil
}

// clusterForControlPlaneNamespace maps <ns>-<name> back to its HostedCluster.
func (a *Agent) clusterForControlPlaneNamespace(ns string) *event.ClusterRef {
	for _, hc := range a.listHostedClusters() {
		if hypershift.ControlPlaneNamespace(hc.GetNamespace(), hc.GetName()) == ns {
			return &event.ClusterRef{Namespace: hc.GetNamespace(), Name: hc.GetName()}
		}
	}
	return nil
}

func (a *Agent) listHostedClusters() []metav1.Object {
	objs, _ := a.hcLister.List(labels.Everything())
	out := make([]metav1.Object, 0, len(objs))
	for _, o := range objs {
		if m, ok := o.(metav1.Object); ok {
			out = append(out, m)
		}
	}
	return out
}

func (a *Agent) syncOpenShiftProxy(ctx context.Context, k key) error {
	if k.name != hypershift.ProxyName {
		return nil
	}
	p, u, ok, err := cached[hypershift.Proxy](a, a.proxyLister, k, func() { a.forgetKey(k) })
	if !ok {
		return err
	}
	obj := objectRef("Proxy", u)
	if old, changed := a.proxySeen(k, p.Spec); changed {
		a.emit(ctx, nil, obj, proxyChangeFact(event.ProxyTargetOpenShift, old, p.Spec, u.GetResourceVersion()))
	}
	a.emitIfChanged(ctx, k, nil, obj, openShiftProxyFact(p))
	return nil
}

func (a *Agent) syncHostedObject(ctx context.Context, k key) error {
	hc := a.hostedFor(k.cluster)
	if hc == nil {
		return nil
	}
	hc.mu.Lock()
	conn := hc.conn
	hc.mu.Unlock()
	if conn == nil {
		return nil
	}
	if k.kind == kindConnectivity {
		a.judgeConnectivity(ctx, hc, conn)
		return nil
	}
	obj, err := conn.get(k)
	ref := k.cluster
	if apierrors.IsNotFound(err) {
		if k.kind == kindAPIService {
			a.apiServiceGone(ctx, k)
			return nil
		}
		a.objectGone(ctx, k, &ref)
		if k.kind == kindNode {
			a.nodesChanged(ctx, hc)
		}
		return nil
	}
	if err != nil {
		return err
	}
	switch o := obj.(type) {
	case *unstructured.Unstructured:
		a.syncAPIService(ctx, k, o)
	case *corev1.Node:
		now := a.now()
		if wait := joinWait(o, now, a.cfg.NodeJoinGrace); wait > 0 {
			// Nothing in the API changes when the grace runs out: look
			// again then.
			a.enqueueAfter(k, wait+time.Second)
		}
		a.emitIfChanged(ctx, k, &ref, nodeRef(o), nodeFact(o, now, a.cfg.NodeJoinGrace))
		a.nodesChanged(ctx, hc)
	case *corev1.Pod:
		if k.kind == kindAPIProxyPod {
			a.emitIfChanged(ctx, k, &ref, podRef(o, true), apiServerProxyFact(o))
			return nil
		}
		if f, ok := crashLoopFact(o); ok {
			a.emitIfChanged(ctx, k, &ref, podRef(o, true), f)
		} else if a.state(k) != "" && a.state(k) != "cleared" {
			a.emitIfChanged(ctx, k, &ref, podRef(o, true), clearedFact(o, string(o.UID)))
		}
	}
	return nil
}

// objectGone reports a deleted hosted Node or a crashlooping pod that went
// away (a Deployment replaces pods: the old one's loop is over).
func (a *Agent) objectGone(ctx context.Context, k key, ref *event.ClusterRef) {
	if k.kind == kindAPIProxyPod {
		// A static pod the kubelet renders again (a rollout reaching the
		// node) is replaced, not removed: its mirror pod goes and comes
		// back under the same name. Its last state stays, so that the new
		// rendering is published as the change it is (tunnel → haproxy),
		// not taken for the first sighting of a healthy pod, which is no
		// news. The node's deletion ends it (here and in the bot).
		return
	}
	prev := a.state(k)
	a.forgetKey(k)
	if k.kind == kindNode {
		proxyPod := apiProxyPodPrefix + k.name
		a.forget(func(x key) bool { return x.kind == kindAPIProxyPod && x.cluster == k.cluster && x.name == proxyPod })
	}
	if prev == "" || prev == stateJoining { // never published
		return
	}
	obj := event.ObjectRef{Kind: kindNames[k.kind], Namespace: k.namespace, Name: k.name, Hosted: true}
	switch k.kind {
	case kindNode:
		a.emit(ctx, ref, obj, fact{payload: event.NodeReadiness{Node: k.name, Ready: event.ConditionUnknown, Deleted: true}, key: "deleted"})
	case kindServiceCAPod:
		if prev != "cleared" {
			p := event.PodCrashLoop{Namespace: k.namespace, Pod: k.name, Cleared: true}
			a.emit(ctx, ref, obj, fact{payload: p, key: "deleted"})
		}
	}
}
