package actions_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/identity"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv"
)

// The third attack review of issue 28 (acting as the approver in hosted
// clusters, and the fixes of the second review): each test here failed
// when it was written, and names the attacker of docs/security.md it
// plays.

// hostedApprover is a KubeVirt hosted cluster running the seed 004 app
// (kubevirtApp), the agent deployed with alice mapped and acted as in that
// hosted cluster too, and alice's identity: she may create and delete
// Services in its control-plane namespace, nothing in the hosted cluster.
func hostedApprover(t *testing.T, name string) (scenario.Cluster, *testenv.Hosted, *actions.Executor, identity.Identity) {
	t.Helper()
	c, hosted := kubevirtApp(t, name)
	m := identity.Map{Required: true, Entries: []identity.Entry{{Slack: "UALICE0001", User: "alice", Groups: []string{"ops"}, Hosted: []string{c.Namespace + "/" + c.Name}}}}
	agent, _ := asDeployedAgent(t, c.Namespace, m)
	grant(t, hypershift.ControlPlaneNamespace(c.Namespace, c.Name), "alice", "", "services", "create", "delete")
	alice, _, err := m.For("mgmt-1", "UALICE0001", nil, "")
	if err != nil {
		t.Fatal(err)
	}
	return c, hosted, agent, alice
}

// asAliceOnceAllowed waits until Access finds nothing missing for alice
// (RBAC caches catch up), then executes ch as her.
func asAliceOnceAllowed(t *testing.T, agent *actions.Executor, alice identity.Identity, ch actions.Change) (*actions.Result, error) {
	t.Helper()
	ctx := context.Background()
	testenv.Eventually(t, 30*time.Second, "alice allowed "+ch.ID, func() bool {
		missing, err := agent.Access(ctx, alice, ch)
		return err == nil && len(missing) == 0
	})
	x, err := agent.As(alice, identity.Extra(ch.ID, "UREQUESTER1", []string{"UALICE0001"}))
	if err != nil {
		t.Fatal(err)
	}
	return x.Execute(ctx, ch)
}

// An approver without the Kubernetes rights (attacker 4), here in the
// hosted cluster only: alice is mapped there (hostedClusters names it),
// may create and delete hcpbot's Services in the control-plane namespace,
// and may create Services in the app's hosted namespace but not delete
// them (or an admission policy of the hosted cluster refuses the delete;
// or her right went after the check). Her rollback of an exposure deletes
// the management Service as her first, then the hosted delete is refused
// (Forbidden): rollbackExpose returns ErrRejected, which the agent takes
// for "refused, nothing written" (nothingWritten) and records as a
// refusal. The management Service is gone all the same: the outcome and
// the audit record say nothing was done while one of the exposure's two
// objects was deleted as alice, and the bot still shows the exposure as
// live. What should hold: acting as the approver in the hosted cluster,
// the rollback tries the hosted delete as them (a dry run, as it does for
// the management delete) before deleting anything, so a refusal leaves
// both Services in place; or a refusal after a write is not reported as
// nothing written.
//
// Resolved: acting as the approver in the hosted cluster, the rollback
// dry-runs the hosted deletes as them before any delete
// (permitsHostedDelete); a refusal after the management delete is no
// longer "nothing written".
func TestI28CHostedRollbackRefusalAfterManagementDelete(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	c, hosted, agent, alice := hostedApprover(t, "kvpart")
	cpNS := hypershift.ControlPlaneNamespace(c.Namespace, c.Name)
	hostedGrant(t, hosted.Kube, appNS, "alice", "create")
	req := exposeReq("expo-part0001", c)
	res, err := asAliceOnceAllowed(t, agent, alice, req)
	if err != nil || res.Undo == nil || res.As != "alice" {
		t.Fatalf("expose as alice: %+v, %v", res, err)
	}
	mgmtName := actions.ManagementServiceName(req.ID)

	undo := actions.Change{ID: "undo-part0001", Type: actions.TypeRollback, Cluster: req.Cluster, RequestedBy: "UREQUESTER1",
		Rollback: &actions.RollbackParams{Undo: *res.Undo}}
	x, err := agent.As(alice, identity.Extra(undo.ID, "UREQUESTER1", []string{"UALICE0001"}))
	if err != nil {
		t.Fatal(err)
	}
	_, err = x.Execute(ctx, undo)
	if err == nil {
		t.Fatalf("rollback as alice, who may not delete Services in the hosted cluster, succeeded")
	}
	mgmtLeft := slices.Contains(serviceNames(t, env.Kube, cpNS), mgmtName)
	if errors.Is(err, actions.ErrRejected) && !mgmtLeft {
		t.Errorf("rollback as alice: %v — ErrRejected, which the agent reports as refused with nothing written, yet management Service %s/%s was deleted as alice; want the hosted delete tried as her before any delete (both Services left), or an error that does not say nothing was written",
			err, cpNS, mgmtName)
	}
	if !slices.Contains(serviceNames(t, hosted.Kube, appNS), actions.HostedServiceName("petclinic")) {
		t.Errorf("the hosted Service went, though alice may not delete it")
	}
}

