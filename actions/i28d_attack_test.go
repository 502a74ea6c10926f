package actions_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/identity"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv"
)

// The fourth attack review of issue 28 (the fixes of the third): each
// test here failed when it was written, and names the attacker of
// docs/security.md it plays.

// nodePortQuota puts a ResourceQuota of n node ports on ns, its status
// written as the quota controller writes it (hard mirrors spec, used
// counted), and waits until the API server's quota admission holds it.
func nodePortQuota(t *testing.T, hosted *testenv.Hosted, ns string, n int64) {
	t.Helper()
	ctx := context.Background()
	hard := corev1.ResourceList{corev1.ResourceServicesNodePorts: *resource.NewQuantity(n, resource.DecimalSI)}
	q, err := hosted.Kube.CoreV1().ResourceQuotas(ns).Create(ctx, &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "node-ports"},
		Spec:       corev1.ResourceQuotaSpec{Hard: hard},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	q.Status = corev1.ResourceQuotaStatus{Hard: hard, Used: corev1.ResourceList{corev1.ResourceServicesNodePorts: *resource.NewQuantity(0, resource.DecimalSI)}}
	if _, err := hosted.Kube.CoreV1().ResourceQuotas(ns).UpdateStatus(ctx, q, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	probe := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "quota-probe"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": "probe"},
			Ports: []corev1.ServicePort{{Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(80)}}},
	}
	testenv.Eventually(t, 30*time.Second, "quota admission holds the node-port quota", func() bool {
		_, err := hosted.Kube.CoreV1().Services(ns).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil
	})
}

// forwardShop creates the app's own NodePort Service shop in the hosted
// cluster, as the runbook has it, and returns the exposure forwarding it.
func forwardShop(t *testing.T, c scenario.Cluster, hosted *testenv.Hosted, id string) actions.Change {
	t.Helper()
	shop := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: appNS, Name: "shop"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": "shop"},
			Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 8080, TargetPort: intstr.FromInt32(8080)}}},
	}
	if _, err := hosted.Kube.CoreV1().Services(appNS).Create(context.Background(), shop, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return actions.Change{ID: id, Type: actions.TypeExposeNodePort, RequestedBy: "UREQUESTER1",
		Cluster: actions.ClusterRef{Namespace: c.Namespace, Name: c.Name},
		Expose:  &actions.ExposeParams{Namespace: appNS, Service: "shop"}}
}

// accessThenAsAlice asks Access about ch for alice, then executes it as
// her: what her identity check would answer, and what the write does.
func accessThenAsAlice(t *testing.T, agent *actions.Executor, alice identity.Identity, ch actions.Change) ([]string, *actions.Result, error) {
	t.Helper()
	ctx := context.Background()
	missing, err := agent.Access(ctx, alice, ch)
	if err != nil {
		t.Fatal(err)
	}
	x, err := agent.As(alice, identity.Extra(ch.ID, "UREQUESTER1", []string{"UALICE0001"}))
	if err != nil {
		t.Fatal(err)
	}
	res, err := x.Execute(ctx, ch)
	return missing, res, err
}

