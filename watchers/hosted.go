package watchers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listerscorev1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/kubeconfig"
)

// What the agent watches inside a hosted cluster.
const (
	ServiceCANamespace      = "openshift-service-ca-operator"
	APIServerProxyNamespace = "kube-system"
	APIServerProxySelector  = "k8s-app=kube-apiserver-proxy"
	// apiProxyPodPrefix + node is the mirror pod of a worker's
	// kube-apiserver-proxy static pod (the kubelet names mirror pods
	// <pod>-<node>).
	apiProxyPodPrefix = "kube-apiserver-proxy-"
)

// hostedCluster is one HostedCluster's watch: an informer on its admin
// kubeconfig Secret in the management cluster and, while that Secret holds a
// kubeconfig, informers inside the hosted cluster built from it.
type hostedCluster struct {
	ref        event.ClusterRef
	secretName string
	// syncMu serialises syncSecret: a worker and a snapshot may both
	// converge the connection.
	syncMu sync.Mutex

	stopSecret    context.CancelFunc
	secretFactory informers.SharedInformerFactory
	secrets       listerscorev1.SecretLister

	mu     sync.Mutex
	conn   *hostedConn // nil while no usable kubeconfig
	reach  reachability
	noCred bool // the missing-Secret report was made
	// unusable is the hash of the kubeconfig last found unusable (refused
	// or invalid) and reported: the same content is not parsed, logged or
	// counted again on each snapshot, only once it changes.
	unusable string

	summary summaryTimer
	// connCheckRV is the resourceVersion of the connectivity-check
	// record last seen: the key of its absence (evidence.go).
	connCheckRV string
}

// hostedConn is the informers of one set of credentials; a rotated Secret
// replaces it as a whole.
type hostedConn struct {
	credsHash  string
	endpoint   string
	client     kubernetes.Interface
	httpClient *http.Client
	cancel     context.CancelFunc
	factories  []factory
	nodes      listerscorev1.NodeLister
	scaPods    listerscorev1.PodLister
	apiProxy   listerscorev1.PodLister
	// apiServices caches slim APIServices (evidence.go), connCheck the
	// one connectivity-check ConfigMap.
	apiServices cache.GenericLister
	connCheck   listerscorev1.ConfigMapLister
	synced      []cache.InformerSynced
	probeDone   chan struct{}
	nudge       chan struct{}
	// stale is set when the API server came back after an outage: the
	// informers would wait out client-go's watch backoff (up to a minute
	// and more, then a 410 and a re-list), so the conn is rebuilt.
	stale  atomic.Bool
	dialer *connDialer
}

type reachability struct {
	known     bool
	reachable bool
	unwatched bool
	since     time.Time
	lastErr   string
}

// startSecretWatch watches exactly one Secret: list/watch with a
// metadata.name field selector, which RBAC can grant by resourceName.
func (a *Agent) startSecretWatch(ctx context.Context, hc *hostedCluster) {
	sctx, cancel := context.WithCancel(ctx)
	hc.stopSecret = cancel
	f := informers.NewSharedInformerFactoryWithOptions(a.kube, 0,
		informers.WithNamespace(hc.ref.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", hc.secretName).String()
		}))
	inf := f.Core().V1().Secrets()
	key := key{kind: kindSecret, cluster: hc.ref}
	_, _ = inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { a.enqueue(key) },
		UpdateFunc: func(any, any) { a.enqueue(key) },
		DeleteFunc: func(any) { a.enqueue(key) },
	})
	hc.secrets = inf.Lister()
	hc.secretFactory = f
	f.Start(sctx.Done())
}

func (hc *hostedCluster) stop() {
	if hc.stopSecret != nil {
		hc.stopSecret()
		shutdown(hc.secretFactory)
	}
	hc.mu.Lock()
	conn := hc.conn
	hc.conn = nil
	hc.mu.Unlock()
	conn.stop()
}

func (c *hostedConn) stop() {
	if c == nil {
		return
	}
	c.cancel()
	// Closing the connections first makes requests in flight fail now.
	c.dialer.closeAll()
	shutdown(c.factories...)
	<-c.probeDone
	c.httpClient.CloseIdleConnections()
}

// informerStopWait bounds how long stopping waits for informers to return.
const informerStopWait = 5 * time.Second

// factory is a typed or dynamic informer factory.
type factory interface {
	Start(stopCh <-chan struct{})
	Shutdown()
}