// Whoever can write Services in the hosted cluster (attacker 5: a tenant
// of the hosted cluster, or its own controllers) pre-creates the NodePort
// Service an exposure would make there, with hcpbot's labels and the
// action id the proposal shows in Slack. alice, mapped in that hosted
// cluster, may not create Services there (Access says so; the check went
// unanswered, or her right went since), only the management Service. The
// exposure acting as alice finds "its" hosted Service, makes no hosted
// request as her, creates the management Service forwarding the tenant's
// node ports, and reports the hosted Service as created, written as
// Kubernetes user alice. The second review fixed exactly this for the
// management Service and the noProxy change (a dry run as the approver
// before a change found in place is theirs), not for the hosted one. What
// should hold: acting as the approver in the hosted cluster, a hosted
// Service found in place is theirs only after a dry-run create as them
// there; else ErrRejected and nothing written.
//
// Resolved: a hosted Service found in place is dry-run created as the
// approver first (permitsHostedFound).
func TestI28CHostedServiceFoundInPlaceCreditedToTheApprover(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	c, hosted, agent, alice := hostedApprover(t, "kvfound")
	ref := c.Namespace + "/" + c.Name
	req := exposeReq("expo-fnd00001", c)
	if missing, err := agent.Access(ctx, alice, req); err != nil || len(missing) != 1 {
		t.Fatalf("Access(alice, expose) = %q, %v; want the hosted create named", missing, err)
	}

	// The tenant's Service, shaped as hcpbot writes its copy.
	planted := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: appNS, Name: actions.HostedServiceName("petclinic"),
			Labels:      map[string]string{actions.LabelManagedBy: actions.ManagedBy, actions.LabelActionID: req.ID},
			Annotations: map[string]string{actions.AnnotationRequestedBy: req.RequestedBy, actions.AnnotationCluster: req.Cluster.String(), actions.AnnotationSource: appNS + "/petclinic"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": "petclinic", "deployment": "petclinic"},
			Ports: []corev1.ServicePort{{Name: "8080-tcp", Protocol: corev1.ProtocolTCP, Port: 8080, TargetPort: intstr.FromInt32(8080)}}},
	}
	if _, err := hosted.Kube.CoreV1().Services(appNS).Create(ctx, planted, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	x, err := agent.As(alice, identity.Extra(req.ID, "UREQUESTER1", []string{"UALICE0001"}))
	if err != nil {
		t.Fatal(err)
	}
	res, err := x.Execute(ctx, req)
	if err == nil && res.As == "alice" && slices.ContainsFunc(res.Created, func(o actions.ObjectRef) bool { return o.Cluster == actions.ClusterHosted }) {
		t.Errorf("alice, who may not create Services in hosted cluster %s, is reported to have created hosted Service %s/%s (outcome %s, written as %q); nothing was asked of the hosted RBAC as her",
			ref, appNS, planted.Name, res.Outcome, res.As)
	} else if err != nil && !errors.Is(err, actions.ErrRejected) {
		t.Errorf("expose as alice: %v; want ErrRejected", err)
	}
}

