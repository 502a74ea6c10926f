package bench

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/watchers"
)

// B4 — agent memory. The agent's informer caches are measured against a
// hosted API server holding thousands of realistic OpenShift Nodes and the
// pods the agent watches (kube-apiserver-proxy mirror pods in kube-system,
// the service-ca-operator), in three stages so that the cost splits into a
// fixed part, a per-pod part and a per-node part:
//
//	stage 0: no hosted objects       → fixed cost
//	stage 1: the pods                → (stage 1 − stage 0) / pods
//	stage 2: the pods and the Nodes  → (stage 2 − stage 1) / nodes
//
// At each stage the real agent (watchers.New + Run, with the HostedCluster's
// admin kubeconfig Secret pointing at the hosted API server) is started,
// measured once its hosted caches synced and its queue settled, and
// stopped; then the physical reference, a bare SharedInformerFactory
// without transforms caching the same Nodes and Pods, is measured the same
// way. The two never run at the same time.
func BenchmarkB4AgentMemory(b *testing.B) {
	// One measurement per run (make bench: -benchtime 1x); with a longer
	// -benchtime the run is not repeated.
	ran, perNode := false, 0.0
	for b.Loop() {
		if !ran {
			ran, perNode = true, b4Run(b)
		}
	}
	b.ReportMetric(perNode, "B/node")
}

// b4Run creates the objects, measures every stage and saves the result; it
// returns the agent's heap per Node.
func b4Run(b *testing.B) float64 {
	nodes := pick(10000, 500)
	pods := pick(2000, 100)
	r := newResult("B4", "Agent memory: informer caches", map[string]any{"nodes": nodes, "pods": pods})
	ctx := context.Background()

	ns := env.Namespace(b)
	spec := scenario.Healthy(ns, "b4")
	hosted := env.HostedCluster(b, spec)
	ref := event.ClusterRef{Namespace: ns, Name: spec.Name}
	gen := newB4Gen(spec)
	b.Cleanup(func() { b4Cleanup(b, hosted.Config, spec, gen, nodes) })

	stages := make([]b4Stage, 3)
	measure := func(i int, profile bool) {
		stages[i].agent = b4Measure(b, r, "B4-agent", profile, func() (func(), error) { return b4StartAgent(ctx, ref) })
		stages[i].bare = b4Measure(b, r, "B4-bare", profile, func() (func(), error) {
			return b4StartBare(hosted.Config, nodesAt(i, nodes), podsAt(i, pods))
		})
		b.Logf("B4 stage %d: agent heap %+d B rss %+d B (sync %s); bare heap %+d B rss %+d B (sync %s)", i,
			stages[i].agent.heap, stages[i].agent.rss, stages[i].agent.sync.Round(time.Millisecond),
			stages[i].bare.heap, stages[i].bare.rss, stages[i].bare.sync.Round(time.Millisecond))
	}

	measure(0, false) // warm-up: one-time initialisations stay out of stage 0
	measure(0, false)

	podTime, err := b4Create(ctx, hosted.Config, pods, func(ctx context.Context, kc kubernetes.Interface, i int) error {
		return gen.createPod(ctx, kc, i)
	}, gen.namespaces)
	if err != nil {
		b.Fatalf("create pods: %v", err)
	}
	r.Add("pods_create_time", podTime.Seconds(), "seconds")
	r.Add("pods_create_rate", float64(pods)/podTime.Seconds(), "pods/second")
	measure(1, false)

	nodeTime, err := b4Create(ctx, hosted.Config, nodes, func(ctx context.Context, kc kubernetes.Interface, i int) error {
		return gen.createNode(ctx, kc, i)
	}, nil)
	if err != nil {
		b.Fatalf("create nodes: %v", err)
	}
	r.Add("nodes_create_time", nodeTime.Seconds(), "seconds")
	r.Add("nodes_create_rate", float64(nodes)/nodeTime.Seconds(), "nodes/second")
	if err := b4ServedSizes(ctx, r, outDir(b), hosted.Kube, gen, nodes, pods); err != nil {
		b.Fatalf("served sizes: %v", err)
	}
	measure(2, true)

	s2 := stages[2]
	heap := func(m b4Mem) int64 { return m.heap }
	rssOf := func(m b4Mem) int64 { return m.rss }
	for _, side := range []struct {
		name string
		get  func(b4Stage) b4Mem
	}{{"agent", func(s b4Stage) b4Mem { return s.agent }}, {"bare", func(s b4Stage) b4Mem { return s.bare }}} {
		m0, m1, m2 := side.get(stages[0]), side.get(stages[1]), side.get(stages[2])
		r.Add(side.name+"_heap_per_node", perObject(m1, m2, nodes, heap), "bytes/node")
		r.Add(side.name+"_heap_per_pod", perObject(m0, m1, pods, heap), "bytes/pod")
		r.Add(side.name+"_rss_per_node", perObject(m1, m2, nodes, rssOf), "bytes/node")
		r.Add(side.name+"_rss_per_pod", perObject(m0, m1, pods, rssOf), "bytes/pod")
		r.Add(side.name+"_heap_per_object", float64(m2.heap)/float64(nodes+pods), "bytes/object")
		r.Add(side.name+"_rss_per_object", float64(m2.rss)/float64(nodes+pods), "bytes/object")
		r.Add(side.name+"_heap_total", float64(m2.heap), "bytes")
		r.Add(side.name+"_rss_total", float64(m2.rss), "bytes")
		r.Add(side.name+"_heap_fixed", float64(m0.heap), "bytes")
		if m2.peak > 0 {
			r.Add(side.name+"_rss_peak_during_sync", float64(m2.peak), "bytes")
		}
		r.Add(side.name+"_sync_time", m2.sync.Seconds(), "seconds")
		r.Add(side.name+"_heap_left_after_stop", float64(m2.leftover), "bytes")
	}
	an, _ := r.Value("agent_heap_per_node")
	bn, _ := r.Value("bare_heap_per_node")
	ap, _ := r.Value("agent_heap_per_pod")
	bp, _ := r.Value("bare_heap_per_pod")
	r.Add("ratio_heap_per_node_agent_bare", an/bn, "ratio")
	r.Add("ratio_heap_per_pod_agent_bare", ap/bp, "ratio")
	r.Add("ratio_heap_total_agent_bare", float64(s2.agent.heap)/float64(s2.bare.heap), "ratio")
	r.Add("ratio_rss_total_agent_bare", float64(s2.agent.rss)/float64(s2.bare.rss), "ratio")
	r.Want("agent_heap_per_node", "<=", 2048)

	r.Note("heap: live heap (runtime.MemStats.HeapAlloc after two GCs) with the caches synced minus before starting them; RSS: VmRSS after debug.FreeOSMemory, same difference")
	r.Note("per node = (stage with nodes and pods − stage with pods) / nodes; per pod = (stage with pods − stage without objects) / pods; the fixed part (informers, clients, management caches) is agent_heap_fixed")
	r.Note("agent: watchers.New + Run with a discarding publisher (no NATS), production defaults except SnapshotWait; its per-object cost includes its published-state map and what its work queue keeps after the initial burst of adds")
	r.Note("bare: informers.NewSharedInformerFactory, Nodes and Pods informers, no transform, no handler, the agent's hosted client settings (QPS 20, client-go's default protobuf for built-in types)")
	r.Note("objects: Nodes created by manager kubelet (metadata, spec) then status written through the status subresource (so managedFields hold two kubelet entries); pods are kube-apiserver-proxy mirror pods in kube-system and one service-ca-operator pod, created then status-updated by kubelet")
	save(b, r)
	return an
}