// shutdown stops factories whose context is cancelled, waiting at most
// informerStopWait. client-go's reflector sleeps out a watch-list backoff
// (up to 30 s against an unreachable API server) without looking at its
// context, and a worker or the agent's shutdown must not wait for that;
// such informers end on their own once the backoff is over.
func shutdown(factories ...factory) {
	done := make(chan struct{})
	go func() {
		for _, f := range factories {
			f.Shutdown()
		}
		close(done)
	}()
	t := time.NewTimer(informerStopWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// syncSecret converges the hosted informers on the Secret's kubeconfig.
func (a *Agent) syncSecret(ctx context.Context, ref event.ClusterRef) error {
	hc := a.hostedFor(ref)
	if hc == nil {
		return nil
	}
	hc.syncMu.Lock()
	defer hc.syncMu.Unlock()
	secret, err := hc.secrets.Secrets(ref.Namespace).Get(hc.secretName)
	var data []byte
	if err == nil {
		data = secret.Data[hypershift.KubeconfigKey]
	}
	if len(data) == 0 {
		hc.mu.Lock()
		conn, reported := hc.conn, hc.noCred
		hc.conn, hc.noCred, hc.unusable = nil, true, ""
		hc.mu.Unlock()
		conn.stop()
		a.metrics.hostedSynced.WithLabelValues(ref.String()).Set(0)
		if !reported {
			a.metrics.syncErrors.WithLabelValues("kubeconfig_missing").Inc()
			a.log.Warn().Str("cluster", ref.String()).Str("secret", hc.secretName).
				Msg("admin kubeconfig Secret missing or without key kubeconfig; waiting for it")
			a.setUnwatched(ctx, hc, fmt.Sprintf("admin kubeconfig Secret %s/%s not found or has no %q key", ref.Namespace, hc.secretName, hypershift.KubeconfigKey))
		}
		return nil
	}
	sum := sha256.Sum256(data)
	hash := hex.EncodeToString(sum[:])
	hc.mu.Lock()
	old, unusable := hc.conn, hc.unusable
	hc.noCred = false
	hc.mu.Unlock()
	if old != nil && old.credsHash == hash && !old.stale.Load() {
		return nil
	}
	if old == nil && unusable == hash {
		return nil // reported; waiting for the Secret to change
	}
	if old != nil {
		why := "admin kubeconfig changed; reconnecting"
		if old.credsHash == hash {
			why = "hosted cluster API back; reconnecting so that the informers list at once"
		}
		a.log.Info().Str("cluster", ref.String()).Msg(why)
		old.stop()
	}
	conn, err := a.connectHosted(ctx, hc, data, hash)
	if err != nil {
		// A kubeconfig that is refused or does not parse will not change
		// by itself: report it once and wait for the Secret to change.
		label, why := unusableKubeconfig(err)
		a.metrics.syncErrors.WithLabelValues(label).Inc()
		text := fmt.Sprintf("admin kubeconfig %s: Secret %s/%s: %s", why, ref.Namespace, hc.secretName, reason(err))
		a.log.Error().Str("cluster", ref.String()).Str("secret", hc.secretName).Str("reason", text).Msg("admin kubeconfig unusable; the hosted cluster is not watched")
		// The old conn, if any, was stopped above: none is left.
		hc.mu.Lock()
		hc.conn, hc.unusable = nil, hash
		hc.mu.Unlock()
		a.metrics.hostedSynced.WithLabelValues(ref.String()).Set(0)
		a.setUnwatched(ctx, hc, text)
		return nil
	}
	hc.mu.Lock()
	hc.conn, hc.unusable = conn, ""
	hc.mu.Unlock()
	return nil
}

// unusableKubeconfig names the metric label and the word for why a
// kubeconfig is not used.
func unusableKubeconfig(err error) (label, why string) {
	if errors.Is(err, kubeconfig.ErrRefused) {
		return "kubeconfig_refused", "refused"
	}
	return "kubeconfig_invalid", "unusable"
}

// reason is what may be said of a connect error: package kubeconfig's
// reasons name fields and entries only; any other error (building the
// client) could quote the kubeconfig's data and is not passed on.
func reason(err error) string {
	var ke *kubeconfig.Error
	if errors.As(err, &ke) {
		return ke.Reason
	}
	return "no client can be built from it"
}

func (a *Agent) connectHosted(ctx context.Context, hc *hostedCluster, data []byte, hash string) (*hostedConn, error) {
	// Untrusted input: inline credentials only, nothing read or run.
	cfg, err := kubeconfig.RESTConfig(data)
	if err != nil {
		return nil, err
	}
	cfg.Timeout = a.cfg.HostedTimeout
	cfg.QPS, cfg.Burst = 20, 40
	cfg.UserAgent = "hcpbot-agent"
	// A dialer of its own per connection: stopping the watch closes every
	// socket it opened (idle HTTP/2 connections are not closed by
	// CloseIdleConnections through client-go's round-tripper wrappers), and
	// client-go does not share a transport with a custom dialer.
	dialer := newConnDialer(a.metrics.hostedConns)
	cfg.Dial = dialer.DialContext
	// An own HTTP client, so that stopping the watch also closes its
	// connections instead of leaving them to an idle timeout.
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	kc, err := kubernetes.NewForConfigAndClient(Protobuf(cfg), httpClient)
	if err != nil {
		return nil, err
	}
	dc, err := dynamic.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithCancel(ctx)
	conn := &hostedConn{credsHash: hash, endpoint: endpointOf(cfg), client: kc, httpClient: httpClient,
		cancel: cancel, probeDone: make(chan struct{}), nudge: make(chan struct{}, 1), dialer: dialer}

	nodeF := informers.NewSharedInformerFactoryWithOptions(kc, 0, informers.WithTransform(transformNode))
	scaF := informers.NewSharedInformerFactoryWithOptions(kc, 0, informers.WithNamespace(ServiceCANamespace), informers.WithTransform(transformPod))
	proxyF := informers.NewSharedInformerFactoryWithOptions(kc, 0, informers.WithNamespace(APIServerProxyNamespace),
		informers.WithTransform(transformPod),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = APIServerProxySelector }))
	// One ConfigMap, by name: nothing else of kube-system is cached.
	connF := informers.NewSharedInformerFactoryWithOptions(kc, 0, informers.WithNamespace(ConnectivityCheckNamespace),
		informers.WithTransform(transformConnectivityCheck),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", ConnectivityCheckName).String()
		}))
	// APIServices through the dynamic client: no kube-aggregator module
	// for one condition.
	apiF := dynamicinformer.NewDynamicSharedInformerFactory(dc, 0)
	conn.factories = []factory{nodeF, scaF, proxyF, connF, apiF}

	onErr := func(*cache.Reflector, error) { a.watchFailed(conn) }
	add := func(inf cache.SharedIndexInformer, k kind) {
		_ = inf.SetWatchErrorHandler(onErr)
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { a.enqueueHosted(k, hc.ref, obj) },
			UpdateFunc: func(_, obj any) { a.enqueueHosted(k, hc.ref, obj) },
			DeleteFunc: func(obj any) { a.enqueueHosted(k, hc.ref, obj) },
		})
		conn.synced = append(conn.synced, inf.HasSynced)
	}
	nodes := nodeF.Core().V1().Nodes()
	add(nodes.Informer(), kindNode)
	conn.nodes = nodes.Lister()
	sca := scaF.Core().V1().Pods()
	add(sca.Informer(), kindServiceCAPod)
	conn.scaPods = sca.Lister()
	ap := proxyF.Core().V1().Pods()
	add(ap.Informer(), kindAPIProxyPod)
	conn.apiProxy = ap.Lister()
	cc := connF.Core().V1().ConfigMaps()
	add(cc.Informer(), kindConnectivity)
	conn.connCheck = cc.Lister()
	as := apiF.ForResource(APIServiceGVR)
	_ = as.Informer().SetTransform(transformAPIService)
	add(as.Informer(), kindAPIService)
	conn.apiServices = as.Lister()
	for _, f := range conn.factories {
		f.Start(cctx.Done())
	}
	go func() {
		defer close(conn.probeDone)
		if cache.WaitForCacheSync(cctx.Done(), conn.synced...) {
			a.metrics.hostedSynced.WithLabelValues(hc.ref.String()).Set(1)
			a.setReachable(cctx, hc, conn.endpoint, true, "")
		}
		a.health(cctx, hc, conn)
	}()
	return conn, nil
}

