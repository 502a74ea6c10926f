package watchers

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listerscorev1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/hypershift"
)

// Config of an Agent.
type Config struct {
	// Source names the management cluster in every event (DNS subdomain).
	Source string
	// Identity names this replica in snapshot run IDs (pod name).
	Identity string
	// Workers process the queue in parallel; default 2.
	Workers int
	// HostedTimeout bounds each request to a hosted API server; default 15s.
	HostedTimeout time.Duration
	// ProbeInterval is how often each hosted API server's /readyz is
	// checked; default 15s. ProbeTimeout bounds one check; default 5s.
	ProbeInterval, ProbeTimeout time.Duration
	// SnapshotWait bounds how long the start-up snapshot waits for hosted
	// clusters' informers to sync; default 30s.
	SnapshotWait time.Duration
	// NodeJoinGrace is how long a Node without a Ready condition counts
	// as joining (new) rather than a problem; after it the node is
	// reported as not joining. Default DefaultNodeJoinGrace.
	NodeJoinGrace time.Duration
	// NodeSummaryInterval is the shortest time between two node summaries
	// of one hosted cluster: changes inside it are coalesced into one.
	// Default DefaultNodeSummaryInterval.
	NodeSummaryInterval time.Duration
	// RestateInterval is how often the leader restates every cluster's
	// current state with fresh event IDs (event.WithRestatement), so that
	// the events stream always holds a copy of every current fact younger
	// than its max age; default DefaultRestateInterval. RestateInterval
	// derives it from the stream's max age.
	RestateInterval time.Duration
	// RestateMinGap is the least time between two requested
	// restatements (Restate): requests within it are folded into one run
	// at its end, so a flood of requests costs one snapshot per gap;
	// default DefaultRestateMinGap.
	RestateMinGap time.Duration
}

// Restatement defaults.
const (
	// DefaultRestateInterval is a sixth of the default events max age
	// (72h): five restatements in a row may be missed (agent down, no
	// leader) before a fact's newest copy ages out.
	DefaultRestateInterval = 12 * time.Hour
	// DefaultRestateMinGap bounds requested restatements to one per 10s:
	// a starting bot waits at most that long, and bot replicas restarting
	// in a loop cost at most one snapshot per 10s.
	DefaultRestateMinGap = 10 * time.Second
	// minRestateInterval keeps a short max age (tests, demos) from making
	// the leader restate continuously.
	minRestateInterval = time.Minute
)

// RestateInterval is the periodic restatement interval for an events
// stream with the given max age: a sixth of it (see
// DefaultRestateInterval), at least a minute. A bot that starts asks for a
// restatement anyway, so a max age below a minute only costs a bot that
// is already running nothing: it keeps what it learnt.
func RestateInterval(maxAge time.Duration) time.Duration {
	if maxAge <= 0 {
		return DefaultRestateInterval
	}
	return max(maxAge/6, minRestateInterval)
}

// Defaults of Config.
const (
	DefaultNodeJoinGrace       = 10 * time.Minute
	DefaultNodeSummaryInterval = 5 * time.Second
)

func (c *Config) defaults() error {
	if err := event.ValidateSource(c.Source); err != nil {
		return fmt.Errorf("agent source: %w", err)
	}
	if c.Identity == "" {
		c.Identity = "agent"
	}
	if c.Workers <= 0 {
		c.Workers = 2
	}
	if c.HostedTimeout <= 0 {
		c.HostedTimeout = 15 * time.Second
	}
	if c.ProbeInterval <= 0 {
		c.ProbeInterval = 15 * time.Second
	}
	if c.ProbeTimeout <= 0 {
		c.ProbeTimeout = 5 * time.Second
	}
	if c.SnapshotWait <= 0 {
		c.SnapshotWait = 30 * time.Second
	}
	if c.NodeJoinGrace <= 0 {
		c.NodeJoinGrace = DefaultNodeJoinGrace
	}
	if c.NodeSummaryInterval <= 0 {
		c.NodeSummaryInterval = DefaultNodeSummaryInterval
	}
	if c.RestateInterval <= 0 {
		c.RestateInterval = DefaultRestateInterval
	}
	if c.RestateMinGap <= 0 {
		c.RestateMinGap = DefaultRestateMinGap
	}
	return nil
}

type kind uint8

const (
	kindHostedCluster kind = iota + 1
	kindNodePool
	kindVirtLauncher
	kindOCPProxy
	kindSecret
	kindNode
	kindServiceCAPod
	kindAPIProxyPod
	kindNodeSummary // one per hosted cluster: its state in Agent.states
)

