package actions_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// recorder notes the API calls a client makes, as "verb resource" (with
// " dry-run" for dry runs), in the spirit of sample-controller's fake
// client action lists, but against a real API server.
type recorder struct {
	mu      sync.Mutex
	actions []string
	// after runs once a call has returned; tests use it to interleave a
	// concurrent edit at an exact point.
	after func(action string)
	// fail, when set, fails the calls it returns a failure for: the
	// executor sees the API server's failures on a real connection.
	fail func(action string) failure
}

// failure is what a recorder does to one call.
type failure struct {
	// status: the call never reaches the API server, which seems to
	// answer with this error (a Status body, as the API server writes it).
	status *apierrors.StatusError
	// lost: the API server handles the call, then the connection breaks
	// before its answer arrives (the agent's view when it dies after a
	// write, or the network drops the response).
	lost bool
}

func (r *recorder) RoundTrip(next http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		a := describe(req)
		if a == "" {
			return next.RoundTrip(req)
		}
		r.mu.Lock()
		r.actions = append(r.actions, a)
		after, fail := r.after, r.fail
		r.mu.Unlock()
		var f failure
		if fail != nil {
			f = fail(a)
		}
		if f.status != nil {
			return statusResponse(req, f.status), nil
		}
		resp, err := next.RoundTrip(req)
		if f.lost && err == nil {
			_ = resp.Body.Close()
			return nil, io.ErrUnexpectedEOF
		}
		if after != nil && err == nil {
			after(a)
		}
		return resp, err
	})
}

// statusResponse is the answer the API server writes for err.
func statusResponse(req *http.Request, err *apierrors.StatusError) *http.Response {
	st := err.Status()
	st.APIVersion, st.Kind = "v1", "Status"
	body, _ := json.Marshal(st)
	return &http.Response{
		StatusCode: int(st.Code), Status: http.StatusText(int(st.Code)), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": {"application/json"}},
		Body:   io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body)), Request: req,
	}
}

// once fails the first call named action (e.g. "patch hostedclusters")
// with f, and no other.
func once(action string, f failure) func(string) failure {
	var mu sync.Mutex
	done := false
	return func(a string) failure {
		mu.Lock()
		defer mu.Unlock()
		if a != action || done {
			return failure{}
		}
		done = true
		return f
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// describe turns /apis/g/v/namespaces/ns/things/name into "get things".
func describe(req *http.Request) string {
	seg := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	switch {
	case len(seg) >= 3 && seg[0] == "api":
		seg = seg[2:]
	case len(seg) >= 4 && seg[0] == "apis":
		seg = seg[3:]
	default:
		return "" // discovery and the like
	}
	if len(seg) >= 3 && seg[0] == "namespaces" {
		seg = seg[2:]
	}
	named := len(seg) >= 2
	verb := map[string]string{http.MethodPost: "create", http.MethodPut: "update", http.MethodPatch: "patch", http.MethodDelete: "delete"}[req.Method]
	if req.Method == http.MethodGet {
		verb = "list"
		if named {
			verb = "get"
		}
	}
	a := verb + " " + seg[0]
	if req.URL.Query().Get("dryRun") != "" {
		a += " dry-run"
	}
	return a
}

func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.actions
	r.actions = nil
	return out
}

func (r *recorder) expect(t *testing.T, what string, want ...string) {
	t.Helper()
	if got := r.take(); !slices.Equal(got, want) {
		t.Errorf("%s: API calls\n got %q\nwant %q", what, got, want)
	}
}

// executor returns an Executor whose management and hosted calls are
// recorded separately.
func executor(t *testing.T) (*actions.Executor, *recorder, *recorder) {
	t.Helper()
	mgmt, hosted := &recorder{}, &recorder{}
	x := executorFor(t, rest.CopyConfig(env.Config), mgmt)
	x.Hosted = func(ctx context.Context, hc *hypershift.HostedCluster) (kubernetes.Interface, error) {
		cfg, err := actions.HostedRESTConfig(ctx, x.Kube, hc)
		if err != nil {
			return nil, err
		}
		cfg.Wrap(hosted.RoundTrip)
		return kubernetes.NewForConfig(cfg)
	}
	return x, mgmt, hosted
}

// executorFor is an Executor with the management clients of cfg, whose
// calls rec records (also those of the copies As makes from it).
func executorFor(t *testing.T, cfg *rest.Config, rec *recorder) *actions.Executor {
	t.Helper()
	cfg.Wrap(rec.RoundTrip)
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &actions.Executor{Dynamic: dc, Kube: kc, Config: cfg}
}