// nodesAt and podsAt are how many Nodes and pods the hosted API server
// holds at a stage.
func nodesAt(stage, n int) int {
	if stage < 2 {
		return 0
	}
	return n
}

func podsAt(stage, n int) int {
	if stage < 1 {
		return 0
	}
	return n
}

// perObject is the growth from one stage to the next per object added.
func perObject(before, after b4Mem, n int, f func(b4Mem) int64) float64 {
	return float64(f(after)-f(before)) / float64(n)
}

type b4Stage struct{ agent, bare b4Mem }

// b4Mem is what one cache holder retained: deltas against the heap and
// RSS measured just before it started.
type b4Mem struct {
	heap, rss, peak, leftover int64
	sync                      time.Duration
}

// b4Measure starts a cache holder (start returns once its caches synced)
// and measures what it retains, then stops it.
func b4Measure(b *testing.B, r *Result, name string, profile bool, start func() (stop func(), err error)) b4Mem {
	b.Helper()
	debug.FreeOSMemory()
	h0 := int64(heapInUse())
	r0 := int64(rss())
	if profile {
		// A fine sampling for the profile of the caches (the figures
		// come from MemStats and do not depend on it).
		defer func(rate int) { runtime.MemProfileRate = rate }(runtime.MemProfileRate)
		runtime.MemProfileRate = 4096
	}
	peakReset := resetPeakRSS()
	t0 := time.Now()
	stop, err := start()
	if err != nil {
		b.Fatalf("%s: %v", name, err)
	}
	var m b4Mem
	m.sync = time.Since(t0)
	if peakReset {
		m.peak = int64(peakRSS()) - r0
	}
	m.heap = int64(settledHeap()) - h0
	debug.FreeOSMemory()
	m.rss = int64(rss()) - r0
	if profile {
		heapProfile(b, r, name)
	}
	stop()
	m.leftover = int64(heapInUse()) - h0
	return m
}