var kindNames = map[kind]string{
	kindHostedCluster: "HostedCluster", kindNodePool: "NodePool", kindVirtLauncher: "Pod", kindOCPProxy: "Proxy",
	kindSecret: "Secret", kindNode: "Node", kindServiceCAPod: "Pod", kindAPIProxyPod: "Pod", kindNodeSummary: "HostedCluster",
}

// key is a work item: an object of a kind, in the management cluster or
// (cluster set) in a hosted cluster.
type key struct {
	kind      kind
	cluster   event.ClusterRef
	namespace string
	name      string
}

// Agent watches one management cluster and its hosted clusters.
type Agent struct {
	cfg     Config
	kube    kubernetes.Interface
	dyn     dynamic.Interface
	pub     Publisher
	log     zerolog.Logger
	metrics *Metrics
	now     func() time.Time

	queue workqueue.TypedRateLimitingInterface[key]

	hcLister, npLister, proxyLister cache.GenericLister
	vlLister                        listerscorev1.PodLister

	mu     sync.Mutex
	hosted map[event.ClusterRef]*hostedCluster
	// states is the last published state per object (see fact.state).
	states map[key]string
	// proxies is the last proxy spec seen per HostedCluster or Proxy, to
	// report edits with their old value.
	proxies map[key]hypershift.ProxySpec

	resync  chan struct{}
	restate chan struct{}
}

// New returns an agent. m may be shared with other agents of the process.
func New(cfg Config, kube kubernetes.Interface, dyn dynamic.Interface, pub Publisher, m *Metrics, log zerolog.Logger) (*Agent, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if m == nil {
		m = NewMetrics(nil)
	}
	return &Agent{
		cfg: cfg, kube: kube, dyn: dyn, pub: pub, log: log.With().Str("source", cfg.Source).Logger(), metrics: m,
		now:     time.Now,
		hosted:  map[event.ClusterRef]*hostedCluster{},
		states:  map[key]string{},
		proxies: map[key]hypershift.ProxySpec{},
		resync:  make(chan struct{}, 1),
		restate: make(chan struct{}, 1),
	}, nil
}

// Resync asks for a snapshot of the current problem state (after a NATS
// reconnect, or when events were dropped). It never blocks.
func (a *Agent) Resync() {
	select {
	case a.resync <- struct{}{}:
	default:
	}
}

// SetRestateInterval sets Config.RestateInterval (0 keeps it); call it
// before Run, e.g. once the events stream's max age is known.
func (a *Agent) SetRestateInterval(d time.Duration) {
	if d > 0 {
		a.cfg.RestateInterval = d
	}
}

// Restate asks for a restatement of every cluster's current state with
// fresh event IDs (a bot that started asks so). Requests are folded: at
// most one restatement runs per Config.RestateMinGap. It never blocks.
func (a *Agent) Restate() {
	select {
	case a.restate <- struct{}{}:
	default:
	}
}

// Run watches until ctx ends. It returns an error only when the
// management cluster cannot be watched at all.
func (a *Agent) Run(ctx context.Context) error {
	a.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[key](),
		workqueue.TypedRateLimitingQueueConfig[key]{Name: "hcpbot-agent"})
	defer a.queue.ShutDown()

	if err := a.waitForCRDs(ctx); err != nil {
		return err
	}
	synced, err := a.startManagementInformers(ctx)
	if err != nil {
		return err
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return ctx.Err()
	}
	a.log.Info().Msg("management caches synced")
	// Workers start after the first snapshot so that the queued "add" of
	// every object finds its state already recorded and stays quiet.
	for _, hcObj := range a.listHostedClusters() {
		a.syncOne(ctx, key{kind: kindHostedCluster, namespace: hcObj.GetNamespace(), name: hcObj.GetName()}, true)
	}
	a.snapshot(ctx, false)

	var wg sync.WaitGroup
	for range a.cfg.Workers {
		wg.Go(func() {
			for a.processNext(ctx) {
			}
		})
	}
	periodic := time.NewTicker(a.cfg.RestateInterval)
	defer periodic.Stop()
	// Restatements run here, one at a time. lastFresh is when the last
	// one with fresh IDs started; a request inside RestateMinGap of it
	// arms gap, and the requests until it fires are folded into one run.
	var lastFresh time.Time
	var gap <-chan time.Time
	fresh := func() {
		lastFresh = time.Now()
		a.snapshot(ctx, true)
	}
	for {
		select {
		case <-ctx.Done():
			a.queue.ShutDown()
			wg.Wait()
			a.stopAllHosted()
			return nil
		case <-a.resync:
			a.snapshot(ctx, false)
		case <-periodic.C:
			fresh()
		case <-a.restate:
			if gap != nil {
				continue // already scheduled
			}
			if wait := time.Until(lastFresh.Add(a.cfg.RestateMinGap)); wait > 0 {
				gap = time.After(wait)
				continue
			}
			fresh()
		case <-gap:
			gap = nil
			fresh()
		}
	}
}

