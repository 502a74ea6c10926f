// Package demo builds the world `hcpbot demo` runs in: a local management
// cluster (real etcd + kube-apiserver) with two hosted clusters — one
// healthy, one behind a proxy whose noProxy lacks `kubernetes` — and drives
// the seed 000 incident on it. It is the demo's world only: agent and bot
// run on it as in production (cmd/hcpbot), and it plays what HyperShift
// would do when they change a HostedCluster (HealWhenFixed).
package demo

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/identity"
	"github.com/hcpbot/hcpbot/internal/controlplane"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/noproxy"
)

// Namespace of the demo's HostedClusters, as in HyperShift's docs.
const Namespace = "clusters"

// Cluster is a hosted cluster of the demo.
type Cluster struct {
	Spec   scenario.Cluster
	Server *controlplane.APIServer
	Kube   kubernetes.Interface
	Nodes  []string
	SCAPod string
}

// World is the running demo environment.
type World struct {
	Dir        string
	CP         *controlplane.ControlPlane
	Kubeconfig string // of the management cluster, for kubectl
	Kube       kubernetes.Interface
	Dynamic    dynamic.Interface
	Healthy    *Cluster
	Proxied    *Cluster
}

// Start brings the world up. progress receives what it is doing (the first
// run builds kube-apiserver from source, which takes minutes).
func Start(ctx context.Context, dir string, progress io.Writer, buildLog *os.File) (*World, error) {
	fmt.Fprintln(progress, "▶ starting a local management cluster (etcd + kube-apiserver from module source;")
	fmt.Fprintln(progress, "  the first run builds kube-apiserver: about 12–15 minutes on 2 cores, cached afterwards)")
	// The audit log shows who each write to a HostedCluster was made as.
	cp, err := controlplane.Start(ctx, controlplane.Options{Dir: filepath.Join(dir, "controlplane"), Progress: buildLog, AuditLog: true})
	if err != nil {
		return nil, err
	}
	w := &World{Dir: dir, CP: cp, Kubeconfig: filepath.Join(dir, "management.kubeconfig")}
	if err := w.setup(ctx, progress); err != nil {
		cp.Stop()
		return nil, err
	}
	return w, nil
}

func (w *World) setup(ctx context.Context, progress io.Writer) error {
	if err := w.CP.Management.WriteKubeconfig(w.Kubeconfig); err != nil {
		return err
	}
	if err := controlplane.InstallCRDs(ctx, w.CP.Management.RESTConfig(), hypershift.CRDs, "crds/*.yaml"); err != nil {
		return err
	}
	kc, dc, err := w.CP.Management.Clients()
	if err != nil {
		return err
	}
	w.Kube, w.Dynamic = kc, dc
	if err := w.grantApprovers(ctx); err != nil {
		return err
	}
	fmt.Fprintln(progress, "▶ creating two hosted clusters: clusters/healthy and clusters/proxied (behind http://proxy.corp.example:3128)")
	if w.Healthy, err = w.hosted(ctx, scenario.Healthy(Namespace, "healthy")); err != nil {
		return err
	}
	if w.Proxied, err = w.hosted(ctx, scenario.BehindProxy(Namespace, "proxied")); err != nil {
		return err
	}
	return nil
}

func (w *World) hosted(ctx context.Context, spec scenario.Cluster) (*Cluster, error) {
	srv, err := w.CP.AddAPIServer(ctx, spec.Name)
	if err != nil {
		return nil, err
	}
	kubeconfig, err := srv.Kubeconfig()
	if err != nil {
		return nil, err
	}
	if _, err := scenario.Create(ctx, w.Kube, w.Dynamic, spec, kubeconfig); err != nil {
		return nil, err
	}
	kc, _, err := srv.Clients()
	if err != nil {
		return nil, err
	}
	c := &Cluster{Spec: spec, Server: srv, Kube: kc}
	pool := spec.Name + "-np"
	if err := scenario.NodePool(ctx, w.Dynamic, spec, pool, 3, true); err != nil {
		return nil, err
	}
	if c.Nodes, err = scenario.Nodes(ctx, kc, pool, 3); err != nil {
		return nil, err
	}
	if err := scenario.VirtLaunchers(ctx, w.Kube, spec, pool, c.Nodes); err != nil {
		return nil, err
	}
	pod, err := scenario.ServiceCAOperator(ctx, kc, c.Nodes[0])
	if err != nil {
		return nil, err
	}
	c.SCAPod = pod.Name
	mode := scenario.ModeHAProxy
	if spec.HTTPSProxy != "" {
		mode = scenario.ModeTunnel
	}
	for _, n := range c.Nodes {
		if err := scenario.KubeAPIServerProxy(ctx, kc, n, mode); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// ApproversGroup is the Kubernetes group the demo's approvers are mapped
// to (identities); it may patch the HostedClusters of Namespace, and
// nothing else.
const ApproversGroup = "platform-ops"

// grantApprovers gives ApproversGroup what a cluster administrator gives
// the people who approve noProxy fixes: get and patch of the
// HostedClusters in Namespace.
func (w *World) grantApprovers(ctx context.Context) error {
	const name = "hcpbot-demo-approvers"
	if _, err := w.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: name},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{hypershift.HostedClusterGVR.Group}, Resources: []string{"hostedclusters"}, Verbs: []string{"get", "patch"}}},
	}
	if _, err := w.Kube.RbacV1().Roles(Namespace).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("demo approvers' Role: %w", err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: ApproversGroup}},
	}
	if _, err := w.Kube.RbacV1().RoleBindings(Namespace).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("demo approvers' RoleBinding: %w", err)
	}
	return nil
}