// settledHeap returns the live heap once it stops changing (the agent's
// workers drain the queue of the initial adds after its snapshot).
func settledHeap() uint64 {
	prev := heapInUse()
	for range 30 {
		time.Sleep(300 * time.Millisecond)
		cur := heapInUse()
		d := int64(cur) - int64(prev)
		if d < 0 {
			d = -d
		}
		if d < 64<<10 || float64(d) < 0.002*float64(cur) {
			return cur
		}
		prev = cur
	}
	return prev
}

// resetPeakRSS resets VmHWM to the current RSS (Linux, /proc/self/clear_refs).
func resetPeakRSS() bool {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
}

// peakRSS is VmHWM in bytes.
func peakRSS() uint64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range bytes.Split(data, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("VmHWM:")); ok {
			var kb uint64
			for _, c := range v {
				if c >= '0' && c <= '9' {
					kb = kb*10 + uint64(c-'0')
				}
			}
			return kb * 1024
		}
	}
	return 0
}

// b4StartAgent runs the real agent until its hosted caches synced and its
// start-up snapshot was published.
func b4StartAgent(ctx context.Context, ref event.ClusterRef) (stop func(), err error) {
	reg := prometheus.NewRegistry()
	m := watchers.NewMetrics(reg)
	logs := &b4Log{}
	kf, df := informers.NewSharedInformerFactory(env.Kube, 0), dynamicinformer.NewDynamicSharedInformerFactory(env.Dynamic, 0)
	a, err := watchers.New(watchers.Config{Source: "bench-b4", Identity: "b4", SnapshotWait: 10 * time.Minute},
		env.Kube, kf, df, b4Discard{}, m, zerolog.New(logs))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	kf.Start(ctx.Done())
	df.Start(ctx.Done())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	stop = func() {
		cancel()
		<-done
	}
	deadline := time.Now().Add(15 * time.Minute)
	for {
		if logs.snapshotDone.Load() && b4HostedSynced(reg, ref.String()) {
			return stop, nil
		}
		select {
		case err := <-done:
			cancel()
			return nil, fmt.Errorf("agent stopped: %v (log: %s)", err, logs.tail())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("agent did not sync within 15m (log: %s)", logs.tail())
		}
	}
}

func b4HostedSynced(reg *prometheus.Registry, cluster string) bool {
	fams, err := reg.Gather()
	if err != nil {
		return false
	}
	for _, f := range fams {
		if f.GetName() != "hcpbot_agent_hosted_cluster_synced" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "cluster" && l.GetValue() == cluster && m.GetGauge().GetValue() == 1 {
					return true
				}
			}
		}
	}
	return false
}

// b4Log watches the agent's log for its start-up snapshot and keeps the
// last lines for error messages.
type b4Log struct {
	snapshotDone atomic.Bool
	mu           sync.Mutex
	last         []string
}

func (l *b4Log) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(`"snapshot published"`)) {
		l.snapshotDone.Store(true)
	}
	l.mu.Lock()
	l.last = append(l.last, string(bytes.TrimSpace(p)))
	if len(l.last) > 10 {
		l.last = l.last[len(l.last)-10:]
	}
	l.mu.Unlock()
	return len(p), nil
}

func (l *b4Log) tail() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprint(l.last)
}

// b4Discard is a publisher that drops every event: B4 measures caches, not
// NATS.
type b4Discard struct{}

func (b4Discard) Publish(context.Context, event.Event) error     { return nil }
func (b4Discard) PublishWait(context.Context, event.Event) error { return nil }

// b4StartBare caches the hosted Nodes and Pods with plain client-go, with
// the client settings the agent uses for a hosted cluster.
func b4StartBare(hostedCfg *rest.Config, nodes, pods int) (stop func(), err error) {
	cfg := rest.CopyConfig(hostedCfg)
	cfg.QPS, cfg.Burst = 20, 40
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	kc, err := kubernetes.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, err
	}
	f := informers.NewSharedInformerFactory(kc, 0)
	ni := f.Core().V1().Nodes().Informer()
	pi := f.Core().V1().Pods().Informer()
	stopCh := make(chan struct{})
	stop = func() {
		close(stopCh)
		f.Shutdown()
		hc.CloseIdleConnections()
	}
	f.Start(stopCh)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	if !cache.WaitForCacheSync(ctx.Done(), ni.HasSynced, pi.HasSynced) {
		stop()
		return nil, fmt.Errorf("bare informers did not sync")
	}
	if n, p := len(ni.GetStore().ListKeys()), len(pi.GetStore().ListKeys()); n != nodes || p != pods {
		stop()
		return nil, fmt.Errorf("bare informers hold %d nodes and %d pods, want %d and %d", n, p, nodes, pods)
	}
	return stop, nil
}

