package testenv_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// The CRDs validate what hcpbot relies on and default what HyperShift defaults.
func TestHostedClusterCRDDefaultsAndValidation(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	ri := env.Dynamic.Resource(hypershift.HostedClusterGVR).Namespace(ns)

	c := scenario.BehindProxy(ns, "example")
	if _, err := ri.Create(ctx, c.Object(), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create: %v", err)
	}
	u, err := ri.Get(ctx, "example", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hc, err := hypershift.FromUnstructured[hypershift.HostedCluster](u)
	if err != nil {
		t.Fatal(err)
	}
	if got := hypershift.CIDRs(hc.Spec.Networking.ServiceNetwork); len(got) != 1 || got[0] != "172.31.0.0/16" {
		t.Errorf("serviceNetwork defaulted to %v, want [172.31.0.0/16]", got)
	}
	if got := hypershift.CIDRs(hc.Spec.Networking.ClusterNetwork); len(got) != 1 || got[0] != "10.132.0.0/14" {
		t.Errorf("clusterNetwork defaulted to %v, want [10.132.0.0/14]", got)
	}
	if hc.Proxy().NoProxy != scenario.SeedNoProxy || hc.Spec.Platform.Type != "KubeVirt" {
		t.Errorf("read back %+v", hc.Spec)
	}
	// Fields hcpbot does not model are preserved.
	_ = unstructured.SetNestedField(u.Object, "4.18.0", "spec", "release", "image")
	if _, err := ri.Update(ctx, u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	u, _ = ri.Get(ctx, "example", metav1.GetOptions{})
	if v, _, _ := unstructured.NestedString(u.Object, "spec", "release", "image"); v != "4.18.0" {
		t.Errorf("unknown field not preserved: %q", v)
	}

	for name, mutate := range map[string]func(*unstructured.Unstructured){
		"bad-cidr": func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedSlice(u.Object, []any{map[string]any{"cidr": "not-a-cidr"}}, "spec", "networking", "serviceNetwork")
		},
		"bad-platform": func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, "Mainframe", "spec", "platform", "type")
		},
		"bad-infraid": func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, "Not_A_Label", "spec", "infraID")
		},
		"three-networks": func(u *unstructured.Unstructured) {
			n := map[string]any{"cidr": "10.0.0.0/16"}
			_ = unstructured.SetNestedSlice(u.Object, []any{n, n, n}, "spec", "networking", "clusterNetwork")
		},
	} {
		bad := scenario.BehindProxy(ns, name).Object()
		mutate(bad)
		_, err := ri.Create(ctx, bad, metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) {
			t.Errorf("%s: want a validation error, got %v", name, err)
		}
	}
}

// A hosted cluster is reachable the way the agent will reach it: through the
// kubeconfig Secret its HostedCluster names; the seed builders work on it.
func TestHostedClusterThroughKubeconfigSecret(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	hosted := env.HostedCluster(t, scenario.BehindProxy(ns, "seed"))

	if hosted.Object.Status.Kubeconfig == nil {
		t.Fatal("status.kubeconfig not set")
	}
	secret, err := env.Kube.CoreV1().Secrets(ns).Get(ctx, hosted.Object.Status.Kubeconfig.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(secret.Data[hypershift.KubeconfigKey])
	if err != nil {
		t.Fatal(err)
	}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := scenario.Nodes(ctx, hosted.Kube, "seed-np", 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := scenario.SetNodeReady(ctx, hosted.Kube, nodes[0], corev1.ConditionFalse, "KubeletNotReady", "PLEG is not healthy"); err != nil {
		t.Fatal(err)
	}
	pod, err := scenario.ServiceCAOperator(ctx, hosted.Kube, nodes[1])
	if err != nil {
		t.Fatal(err)
	}
	if err := scenario.CrashLoop(ctx, hosted.Kube, pod.Namespace, pod.Name, 7, scenario.SeedConnectivityMessage); err != nil {
		t.Fatal(err)
	}
	if err := scenario.KubeAPIServerProxy(ctx, hosted.Kube, nodes[0], scenario.ModeTunnel); err != nil {
		t.Fatal(err)
	}

	// Read back through the Secret's credentials: a separate cluster.
	list, err := kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 2 {
		t.Fatalf("nodes via kubeconfig secret: %v, %d", err, len(list.Items))
	}
	if mgmtNodes, _ := env.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); len(mgmtNodes.Items) != 0 {
		t.Errorf("hosted nodes leaked into the management cluster: %d", len(mgmtNodes.Items))
	}
	for _, n := range list.Items {
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && n.Name == nodes[0] && c.Status != corev1.ConditionFalse {
				t.Errorf("node %s Ready=%s, want False", n.Name, c.Status)
			}
		}
	}
	got, err := kc.CoreV1().Pods(scenario.ServiceCANamespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cs := got.Status.ContainerStatuses[0]
	if cs.State.Waiting == nil || cs.State.Waiting.Reason != "CrashLoopBackOff" ||
		!strings.Contains(cs.LastTerminationState.Terminated.Message, "failed checking apiserver connectivity") {
		t.Errorf("crashloop status not stored: %+v", cs)
	}

	// KubeVirt: virt-launcher pods in the control-plane namespace of the management cluster.
	if err := scenario.VirtLaunchers(ctx, env.Kube, hosted.Spec, "seed-np", nodes); err != nil {
		t.Fatal(err)
	}
	sel := hypershift.LabelClusterName + "=" + hosted.Spec.InfraID
	pods, err := env.Kube.CoreV1().Pods(hypershift.ControlPlaneNamespace(ns, "seed")).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil || len(pods.Items) != 2 || pods.Items[0].Status.PodIP == "" {
		t.Fatalf("virt-launcher pods: %v %+v", err, pods)
	}
}

// An API server stopped and started again keeps its port, credentials and data.
func TestAPIServerRestart(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	hosted := env.HostedCluster(t, scenario.Healthy(ns, "restart"))
	if _, err := scenario.Nodes(ctx, hosted.Kube, "restart-np", 1); err != nil {
		t.Fatal(err)
	}
	hosted.Server.Stop()
	if _, err := hosted.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err == nil {
		t.Fatal("stopped API server still answers")
	}
	if err := hosted.Server.Start(ctx); err != nil {
		t.Fatal(err)
	}
	list, err := hosted.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("after restart: %v, %d nodes", err, len(list.Items))
	}
}
