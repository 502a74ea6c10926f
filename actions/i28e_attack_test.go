package actions_test

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/identity"
	"github.com/hcpbot/hcpbot/internal/scenario"
)

// The fifth attack review of issue 28 (the fixes of the fourth): each
// test here failed when it was written, and names the attacker of
// docs/security.md it plays.

// forwardedByAlice forwards the app's NodePort Service shop as alice
// (hostedApprover's cluster name) under action expo-<id>, and returns the
// rollback undo-<id> of that exposure.
func forwardedByAlice(t *testing.T, name, id string) (scenario.Cluster, *actions.Executor, identity.Identity, actions.Change) {
	t.Helper()
	c, hosted, agent, alice := hostedApprover(t, name)
	req := forwardShop(t, c, hosted, "expo-"+id)
	res, err := asAliceOnceAllowed(t, agent, alice, req)
	if err != nil || res.Outcome != actions.OutcomeApplied || res.Undo == nil {
		t.Fatalf("forward of shop as alice: %+v, %v", res, err)
	}
	undo := actions.Change{ID: "undo-" + id, Type: actions.TypeRollback, Cluster: req.Cluster, RequestedBy: "UREQUESTER1",
		Rollback: &actions.RollbackParams{Undo: *res.Undo}}
	return c, agent, alice, undo
}

// An approver without the Kubernetes rights (attacker 4: bob, mapped in
// the hosted cluster like every approver of his entry, may not delete
// hcpbot's Services in the control-plane namespace), and whoever can
// write Secrets in the HostedCluster namespace (or just a hosted cluster
// that cannot be reached, as in the incident the exposure was for): the
// admin kubeconfig Secret is gone when the agent reviews the
// co-approvers of an exposure's rollback. Access makes the management
// review first — a definite answer: bob lacks delete services there —
// then fails on the hosted part and returns (nil, err), dropping the
// denial it already has. approversMay lets an exposure rollback through
// a co-approver whose review "cannot be made", so bob's approval counts
// towards approvals.required although RBAC answered that he may not
// make the change (docs/security.md: "every counted approval is judged
// by RBAC"; only an unreviewable one is let through). What should hold:
// a denial the management API server gave is reported whatever the
// hosted cluster does. Fix: Access returns the management missing with
// the hosted error (or reviews the management writes in a call of their
// own), and approversMay refuses on len(missing) > 0 before it looks at
// err.
//
// Resolved: Access returns every denial it found with the error of what
// it could not ask, and approversMay (and the check's answer) take a
// denial first.
func TestI28EHostedFailureDropsTheManagementDenial(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	c, agent, _, undo := forwardedByAlice(t, "kvdrop", "drop0001")
	bob := identity.Identity{User: "bob", Groups: []string{"ops"}, Hosted: []string{c.Namespace + "/" + c.Name}}
	cpNS := hypershift.ControlPlaneNamespace(c.Namespace, c.Name)

	missing, err := agent.Access(ctx, bob, undo)
	if err != nil || len(missing) == 0 {
		t.Fatalf("Access(bob) with the hosted cluster reachable = %q, %v; want the management delete missing", missing, err)
	}

	if err := env.Kube.CoreV1().Secrets(c.Namespace).Delete(ctx, c.KubeconfigSecretName(), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	missing, err = agent.Access(ctx, bob, undo)
	if !strings.Contains(strings.Join(missing, "; "), "delete services in namespace "+cpNS) {
		t.Errorf("Access(bob, rollback) with the kubeconfig Secret gone = %q, %v: the management API server refused bob the delete, but the hosted failure drops that answer, and approversMay counts an exposure rollback's co-approver whose review errs",
			missing, err)
	}
}

// Whoever may patch Services in the hosted namespace (attacker: a tenant
// of the hosted cluster) gives the app's own Service, forwarded by an
// exposure, the action's labels. The rollback deletes what the exposure
// made (its management Service), never the app's Service: a labelled
// Service not named as hcpbot names its copies is not the action's
// (ownName), whoever the rollback acts as.
func TestI28ERollbackSparesALabelledAppService(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	c, hosted, agent, alice := hostedApprover(t, "kvlabel")
	req := forwardShop(t, c, hosted, "expo-lbl00001")
	res, err := asAliceOnceAllowed(t, agent, alice, req)
	if err != nil || res.Outcome != actions.OutcomeApplied || res.Undo == nil {
		t.Fatalf("forward of shop as alice: %+v, %v", res, err)
	}
	shop, err := hosted.Kube.CoreV1().Services(appNS).Get(ctx, "shop", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if shop.Labels == nil {
		shop.Labels = map[string]string{}
	}
	shop.Labels[actions.LabelManagedBy], shop.Labels[actions.LabelActionID] = actions.ManagedBy, req.ID
	if _, err := hosted.Kube.CoreV1().Services(appNS).Update(ctx, shop, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	undo := actions.Change{ID: "undo-lbl00001", Type: actions.TypeRollback, Cluster: req.Cluster, RequestedBy: "UREQUESTER1",
		Rollback: &actions.RollbackParams{Undo: *res.Undo}}
	// alice may not delete Services in the hosted cluster: none of the
	// action's is there to delete, so nothing is asked of it.
	rb, err := asAliceOnceAllowed(t, agent, alice, undo)
	if err != nil || rb.Outcome != actions.OutcomeRolledBack {
		t.Fatalf("rollback as alice: %+v, %v", rb, err)
	}
	for _, d := range rb.Deleted {
		if d.Cluster == actions.ClusterHosted {
			t.Errorf("the rollback deleted hosted %s", d)
		}
	}
	if _, err := hosted.Kube.CoreV1().Services(appNS).Get(ctx, "shop", metav1.GetOptions{}); err != nil {
		t.Errorf("the app's own Service after the rollback: %v", err)
	}
}