// b4Client is a client for creating objects fast: protobuf, raised QPS.
func b4Client(hostedCfg *rest.Config) (kubernetes.Interface, func(), error) {
	cfg := rest.CopyConfig(hostedCfg)
	cfg.QPS, cfg.Burst = 1000, 2000
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	cfg.WarningHandler = rest.NoWarnings{}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, nil, err
	}
	kc, err := kubernetes.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, nil, err
	}
	return kc, hc.CloseIdleConnections, nil
}

const b4Workers = 16

// b4Create creates n objects with b4Workers workers and a client of its
// own, released when it returns.
func b4Create(ctx context.Context, hostedCfg *rest.Config, n int, create func(context.Context, kubernetes.Interface, int) error, namespaces []string) (time.Duration, error) {
	kc, closeIdle, err := b4Client(hostedCfg)
	if err != nil {
		return 0, err
	}
	defer closeIdle()
	for _, ns := range namespaces {
		_, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return 0, err
		}
	}
	t0 := time.Now()
	err = b4Parallel(ctx, n, b4Workers, func(ctx context.Context, i int) error {
		return b4Retry(ctx, func() error { return create(ctx, kc, i) })
	})
	return time.Since(t0), err
}

// b4Parallel runs fn for 0..n-1 on workers goroutines; the first error
// stops it.
func b4Parallel(ctx context.Context, n, workers int, fn func(context.Context, int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(ctx, i); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}

// b4Retry retries what an overloaded API server answers with.
func b4Retry(ctx context.Context, fn func() error) error {
	var err error
	for attempt := range 6 {
		err = fn()
		if err == nil || !(apierrors.IsTooManyRequests(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsInternalError(err)) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(100<<attempt) * time.Millisecond):
		}
	}
	return err
}

// b4ServedSizes records the average JSON size of a Node and a pod as the
// API server serves them (a sample of each).
// The first of each is written to <out>/B4-node.json and B4-pod.json.
func b4ServedSizes(ctx context.Context, r *Result, dir string, kc kubernetes.Interface, gen *b4Gen, nodes, pods int) error {
	sample := func(n int, get func(i int) ([]byte, error), file string) (avg, managed float64, err error) {
		k := min(n, 50)
		var total, mf int
		for j := range k {
			raw, err := get(j * n / k)
			if err != nil {
				return 0, 0, err
			}
			total += len(raw)
			if j == 0 {
				var out bytes.Buffer
				if err := json.Indent(&out, raw, "", "  "); err == nil {
					_ = os.WriteFile(filepath.Join(dir, file), out.Bytes(), 0o644)
				}
			}
			var o struct {
				Metadata struct {
					ManagedFields json.RawMessage `json:"managedFields"`
				} `json:"metadata"`
			}
			if err := json.Unmarshal(raw, &o); err != nil {
				return 0, 0, err
			}
			mf += len(o.Metadata.ManagedFields)
		}
		return float64(total) / float64(k), float64(mf) / float64(k), nil
	}
	rc := kc.CoreV1().RESTClient()
	avg, mf, err := sample(nodes, func(i int) ([]byte, error) {
		return rc.Get().Resource("nodes").Name(gen.nodeName(i)).SetHeader("Accept", "application/json").DoRaw(ctx)
	}, "B4-node.json")
	if err != nil {
		return err
	}
	r.Add("node_json_bytes", avg, "bytes")
	r.Add("node_json_managed_fields_bytes", mf, "bytes")
	avg, mf, err = sample(pods, func(i int) ([]byte, error) {
		p := gen.pod(i)
		return rc.Get().Namespace(p.Namespace).Resource("pods").Name(p.Name).SetHeader("Accept", "application/json").DoRaw(ctx)
	}, "B4-pod.json")
	if err != nil {
		return err
	}
	r.Add("pod_json_bytes", avg, "bytes")
	r.Add("pod_json_managed_fields_bytes", mf, "bytes")
	return nil
}

