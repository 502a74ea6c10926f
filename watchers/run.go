package watchers

import (
	"context"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/hypershift"
)

// Run works until ctx ends: the leader's term. It returns an error only
// when the management cluster cannot be watched at all. It may run again
// once it returned (the next term), never twice at once.
func (a *Agent) Run(ctx context.Context) error {
	q := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[key](),
		workqueue.TypedRateLimitingQueueConfig[key]{Name: "hcpbot-agent"})
	defer q.ShutDown()

	if err := a.waitForCRDs(ctx); err != nil {
		return err
	}
	if !cache.WaitForCacheSync(ctx.Done(), a.synced...) {
		return ctx.Err()
	}
	a.log.Info().Msg("management caches synced")
	a.queue.Store(&q)
	defer a.queue.Store(nil)
	// Workers start after the first snapshot so that the queued object
	// of every management object finds its state already recorded and
	// stays quiet. The informers may have synced long before this run (a
	// replica that just became leader): every object is queued here, as
	// a fresh informer's initial adds would be.
	for _, hcObj := range a.listHostedClusters() {
		a.syncOne(ctx, key{kind: kindHostedCluster, namespace: hcObj.GetNamespace(), name: hcObj.GetName()}, true)
	}
	a.snapshot(ctx, false)
	a.enqueueManagement()

	var wg sync.WaitGroup
	for range a.cfg.Workers {
		wg.Go(func() {
			for a.processNext(ctx, q) {
			}
		})
	}
	periodic := time.NewTicker(a.cfg.RestateInterval)
	defer periodic.Stop()
	// One ticker for every cluster's connectivity-check stamp.
	connTick := time.NewTicker(a.cfg.ConnectivityInterval)
	defer connTick.Stop()
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
			q.ShutDown()
			wg.Wait()
			a.stopAllHosted()
			return nil
		case <-a.resync:
			a.snapshot(ctx, false)
		case <-periodic.C:
			fresh()
		case <-connTick.C:
			a.judgeAllConnectivity(ctx)
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

// enqueueManagement queues every object in the management caches.
func (a *Agent) enqueueManagement() {
	add := func(l cache.GenericLister, k kind) {
		if l == nil {
			return
		}
		objs, _ := l.List(labels.Everything())
		for _, o := range objs {
			a.enqueueHosted(k, event.ClusterRef{}, o)
		}
	}
	add(a.hcLister, kindHostedCluster)
	add(a.npLister, kindNodePool)
	add(a.proxyLister, kindOCPProxy)
	pods, _ := a.vlLister.List(labels.Everything())
	for _, p := range pods {
		a.enqueueHosted(kindVirtLauncher, event.ClusterRef{}, p)
	}
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
	a.enqueue(key{kind: k, cluster: cluster, namespace: m.GetNamespace(), name: m.GetName()})
}

// enqueue queues k for the running Run; between runs there is nobody to
// work on it, and the next Run queues every object anyway.
func (a *Agent) enqueue(k key) {
	if q := a.queue.Load(); q != nil {
		(*q).Add(k)
	}
}

// enqueueAfter queues k for the running Run once d has passed.
func (a *Agent) enqueueAfter(k key, d time.Duration) {
	if q := a.queue.Load(); q != nil {
		(*q).AddAfter(k, d)
	}
}

func (a *Agent) processNext(ctx context.Context, q workqueue.TypedRateLimitingInterface[key]) bool {
	k, quit := q.Get()
	if quit {
		return false
	}
	defer q.Done(k)
	if err := a.syncOne(ctx, k, false); err != nil {
		a.metrics.syncErrors.WithLabelValues("sync").Inc()
		a.log.Warn().Err(err).Str("kind", kindNames[k.kind]).Str("object", k.namespace+"/"+k.name).Msg("sync failed; requeued")
		q.AddRateLimited(k)
		return true
	}
	q.Forget(k)
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
	case kindNode, kindServiceCAPod, kindAPIProxyPod, kindAPIService, kindConnectivity:
		return a.syncHostedObject(ctx, k)
	}
	return nil
}