// An approver whom the map acts as in a hosted cluster, and who may make
// everything an exposure of a Service that already is of type NodePort
// writes: its management Service (the hosted node ports are forwarded as
// they are, nothing is written in the hosted cluster). Access asks the
// hosted API server about a hosted create all the same ("asked always"),
// so the identity check tells the bot she may not, her approval does not
// count, and with two approvers the agent's approversMay refuses the
// change as not-permitted (a regression: the agent refuses a legitimate
// change). What should hold: Access asks about the writes the change
// makes; whether the app's Service is a NodePort one is readable with the
// agent's own client when Access runs.
//
// Resolved: Access reads the app Service and asks nothing of the hosted
// cluster when it is forwarded as it is.
func TestI28CAccessAsksHostedCreateForAForwardedService(t *testing.T) {
	env.Need(t)
	c, hosted, agent, alice := hostedApprover(t, "kvfwd")
	req := forwardShop(t, c, hosted, "expo-fwd00001")

	missing, res, err := accessThenAsAlice(t, agent, alice, req)
	if err != nil || res.Outcome != actions.OutcomeApplied {
		t.Fatalf("expose of a NodePort Service as alice: %+v, %v", res, err)
	}
	if len(missing) > 0 {
		t.Errorf("Access(alice, forward of %s/shop) = %q, but the exposure writes nothing in the hosted cluster and alice made it (%s): an approval of hers is refused for a write that is never made",
			appNS, missing, res.Summary)
	}
}

// HyperShift writes the HostedCluster's status all the time (a
// regression of the second review's fix): a rollback of a noProxy patch
// whose earlier attempt restored the value (its result was lost) finds
// its mark, and, acting as the approver, dry-runs the restore as them
// (permitsFound) with the resourceVersion it read. A status write between
// the read and the dry run makes the dry run a Conflict: the re-run is
// refused (ErrConflict, "changed while the action ran"), though the value
// is exactly what the rollback restored, and the rollback path, unlike
// PatchNoProxy, reads nothing again. What should hold: the permission
// probe of a change found in place carries no resourceVersion
// precondition (or is retried on conflict), and the re-run reports the
// rollback done.
//
// Resolved: permitsFound dry-runs without a resourceVersion
// precondition: it asks about permission only.
func TestI28CFoundRollbackRefusedOnStatusWrite(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	c, agent, rec := seededAgent(t, idMap)
	grant(t, c.Namespace, "alice", hypershift.HostedClusterGVR.Group, "hostedclusters", "patch")
	alice := identity.Identity{User: "alice", Groups: []string{"ops"}}
	req := patchRequest("fix-race0001", c, scenario.SeedNoProxy)
	res, err := asAliceOnceAllowed(t, agent, alice, req)
	if err != nil || res.Undo == nil {
		t.Fatalf("patch as alice: %+v, %v", res, err)
	}
	undo := actions.Change{ID: "undo-race0001", Type: actions.TypeRollback, Cluster: res.Undo.Cluster, RequestedBy: "UREQUESTER1",
		Rollback: &actions.RollbackParams{Undo: *res.Undo}}
	x, err := agent.As(alice, identity.Extra(undo.ID, "UREQUESTER1", []string{"UALICE0001"}))
	if err != nil {
		t.Fatal(err)
	}
	if rb, err := x.Execute(ctx, undo); err != nil || rb.Outcome != actions.OutcomeRolledBack {
		t.Fatalf("rollback as alice: %+v, %v", rb, err)
	}

	// Its result was lost; the re-run reads the HostedCluster, and
	// HyperShift writes its status right then.
	wrote := false
	rec.mu.Lock()
	rec.after = func(a string) {
		if a != "get hostedclusters" || wrote {
			return
		}
		wrote = true
		hyperShiftStatusWrite(t, c)
	}
	rec.mu.Unlock()
	rb, err := x.Execute(ctx, undo)
	if !wrote {
		t.Fatal("no status write was interleaved")
	}
	if err != nil || rb.Outcome != actions.OutcomeRolledBack {
		t.Errorf("re-run of the rollback after a status write: %+v, %v (conflict: %v); want rolled-back: the value is the one it restored",
			rb, err, apierrors.IsConflict(err))
	}
}