// b4Cleanup deletes what B4 created: the hosted objects (the hosted API
// server itself is removed by testenv) and the HostedCluster with its
// Secret, so that no later benchmark's agent watches a stopped server.
func b4Cleanup(b *testing.B, hostedCfg *rest.Config, spec scenario.Cluster, gen *b4Gen, nodes int) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	t0 := time.Now()
	kc, closeIdle, err := b4Client(hostedCfg)
	if err != nil {
		b.Errorf("cleanup: %v", err)
		return
	}
	defer closeIdle()
	err = b4Parallel(ctx, nodes, b4Workers, func(ctx context.Context, i int) error {
		err := b4Retry(ctx, func() error {
			return kc.CoreV1().Nodes().Delete(ctx, gen.nodeName(i), metav1.DeleteOptions{})
		})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
	if err != nil {
		b.Errorf("cleanup nodes: %v", err)
	}
	for _, ns := range gen.namespaces {
		if err := kc.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			b.Errorf("cleanup pods in %s: %v", ns, err)
		}
	}
	if err := env.Dynamic.Resource(hypershift.HostedClusterGVR).Namespace(spec.Namespace).Delete(ctx, spec.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		b.Errorf("cleanup HostedCluster: %v", err)
	}
	if err := env.Kube.CoreV1().Secrets(spec.Namespace).Delete(ctx, spec.KubeconfigSecretName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		b.Errorf("cleanup Secret: %v", err)
	}
	b.Logf("B4 cleanup: %s", time.Since(t0).Round(time.Millisecond))
}

// b4Gen renders realistic objects of one hosted cluster: OpenShift worker
// Nodes of a KubeVirt NodePool as the kubelet, OVN-Kubernetes and the
// machine-config and cluster-api controllers leave them, and the pods the
// agent watches.
type b4Gen struct {
	cluster    scenario.Cluster
	pool       string
	created    metav1.Time
	images     []corev1.ContainerImage
	release    string // image of the kube-apiserver-proxy (HAProxy)
	namespaces []string
}

func newB4Gen(c scenario.Cluster) *b4Gen {
	g := &b4Gen{cluster: c, pool: c.Name + "-workers", created: metav1.NewTime(time.Now().Add(-72 * time.Hour).Truncate(time.Second)),
		namespaces: []string{watchers.ServiceCANamespace, watchers.APIServerProxyNamespace}}
	// A release's worth of images; each Node lists 40 of them (the kubelet
	// reports at most 50).
	const art = "quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:"
	for j := range 120 {
		img := corev1.ContainerImage{Names: []string{art + digest("image", j)}, SizeBytes: 180_000_000 + int64(j*7_919_113%1_300_000_000)}
		if j%4 == 0 {
			img.Names = append(img.Names, fmt.Sprintf("quay.io/openshift-release-dev/ocp-release@sha256:%s", digest("tagged", j)))
		}
		g.images = append(g.images, img)
	}
	g.release = art + digest("haproxy-router", 0)
	return g
}

func digest(kind string, i int) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s-%d", kind, i))
	return hex.EncodeToString(sum[:])
}

func uuidOf(kind string, i int) string {
	d := digest(kind, i)
	return d[0:8] + "-" + d[8:12] + "-" + d[12:16] + "-" + d[16:20] + "-" + d[20:32]
}

// nodeName is <pool>-<5 letters>, like a KubeVirt VMI of a NodePool.
func (g *b4Gen) nodeName(i int) string {
	const letters = "bcdfghjklmnpqrstvwxz2456789"
	out := make([]byte, 5)
	for k := range out {
		out[k] = letters[i%len(letters)]
		i /= len(letters)
	}
	return g.pool + "-" + string(out)
}

func nodeIPOf(i int) string { return fmt.Sprintf("10.131.%d.%d", i/250, i%250+2) }

