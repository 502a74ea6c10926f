package command_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/bot/blockkit"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv"
)

// outcomeOf accepts the outcome of approval id posted after the
// immediate answer: whatever it says, it no longer says where the change
// was sent.
func outcomeOf(id string) func(string) bool {
	return func(s string) bool {
		return strings.Contains(s, "`"+id+"`") && !strings.Contains(s, "sent to the agent")
	}
}

func serviceVersions(t *testing.T, kc kubernetes.Interface) map[string]string {
	t.Helper()
	v, err := scenario.ServiceVersions(context.Background(), kc)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Seed 004 end to end, as the runbook does it: petclinic's hosted Service
// already is of type NodePort on 30001–30003. From Slack, `/hcp expose`
// proposes, a second approver approves (answered at once), and the agent
// creates one
// management Service forwarding exactly 30001–30003 (port = targetPort =
// nodePort, selecting the VMs by cluster.x-k8s.io/cluster-name=<infraID>)
// and nothing in the hosted cluster; the approved rollback deletes that
// Service only. With 30002 then held by another management Service, the
// exposure is refused when proposed (the agent's preflight, issue 29),
// naming that Service and the nearest free port, and no proposal is
// stored; proposed while 30002 is free and taken after the approval,
// before the agent runs it, the outcome is the same collision, and no
// object is created or changed on either side.
func TestExposeSeed004Live(t *testing.T) {
	e := newLiveEnv(t)
	ctx := context.Background()
	cpNS := hypershift.ControlPlaneNamespace(e.ns, "kv")
	runbookPorts := scenario.Seed004NodePorts
	if err := scenario.SetNodePorts(ctx, e.hosted.Kube, appNS, "petclinic", runbookPorts); err != nil {
		t.Fatal(err)
	}
	hostedBefore := serviceVersions(t, e.hosted.Kube)

	reply := e.slack.command("expose "+e.cluster+" "+appNS+"/petclinic", requester, hasID)
	id := actionID.FindString(reply)
	if id == "" || !strings.Contains(reply, "hcpbot-np-"+id) || !strings.Contains(reply, "is not of type NodePort already") {
		t.Fatalf("expose proposal: %q", reply)
	}
	conv := e.slack.pressIn(approver1, blockkit.ActionApprove, id)
	conv.approvedAtOnce(t, approver1, e.source)
	txt := conv.posted(outcomeOf(id)).Form.Get("text")
	if !strings.Contains(txt, "and applied") || !strings.Contains(txt, "nothing created in the hosted cluster") {
		t.Fatalf("approval: outcome %q", txt)
	}
	msvc, err := env.Kube.CoreV1().Services(cpNS).Get(ctx, actions.ManagementServiceName(id), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{hypershift.LabelClusterName: e.c.InfraID, hypershift.LabelKubeVirt: hypershift.VirtLauncher}; !maps.Equal(msvc.Spec.Selector, want) || msvc.Spec.Type != corev1.ServiceTypeNodePort {
		t.Errorf("management Service %s selector %v", msvc.Spec.Type, msvc.Spec.Selector)
	}
	var forwarded []int32
	for _, mp := range msvc.Spec.Ports {
		if mp.Port != mp.NodePort || mp.TargetPort != intstr.FromInt32(mp.NodePort) {
			t.Errorf("management port %+v: want port = targetPort = nodePort", mp)
		}
		forwarded = append(forwarded, mp.NodePort)
	}
	if !slices.Equal(forwarded, runbookPorts) {
		t.Errorf("management Service forwards %v, want exactly %v", forwarded, runbookPorts)
	}
	if got := serviceVersions(t, e.hosted.Kube); !maps.Equal(got, hostedBefore) {
		t.Errorf("hosted Services changed:\n got %v\nwant %v", got, hostedBefore)
	}

	// The rollback, approved by another approver, deletes that one Service.
	reply = e.slack.command("rollback "+id, requester, func(s string) bool { return rollbackIDs.MatchString(s) || strings.Contains(s, id) })
	rb := rollbackIDs.FindString(reply)
	if rb == "" {
		t.Fatalf("rollback proposal: %q", reply)
	}
	a, c := e.slack.send("approve "+rb, approver2)
	a.approvedAtOnce(t, approver2, e.source)
	if r := c.posted(outcomeOf(rb)).Form.Get("text"); !strings.Contains(r, "rolled-back") {
		t.Fatalf("rollback approval: outcome %q", r)
	}
	if _, err := env.Kube.CoreV1().Services(cpNS).Get(ctx, msvc.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("management Service after rollback: %v", err)
	}
	if got := serviceVersions(t, e.hosted.Kube); !maps.Equal(got, hostedBefore) {
		t.Errorf("hosted Services after rollback:\n got %v\nwant %v", got, hostedBefore)
	}

	// 30002 taken in the management cluster (and 30009 by a Service that
	// has nothing to do with the exposure): found when the exposure is
	// proposed (issue 29), by a channel member who is no approver. The
	// proposal is refused naming the port, the Service holding it and
	// the nearest free port, and nothing else; no proposal is stored.
	holder := takePort(t, cpNS, "holds-30002", 30002)
	takePort(t, cpNS, "unrelated-30009", 30009)
	mgmtBefore := serviceVersions(t, env.Kube)
	proposals := proposalKeys(t, e)
	reply = e.slack.command("expose "+e.cluster+" "+appNS+"/petclinic", requester, func(s string) bool { return strings.Contains(s, "Cannot propose") || hasID(s) })
	t.Logf("refused proposal: %s", reply)
	collision := "30002 is already allocated in the management cluster (Service " + cpNS + "/holds-30002)"
	for _, want := range []string{
		"Cannot propose exposing `petclinic/petclinic` of " + e.source + "/" + e.cluster, collision,
		"nearest free node ports (range 30000-32767): 30004", "give it free ones there (nearest: 30004)",
	} {
		if !strings.Contains(reply, want) {
			t.Errorf("refused proposal lacks %q", want)
		}
	}
	if hasID(reply) || strings.Contains(reply, "unrelated-30009") {
		t.Errorf("refused proposal: %q", reply)
	}
	if got := proposalKeys(t, e); !slices.Equal(got, proposals) {
		t.Errorf("proposals after the refusal: %v, before %v", got, proposals)
	}

	// Free when proposed, taken after the approval and before the agent
	// runs it: refused at execution with the same words, nothing created
	// on either side, and the outcome says so.
	deleteService(t, holder)
	reply = e.slack.command("expose "+e.cluster+" "+appNS+"/petclinic", requester, hasID)
	id = actionID.FindString(reply)
	if !strings.Contains(reply, "Node ports 30001, 30002, 30003 are free in the management cluster now (checked by the agent of "+e.source+")") {
		t.Errorf("proposal on free ports: %q", reply)
	}
	e.agentStop()
	conv = e.slack.pressIn(approver1, blockkit.ActionApprove, id)
	conv.approvedAtOnce(t, approver1, e.source)
	takePort(t, cpNS, "holds-30002", 30002)
	mgmtBefore = serviceVersions(t, env.Kube)
	e.agentStop = e.serveAgent()
	txt = conv.posted(outcomeOf(id)).Form.Get("text")
	t.Logf("collision outcome: %s", txt)
	for _, want := range []string{
		"was not applied", collision,
		"nearest free node ports (range 30000-32767): 30004", "give it free ones there (nearest: 30004)",
	} {
		if !strings.Contains(txt, want) {
			t.Errorf("collision reply lacks %q", want)
		}
	}
	if got := serviceVersions(t, env.Kube); !maps.Equal(got, mgmtBefore) {
		t.Errorf("management Services changed:\n got %v\nwant %v", got, mgmtBefore)
	}
	if got := serviceVersions(t, e.hosted.Kube); !maps.Equal(got, hostedBefore) {
		t.Errorf("hosted Services changed:\n got %v\nwant %v", got, hostedBefore)
	}
	if s := stateOf(t, e.flow, id); s != approval.StateFailed {
		t.Errorf("refused exposure is %s, want failed", s)
	}
}

// takePort creates a NodePort Service in the management cluster holding
// nodePort, deleted with the test.
func takePort(t *testing.T, ns, name string, nodePort int32) *corev1.Service {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": "other"},
			Ports: []corev1.ServicePort{{Port: 80, NodePort: nodePort}}},
	}
	if _, err := env.Kube.CoreV1().Services(ns).Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteService(t, svc) })
	return svc
}

func deleteService(t *testing.T, svc *corev1.Service) {
	t.Helper()
	err := env.Kube.CoreV1().Services(svc.Namespace).Delete(context.Background(), svc.Name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	// The API server releases the node port with the Service.
	testenv.Eventually(t, 30*time.Second, "Service "+svc.Name+" gone", func() bool {
		_, err := env.Kube.CoreV1().Services(svc.Namespace).Get(context.Background(), svc.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}

// proposalKeys lists the keys of the approval store.
func proposalKeys(t *testing.T, e *liveEnv) []string {
	t.Helper()
	ctx := context.Background()
	kv, err := e.botJS.KeyValue(ctx, bus.ProposalsBucket)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kv.Keys(ctx)
	if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
		t.Fatal(err)
	}
	slices.Sort(keys)
	return keys
}
