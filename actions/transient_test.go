package actions_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/internal/scenario"
)

// Errors as the API server and the network produce them, wrapped with %w
// as the executor wraps them ("patch of HostedCluster …: %w").
func TestTransient(t *testing.T) {
	hcs := schema.GroupResource{Group: hypershift.HostedClusterGVR.Group, Resource: hypershift.HostedClusterGVR.Resource}
	wrap := func(err error) error {
		return fmt.Errorf("patch of HostedCluster clusters/example spec.configuration.proxy.noProxy: %w", err)
	}
	put := func(err error) error {
		return &url.Error{Op: "Patch", URL: "https://127.0.0.1:6443/apis/hypershift.openshift.io/v1beta1/namespaces/clusters/hostedclusters/example", Err: err}
	}
	sysErr := func(op string, errno syscall.Errno) error {
		return &net.OpError{Op: op, Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 6443}, Err: os.NewSyscallError(op, errno)}
	}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"InternalError", wrap(apierrors.NewInternalError(errors.New("etcdserver: request timed out"))), true},
		{"ServiceUnavailable", wrap(apierrors.NewServiceUnavailable("apiserver is shutting down")), true},
		{"ServerTimeout", wrap(apierrors.NewServerTimeout(hcs, "patch", 2)), true},
		{"Timeout", wrap(apierrors.NewTimeoutError("request did not complete within 60s", 0)), true},
		{"TooManyRequests", wrap(apierrors.NewTooManyRequests("too many requests", 1)), true},
		{"502 from a load balancer", wrap(apierrors.NewGenericServerResponse(http.StatusBadGateway, "patch", hcs, "example", "<html>bad gateway</html>", 0, true)), true},
		{"504 from a load balancer", wrap(apierrors.NewGenericServerResponse(http.StatusGatewayTimeout, "patch", hcs, "example", "", 0, true)), true},
		{"connection refused", wrap(put(sysErr("dial", syscall.ECONNREFUSED))), true},
		{"connection reset", wrap(put(sysErr("read", syscall.ECONNRESET))), true},
		{"unexpected EOF", wrap(put(io.ErrUnexpectedEOF)), true},
		{"EOF", wrap(put(io.EOF)), true},
		{"no route to host", wrap(put(sysErr("dial", syscall.EHOSTUNREACH))), true},
		{"i/o timeout", wrap(put(&net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded})), true},
		{"DNS timeout", wrap(put(&net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "i/o timeout", Name: "api.example", IsTimeout: true}})), true},
		{"DNS no such host", wrap(put(&net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "api.example", IsNotFound: true}})), false},
		{"per-call deadline", wrap(put(context.DeadlineExceeded)), true},
		{"caller cancelled", wrap(put(context.Canceled)), false},
		{"ErrConflict over an API conflict", fmt.Errorf("%w: patch: changed while the action ran: %w", actions.ErrConflict, apierrors.NewConflict(hcs, "example", errors.New("object was modified"))), false},
		{"ErrConflict", fmt.Errorf("%w: noProxy is %q", actions.ErrConflict, "x"), false},
		{"ErrInvalid", fmt.Errorf("%w: %w", actions.ErrInvalid, field.ErrorList{field.Required(field.NewPath("id"), "")}.ToAggregate()), false},
		{"ErrRejected (admission)", fmt.Errorf("%w: dry run of x: %w", actions.ErrRejected, apierrors.NewForbidden(hcs, "example", errors.New("denied by policy"))), false},
		{"ErrRejected (invalid)", fmt.Errorf("%w: %w", actions.ErrRejected, apierrors.NewInvalid(schema.GroupKind{Kind: "Service"}, "x", nil)), false},
		{"ErrPortCollision", &actions.PortCollisionError{NodePort: 30080, Err: apierrors.NewInvalid(schema.GroupKind{Kind: "Service"}, "x", nil)}, false},
		{"ErrNotKubeVirt", fmt.Errorf("%w: platform AWS", actions.ErrNotKubeVirt), false},
		{"ErrKubeconfig", fmt.Errorf("%w: Secret clusters/example-admin-kubeconfig not found", actions.ErrKubeconfig), false},
		{"ErrConflict joined with a failed cleanup", errors.Join(fmt.Errorf("%w: x", actions.ErrConflict), apierrors.NewServiceUnavailable("x")), false},
		{"NotFound of the target", wrap(apierrors.NewNotFound(hcs, "example")), false},
		{"Forbidden", wrap(apierrors.NewForbidden(hcs, "example", errors.New("RBAC"))), false},
		{"Unauthorized", wrap(apierrors.NewUnauthorized("token expired")), false},
		{"raw Conflict", wrap(apierrors.NewConflict(hcs, "example", errors.New("modified"))), false},
		{"AlreadyExists", wrap(apierrors.NewAlreadyExists(hcs, "example")), false},
		{"unknown", errors.New("something else"), false},
	} {
		if got := actions.Transient(tc.err); got != tc.want {
			t.Errorf("%s: Transient(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

// The same, from real calls of the executor: to a closed port, to a server
// that never answers, to one whose certificate is not trusted, with the
// caller's context cancelled, and the API server's own definite answers.
// All on loopback.
func TestTransientFromExecutor(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	c := scenario.BehindProxy(env.Namespace(t), "transient")
	seedCluster(t, c)
	aws := scenario.Healthy(c.Namespace, "aws")
	aws.Platform = "AWS"
	seedCluster(t, aws)
	patch := patchRequest("fix-0301abcd", c, scenario.SeedNoProxy)

	at := func(host string, timeout time.Duration, tlsCfg rest.TLSClientConfig) *actions.Executor {
		cfg := rest.CopyConfig(env.Config)
		cfg.Host, cfg.Timeout, cfg.TLSClientConfig = host, timeout, tlsCfg
		dc, err := dynamic.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		kc, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return &actions.Executor{Dynamic: dc, Kube: kc}
	}
	closed := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		_ = l.Close()
		return addr
	}()
	// silent accepts connections and never says a word.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = silent.Close() })
	go func() {
		for {
			conn, err := silent.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = conn.Close() })
		}
	}()
	untrusted := httptest.NewTLSServer(http.NotFoundHandler())
	t.Cleanup(untrusted.Close)

	// The TLS handshake timeout, from Go's own transport (client-go's
	// waits 10 s for it).
	tr := &http.Transport{TLSHandshakeTimeout: 100 * time.Millisecond, TLSClientConfig: &tls.Config{ServerName: "localhost"}}
	_, handshake := (&http.Client{Transport: tr}).Get("https://" + silent.Addr().String() + "/version")
	tr.CloseIdleConnections()

	x, mgmt, _ := executor(t)
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	// within is a per-call deadline, started when the call is made.
	within := func(d time.Duration) context.Context {
		ctx, cancel := context.WithTimeout(ctx, d)
		t.Cleanup(cancel)
		return ctx
	}
	run := func(x *actions.Executor, ctx context.Context, ch actions.Change) error {
		_, err := x.Execute(ctx, ch)
		return err
	}
	forbidden := func() error {
		mgmt.fail = once("patch hostedclusters dry-run", failure{status: apierrors.NewForbidden(schema.GroupResource{Group: "hypershift.openshift.io", Resource: "hostedclusters"}, c.Name, errors.New("denied by admission webhook"))})
		defer func() { mgmt.fail = nil }()
		return run(x, ctx, patch)
	}
	unavailable := func() error {
		mgmt.fail = once("patch hostedclusters dry-run", failure{status: apierrors.NewServiceUnavailable("apiserver is shutting down")})
		defer func() { mgmt.fail = nil }()
		return run(x, ctx, patch)
	}
	missing := patchRequest("fix-0302abcd", scenario.Cluster{Namespace: c.Namespace, Name: "missing"}, "")
	stale := patchRequest("fix-0303abcd", c, ".not.the.value")
	invalid := patch
	invalid.ID = "not an id"
	notKubeVirt := exposeReq("expo-0301abcd", aws)
	// seedCluster's kubeconfig Secret holds a placeholder, which package
	// kubeconfig refuses.
	badKubeconfig := exposeReq("expo-0302abcd", c)

	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"connection refused", run(at("https://"+closed, 0, rest.TLSClientConfig{Insecure: true}), ctx, patch), true},
		{"client timeout", run(at("https://"+silent.Addr().String(), 300*time.Millisecond, rest.TLSClientConfig{Insecure: true}), ctx, patch), true},
		{"per-call deadline", run(at("https://"+silent.Addr().String(), 0, rest.TLSClientConfig{Insecure: true}), within(200*time.Millisecond), patch), true},
		{"TLS handshake timeout", fmt.Errorf("get HostedCluster %s: %w", patch.Cluster, handshake), true},
		{"ServiceUnavailable", unavailable(), true},
		{"untrusted certificate", run(at(untrusted.URL, 0, rest.TLSClientConfig{}), ctx, patch), false},
		{"caller cancelled", run(x, cancelled, patch), false},
		{"rejected by admission", forbidden(), false},
		{"NotFound of the target", run(x, ctx, missing), false},
		{"ErrConflict", run(x, ctx, stale), false},
		{"ErrInvalid", run(x, ctx, invalid), false},
		{"ErrNotKubeVirt", run(x, ctx, notKubeVirt), false},
		{"ErrKubeconfig", run(x, ctx, badKubeconfig), false},
	} {
		if tc.err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		t.Logf("%s: %v", tc.name, tc.err)
		if got := actions.Transient(tc.err); got != tc.want {
			t.Errorf("%s: Transient(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
	if got, _ := readHC(t, c.Namespace, c.Name); got != scenario.SeedNoProxy {
		t.Errorf("written: %q", got)
	}
}