// watchFailed is called by reflectors when a list or watch fails in a way
// they do not retry by themselves; it only hurries the health check.
// (Connection errors are retried inside the reflector and never get here,
// which is why reachability comes from the health check.)
func (a *Agent) watchFailed(conn *hostedConn) {
	select {
	case conn.nudge <- struct{}{}:
	default:
	}
}

// health checks the hosted API server's /readyz every ProbeInterval (at
// once when nudged) and reports changes of reachability: one request per
// cluster per interval, whatever the reflectors are doing.
func (a *Agent) health(ctx context.Context, hc *hostedCluster, conn *hostedConn) {
	t := time.NewTicker(a.cfg.ProbeInterval)
	defer t.Stop()
	failures, down := 0, false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-conn.nudge:
		}
		pctx, cancel := context.WithTimeout(ctx, a.cfg.ProbeTimeout)
		err := conn.client.Discovery().RESTClient().Get().AbsPath("/readyz").Do(pctx).Error()
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			failures = 0
			if down {
				// Back after an outage: a fresh conn lists at once and
				// reports the cluster reachable once it has.
				conn.stale.Store(true)
				a.enqueue(key{kind: kindSecret, cluster: hc.ref})
				return
			}
			if conn.hasSynced() {
				a.metrics.hostedSynced.WithLabelValues(hc.ref.String()).Set(1)
				a.setReachable(ctx, hc, conn.endpoint, true, "")
			}
			continue
		}
		// Two failures in a row: one lost request is not an outage.
		if failures++; failures == 2 {
			down = true
			a.metrics.hostedSynced.WithLabelValues(hc.ref.String()).Set(0)
			a.setReachable(ctx, hc, conn.endpoint, false, err.Error())
		}
	}
}