// Write is one write to a HostedCluster as the API server's audit log
// recorded it.
type Write struct {
	Verb, Object string
	// By is who sent it; As whom it impersonated ("" for nobody), with
	// As's groups.
	By, As   string
	AsGroups []string
	Code     int32
}

// WritesOf reads the writes made for hcpbot action id (the
// hcpbot.io/action extra of an impersonated request) from the management
// API server's audit log, dry runs left out.
func (w *World) WritesOf(id string) ([]Write, error) {
	evs, err := controlplane.AuditEvents(w.CP.Management.AuditLogPath())
	if err != nil {
		return nil, err
	}
	var out []Write
	for _, e := range evs {
		if e.ImpersonatedUser == nil || e.ObjectRef == nil || e.ResponseStatus == nil || strings.Contains(e.RequestURI, "dryRun=") ||
			!slices.Contains(e.ImpersonatedUser.Extra[identity.ExtraAction], id) {
			continue
		}
		out = append(out, Write{
			Verb: e.Verb, Object: e.ObjectRef.Resource + " " + e.ObjectRef.Namespace + "/" + e.ObjectRef.Name,
			By: e.User.Username, As: e.ImpersonatedUser.Username, AsGroups: e.ImpersonatedUser.Groups, Code: e.ResponseStatus.Code,
		})
	}
	return out, nil
}

// BreakProxied plays seed 000 on clusters/proxied: API traffic tunnelled
// through the proxy fails, nodes go NotReady, the service-ca-operator
// crashloops with `failed checking apiserver connectivity`.
func (w *World) BreakProxied(ctx context.Context, progress io.Writer) error {
	c := w.Proxied
	fmt.Fprintln(progress, "▶ seed 000 on clusters/proxied: nodes go NotReady, service-ca-operator crashloops")
	for _, n := range c.Nodes {
		if err := scenario.SetNodeReady(ctx, c.Kube, n, corev1.ConditionFalse, "KubeletNotReady", "container runtime network not ready: NetworkReady=false"); err != nil {
			return err
		}
	}
	if err := scenario.SetNodePoolHealth(ctx, w.Dynamic, Namespace, c.Spec.Name+"-np", false); err != nil {
		return err
	}
	return scenario.CrashLoop(ctx, c.Kube, scenario.ServiceCANamespace, c.SCAPod, 6, scenario.SeedConnectivityMessage)
}

// HealProxied plays what HyperShift does once noProxy exempts the API
// server: the NodePool rolls out, kube-apiserver-proxy runs HAProxy, nodes
// come back and the operator starts. (The demo has no HyperShift operator.)
func (w *World) HealProxied(ctx context.Context, progress io.Writer) error {
	c := w.Proxied
	fmt.Fprintln(progress, "▶ rollout with the new noProxy (played by the demo): nodes Ready, operator running")
	for _, n := range c.Nodes {
		if err := scenario.SetNodeReady(ctx, c.Kube, n, corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"); err != nil {
			return err
		}
	}
	if err := scenario.SetNodePoolHealth(ctx, w.Dynamic, Namespace, c.Spec.Name+"-np", true); err != nil {
		return err
	}
	return scenario.Recover(ctx, c.Kube, scenario.ServiceCANamespace, c.SCAPod)
}

// HealWhenFixed plays HyperShift's operator for clusters/proxied: it
// watches the HostedCluster and, once its noProxy exempts `kubernetes`
// (whoever changed it: in the demo, the agent carrying out an approved
// fix), rolls out with HealProxied. It returns after healing, or with
// ctx's error.
func (w *World) HealWhenFixed(ctx context.Context, progress io.Writer) error {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		fixed, err := w.proxiedExempt(ctx)
		if err == nil && fixed {
			return w.HealProxied(ctx, progress)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// proxiedExempt reports whether clusters/proxied's noProxy holds
// `kubernetes`.
func (w *World) proxiedExempt(ctx context.Context) (bool, error) {
	u, err := w.Dynamic.Resource(hypershift.HostedClusterGVR).Namespace(Namespace).Get(ctx, w.Proxied.Spec.Name, metav1.GetOptions{})
	if err != nil {
		return false, err
	}
	hc, err := hypershift.FromUnstructured[hypershift.HostedCluster](u)
	if err != nil {
		return false, err
	}
	for _, e := range noproxy.Parse(hc.Proxy().NoProxy) {
		if e.Host == "kubernetes" {
			return true, nil
		}
	}
	return false, nil
}

// Stop ends every process of the world.
func (w *World) Stop() { w.CP.Stop() }
