package actions_test

import (
	"context"
	"errors"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv"
)

// seed004 is the runbook's starting point: a KubeVirt hosted cluster whose
// petclinic Service already is of type NodePort on 30001–30003, and its
// VMs' virt-launcher pods in the control-plane namespace.
func seed004(t *testing.T, name string) (scenario.Cluster, *testenv.Hosted) {
	t.Helper()
	c, hosted := kubevirtApp(t, name)
	if err := scenario.SetNodePorts(context.Background(), hosted.Kube, appNS, "petclinic", scenario.Seed004NodePorts); err != nil {
		t.Fatal(err)
	}
	return c, hosted
}

// services is scenario.ServiceVersions, failing t on error.
func services(t *testing.T, kc kubernetes.Interface) map[string]string {
	t.Helper()
	v, err := scenario.ServiceVersions(context.Background(), kc)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// unchanged fails t unless the Services of both clusters are still exactly
// those of the snapshots.
func unchanged(t *testing.T, hosted kubernetes.Interface, hostedBefore, mgmtBefore map[string]string) {
	t.Helper()
	if got := services(t, hosted); !maps.Equal(got, hostedBefore) {
		t.Errorf("hosted Services changed:\n got %v\nwant %v", got, hostedBefore)
	}
	if got := services(t, env.Kube); !maps.Equal(got, mgmtBefore) {
		t.Errorf("management Services changed:\n got %v\nwant %v", got, mgmtBefore)
	}
}

// Seed 004 as the runbook does it: the app's hosted Service already is a
// NodePort Service on 30001–30003, so exactly those ports are forwarded by
// one management Service (port = targetPort = nodePort, selecting the
// cluster's VMs by cluster.x-k8s.io/cluster-name=<infraID>) and nothing is
// created in the hosted cluster; the rollback deletes that one Service.
func TestExposeSeed004ForwardsExistingNodePorts(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	c, hosted := seed004(t, "runbook")
	cpNS := hypershift.ControlPlaneNamespace(c.Namespace, c.Name)
	hostedBefore := services(t, hosted.Kube)

	x, mgmt, hostedRec := executor(t)
	req := exposeReq("expo-0041abcd", c)
	res, err := x.Execute(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	mgmt.expect(t, "forward (management)", "get hostedclusters", "get secrets", "list services", "list services", "create services dry-run", "create services", "list nodes")
	hostedRec.expect(t, "forward (hosted)", "list services", "get services", "list services")
	if got := services(t, hosted.Kube); !maps.Equal(got, hostedBefore) {
		t.Errorf("hosted Services changed:\n got %v\nwant %v", got, hostedBefore)
	}

	msvc, err := env.Kube.CoreV1().Services(cpNS).Get(ctx, actions.ManagementServiceName(req.ID), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if msvc.Spec.Type != corev1.ServiceTypeNodePort {
		t.Errorf("management Service type %s", msvc.Spec.Type)
	}
	if want := map[string]string{hypershift.LabelClusterName: c.InfraID, hypershift.LabelKubeVirt: hypershift.VirtLauncher}; !maps.Equal(msvc.Spec.Selector, want) {
		t.Errorf("management selector %v, want %v", msvc.Spec.Selector, want)
	}
	var got []int32
	for _, mp := range msvc.Spec.Ports {
		if mp.Port != mp.NodePort || mp.TargetPort != intstr.FromInt32(mp.NodePort) || mp.Protocol != corev1.ProtocolTCP {
			t.Errorf("management port %+v: want port = targetPort = nodePort", mp)
		}
		got = append(got, mp.NodePort)
	}
	if !slices.Equal(got, scenario.Seed004NodePorts) {
		t.Errorf("management Service forwards %v, want exactly %v", got, scenario.Seed004NodePorts)
	}
	if msvc.Labels[actions.LabelActionID] != req.ID || msvc.Annotations[actions.AnnotationSource] != appNS+"/petclinic" {
		t.Errorf("labels %v annotations %v", msvc.Labels, msvc.Annotations)
	}
	wantCreated := []actions.ObjectRef{{Cluster: actions.ClusterManagement, Kind: "Service", Namespace: cpNS, Name: msvc.Name}}
	if res.Outcome != actions.OutcomeApplied || !slices.Equal(res.Created, wantCreated) {
		t.Errorf("outcome %s, created %v, want %v", res.Outcome, res.Created, wantCreated)
	}
	wantPorts := []actions.ExposedPort{
		{Name: "8080-tcp", Protocol: "TCP", Port: 8080, NodePort: 30001},
		{Name: "8443-tcp", Protocol: "TCP", Port: 8443, NodePort: 30002},
		{Name: "8778-tcp", Protocol: "TCP", Port: 8778, NodePort: 30003},
	}
	if !slices.Equal(res.Ports, wantPorts) {
		t.Errorf("result ports %v, want %v", res.Ports, wantPorts)
	}
	t.Logf("summary: %s", res.Summary)

	// Re-running the action (its result was not recorded) finds its
	// Service, writes nothing and reports what the first run did.
	again, err := x.Execute(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	mgmt.expect(t, "re-run (management)", "get hostedclusters", "get secrets", "list services", "list nodes")
	hostedRec.expect(t, "re-run (hosted)", "list services", "get services")
	if again.Outcome != actions.OutcomeApplied || !slices.Equal(again.Created, wantCreated) || !slices.Equal(again.Ports, wantPorts) ||
		!reflect.DeepEqual(again.Undo, res.Undo) || !strings.Contains(again.Summary, "earlier attempt of action "+req.ID) {
		t.Errorf("re-run: %+v", again)
	}

	// Other node ports cannot be chosen for a Service that has its own.
	chosen := exposeReq("expo-0042abcd", c)
	chosen.Expose.NodePorts = []int32{30011}
	if _, err := x.Execute(ctx, chosen); !errors.Is(err, actions.ErrInvalid) {
		t.Errorf("choosing node ports of a NodePort Service: %v, want ErrInvalid", err)
	}
	mgmt.expect(t, "chosen (management)", "get hostedclusters", "get secrets", "list services")
	hostedRec.expect(t, "chosen (hosted)", "list services", "get services")

	// The rollback deletes the management Service only.
	rb, err := x.Rollback(ctx, *res.Undo)
	if err != nil {
		t.Fatal(err)
	}
	if rb.Outcome != actions.OutcomeRolledBack || !slices.Equal(rb.Deleted, wantCreated) {
		t.Errorf("rollback: %+v, want deleted %v", rb, wantCreated)
	}
	if got := services(t, hosted.Kube); !maps.Equal(got, hostedBefore) {
		t.Errorf("hosted Services after rollback:\n got %v\nwant %v", got, hostedBefore)
	}
	if got := serviceNames(t, env.Kube, cpNS); len(got) != 0 {
		t.Errorf("management Services after rollback: %v", got)
	}
}

// Seed 004 with 30002 already taken in the management cluster: refused
// before any write on either side, naming the port, its holder and the
// nearest port free in both clusters.
func TestExposeSeed004CollisionBeforeAnyWrite(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	c, hosted := seed004(t, "taken")
	other := env.Namespace(t)
	blocker(t, other, "holds-30002", 30002)
	hostedBefore, mgmtBefore := services(t, hosted.Kube), services(t, env.Kube)

	x, mgmt, hostedRec := executor(t)
	_, err := x.Execute(ctx, exposeReq("expo-0043abcd", c))
	var pc *actions.PortCollisionError
	if !errors.As(err, &pc) || !errors.Is(err, actions.ErrPortCollision) {
		t.Fatalf("err = %v, want a PortCollisionError", err)
	}
	// 30001 and 30003 are the app's in the hosted cluster: the nearest
	// port free in both clusters is 30004.
	want := actions.PortCollision{
		Ports: []actions.PortProblem{{NodePort: 30002, Reason: actions.PortAllocated, Holder: other + "/holds-30002"}},
		Range: actions.DefaultNodePortRange, Alternatives: []int32{30004}, Forwarded: true,
	}
	if !reflect.DeepEqual(pc.PortCollision, want) || pc.NodePort != 30002 {
		t.Errorf("collision %+v, want %+v", pc.PortCollision, want)
	}
	t.Logf("error: %v", err)
	mgmt.expect(t, "collision (management)", "get hostedclusters", "get secrets", "list services", "list services")
	hostedRec.expect(t, "collision (hosted)", "list services", "get services", "list services")
	unchanged(t, hosted.Kube, hostedBefore, mgmtBefore)

	// A management cluster with a narrower node-port range: 30003 is out
	// of it, and the alternatives stay inside it.
	x.NodePortRange = actions.PortRange{Min: 30000, Max: 30002}
	_, err = x.Execute(ctx, exposeReq("expo-0044abcd", c))
	want = actions.PortCollision{
		Ports: []actions.PortProblem{
			{NodePort: 30002, Reason: actions.PortAllocated, Holder: other + "/holds-30002"},
			{NodePort: 30003, Reason: actions.PortOutOfRange},
		},
		Range: x.NodePortRange, Alternatives: []int32{30000}, Forwarded: true,
	}
	if !errors.As(err, &pc) || !reflect.DeepEqual(pc.PortCollision, want) {
		t.Errorf("narrow range: %v (%+v), want %+v", err, pc, want)
	}
	mgmt.take()
	hostedRec.take()
	unchanged(t, hosted.Kube, hostedBefore, mgmtBefore)
}

// A ClusterIP app Service with node ports chosen: the hosted NodePort
// Service gets exactly those, and the management Service forwards them;
// chosen ports taken on either side or out of range are refused before
// any write, each with an alternative.
func TestExposeChosenNodePorts(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	c := scenario.BehindProxy(env.Namespace(t), "chosen")
	hosted := env.HostedCluster(t, c)
	petclinic(t, hosted.Kube)
	cpNS := hypershift.ControlPlaneNamespace(c.Namespace, c.Name)
	other := env.Namespace(t)
	blocker(t, other, "holds-30052", 30052)
	// A hosted Service that is not the app's holds 30053 in the hosted
	// cluster.
	hostedHolder := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: appNS, Name: "metrics"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": "metrics"},
			Ports: []corev1.ServicePort{{Port: 9100, NodePort: 30053}}},
	}
	if _, err := hosted.Kube.CoreV1().Services(appNS).Create(ctx, hostedHolder, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	hostedBefore, mgmtBefore := services(t, hosted.Kube), services(t, env.Kube)

	x, mgmt, hostedRec := executor(t)
	bad := exposeReq("expo-0051abcd", c)
	bad.Expose.NodePorts = []int32{30052, 30053, 40000}
	_, err := x.Execute(ctx, bad)
	var pc *actions.PortCollisionError
	want := actions.PortCollision{
		Ports: []actions.PortProblem{
			{NodePort: 30052, Reason: actions.PortAllocated, Holder: other + "/holds-30052"},
			{NodePort: 30053, Reason: actions.PortAllocatedHosted, Holder: appNS + "/metrics"},
			{NodePort: 40000, Reason: actions.PortOutOfRange},
		},
		Range: actions.DefaultNodePortRange, Alternatives: []int32{30051, 30054, 32767},
	}
	if !errors.As(err, &pc) || !reflect.DeepEqual(pc.PortCollision, want) {
		t.Fatalf("err = %v (%+v), want %+v", err, pc, want)
	}
	t.Logf("error: %v", err)
	mgmt.expect(t, "refused (management)", "get hostedclusters", "get secrets", "list services", "list services")
	hostedRec.expect(t, "refused (hosted)", "list services", "get services", "list services")
	unchanged(t, hosted.Kube, hostedBefore, mgmtBefore)

	// An agent configured with a wider range than the hosted API server
	// has: the dry run does not check ranges, the hosted API server
	// refuses the create; reported with its range, nothing written.
	x.NodePortRange = actions.PortRange{Min: 30000, Max: 40000}
	wide := exposeReq("expo-0053abcd", c)
	wide.Expose.NodePorts = []int32{40000}
	_, err = x.Execute(ctx, wide)
	wantWide := actions.PortCollision{
		Ports: []actions.PortProblem{{NodePort: 40000, Reason: actions.PortOutOfRange}},
		Range: actions.DefaultNodePortRange, Alternatives: []int32{32767},
	}
	if !errors.As(err, &pc) || !reflect.DeepEqual(pc.PortCollision, wantWide) {
		t.Errorf("hosted range: %v (%+v), want %+v", err, pc, wantWide)
	}
	mgmt.expect(t, "hosted range (management)", "get hostedclusters", "get secrets", "list services", "list services", "create services dry-run")
	hostedRec.expect(t, "hosted range (hosted)", "list services", "get services", "list services", "create services")
	unchanged(t, hosted.Kube, hostedBefore, mgmtBefore)
	x.NodePortRange = actions.PortRange{}

	// The alternatives work: taken as they are, both Services use them.
	good := exposeReq("expo-0052abcd", c)
	good.Expose.NodePorts = want.Alternatives
	res, err := x.Execute(ctx, good)
	if err != nil {
		t.Fatal(err)
	}
	mgmt.expect(t, "chosen (management)", "get hostedclusters", "get secrets", "list services", "list services", "create services dry-run", "create services dry-run", "create services", "list nodes")
	hostedRec.expect(t, "chosen (hosted)", "list services", "get services", "list services", "create services")
	hsvc, err := hosted.Kube.CoreV1().Services(appNS).Get(ctx, actions.HostedServiceName("petclinic"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	msvc, err := env.Kube.CoreV1().Services(cpNS).Get(ctx, actions.ManagementServiceName(good.ID), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range want.Alternatives {
		hp, mp := hsvc.Spec.Ports[i], msvc.Spec.Ports[i]
		if hp.NodePort != n || mp.NodePort != n || mp.Port != n || mp.TargetPort != intstr.FromInt32(n) {
			t.Errorf("port %d: hosted %+v, management %+v, want node port %d", i, hp, mp, n)
		}
	}
	if len(res.Created) != 2 {
		t.Errorf("created %v", res.Created)
	}
	if _, err := x.Rollback(ctx, *res.Undo); err != nil {
		t.Fatal(err)
	}
	if got := services(t, hosted.Kube); !slices.Equal(slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(hostedBefore))) {
		t.Errorf("hosted Services after rollback: %v", got)
	}
}