// No attacker but the hosted cluster's own tenant policy (a ResourceQuota
// on services.nodeports, as multi-tenant clusters set): a regression of
// permitsHostedFound. alice, mapped in the hosted cluster and allowed to
// create and delete Services there, exposes petclinic; the namespace's
// quota allows the one node port the copy takes. The agent dies after
// the write (its result was never recorded), and the re-run finds the
// hosted Service, dry-run creates a second NodePort Service as alice, and
// the quota admission (which checks dry runs, pkg/admission/plugin/
// resourcequota: only the usage update is skipped) refuses it: Forbidden,
// "exceeded quota" — the quota the found Service itself uses. The re-run
// returns ErrRejected, which the agent records as "refused, nothing
// written", while both Services of the exposure are in place and its
// port is reachable from outside, with no Undo to roll it back. Observe
// (the agent's answer after the deadline, as alice) fails the same way:
// "what the cluster holds is not alice's change to report". The same
// holds for the management Service found in place under a quota in the
// control-plane namespace. What should hold: a found object is asked
// about permission only — a SubjectAccessReview as the approver (Access's
// review of create services in that namespace), not a dry-run create
// that admission and quota judge as a second object; the re-run reports
// the exposure in place. Fix: permitsHostedFound (and the management
// found-in-place check) review access, or treat a quota refusal as
// permission granted.
//
// Resolved: a Service found in place (hosted or management) is asked
// about as a permission (SubjectAccessReview as the approver), not by a
// dry-run create.
func TestI28DHostedQuotaRefusesTheApproversOwnExposure(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	c, hosted, agent, alice := hostedApprover(t, "kvquota")
	hostedGrant(t, hosted.Kube, appNS, "alice", "create", "delete")
	nodePortQuota(t, hosted, appNS, 3)
	req := exposeReq("expo-quota001", c)
	res, err := asAliceOnceAllowed(t, agent, alice, req)
	if err != nil || res.Outcome != actions.OutcomeApplied {
		t.Fatalf("expose as alice: %+v, %v", res, err)
	}
	cpNS := hypershift.ControlPlaneNamespace(c.Namespace, c.Name)
	if !slices.Contains(serviceNames(t, env.Kube, cpNS), actions.ManagementServiceName(req.ID)) {
		t.Fatal("no management Service")
	}

	// Its result was lost: the re-run, and the observation after the
	// deadline, both as alice.
	x, err := agent.As(alice, identity.Extra(req.ID, "UREQUESTER1", []string{"UALICE0001"}))
	if err != nil {
		t.Fatal(err)
	}
	again, err := x.Execute(ctx, req)
	if err != nil || again.Outcome != actions.OutcomeApplied {
		t.Errorf("re-run as alice of her own exposure: %+v, %v (rejected: %v) — both Services are in place and the port is open, the agent would record \"refused, nothing written\" with no Undo",
			again, err, errors.Is(err, actions.ErrRejected))
	}
	_, inPlace, err := x.Observe(ctx, req)
	if err != nil || !inPlace {
		t.Errorf("Observe as alice of her own exposure: in place %v, %v; want in place", inPlace, err)
	}
}

// An approver who may forward (attacker 4's side: the legitimate
// approver whom the third review's fix now lets expose): alice is mapped
// in the hosted cluster, may create and delete hcpbot's Services in the
// control-plane namespace and nothing in the hosted cluster. Since the
// third review, Access asks nothing of the hosted cluster for a forward of
// the app's own NodePort Service, so she may expose it — and the exposure
// is made as her. Its rollback writes nothing in the hosted cluster
// either (the action made no Service there; permitsHostedDelete finds
// none and the rollback as her succeeds), yet Access still asks the
// hosted delete for every rollback of an exposure: her identity check
// says she lacks "delete services ... in hosted cluster", the bot does not
// count her approval of the rollback, and with two approvers the agent
// refuses it as not-permitted. The port she opened stays open: she may
// open what she may not close. What should hold: Access asks about the
// writes the rollback makes; the action's hosted Services are readable
// with the agent's own client (by the action id label), and with none
// there nothing is asked of the hosted cluster. Fix: in Access, for a
// rollback of an exposure, list the hosted Services of undo.ActionID and
// skip the hosted review when there are none.
//
// Resolved: Access asks nothing of the hosted cluster for the rollback
// of an action that owns no hosted Service.
func TestI28DRollbackOfForwardAsksHostedDelete(t *testing.T) {
	env.Need(t)
	_, agent, alice, undo := forwardedByAlice(t, "kvfwdrb", "fwdrb001")
	missing, rb, err := accessThenAsAlice(t, agent, alice, undo)
	if err != nil || rb.Outcome != actions.OutcomeRolledBack {
		t.Fatalf("rollback of the forward as alice: %+v, %v", rb, err)
	}
	if len(missing) > 0 {
		t.Errorf("Access(alice, rollback of her forward) = %q, but the rollback writes nothing in the hosted cluster and succeeds as her (%s): her approval of closing the port she opened is refused for a write that is never made",
			strings.Join(missing, "; "), rb.Summary)
	}
}