// waitForCRDs blocks until the HostedCluster API is served: an agent
// deployed before HyperShift (or with a broken CRD) waits and says why
// instead of crash-looping.
func (a *Agent) waitForCRDs(ctx context.Context) error {
	backoff := time.Second
	for {
		_, err := a.kube.Discovery().ServerResourcesForGroupVersion(hypershift.HostedClusterGVR.GroupVersion().String())
		if err == nil {
			return nil
		}
		a.metrics.syncErrors.WithLabelValues("crd_missing").Inc()
		a.log.Error().Err(err).Msg("HostedCluster API not served (HyperShift CRDs missing?); waiting")
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, time.Minute)
	}
}

func (a *Agent) startManagementInformers(ctx context.Context) ([]cache.InformerSynced, error) {
	df := dynamicinformer.NewDynamicSharedInformerFactory(a.dyn, 0)
	var synced []cache.InformerSynced
	handle := func(inf cache.SharedIndexInformer, k kind) {
		_ = inf.SetTransform(transformUnstructured)
		_, _ = inf.AddEventHandler(a.handler(k, event.ClusterRef{}))
		synced = append(synced, inf.HasSynced)
	}
	hc := df.ForResource(hypershift.HostedClusterGVR)
	handle(hc.Informer(), kindHostedCluster)
	a.hcLister = hc.Lister()
	np := df.ForResource(hypershift.NodePoolGVR)
	handle(np.Informer(), kindNodePool)
	a.npLister = np.Lister()
	// Proxy/cluster exists on OpenShift management clusters only.
	if _, err := a.kube.Discovery().ServerResourcesForGroupVersion(hypershift.ProxyGVR.GroupVersion().String()); err == nil {
		px := df.ForResource(hypershift.ProxyGVR)
		handle(px.Informer(), kindOCPProxy)
		a.proxyLister = px.Lister()
	}
	df.Start(ctx.Done())

	kf := informers.NewSharedInformerFactoryWithOptions(a.kube, 0,
		informers.WithTransform(transformPod),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = hypershift.LabelKubeVirt + "=" + hypershift.VirtLauncher
		}))
	vl := kf.Core().V1().Pods()
	_, _ = vl.Informer().AddEventHandler(a.handler(kindVirtLauncher, event.ClusterRef{}))
	synced = append(synced, vl.Informer().HasSynced)
	a.vlLister = vl.Lister()
	kf.Start(ctx.Done())
	return synced, nil
}

// handler only enqueues: sync functions read the current state from listers.
func (a *Agent) handler(k kind, cluster event.ClusterRef) cache.ResourceEventHandler {
	enqueue := func(obj any) { a.enqueueHosted(k, cluster, obj) }
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	}
}

func (a *Agent) enqueueHosted(k kind, cluster event.ClusterRef, obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, ok := obj.(metav1.Object)
	if !ok {
		return
	}
	if a.queue != nil {
		a.queue.Add(key{kind: k, cluster: cluster, namespace: m.GetNamespace(), name: m.GetName()})
	}
}

func (a *Agent) processNext(ctx context.Context) bool {
	k, quit := a.queue.Get()
	if quit {
		return false
	}
	defer a.queue.Done(k)
	if err := a.syncOne(ctx, k, false); err != nil {
		a.metrics.syncErrors.WithLabelValues("sync").Inc()
		a.log.Warn().Err(err).Str("kind", kindNames[k.kind]).Str("object", k.namespace+"/"+k.name).Msg("sync failed; requeued")
		a.queue.AddRateLimited(k)
		return true
	}
	a.queue.Forget(k)
	return true
}

// syncOne converges one object; quiet records state without publishing
// (used before the start-up snapshot, which publishes instead).
func (a *Agent) syncOne(ctx context.Context, k key, quiet bool) error {
	switch k.kind {
	case kindHostedCluster:
		return a.syncHostedCluster(ctx, k, quiet)
	case kindNodePool:
		return a.syncNodePool(ctx, k)
	case kindVirtLauncher:
		return a.syncVirtLauncher(ctx, k)
	case kindOCPProxy:
		return a.syncOpenShiftProxy(ctx, k)
	case kindSecret:
		return a.syncSecret(ctx, k.cluster)
	case kindNode, kindServiceCAPod, kindAPIProxyPod:
		return a.syncHostedObject(ctx, k)
	}
	return nil
}

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

