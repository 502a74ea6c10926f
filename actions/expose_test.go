package actions_test

import (
	"context"
	"errors"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv"
)

const appNS = "petclinic"

// petclinic is the seed 004 app: a ClusterIP Service on 8080/8443/8778.
func petclinic(t *testing.T, kc kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: appNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: appNS, Name: "petclinic"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "petclinic", "deployment": "petclinic"},
			Ports: []corev1.ServicePort{
				{Name: "8080-tcp", Port: 8080, TargetPort: intstr.FromInt32(8080)},
				{Name: "8443-tcp", Port: 8443, TargetPort: intstr.FromInt32(8443)},
				{Name: "8778-tcp", Port: 8778, TargetPort: intstr.FromString("jolokia")},
			},
		},
	}
	if _, err := kc.CoreV1().Services(appNS).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// kubevirtApp is a KubeVirt hosted cluster running the seed 004 app
// (petclinic, a ClusterIP Service), in a namespace of the test's: its
// HostedCluster and API server, kubevirtNodes hosted nodes and their VMs'
// virt-launcher pods in the control-plane namespace.
func kubevirtApp(t *testing.T, name string) (scenario.Cluster, *testenv.Hosted) {
	t.Helper()
	ctx := context.Background()
	c := scenario.BehindProxy(env.Namespace(t), name)
	hosted := env.HostedCluster(t, c)
	petclinic(t, hosted.Kube)
	nodes, err := scenario.Nodes(ctx, hosted.Kube, c.Name+"-np", kubevirtNodes)
	if err != nil {
		t.Fatal(err)
	}
	if err := scenario.VirtLaunchers(ctx, env.Kube, c, c.Name+"-np", nodes); err != nil {
		t.Fatal(err)
	}
	return c, hosted
}

const kubevirtNodes = 2

func exposeReq(id string, c scenario.Cluster, ports ...actions.ExposePort) actions.Change {
	return actions.Change{
		ID: id, Type: actions.TypeExposeNodePort, RequestedBy: "alice",
		Cluster: actions.ClusterRef{Namespace: c.Namespace, Name: c.Name},
		Expose:  &actions.ExposeParams{Namespace: appNS, Service: "petclinic", Ports: ports},
	}
}

