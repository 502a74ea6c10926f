package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/hcpbot/hcpbot/hypershift"
)

// starved is a client-side rate limiter with no tokens left: Wait blocks
// until its context ends.
type starved struct{}

func (starved) TryAccept() bool { return false }
func (starved) Accept()         { select {} }
func (starved) Stop()           {}
func (starved) QPS() float32    { return 0 }
func (starved) Wait(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

// TestExecutorHasItsOwnRateLimit: the executor's clients do not share the
// watchers' client-side rate limiter — with that one spent, the
// executor's reads still go out, more of them in a row than client-go's
// default burst — and its limit is at least executorQPS/executorBurst.
func TestExecutorHasItsOwnRateLimit(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"apiVersion":"hypershift.openshift.io/v1beta1","kind":"HostedCluster","metadata":{"name":"hc","namespace":"ns"}}`))
	}))
	defer srv.Close()
	shared := &rest.Config{Host: srv.URL, RateLimiter: starved{}}

	x := executorConfig(shared)
	if x.RateLimiter != nil || x.QPS < executorQPS || x.Burst < executorBurst {
		t.Fatalf("executor config: RateLimiter %v, QPS %v, Burst %d; want its own limiter, >= %d/s, burst >= %d",
			x.RateLimiter, x.QPS, x.Burst, executorQPS, executorBurst)
	}
	if shared.RateLimiter == nil {
		t.Fatal("executorConfig changed the watchers' config")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The watchers' client is held back by the spent limiter...
	watchers, err := dynamic.NewForConfig(shared)
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer wcancel()
	if _, err := watchers.Resource(hypershift.HostedClusterGVR).Namespace("ns").Get(wctx, "hc", metav1.GetOptions{}); err == nil {
		t.Fatal("the shared client got through a spent rate limiter: the test proves nothing")
	}
	// ...the executor's is not.
	exec, err := newExecutor(shared)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 * 10 {
		if _, err := exec.Dynamic.Resource(hypershift.HostedClusterGVR).Namespace("ns").Get(ctx, "hc", metav1.GetOptions{}); err != nil {
			t.Fatalf("executor read %d: %v", i, err)
		}
	}
}