func (a *Agent) syncHostedCluster(ctx context.Context, k key, quiet bool) error {
	ref := event.ClusterRef{Namespace: k.namespace, Name: k.name}
	u, err := getUnstructured(a.hcLister, k.namespace, k.name)
	if apierrors.IsNotFound(err) {
		a.stopHosted(ref)
		obj := event.ObjectRef{Kind: "HostedCluster", Namespace: k.namespace, Name: k.name}
		a.emit(ctx, &ref, obj, fact{payload: event.HostedClusterState{Deleted: true}, key: "deleted", state: "deleted"})
		a.forget(func(x key) bool { return x == k || x.cluster == ref })
		return nil
	}
	if err != nil {
		return err
	}
	hc, err := hypershift.FromUnstructured[hypershift.HostedCluster](u)
	if err != nil {
		// A HostedCluster the schema accepted but we cannot read: say so
		// once per resourceVersion and do not retry in a hot loop.
		a.metrics.syncErrors.WithLabelValues("malformed_object").Inc()
		a.log.Error().Err(err).Str("cluster", ref.String()).Msg("HostedCluster unreadable; skipped")
		return nil
	}
	obj := objectRef("HostedCluster", u)
	f := hostedClusterFact(hc)
	cur := hc.Proxy()
	a.mu.Lock()
	old, seen := a.proxies[k]
	a.proxies[k] = cur
	a.mu.Unlock()
	if !quiet && seen && !equalProxy(old, cur) {
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

// ensureHosted starts, keeps or restarts the watch of a hosted cluster to
// match the Secret its HostedCluster names.
func (a *Agent) ensureHosted(ctx context.Context, ref event.ClusterRef, hc *hypershift.HostedCluster) {
	secret := ""
	if hc.Status.Kubeconfig != nil {
		secret = hc.Status.Kubeconfig.Name
	}
	a.mu.Lock()
	cur := a.hosted[ref]
	if cur != nil && cur.secretName == secret {
		a.mu.Unlock()
		return
	}
	delete(a.hosted, ref)
	var next *hostedCluster
	if secret != "" {
		next = &hostedCluster{ref: ref, secretName: secret}
		a.hosted[ref] = next
	}
	n := len(a.hosted)
	a.mu.Unlock()
	if cur != nil {
		cur.stop()
	}
	if next != nil {
		a.startSecretWatch(ctx, next)
		a.log.Info().Str("cluster", ref.String()).Str("secret", secret).Msg("watching hosted cluster")
	}
	a.metrics.hostedWatched.Set(float64(n))
}

func (a *Agent) hostedFor(ref event.ClusterRef) *hostedCluster {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.hosted[ref]
}

func (a *Agent) stopHosted(ref event.ClusterRef) {
	a.mu.Lock()
	hc := a.hosted[ref]
	delete(a.hosted, ref)
	n := len(a.hosted)
	a.mu.Unlock()
	if hc != nil {
		hc.stop()
		a.metrics.hostedSynced.DeleteLabelValues(ref.String())
		a.log.Info().Str("cluster", ref.String()).Msg("stopped watching hosted cluster")
	}
	a.metrics.hostedWatched.Set(float64(n))
}

func (a *Agent) stopAllHosted() {
	a.mu.Lock()
	all := a.hosted
	a.hosted = map[event.ClusterRef]*hostedCluster{}
	a.mu.Unlock()
	for _, hc := range all {
		hc.stop()
	}
	a.metrics.hostedWatched.Set(0)
}

// HostedClusters returns the hosted clusters being watched (for tests and
// the health endpoint).
func (a *Agent) HostedClusters() []event.ClusterRef {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]event.ClusterRef, 0, len(a.hosted))
	for ref, hc := range a.hosted {
		hc.mu.Lock()
		if hc.conn != nil {
			out = append(out, ref)
		}
		hc.mu.Unlock()
	}
	return out
}

func (a *Agent) syncNodePool(ctx context.Context, k key) error {
	u, err := getUnstructured(a.npLister, k.namespace, k.name)
	if apierrors.IsNotFound(err) {
		a.forget(func(x key) bool { return x == k })
		return nil
	}
	if err != nil {
		return err
	}
	np, err := hypershift.FromUnstructured[hypershift.NodePool](u)
	if err != nil {
		a.metrics.syncErrors.WithLabelValues("malformed_object").Inc()
		return nil
	}
	ref := event.ClusterRef{Namespace: np.Namespace, Name: np.Spec.ClusterName}
	a.emitIfChanged(ctx, k, &ref, objectRef("NodePool", u), nodePoolFact(np))
	return nil
}