func (g *b4Gen) node(i int) *corev1.Node {
	name := g.nodeName(i)
	ip := nodeIPOf(i)
	machine := g.pool + "-" + digest("machine", i)[:5]
	infra := g.cluster.InfraID
	cpNS := hypershift.ControlPlaneNamespace(g.cluster.Namespace, g.cluster.Name)
	mc := "rendered-worker-" + digest("mc", 0)[:32]
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Labels: map[string]string{
				"beta.kubernetes.io/arch":                     "amd64",
				"beta.kubernetes.io/instance-type":            "u1.xlarge",
				"beta.kubernetes.io/os":                       "linux",
				"hypershift.openshift.io/nodePool":            g.pool,
				"kubernetes.io/arch":                          "amd64",
				"kubernetes.io/hostname":                      name,
				"kubernetes.io/os":                            "linux",
				"node-role.kubernetes.io/worker":              "",
				"node.kubernetes.io/instance-type":            "u1.xlarge",
				"node.openshift.io/os_id":                     "rhcos",
				"topology.kubernetes.io/region":               "kubevirt",
				"topology.kubernetes.io/zone":                 fmt.Sprintf("zone-%d", i%3),
				"kubevirt.io/schedulable":                     "true",
				"cluster.x-k8s.io/set-by-machine":             "true",
				"hypershift.openshift.io/managed-by-nodepool": "true",
			},
			Annotations: map[string]string{
				"cluster.x-k8s.io/annotations-from-machine":                                   "",
				"cluster.x-k8s.io/cluster-name":                                               infra,
				"cluster.x-k8s.io/cluster-namespace":                                          cpNS,
				"cluster.x-k8s.io/labels-from-machine":                                        "hypershift.openshift.io/nodePool,node-role.kubernetes.io/worker",
				"cluster.x-k8s.io/machine":                                                    machine,
				"cluster.x-k8s.io/owner-kind":                                                 "MachineSet",
				"cluster.x-k8s.io/owner-name":                                                 g.pool + "-" + digest("ms", 0)[:10],
				"csi.volume.kubernetes.io/nodeid":                                             `{"csi.kubevirt.io":"` + name + `"}`,
				"hypershift.openshift.io/nodePool":                                            g.cluster.Namespace + "/" + g.pool,
				"k8s.ovn.org/host-cidrs":                                                      `["` + ip + `/16"]`,
				"k8s.ovn.org/l3-gateway-config":                                               `{"default":{"mode":"shared","bridge-id":"br-ex","interface-id":"br-ex_` + name + `","mac-address":"02:` + digest("mac", i)[:2] + `:` + digest("mac", i)[2:4] + `:00:00:0a","ip-addresses":["` + ip + `/16"],"ip-address":"` + ip + `/16","next-hops":["10.131.0.1"],"next-hop":"10.131.0.1","node-port-enable":"true","vlan-id":"0"}}`,
				"k8s.ovn.org/node-chassis-id":                                                 uuidOf("chassis", i),
				"k8s.ovn.org/node-encap-ips":                                                  `["` + ip + `"]`,
				"k8s.ovn.org/node-gateway-router-lrp-ifaddrs":                                 fmt.Sprintf(`{"default":{"ipv4":"100.64.%d.%d/16"}}`, i/250, i%250+2),
				"k8s.ovn.org/node-id":                                                         fmt.Sprint(i + 4),
				"k8s.ovn.org/node-masquerade-subnet":                                          `{"ipv4":"169.254.0.0/17","ipv6":"fd69::/112"}`,
				"k8s.ovn.org/node-primary-ifaddr":                                             `{"ipv4":"` + ip + `/16"}`,
				"k8s.ovn.org/node-subnets":                                                    fmt.Sprintf(`{"default":["10.%d.%d.0/23"]}`, 132+i/128, (i%128)*2),
				"k8s.ovn.org/node-transit-switch-port-ifaddr":                                 fmt.Sprintf(`{"ipv4":"100.88.%d.%d/16"}`, i/250, i%250+2),
				"k8s.ovn.org/remote-zone-migrated":                                            name,
				"k8s.ovn.org/zone-name":                                                       name,
				"machineconfiguration.openshift.io/controlPlaneTopology":                      "External",
				"machineconfiguration.openshift.io/currentConfig":                             mc,
				"machineconfiguration.openshift.io/desiredConfig":                             mc,
				"machineconfiguration.openshift.io/desiredDrain":                              "uncordon-" + mc,
				"machineconfiguration.openshift.io/lastAppliedDrain":                          "uncordon-" + mc,
				"machineconfiguration.openshift.io/lastSyncedControllerConfigResourceVersion": "48211",
				"machineconfiguration.openshift.io/reason":                                    "",
				"machineconfiguration.openshift.io/state":                                     "Done",
				"node.alpha.kubernetes.io/ttl":                                                "0",
				"volumes.kubernetes.io/controller-managed-attach-detach":                      "true",
			},
		},
		Spec: corev1.NodeSpec{ProviderID: "kubevirt://" + name},
	}
	return n
}

