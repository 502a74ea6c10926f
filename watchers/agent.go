package watchers

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
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
	// ConnectivityStaleAfter is the age past which a hosted cluster's
	// connectivity-check stamp is stale; default
	// DefaultConnectivityStaleAfter (HyperShift's). ConnectivityInterval
	// is how often the agent re-judges every cached stamp; default
	// DefaultConnectivityInterval.
	ConnectivityStaleAfter, ConnectivityInterval time.Duration
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
	if c.ConnectivityStaleAfter <= 0 {
		c.ConnectivityStaleAfter = DefaultConnectivityStaleAfter
	}
	if c.ConnectivityInterval <= 0 {
		c.ConnectivityInterval = DefaultConnectivityInterval
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
	kindAPIService
	kindConnectivity // the connectivity-check ConfigMap of a hosted cluster
)

var kindNames = map[kind]string{
	kindHostedCluster: "HostedCluster", kindNodePool: "NodePool", kindVirtLauncher: "Pod", kindOCPProxy: "Proxy",
	kindSecret: "Secret", kindNode: "Node", kindServiceCAPod: "Pod", kindAPIProxyPod: "Pod", kindNodeSummary: "HostedCluster",
	kindAPIService: "APIService", kindConnectivity: "ConfigMap",
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
	pub     Publisher
	log     zerolog.Logger
	metrics *Metrics
	now     func() time.Time

	// queue is the work queue of the running Run (nil between runs): the
	// management informers outlive a leader term, their handlers drop
	// what arrives while no Run is there to work on it.
	queue atomic.Pointer[workqueue.TypedRateLimitingInterface[key]]

	hcLister, npLister, proxyLister cache.GenericLister // proxyLister nil without the Proxy API
	vlLister                        listerscorev1.PodLister
	cmLister                        listerscorev1.ConfigMapLister // stubs only (trustedca.go)
	synced                          []cache.InformerSynced

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

// New returns an agent that watches the management cluster through the
// given informer factories, as sample-controller's NewController does: it
// registers its informers (HostedClusters, NodePools and, where the API
// exists, the OpenShift Proxy on dyn; virt-launcher pods and ConfigMap
// stubs on kf) and their
// handlers, and the caller starts the factories once New returned
// (kf.Start, dyn.Start) and shuts them down after Run. The factories live
// as long as the process, across leader terms: a replica that does not
// lead keeps the management caches warm, so that a new leader's Run starts
// from synced caches. kube answers discovery (the HyperShift and Proxy
// APIs) and reads hosted clusters' Secrets. m may be shared with other
// agents of the process.
//
// kf's Pod informer is the agent's, listing virt-launcher pods only, and
// its ConfigMap informer caches stubs without data (trustedca.go): share
// the factory only with code that wants those.
func New(cfg Config, kube kubernetes.Interface, kf informers.SharedInformerFactory, dyn dynamicinformer.DynamicSharedInformerFactory,
	pub Publisher, m *Metrics, log zerolog.Logger) (*Agent, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if m == nil {
		m = NewMetrics(nil)
	}
	a := &Agent{
		cfg: cfg, kube: kube, pub: pub, log: log.With().Str("source", cfg.Source).Logger(), metrics: m,
		now:     time.Now,
		hosted:  map[event.ClusterRef]*hostedCluster{},
		states:  map[key]string{},
		proxies: map[key]hypershift.ProxySpec{},
		resync:  make(chan struct{}, 1),
		restate: make(chan struct{}, 1),
	}
	hcInf := dyn.ForResource(hypershift.HostedClusterGVR)
	if err := hcInf.Informer().AddIndexers(cache.Indexers{trustedCAIndex: trustedCAIndexFunc}); err != nil {
		return nil, fmt.Errorf("HostedCluster informer: %w", err)
	}
	a.hcLister = a.watch(hcInf, kindHostedCluster)
	a.npLister = a.watch(dyn.ForResource(hypershift.NodePoolGVR), kindNodePool)
	// Proxy/cluster exists on OpenShift management clusters only.
	if _, err := kube.Discovery().ServerResourcesForGroupVersion(hypershift.ProxyGVR.GroupVersion().String()); err == nil {
		a.proxyLister = a.watch(dyn.ForResource(hypershift.ProxyGVR), kindOCPProxy)
	} else {
		a.log.Info().Err(err).Msg("no OpenShift Proxy API: the management cluster's proxy is not watched")
	}
	vl := kf.InformerFor(&corev1.Pod{}, virtLauncherInformer)
	_ = vl.SetTransform(transformPod)
	_, _ = vl.AddEventHandler(a.handler(kindVirtLauncher, event.ClusterRef{}))
	a.synced = append(a.synced, vl.HasSynced)
	a.vlLister = listerscorev1.NewPodLister(vl.GetIndexer())
	// The proxies' trusted CA ConfigMaps, as stubs with a summary: a
	// change re-syncs the HostedClusters that name it (trustedca.go).
	cm := kf.InformerFor(&corev1.ConfigMap{}, configMapInformer)
	_ = cm.SetTransform(transformConfigMap)
	_, _ = cm.AddEventHandler(a.configMapHandler(hcInf.Informer().GetIndexer()))
	a.synced = append(a.synced, cm.HasSynced)
	a.cmLister = listerscorev1.NewConfigMapLister(cm.GetIndexer())
	return a, nil
}

// watch registers the handler of kind k on a dynamic informer and returns
// its lister.
func (a *Agent) watch(inf informers.GenericInformer, k kind) cache.GenericLister {
	_ = inf.Informer().SetTransform(transformUnstructured)
	_, _ = inf.Informer().AddEventHandler(a.handler(k, event.ClusterRef{}))
	a.synced = append(a.synced, inf.Informer().HasSynced)
	return inf.Lister()
}

// virtLauncherInformer lists KubeVirt's virt-launcher pods only: the agent
// needs no other pod of the management cluster.
func virtLauncherInformer(c kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
	return coreinformers.NewFilteredPodInformer(c, metav1.NamespaceAll, resync,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
		func(o *metav1.ListOptions) {
			o.LabelSelector = hypershift.LabelKubeVirt + "=" + hypershift.VirtLauncher
		})
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