func (a *Agent) syncVirtLauncher(ctx context.Context, k key) error {
	pod, err := a.vlLister.Pods(k.namespace).Get(k.name)
	if apierrors.IsNotFound(err) {
		a.forget(func(x key) bool { return x == k })
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
	u, err := getUnstructured(a.proxyLister, "", k.name)
	if apierrors.IsNotFound(err) {
		a.forget(func(x key) bool { return x == k })
		return nil
	}
	if err != nil {
		return err
	}
	p, err := hypershift.FromUnstructured[hypershift.Proxy](u)
	if err != nil {
		a.metrics.syncErrors.WithLabelValues("malformed_object").Inc()
		return nil
	}
	obj := objectRef("Proxy", u)
	a.mu.Lock()
	old, seen := a.proxies[k]
	a.proxies[k] = p.Spec
	a.mu.Unlock()
	if seen && !equalProxy(old, p.Spec) {
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
	obj, err := conn.get(k)
	ref := k.cluster
	if apierrors.IsNotFound(err) {
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
	case *corev1.Node:
		now := a.now()
		if wait := joinWait(o, now, a.cfg.NodeJoinGrace); wait > 0 {
			// Nothing in the API changes when the grace runs out: look
			// again then.
			a.queue.AddAfter(k, wait+time.Second)
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
	prev := a.state(k)
	a.forget(func(x key) bool { return x == k })
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

// emitIfChanged publishes f when its state differs from the last published
// one. A first sighting is published only when it is a problem: a healthy
// object is no news, and the snapshot covers problems.
func (a *Agent) emitIfChanged(ctx context.Context, k key, ref *event.ClusterRef, obj event.ObjectRef, f fact) {
	a.mu.Lock()
	prev, seen := a.states[k]
	a.states[k] = f.state
	a.mu.Unlock()
	if seen && prev == f.state {
		return
	}
	// A joining node was never published: its first healthy state is no
	// news either.
	if (!seen || prev == stateJoining) && !f.problem {
		return
	}
	a.emit(ctx, ref, obj, f)
}

func (a *Agent) emit(ctx context.Context, ref *event.ClusterRef, obj event.ObjectRef, f fact, opts ...event.Option) bool {
	e, err := event.New(a.cfg.Source, ref, obj, f.payload, f.key, a.now(), opts...)
	if err != nil {
		a.metrics.publishErrors.WithLabelValues("invalid").Inc()
		a.log.Error().Err(err).Str("kind", obj.Kind).Str("object", obj.Namespace+"/"+obj.Name).Msg("cannot build event")
		return false
	}
	return a.publish(ctx, e, false)
}

// WaitingPublisher is a Publisher that can also wait for room instead of
// dropping. Snapshots use it: a snapshot that dropped its own events would
// ask for another snapshot, forever.
type WaitingPublisher interface {
	Publisher
	PublishWait(ctx context.Context, e event.Event) error
}

func (a *Agent) publish(ctx context.Context, e event.Event, wait bool) bool {
	var err error
	if wp, ok := a.pub.(WaitingPublisher); ok && wait {
		err = wp.PublishWait(ctx, e)
	} else {
		err = a.pub.Publish(ctx, e)
	}
	if err != nil {
		if !errors.Is(err, ErrBufferFull) {
			a.log.Warn().Err(err).Str("type", string(e.Type)).Msg("publish failed")
		}
		return false
	}
	return true
}

func (a *Agent) record(k key, state string) {
	a.mu.Lock()
	a.states[k] = state
	a.mu.Unlock()
}

func (a *Agent) state(k key) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.states[k]
}

func (a *Agent) forget(match func(key) bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for k := range a.states {
		if match(k) {
			delete(a.states, k)
		}
	}
	for k := range a.proxies {
		if match(k) {
			delete(a.proxies, k)
		}
	}
}

func objectRef(kind string, u *unstructured.Unstructured) event.ObjectRef {
	return event.ObjectRef{Kind: kind, Namespace: u.GetNamespace(), Name: u.GetName(), UID: string(u.GetUID()), ResourceVersion: u.GetResourceVersion()}
}

func podRef(p *corev1.Pod, hosted bool) event.ObjectRef {
	return event.ObjectRef{Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: string(p.UID), ResourceVersion: p.ResourceVersion, Hosted: hosted}
}

func nodeRef(n *corev1.Node) event.ObjectRef {
	return event.ObjectRef{Kind: "Node", Name: n.Name, UID: string(n.UID), ResourceVersion: n.ResourceVersion, Hosted: true}
}

func itoa(i int) string { return strconv.Itoa(i) }
