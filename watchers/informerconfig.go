package watchers

import (
	"fmt"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Bounds of the management informers' wait for an API server that refuses
// connections (a restart, an upgrade): well under the reflectors' watch
// timeouts, so that a longer outage still fails and is logged.
const (
	serverWaitPoll = 500 * time.Millisecond
	serverWaitMax  = 25 * time.Second
)

// NewInformerFactories returns the management informer factories the
// process shares across leader terms (watchers.New registers the agent's
// informers in them, the caller starts them), on clients of their own
// (InformerConfig).
func NewInformerFactories(cfg *rest.Config) (informers.SharedInformerFactory, dynamicinformer.DynamicSharedInformerFactory, error) {
	ic := InformerConfig(cfg)
	kube, err := kubernetes.NewForConfig(Protobuf(ic))
	if err != nil {
		return nil, nil, fmt.Errorf("informer client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(ic)
	if err != nil {
		return nil, nil, fmt.Errorf("informer client: %w", err)
	}
	return informers.NewSharedInformerFactory(kube, 0), dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0), nil
}

// Protobuf returns a copy of cfg whose typed clients speak protobuf, the
// API server's own encoding of the built-in types, with JSON accepted
// for a server or a type that has none. An agent watches every Node of
// every hosted cluster: a Node as the kubelet writes it is 16.5 KB of
// JSON, which takes several times longer to decode than the same object
// in protobuf, on the path from a status write to the first post (B2,
// docs/performance.md). HyperShift's types have no protobuf: the
// dynamic clients set JSON on their own copy (dynamic.ConfigFor).
func Protobuf(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.ContentType = runtime.ContentTypeProtobuf
	c.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return c
}

// InformerConfig returns a copy of cfg whose lists and watches (GETs)
// wait for an API server that refuses connections, trying again every
// serverWaitPoll for up to serverWaitMax, instead of failing at once.
//
// The management informers live as long as the process, so that a
// replica that does not lead keeps warm caches. Through an outage of the
// API server their reflectors would fail attempt after attempt and back
// off, up to [30 s, 60 s) between attempts (client-go's defaults, which a
// SharedInformerFactory does not let one change): the changes made
// meanwhile would reach the agent up to a minute after the server is
// back. Waiting inside the attempt keeps the reflector from backing off,
// so the list that follows the outage starts as soon as the server
// accepts connections (watchers TestAPIServerOutages). Writes are never
// retried, and the leader election keeps its own client: it must notice
// the outage within renewDeadline.
func InformerConfig(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return &serverWait{next: rt, poll: serverWaitPoll, max: serverWaitMax}
	})
	return c
}

// serverWait retries a GET refused at connect.
type serverWait struct {
	next      http.RoundTripper
	poll, max time.Duration
}

func (w *serverWait) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := w.next.RoundTrip(req)
	if req.Method != http.MethodGet || req.Body != nil && req.Body != http.NoBody || !utilnet.IsConnectionRefused(err) {
		return resp, err
	}
	deadline := time.Now().Add(w.max)
	t := time.NewTimer(w.poll)
	defer t.Stop()
	for utilnet.IsConnectionRefused(err) && time.Now().Before(deadline) {
		select {
		case <-req.Context().Done():
			return resp, err
		case <-t.C:
		}
		resp, err = w.next.RoundTrip(req)
		t.Reset(w.poll)
	}
	return resp, err
}