func serviceNames(t *testing.T, kc kubernetes.Interface, ns string) []string {
	t.Helper()
	list, err := kc.CoreV1().Services(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range list.Items {
		out = append(out, s.Name)
	}
	slices.Sort(out)
	return out
}

// Seed 004 on a KubeVirt hosted cluster: both Services, node ports lined
// up, idempotent re-run, and a rollback that removes exactly those two.
func TestExposeAndRollback(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	c, hosted := kubevirtApp(t, "kv")
	cpNS := hypershift.ControlPlaneNamespace(c.Namespace, c.Name)
	// Services that are not this action's: the rollback must leave them.
	bystander := func(kc kubernetes.Interface, ns, name string) {
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{actions.LabelManagedBy: actions.ManagedBy, actions.LabelActionID: "expo-other1"}},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
		}
		if _, err := kc.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	bystander(hosted.Kube, appNS, "other-hcpbot-np")
	bystander(env.Kube, cpNS, "hcpbot-np-expo-other1")

	x, mgmt, hostedRec := executor(t)
	req := exposeReq("expo-0001abcd", c)
	res, err := x.Execute(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	// Node ports are checked (lists, dry run) before the management write;
	// the hosted API server allocates them, so nothing to check before the
	// hosted write but to list what is in use (the alternatives).
	mgmt.expect(t, "expose (management)", "get hostedclusters", "get secrets", "list services", "list services", "create services dry-run", "create services", "list nodes")
	hostedRec.expect(t, "expose (hosted)", "list services", "get services", "list services", "create services")

	hsvc, err := hosted.Kube.CoreV1().Services(appNS).Get(ctx, "petclinic-hcpbot-np", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	msvc, err := env.Kube.CoreV1().Services(cpNS).Get(ctx, "hcpbot-np-expo-0001abcd", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if hsvc.Spec.Type != corev1.ServiceTypeNodePort || msvc.Spec.Type != corev1.ServiceTypeNodePort {
		t.Errorf("types %s / %s, want NodePort", hsvc.Spec.Type, msvc.Spec.Type)
	}
	if want := map[string]string{"app": "petclinic", "deployment": "petclinic"}; !maps.Equal(hsvc.Spec.Selector, want) {
		t.Errorf("hosted selector %v, want the app's %v", hsvc.Spec.Selector, want)
	}
	if want := map[string]string{hypershift.LabelClusterName: c.InfraID, hypershift.LabelKubeVirt: hypershift.VirtLauncher}; !maps.Equal(msvc.Spec.Selector, want) {
		t.Errorf("management selector %v, want %v", msvc.Spec.Selector, want)
	}
	// The management Service selects exactly the cluster's virt-launchers.
	pods, err := env.Kube.CoreV1().Pods(cpNS).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(msvc.Spec.Selector).String()})
	if err != nil || len(pods.Items) != kubevirtNodes {
		t.Errorf("management selector matches %d pods (%v), want %d virt-launchers", len(pods.Items), err, kubevirtNodes)
	}
	wantPorts := []int32{8080, 8443, 8778}
	if len(hsvc.Spec.Ports) != 3 || len(msvc.Spec.Ports) != 3 || len(res.Ports) != 3 {
		t.Fatalf("ports: hosted %v, management %v, result %v", hsvc.Spec.Ports, msvc.Spec.Ports, res.Ports)
	}
	for i, hp := range hsvc.Spec.Ports {
		mp := msvc.Spec.Ports[i]
		if hp.Port != wantPorts[i] || hp.NodePort == 0 {
			t.Errorf("hosted port %d: %+v", i, hp)
		}
		if mp.NodePort != hp.NodePort || mp.TargetPort != intstr.FromInt32(hp.NodePort) || mp.Port != hp.NodePort {
			t.Errorf("port %d: hosted nodePort %d, management port %d targetPort %s nodePort %d", i, hp.NodePort, mp.Port, mp.TargetPort.String(), mp.NodePort)
		}
		if r := res.Ports[i]; r.Port != hp.Port || r.NodePort != hp.NodePort || r.Protocol != "TCP" {
			t.Errorf("result port %d: %+v", i, r)
		}
	}
	if hsvc.Spec.Ports[2].TargetPort != intstr.FromString("jolokia") {
		t.Errorf("named targetPort not kept: %v", hsvc.Spec.Ports[2].TargetPort)
	}
	for _, s := range []*corev1.Service{hsvc, msvc} {
		if s.Labels[actions.LabelManagedBy] != "hcpbot" || s.Labels[actions.LabelActionID] != req.ID ||
			s.Annotations[actions.AnnotationRequestedBy] != "alice" || s.Annotations[actions.AnnotationCluster] != c.Namespace+"/"+c.Name {
			t.Errorf("%s: labels %v annotations %v", s.Name, s.Labels, s.Annotations)
		}
	}
	wantCreated := []actions.ObjectRef{
		{Cluster: actions.ClusterHosted, Kind: "Service", Namespace: appNS, Name: "petclinic-hcpbot-np"},
		{Cluster: actions.ClusterManagement, Kind: "Service", Namespace: cpNS, Name: "hcpbot-np-expo-0001abcd"},
	}
	if res.Outcome != actions.OutcomeApplied || !slices.Equal(res.Created, wantCreated) {
		t.Errorf("outcome %s, created %v", res.Outcome, res.Created)
	}
	// The test management cluster has no Nodes: no endpoint is invented.
	if len(res.Endpoints) != 0 {
		t.Errorf("endpoints %v without management nodes", res.Endpoints)
	}
	t.Logf("summary: %s", res.Summary)

	// Management nodes appear (data only): endpoints are their InternalIPs.
	mnodes, err := scenario.Nodes(ctx, env.Kube, "mgmt-"+c.Namespace, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, n := range mnodes {
			_ = env.Kube.CoreV1().Nodes().Delete(context.Background(), n, metav1.DeleteOptions{})
		}
	})
	// Re-running the same action (the agent died after both creations)
	// finds its Services, creates nothing and reports what it made.
	again, err := x.Execute(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	mgmt.expect(t, "re-run (management)", "get hostedclusters", "get secrets", "list services", "list nodes")
	hostedRec.expect(t, "re-run (hosted)", "list services")
	if again.Outcome != actions.OutcomeApplied || !slices.Equal(again.Created, wantCreated) || !slices.Equal(again.Ports, res.Ports) ||
		!reflect.DeepEqual(again.Undo, res.Undo) || !strings.Contains(again.Summary, "earlier attempt of action "+req.ID) {
		t.Errorf("re-run: %+v", again)
	}
	var wantEndpoints []string
	for _, n := range mnodes {
		node, _ := env.Kube.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		for _, p := range res.Ports {
			wantEndpoints = append(wantEndpoints, node.Status.Addresses[0].Address+":"+strconv.Itoa(int(p.NodePort)))
		}
	}
	if !slices.Equal(again.Endpoints, wantEndpoints) {
		t.Errorf("endpoints %v, want %v", again.Endpoints, wantEndpoints)
	}
	t.Logf("summary: %s", again.Summary)

	// Rollback deletes exactly the two Services of this action.
	rb, err := x.Rollback(ctx, *res.Undo)
	if err != nil {
		t.Fatal(err)
	}
	mgmt.expect(t, "rollback (management)", "get hostedclusters", "list services", "delete services", "get secrets")
	hostedRec.expect(t, "rollback (hosted)", "list services", "delete services")
	if rb.Outcome != actions.OutcomeRolledBack || len(rb.Deleted) != 2 || !slices.Contains(rb.Deleted, wantCreated[0]) || !slices.Contains(rb.Deleted, wantCreated[1]) {
		t.Errorf("rollback: %+v", rb)
	}
	if got := serviceNames(t, hosted.Kube, appNS); !slices.Equal(got, []string{"other-hcpbot-np", "petclinic"}) {
		t.Errorf("hosted Services after rollback: %v", got)
	}
	if got := serviceNames(t, env.Kube, cpNS); !slices.Equal(got, []string{"hcpbot-np-expo-other1"}) {
		t.Errorf("management Services after rollback: %v", got)
	}
	if rb, err := x.Rollback(ctx, *res.Undo); err != nil || rb.Outcome != actions.OutcomeUnchanged {
		t.Errorf("second rollback: %+v, %v", rb, err)
	}
}

// Only KubeVirt clusters have virt-launcher pods to forward to.
func TestExposeNotKubeVirt(t *testing.T) {
	env.Need(t)
	c := scenario.Healthy(env.Namespace(t), "aws")
	c.Platform = "AWS"
	seedCluster(t, c)
	x, mgmt, hostedRec := executor(t)
	_, err := x.Execute(context.Background(), exposeReq("expo-0002abcd", c))
	if !errors.Is(err, actions.ErrNotKubeVirt) {
		t.Fatalf("err = %v, want ErrNotKubeVirt", err)
	}
	t.Logf("reason: %v", err)
	mgmt.expect(t, "refused (management)", "get hostedclusters")
	hostedRec.expect(t, "refused (hosted)")
}

// The management cluster already allocates a chosen node port: refused
// before anything is written, the port and its holder named, with the
// nearest free port.
func TestExposePortCollision(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	c := scenario.BehindProxy(env.Namespace(t), "clash")
	hosted := env.HostedCluster(t, c)
	petclinic(t, hosted.Kube)
	cpNS := hypershift.ControlPlaneNamespace(c.Namespace, c.Name)
	const taken = 30080
	blocker(t, cpNS, "someone-elses", taken)

	x, mgmt, hostedRec := executor(t)
	_, err := x.Execute(ctx, exposeReq("expo-0003abcd", c, actions.ExposePort{Port: 8443}, actions.ExposePort{Port: 8080, NodePort: taken}))
	var pc *actions.PortCollisionError
	if !errors.Is(err, actions.ErrPortCollision) || !errors.As(err, &pc) || pc.NodePort != taken {
		t.Fatalf("err = %v, want a PortCollisionError for %d", err, taken)
	}
	want := actions.PortCollision{
		Ports: []actions.PortProblem{{NodePort: taken, Reason: actions.PortAllocated, Holder: cpNS + "/someone-elses"}},
		Range: actions.DefaultNodePortRange, Alternatives: []int32{taken + 1},
	}
	if !reflect.DeepEqual(pc.PortCollision, want) {
		t.Errorf("collision %+v, want %+v", pc.PortCollision, want)
	}
	t.Logf("error: %v", err)
	mgmt.expect(t, "collision (management)", "get hostedclusters", "get secrets", "list services", "list services")
	hostedRec.expect(t, "collision (hosted)", "list services", "get services", "list services")
	if got := serviceNames(t, hosted.Kube, appNS); !slices.Equal(got, []string{"petclinic"}) {
		t.Errorf("hosted Services left: %v", got)
	}
	if got := serviceNames(t, env.Kube, cpNS); !slices.Equal(got, []string{"someone-elses"}) {
		t.Errorf("management Services: %v", got)
	}

	// Requests the hosted Service cannot satisfy create nothing anywhere.
	noSuchPort := exposeReq("expo-0004abcd", c, actions.ExposePort{Port: 9999})
	noSuchService := exposeReq("expo-0005abcd", c)
	noSuchService.Expose.Service = "nope"
	tooManyNodePorts := exposeReq("expo-0006abcd", c)
	tooManyNodePorts.Expose.NodePorts = []int32{30101, 30102, 30103, 30104}
	for _, req := range []actions.Change{noSuchPort, noSuchService, tooManyNodePorts} {
		if _, err := x.Execute(ctx, req); !errors.Is(err, actions.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", req.ID, err)
		}
		hostedRec.expect(t, req.ID+" (hosted)", "list services", "get services")
	}
	if got := serviceNames(t, hosted.Kube, appNS); !slices.Equal(got, []string{"petclinic"}) {
		t.Errorf("hosted Services left: %v", got)
	}
	if got := serviceNames(t, env.Kube, cpNS); !slices.Equal(got, []string{"someone-elses"}) {
		t.Errorf("management Services: %v", got)
	}
}

// blocker allocates nodePort in the management cluster with a Service that
// is not hcpbot's, given back when the test ends (node ports are global to
// the management API server, which the whole package shares).
func blocker(t *testing.T, ns, name string, nodePort int32) {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": "x"},
			Ports: []corev1.ServicePort{{Port: 80, NodePort: nodePort}}},
	}
	if _, err := env.Kube.CoreV1().Services(ns).Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Kube.CoreV1().Services(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}