func (g *b4Gen) nodeStatus(i int, n *corev1.Node) {
	name := n.Name
	ip := nodeIPOf(i)
	hb := metav1.NewTime(time.Now().Add(-time.Duration(i%40) * time.Second).Truncate(time.Second))
	cond := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: s, Reason: reason, Message: msg, LastHeartbeatTime: hb, LastTransitionTime: g.created}
	}
	q := resource.MustParse
	n.Status = corev1.NodeStatus{
		Capacity: corev1.ResourceList{
			"cpu": q("4"), "ephemeral-storage": q("31376364Ki"), "hugepages-1Gi": q("0"), "hugepages-2Mi": q("0"),
			"memory": q("16373852Ki"), "pods": q("250"), "devices.kubevirt.io/vhost-net": q("1k"),
		},
		Allocatable: corev1.ResourceList{
			"cpu": q("3500m"), "ephemeral-storage": q("27842474166"), "hugepages-1Gi": q("0"), "hugepages-2Mi": q("0"),
			"memory": q("15222876Ki"), "pods": q("250"), "devices.kubevirt.io/vhost-net": q("1k"),
		},
		Conditions: []corev1.NodeCondition{
			cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
			cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
			cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
			cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"),
		},
		Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}, {Type: corev1.NodeHostName, Address: name}},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: 10250}},
		NodeInfo: corev1.NodeSystemInfo{
			MachineID: digest("machine-id", i)[:32], SystemUUID: uuidOf("system", i), BootID: uuidOf("boot", i),
			KernelVersion: "5.14.0-427.68.1.el9_4.x86_64", OSImage: "Red Hat Enterprise Linux CoreOS 418.94.202505281402-0",
			ContainerRuntimeVersion: "cri-o://1.31.9-2.rhaos4.18.git7c2e7d5.el9", KubeletVersion: "v1.31.9",
			KubeProxyVersion: "", OperatingSystem: "linux", Architecture: "amd64",
		},
		RuntimeHandlers: []corev1.NodeRuntimeHandler{
			{Name: "crun", Features: &corev1.NodeRuntimeHandlerFeatures{RecursiveReadOnlyMounts: ptrTo(true), UserNamespaces: ptrTo(true)}},
			{Name: "", Features: &corev1.NodeRuntimeHandlerFeatures{RecursiveReadOnlyMounts: ptrTo(true), UserNamespaces: ptrTo(true)}},
			{Name: "runc", Features: &corev1.NodeRuntimeHandlerFeatures{RecursiveReadOnlyMounts: ptrTo(true), UserNamespaces: ptrTo(true)}},
		},
		Features: &corev1.NodeFeatures{SupplementalGroupsPolicy: ptrTo(true)},
	}
	for k := range 40 {
		n.Status.Images = append(n.Status.Images, g.images[(i*7+k)%len(g.images)])
	}
}

func ptrTo[T any](v T) *T { return &v }

// createNode registers a Node as the kubelet does: the object, then its
// status through the status subresource (two managedFields entries).
func (g *b4Gen) createNode(ctx context.Context, kc kubernetes.Interface, i int) error {
	n := g.node(i)
	created, err := kc.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{FieldManager: "kubelet"})
	if err != nil {
		return fmt.Errorf("create node %s: %w", n.Name, err)
	}
	g.nodeStatus(i, created)
	_, err = kc.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{FieldManager: "kubelet"})
	return err
}

// pod i: the service-ca-operator for i == 0, else the kube-apiserver-proxy
// mirror pod of node i-1.
func (g *b4Gen) pod(i int) *corev1.Pod {
	if i == 0 {
		return g.serviceCAPod()
	}
	node := g.nodeName(i - 1)
	hash := digest("config-hash", i)[:32]
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: watchers.APIServerProxyNamespace, Name: "kube-apiserver-proxy-" + node,
			Labels: map[string]string{"k8s-app": "kube-apiserver-proxy"},
			Annotations: map[string]string{
				"kubernetes.io/config.hash":               hash,
				"kubernetes.io/config.mirror":             hash,
				"kubernetes.io/config.seen":               g.created.UTC().Format(time.RFC3339Nano),
				"kubernetes.io/config.source":             "file",
				"target.workload.openshift.io/management": `{"effect": "PreferredDuringScheduling"}`,
			},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node, UID: types.UID(uuidOf("node-uid", i-1)), Controller: ptrTo(true)}},
		},
		Spec: corev1.PodSpec{
			NodeName: node, HostNetwork: true, PriorityClassName: "system-node-critical", Priority: ptrTo(int32(2000001000)),
			Containers: []corev1.Container{{
				Name: "haproxy", Image: g.release,
				Command: []string{"haproxy", "-f", "/usr/local/etc/haproxy"},
				LivenessProbe: &corev1.Probe{
					ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
						Path: "/version", Port: intstr.FromInt32(6443), Scheme: corev1.URISchemeHTTPS, Host: "172.20.0.1",
					}},
					InitialDelaySeconds: 120, PeriodSeconds: 120, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 3,
				},
				Ports:                    []corev1.ContainerPort{{Name: "apiserver", ContainerPort: 6443, HostPort: 6443, Protocol: corev1.ProtocolTCP}},
				Resources:                corev1.ResourceRequirements{Requests: corev1.ResourceList{"cpu": resource.MustParse("13m"), "memory": resource.MustParse("16Mi")}},
				SecurityContext:          &corev1.SecurityContext{RunAsUser: ptrTo(int64(1001))},
				TerminationMessagePath:   "/dev/termination-log",
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
				ImagePullPolicy:          corev1.PullIfNotPresent,
				VolumeMounts:             []corev1.VolumeMount{{Name: "config", MountPath: "/usr/local/etc/haproxy"}},
			}},
			Volumes:     []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/etc/kubernetes/apiserver-proxy-config"}}}},
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}},
		},
	}
}

