package bench

import (
	"context"
	"crypto/x509/pkix"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/hcpbot/hcpbot/internal/testenv/testcert"
	"github.com/hcpbot/hcpbot/watchers"
)

// B4 (ConfigMaps) — what the agent's management ConfigMap informer (the
// proxies' trusted CA bundles, watchers/trustedca.go) costs per hosted
// cluster. It lists every ConfigMap of the management cluster and caches a
// stub of each; measured against a bare ConfigMap informer without
// transform, the physical reference, on the same objects:
//
//	stage 0: no bench ConfigMaps → fixed cost
//	stage 1: per hosted cluster, its trusted CA ConfigMap (a bundle of
//	         three certificates) in the HostedCluster namespace and
//	         b4FillerConfigMaps ConfigMaps of 2 KiB in its control-plane
//	         namespace → (stage 1 − stage 0) / clusters
func BenchmarkB4ConfigMapStubs(b *testing.B) {
	ran, perCluster := false, 0.0
	for b.Loop() {
		if !ran {
			ran, perCluster = true, b4ConfigMapRun(b)
		}
	}
	b.ReportMetric(perCluster, "B/cluster")
}

// b4FillerConfigMaps is how many other ConfigMaps a control-plane
// namespace holds (guess: HyperShift renders a few dozen per cluster).
const b4FillerConfigMaps = 20

func b4ConfigMapRun(b *testing.B) float64 {
	clusters := pick(200, 20)
	perCluster := 1 + b4FillerConfigMaps
	r := newResult("B4-configmaps", "Agent memory: trusted CA ConfigMap stubs", map[string]any{
		"clusters": clusters, "configmaps_per_cluster": perCluster})
	ctx := context.Background()
	prefix := env.Namespace(b)
	bundle := b4Bundle(b, 3)
	filler := strings.Repeat("x", 2048)

	measure := func(want int) (agent, bare b4Mem) {
		agent = b4Measure(b, r, "B4-configmaps-agent", false, func() (func(), error) { return b4StartConfigMaps(true, want) })
		bare = b4Measure(b, r, "B4-configmaps-bare", false, func() (func(), error) { return b4StartConfigMaps(false, want) })
		return agent, bare
	}
	measure(0) // warm-up
	a0, b0 := measure(0)

	var names []string
	for c := range clusters {
		hcNS, cpNS := fmt.Sprintf("%s-hc%d", prefix, c), fmt.Sprintf("%s-hc%d-cp", prefix, c)
		names = append(names, hcNS, cpNS)
	}
	t0 := time.Now()
	err := b4Parallel(ctx, len(names), b4Workers, func(ctx context.Context, i int) error {
		return b4Retry(ctx, func() error {
			_, err := env.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: names[i]}}, metav1.CreateOptions{})
			return err
		})
	})
	if err == nil {
		err = b4Parallel(ctx, clusters*perCluster, b4Workers, func(ctx context.Context, i int) error {
			c, j := i/perCluster, i%perCluster
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: names[2*c], Name: "user-ca-bundle"},
				Data: map[string]string{watchers.CABundleKey: bundle}}
			if j > 0 {
				cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: names[2*c+1], Name: fmt.Sprintf("config-%d", j)},
					Data: map[string]string{"config.yaml": filler}}
			}
			return b4Retry(ctx, func() error {
				_, err := env.Kube.CoreV1().ConfigMaps(cm.Namespace).Create(ctx, cm, metav1.CreateOptions{})
				return err
			})
		})
	}
	if err != nil {
		b.Fatalf("create ConfigMaps: %v", err)
	}
	b.Cleanup(func() {
		for _, ns := range names {
			_ = env.Kube.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
		}
	})
	r.Add("create_time", time.Since(t0).Seconds(), "seconds")
	a1, b1 := measure(clusters * perCluster)
	b.Logf("B4 ConfigMaps: agent heap %+d → %+d B, bare heap %+d → %+d B, %d clusters", a0.heap, a1.heap, b0.heap, b1.heap, clusters)

	heap := func(m b4Mem) int64 { return m.heap }
	agentPer := perObject(a0, a1, clusters, heap)
	barePer := perObject(b0, b1, clusters, heap)
	r.Add("agent_heap_per_cluster", agentPer, "bytes/cluster")
	r.Add("bare_heap_per_cluster", barePer, "bytes/cluster")
	r.Add("agent_heap_per_configmap", agentPer/float64(perCluster), "bytes/configmap")
	r.Add("bare_heap_per_configmap", barePer/float64(perCluster), "bytes/configmap")
	r.Add("ratio_heap_agent_bare", agentPer/barePer, "ratio")
	r.Add("agent_sync_time", a1.sync.Seconds(), "seconds")
	r.Want("agent_heap_per_configmap", "<=", 1024)
	r.Note("agent: watchers.New on a fresh SharedInformerFactory (its ConfigMap and virt-launcher Pod informers started, the dynamic ones not); bare: the same factory's plain ConfigMap informer, no transform")
	r.Note("per cluster: one trusted CA ConfigMap (3 self-signed certificates, ca-bundle.crt) and %d ConfigMaps of 2 KiB; real control-plane namespaces and corporate bundles (~150 certificates) are larger, which changes the bare figure, not the stubs'", b4FillerConfigMaps)
	save(b, r)
	return agentPer
}

// b4StartConfigMaps starts the agent's ConfigMap informer (agent) or a
// bare one and returns once it synced at least want ConfigMaps.
func b4StartConfigMaps(agent bool, want int) (stop func(), err error) {
	kf := informers.NewSharedInformerFactory(env.Kube, 0)
	if agent {
		df := dynamicinformer.NewDynamicSharedInformerFactory(env.Dynamic, 0)
		if _, err := watchers.New(watchers.Config{Source: "bench-b4"}, env.Kube, kf, df, b4Discard{}, nil, zerolog.Nop()); err != nil {
			return nil, err
		}
	}
	// The agent registered its ConfigMap informer: the factory returns it.
	inf := kf.Core().V1().ConfigMaps().Informer()
	stopCh := make(chan struct{})
	stop = func() {
		close(stopCh)
		kf.Shutdown()
	}
	kf.Start(stopCh)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		stop()
		return nil, fmt.Errorf("ConfigMap informer did not sync")
	}
	if n := len(inf.GetStore().ListKeys()); n < want {
		stop()
		return nil, fmt.Errorf("ConfigMap informer holds %d, want at least %d", n, want)
	}
	if agent {
		for _, o := range inf.GetStore().List() {
			if cm := o.(*corev1.ConfigMap); cm.Data != nil {
				stop()
				return nil, fmt.Errorf("the agent cached ConfigMap %s/%s with its data", cm.Namespace, cm.Name)
			}
		}
	}
	return stop, nil
}

// b4Bundle is a PEM bundle of n throw-away self-signed certificates.
func b4Bundle(b *testing.B, n int) string {
	var out strings.Builder
	for i := range n {
		cert, _ := testcert.CA(b, pkix.Name{CommonName: fmt.Sprintf("Corp CA %d", i)}, 365*24*time.Hour)
		out.WriteString(cert)
	}
	return out.String()
}