// setUnwatched publishes that the cluster is not watched at all (its
// admin kubeconfig is missing, invalid or refused), and why.
func (a *Agent) setUnwatched(ctx context.Context, hc *hostedCluster, why string) {
	a.publishReach(ctx, hc, "", false, true, why)
}

// setReachable publishes a reachability change (only changes).
func (a *Agent) setReachable(ctx context.Context, hc *hostedCluster, endpoint string, reachable bool, errText string) {
	a.publishReach(ctx, hc, endpoint, reachable, false, errText)
}

func (a *Agent) publishReach(ctx context.Context, hc *hostedCluster, endpoint string, reachable, unwatched bool, errText string) {
	hc.mu.Lock()
	if hc.reach.known && hc.reach.reachable == reachable && hc.reach.unwatched == unwatched && hc.reach.lastErr == errText {
		hc.mu.Unlock()
		return
	}
	// A first "reachable" is not news.
	first := !hc.reach.known
	hc.reach = reachability{known: true, reachable: reachable, unwatched: unwatched, since: a.now(), lastErr: errText}
	since := hc.reach.since
	hc.mu.Unlock()
	if first && reachable {
		return
	}
	switch {
	case unwatched:
		a.log.Warn().Str("cluster", hc.ref.String()).Str("error", errText).Msg("hosted cluster not watched")
	case !reachable:
		a.log.Warn().Str("cluster", hc.ref.String()).Str("error", errText).Msg("hosted cluster API unreachable")
	default:
		a.log.Info().Str("cluster", hc.ref.String()).Msg("hosted cluster API reachable again")
	}
	p := event.Reachability{Endpoint: endpoint, Reachable: reachable, Unwatched: unwatched, Error: errText, Since: since}
	state := "reachable=" + boolStr(reachable)
	// The reason is part of the key: "Secret missing" then "kubeconfig
	// invalid" within one second are two facts, not one.
	sum := sha256.Sum256([]byte(errText))
	key := event.TransitionAt(state+":"+hex.EncodeToString(sum[:6]), since)
	obj := event.ObjectRef{Kind: "HostedCluster", Namespace: hc.ref.Namespace, Name: hc.ref.Name}
	a.emit(ctx, &hc.ref, obj, fact{payload: p, key: key, state: state, problem: !reachable})
}

// endpointOf is the host:port the kubeconfig points at (reported as data).
func endpointOf(cfg *rest.Config) string {
	u, err := url.Parse(cfg.Host)
	if err != nil {
		return ""
	}
	return u.Host
}

// hostedObject returns a cached object of a hosted cluster, or nil.
func (c *hostedConn) get(k key) (any, error) {
	switch k.kind {
	case kindNode:
		return c.nodes.Get(k.name)
	case kindServiceCAPod:
		return c.scaPods.Pods(k.namespace).Get(k.name)
	case kindAPIProxyPod:
		return c.apiProxy.Pods(k.namespace).Get(k.name)
	case kindAPIService:
		return c.apiServices.Get(k.name)
	}
	return nil, fmt.Errorf("unknown hosted kind %d", k.kind)
}

func (c *hostedConn) list() (nodes []*corev1.Node, sca []*corev1.Pod, apiProxy []*corev1.Pod) {
	nodes, _ = c.nodes.List(labels.Everything())
	sca, _ = c.scaPods.List(labels.Everything())
	apiProxy, _ = c.apiProxy.List(labels.Everything())
	return
}

// listAPIServices reads the cached APIServices.
func (c *hostedConn) listAPIServices() []apiServiceView {
	objs, _ := c.apiServices.List(labels.Everything())
	out := make([]apiServiceView, 0, len(objs))
	for _, o := range objs {
		if u, ok := o.(*unstructured.Unstructured); ok {
			out = append(out, readAPIService(u))
		}
	}
	return out
}

func (c *hostedConn) hasSynced() bool {
	for _, s := range c.synced {
		if !s() {
			return false
		}
	}
	return true
}