func (g *b4Gen) serviceCAPod() *corev1.Pod {
	img := "quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:" + digest("service-ca-operator", 0)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: watchers.ServiceCANamespace, Name: scenario.ServiceCAName + "-5d4b8c7f9-x2k8q",
			Labels: map[string]string{"app": scenario.ServiceCAName, "pod-template-hash": "5d4b8c7f9"},
			Annotations: map[string]string{
				"openshift.io/required-scc":                "restricted-v2",
				"openshift.io/scc":                         "restricted-v2",
				"seccomp.security.alpha.kubernetes.io/pod": "runtime/default",
				"target.workload.openshift.io/management":  `{"effect": "PreferredDuringScheduling"}`,
			},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: scenario.ServiceCAName + "-5d4b8c7f9",
				UID: types.UID(uuidOf("rs", 0)), Controller: ptrTo(true), BlockOwnerDeletion: ptrTo(true)}},
		},
		Spec: corev1.PodSpec{
			NodeName: g.nodeName(0), ServiceAccountName: "service-ca-operator", PriorityClassName: "system-cluster-critical",
			Containers: []corev1.Container{{
				Name: scenario.ServiceCAName, Image: img,
				Command:   []string{"service-ca-operator", "operator"},
				Args:      []string{"--config=/var/run/configmaps/config/operator-config.yaml", "-v=2"},
				Env:       []corev1.EnvVar{{Name: "CONTROLLER_IMAGE", Value: img}, {Name: "OPERATOR_IMAGE_VERSION", Value: "4.18.17"}},
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{"cpu": resource.MustParse("10m"), "memory": resource.MustParse("80Mi")}},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "config", MountPath: "/var/run/configmaps/config"},
					{Name: "serving-cert", MountPath: "/var/run/secrets/serving-cert"},
				},
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptrTo(false), RunAsNonRoot: ptrTo(true),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
			}},
			Volumes: []corev1.Volume{
				{Name: "serving-cert", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "serving-cert", Optional: ptrTo(true)}}},
				{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "service-ca-operator-config"}}}},
			},
			NodeSelector: map[string]string{"node-role.kubernetes.io/master": ""},
			Tolerations: []corev1.Toleration{
				{Key: "node-role.kubernetes.io/master", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
				{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptrTo(int64(120))},
				{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptrTo(int64(120))},
			},
		},
	}
}

func (g *b4Gen) podStatus(i int, p *corev1.Pod) {
	ip := nodeIPOf(max(i-1, 0))
	started := metav1.NewTime(g.created.Add(40 * time.Second))
	cond := func(t corev1.PodConditionType) corev1.PodCondition {
		return corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: started}
	}
	c := p.Spec.Containers[0]
	var mounts []corev1.VolumeMountStatus
	for _, m := range c.VolumeMounts {
		mounts = append(mounts, corev1.VolumeMountStatus{Name: m.Name, MountPath: m.MountPath})
	}
	p.Status = corev1.PodStatus{
		Phase: corev1.PodRunning,
		Conditions: []corev1.PodCondition{
			cond("PodReadyToStartContainers"), cond(corev1.PodInitialized), cond(corev1.PodReady),
			cond(corev1.ContainersReady), cond(corev1.PodScheduled),
		},
		HostIP: ip, HostIPs: []corev1.HostIP{{IP: ip}}, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
		StartTime: &g.created, QOSClass: corev1.PodQOSBurstable,
		ContainerStatuses: []corev1.ContainerStatus{{
			Name: c.Name, Image: c.Image, ImageID: c.Image, ContainerID: "cri-o://" + digest("container", i),
			Ready: true, Started: ptrTo(true),
			State:        corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}},
			VolumeMounts: mounts,
			User:         &corev1.ContainerUser{Linux: &corev1.LinuxContainerUser{UID: 1001, GID: 0, SupplementalGroups: []int64{0}}},
		}},
	}
}

// createPod creates the pod as the kubelet does (a mirror pod, then its
// status); the API server drops status on create.
func (g *b4Gen) createPod(ctx context.Context, kc kubernetes.Interface, i int) error {
	p := g.pod(i)
	created, err := kc.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{FieldManager: "kubelet"})
	if err != nil {
		return fmt.Errorf("create pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	g.podStatus(i, created)
	_, err = kc.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{FieldManager: "kubelet"})
	return err
}
