package testenv

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/internal/controlplane"
	"github.com/hcpbot/hcpbot/internal/scenario"
)

// Env is the control plane shared by the tests of one package.
type Env struct {
	CP *controlplane.ControlPlane
	// Management cluster clients (admin).
	Config  *rest.Config
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface

	seq atomic.Int64
}

// Main starts the package's control plane, runs the tests and stops it. With
// -short no control plane is started and *env stays nil (Need skips).
func Main(m *testing.M, env **Env) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "hcpbot-testenv-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "testenv:", err)
		os.Exit(1)
	}
	e, err := start(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testenv:", err)
		os.Exit(1)
	}
	*env = e
	code := m.Run()
	e.CP.Stop()
	if code == 0 {
		os.RemoveAll(dir)
	} else {
		fmt.Fprintf(os.Stderr, "testenv: control-plane logs kept in %s\n", dir)
	}
	os.Exit(code)
}

func start(dir string) (*Env, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	// The audit log (writes of HostedClusters, Proxies and Services only)
	// lets a test see who made a write and as whom; it costs a line per
	// such write.
	cp, err := controlplane.Start(ctx, controlplane.Options{Dir: dir, Progress: os.Stderr, AuditLog: true})
	if err != nil {
		return nil, err
	}
	cfg := cp.Management.RESTConfig()
	if err := controlplane.InstallCRDs(ctx, cfg, hypershift.CRDs, "crds/*.yaml"); err != nil {
		cp.Stop()
		return nil, err
	}
	kc, dc, err := cp.Management.Clients()
	if err != nil {
		cp.Stop()
		return nil, err
	}
	return &Env{CP: cp, Config: cfg, Kube: kc, Dynamic: dc}, nil
}

// Need skips the test when no control plane runs (-short).
func (e *Env) Need(t testing.TB) {
	t.Helper()
	if e == nil {
		t.Skip("integration test: needs the test control plane (run without -short)")
	}
}

// Namespace creates a namespace unique to the test in the management cluster.
func (e *Env) Namespace(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("t%d-%s", e.seq.Add(1), dnsSafe(t.Name()))
	if len(name) > 40 {
		name = strings.TrimRight(name[:40], "-")
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := e.Kube.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	return name
}

func dnsSafe(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	return strings.Trim(b.String(), "-")
}

// Hosted is a hosted cluster: its own API server, and its HostedCluster in
// the management cluster pointing at it.
type Hosted struct {
	Spec    scenario.Cluster
	Object  *hypershift.HostedCluster
	Server  *controlplane.APIServer
	Config  *rest.Config
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface
}

// HostedCluster starts an API server for c and creates the HostedCluster,
// control-plane namespace and admin kubeconfig Secret in the management
// cluster. The API server stops when the test ends.
func (e *Env) HostedCluster(t testing.TB, c scenario.Cluster) *Hosted {
	t.Helper()
	ctx := context.Background()
	name := fmt.Sprintf("hosted-%d-%s", e.seq.Add(1), dnsSafe(c.Name))
	srv, err := e.CP.AddAPIServer(ctx, name)
	if err != nil {
		t.Fatalf("start hosted API server: %v", err)
	}
	t.Cleanup(func() { e.CP.RemoveAPIServer(name) })
	kubeconfig, err := srv.Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	obj, err := scenario.Create(ctx, e.Kube, e.Dynamic, c, kubeconfig)
	if err != nil {
		t.Fatalf("create HostedCluster: %v", err)
	}
	// Gone with the test: an agent of a later test in the package watches
	// every HostedCluster and would wait for this one's stopped API server.
	t.Cleanup(func() {
		ctx := context.Background()
		if err := e.Dynamic.Resource(hypershift.HostedClusterGVR).Namespace(c.Namespace).Delete(ctx, c.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete HostedCluster %s/%s: %v", c.Namespace, c.Name, err)
		}
		if err := e.Kube.CoreV1().Secrets(c.Namespace).Delete(ctx, c.KubeconfigSecretName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete Secret %s/%s: %v", c.Namespace, c.KubeconfigSecretName(), err)
		}
	})
	kc, dc, err := srv.Clients()
	if err != nil {
		t.Fatal(err)
	}
	return &Hosted{Spec: c, Object: obj, Server: srv, Config: srv.RESTConfig(), Kube: kc, Dynamic: dc}
}

// Eventually polls cond until it returns true or the timeout passes.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
