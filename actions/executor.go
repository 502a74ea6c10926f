package actions

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/kubeconfig"
)

// HostedClientFunc returns a client for a hosted cluster.
type HostedClientFunc func(ctx context.Context, hc *hypershift.HostedCluster) (kubernetes.Interface, error)

// Executor runs approved actions with the agent's management-cluster
// identity, or, in a copy made by As, writes as the approver's mapped
// identity. It holds no state between calls and is safe for concurrent
// use.
type Executor struct {
	// Dynamic reads and writes HostedClusters (and Proxy/cluster).
	Dynamic dynamic.Interface
	// Kube reads kubeconfig Secrets and Nodes, and manages the Services
	// of exposures in control-plane namespaces.
	Kube kubernetes.Interface
	// Hosted reaches a hosted cluster; nil means HostedClient with Kube.
	Hosted HostedClientFunc
	// NodePortRange is the management cluster's service-node-port-range,
	// which exposed node ports are checked against before any write; the
	// zero value means DefaultNodePortRange (30000-32767).
	NodePortRange PortRange
	// Instance names this agent (its pod) in the Events RecordEvent
	// records (reportingInstance); empty leaves it unset.
	Instance string
	// Config is the management cluster's client configuration (the one
	// Dynamic and Kube were built from): the base of the impersonating
	// clients As builds. Nil, As refuses.
	Config *rest.Config

	// writer makes the management writes when set (As); nil, they are
	// made with Dynamic and Kube.
	writer *writer
}

// Execute validates req and runs it.
func (x *Executor) Execute(ctx context.Context, req Change) (*Result, error) {
	c, err := check(req)
	if err != nil {
		return nil, err
	}
	res, err := x.run(ctx, c)
	if id, ok := x.ActingAs(); ok && res != nil {
		res.As = id.User
	}
	return res, err
}

// run executes a validated request (Execute's, or the one Verifier.Open
// validated for Serve) without validating it again.
func (x *Executor) run(ctx context.Context, c checked) (*Result, error) {
	switch c.req.Type {
	case TypeNoProxyPatch:
		return x.patchNoProxy(ctx, c)
	case TypeExposeNodePort:
		return x.expose(ctx, c, false)
	case TypeRollback:
		return x.rollback(ctx, c.req.ID, c.req.Rollback.Undo, false)
	}
	// Only the zero checked gets here: nothing that passed Validate.
	return nil, fmt.Errorf("%w: request %q was not validated", ErrInvalid, c.req.ID)
}

func (x *Executor) hostedClient(ctx context.Context, hc *hypershift.HostedCluster) (kubernetes.Interface, error) {
	if x.Hosted != nil {
		return x.Hosted(ctx, hc)
	}
	return HostedClient(ctx, x.Kube, hc)
}

func (x *Executor) getHostedCluster(ctx context.Context, ref ClusterRef) (*hypershift.HostedCluster, error) {
	u, err := x.Dynamic.Resource(hypershift.HostedClusterGVR).Namespace(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get HostedCluster %s: %w", ref, err)
	}
	return hypershift.FromUnstructured[hypershift.HostedCluster](u)
}

// HostedClient builds a client for a hosted cluster from its admin
// kubeconfig Secret (status.kubeconfig.name, key "kubeconfig", in the
// HostedCluster's namespace).
func HostedClient(ctx context.Context, mgmt kubernetes.Interface, hc *hypershift.HostedCluster) (kubernetes.Interface, error) {
	cfg, err := HostedRESTConfig(ctx, mgmt, hc)
	if err != nil {
		return nil, err
	}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrKubeconfig, err)
	}
	return kc, nil
}

// HostedRESTConfig is HostedClient's configuration, for callers that wrap
// the transport (metrics, tests).
//
// The kubeconfig comes from a Secret that anyone able to write Secrets in
// the HostedCluster's namespace controls, so it is held to what HyperShift
// writes (package kubeconfig): inline server, CA and credentials only.
// Exec and auth-provider plugins would run programs where the executor runs,
// and file references (token or certificate files) could send its
// own credentials to the server named there. A refusal wraps both
// ErrKubeconfig and kubeconfig.ErrRefused.
func HostedRESTConfig(ctx context.Context, mgmt kubernetes.Interface, hc *hypershift.HostedCluster) (*rest.Config, error) {
	if hc.Status.Kubeconfig == nil || hc.Status.Kubeconfig.Name == "" {
		return nil, fmt.Errorf("%w: HostedCluster %s/%s has no status.kubeconfig yet", ErrKubeconfig, hc.Namespace, hc.Name)
	}
	name := hc.Status.Kubeconfig.Name
	secret, err := mgmt.CoreV1().Secrets(hc.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%w: Secret %s/%s not found", ErrKubeconfig, hc.Namespace, name)
		}
		return nil, fmt.Errorf("get kubeconfig Secret %s/%s: %w", hc.Namespace, name, err)
	}
	data := secret.Data[hypershift.KubeconfigKey]
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: Secret %s/%s has no key %q", ErrKubeconfig, hc.Namespace, name, hypershift.KubeconfigKey)
	}
	cfg, err := kubeconfig.RESTConfig(data)
	if err != nil {
		// The reason names fields and entries, never the Secret's content.
		return nil, fmt.Errorf("%w: Secret %s/%s: %w", ErrKubeconfig, hc.Namespace, name, err)
	}
	cfg.UserAgent = "hcpbot-actions"
	return cfg, nil
}

// ExecuteTimeout bounds one execution. A noProxy patch is three API calls;
// an exposure reaches the hosted API server too.
const ExecuteTimeout = 90 * time.Second
