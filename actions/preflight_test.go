package actions_test

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/hcpbot/hcpbot/actions"
)

// An exposure's preflight (what the agent answers when it is proposed,
// issue 29) reads what Expose reads before its first write, and nothing
// else: no write, no dry run, on either side. It finds the node port seed
// 004's forwarded Service would take from another management Service,
// naming that Service and the nearest free port, with the same words as
// the execution's refusal; and, for a ClusterIP app, the chosen node
// ports, the hosted API server's allocations left to execution.
func TestPreflightExposure(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	c, hosted := seed004(t, "pre")
	// A ClusterIP app beside the runbook's NodePort one: its NodePort
	// copy would be created, on the node ports the request chooses.
	ip := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: appNS, Name: "petclinic-ip"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "petclinic"}, Ports: []corev1.ServicePort{
			{Name: "8080-tcp", Port: 8080, TargetPort: intstr.FromInt32(8080)},
			{Name: "8443-tcp", Port: 8443, TargetPort: intstr.FromInt32(8443)},
			{Name: "8778-tcp", Port: 8778, TargetPort: intstr.FromInt32(8778)},
		}},
	}
	if _, err := hosted.Kube.CoreV1().Services(appNS).Create(ctx, ip, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	x, mgmt, hostedRec := executor(t)
	reads := func(what string) {
		t.Helper()
		mgmt.expect(t, what+" (management)", "get hostedclusters", "get secrets", "list services")
		hostedRec.expect(t, what+" (hosted)", "get services", "list services")
	}

	pf, err := x.Preflight(ctx, exposeReq("expo-0061abcd", c))
	if err != nil || pf.Collision != nil || !slices.Equal(pf.Free, []int32{30001, 30002, 30003}) || pf.Allocated != 0 {
		t.Fatalf("free: %+v, %v", pf, err)
	}
	reads("free")

	other := env.Namespace(t)
	blocker(t, other, "holds-30002", 30002)
	hostedBefore, mgmtBefore := services(t, hosted.Kube), services(t, env.Kube)
	pf, err = x.Preflight(ctx, exposeReq("expo-0062abcd", c))
	want := actions.PortCollision{
		Ports: []actions.PortProblem{{NodePort: 30002, Reason: actions.PortAllocated, Holder: other + "/holds-30002"}},
		Range: actions.DefaultNodePortRange, Alternatives: []int32{30004}, Forwarded: true,
	}
	if err != nil || pf.Collision == nil || !reflect.DeepEqual(*pf.Collision, want) {
		t.Fatalf("taken: %+v, %v; want the collision %+v", pf, err, want)
	}
	reads("taken")
	// The execution's refusal of the same exposure says the same.
	_, xerr := x.Execute(ctx, exposeReq("expo-0062abcd", c))
	if remote := actions.RemotePortCollision(*pf.Collision, ""); xerr == nil || remote.Error() != xerr.Error() {
		t.Errorf("preflight says %q, execution %v", remote, xerr)
	}
	t.Logf("preflight: %v", actions.RemotePortCollision(*pf.Collision, ""))
	mgmt.take()
	hostedRec.take()

	// A ClusterIP app: chosen node ports checked in both clusters (one
	// free, one held by the runbook's app in the hosted cluster), the
	// third left to the hosted API server.
	req := exposeReq("expo-0063abcd", c)
	req.Expose.Service, req.Expose.NodePorts = "petclinic-ip", []int32{30071}
	if pf, err = x.Preflight(ctx, req); err != nil || pf.Collision != nil || !slices.Equal(pf.Free, []int32{30071}) || pf.Allocated != 2 {
		t.Errorf("chosen: %+v, %v", pf, err)
	}
	reads("chosen")
	req.Expose.NodePorts = []int32{30071, 30003}
	pf, err = x.Preflight(ctx, req)
	if err != nil || pf.Collision == nil || len(pf.Collision.Ports) != 1 || pf.Collision.Ports[0] != (actions.PortProblem{NodePort: 30003, Reason: actions.PortAllocatedHosted, Holder: appNS + "/petclinic"}) || pf.Collision.Forwarded {
		t.Errorf("chosen, taken in the hosted cluster: %+v, %v", pf, err)
	}
	reads("chosen, taken")

	// What Expose refuses whatever the ports.
	req = exposeReq("expo-0064abcd", c)
	req.Expose.Service = "nope"
	if _, err := x.Preflight(ctx, req); !errors.Is(err, actions.ErrInvalid) {
		t.Errorf("no such Service: %v", err)
	}
	mgmt.take()
	hostedRec.take()
	np := actions.Change{ID: "fix-0065abcd", Type: actions.TypeNoProxyPatch, RequestedBy: "alice", Cluster: req.Cluster,
		NoProxy: &actions.NoProxyParams{Add: []string{"kubernetes"}}}
	if _, err := x.Preflight(ctx, np); !errors.Is(err, actions.ErrInvalid) {
		t.Errorf("a noProxy patch: %v", err)
	}
	mgmt.expect(t, "noProxy (management)")
	unchanged(t, hosted.Kube, hostedBefore, mgmtBefore)
}
