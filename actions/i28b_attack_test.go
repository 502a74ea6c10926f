package actions_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/identity"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/noproxy"
)

// The second attack review of issue 28 (acting as the approver): each
// test here failed when it was written, and names the attacker of
// docs/security.md it plays.

// An approver without the Kubernetes rights (attacker 4): dave may read,
// not delete Services in the control-plane namespace. An exposure made
// as alice is to be rolled back; its management Service is gone already
// (deleted by hand by an operator, or by anyone who may delete Services
// there). dave's approval of the rollback counts — the agent did not
// answer the identity check, which README leaves to "RBAC at the write".
// The rollback (rollbackExpose) lists the management Services of the
// action with the agent's own client, finds none, so makes no write as
// dave, and goes on to delete the hosted NodePort Service with the
// hosted cluster's admin kubeconfig: a write made for dave with the
// agent's rights, which RBAC never saw; the outcome then says "written as
// Kubernetes user dave". The exposure itself was fixed for this (its
// management dry run as the approver comes before any hosted write); its
// rollback should do the same: a dry-run delete of the management
// Service's name as the approver (Forbidden stops it; NotFound is fine)
// before anything is deleted in the hosted cluster.
func TestI28BExposeRollbackDeletesHostedWithoutTheApproversRight(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	c, hosted := kubevirtApp(t, "kvrb")
	cpNS := hypershift.ControlPlaneNamespace(c.Namespace, c.Name)
	agent, _ := asDeployedAgent(t, c.Namespace, idMap)
	grant(t, cpNS, "alice", "", "services", "create", "delete")
	alice, dave := identity.Identity{User: "alice", Groups: []string{"ops"}}, identity.Identity{User: "dave"}

	req := exposeReq("expo-rbk00001", c)
	x, err := agent.As(alice, identity.Extra(req.ID, "UREQUESTER1", []string{"UALICE0001"}))
	if err != nil {
		t.Fatal(err)
	}
	res, err := x.Execute(ctx, req)
	if err != nil || res.Undo == nil {
		t.Fatalf("expose as alice: %+v, %v", res, err)
	}
	hostedName := actions.HostedServiceName("petclinic")
	if got := serviceNames(t, hosted.Kube, appNS); !slices.Contains(got, hostedName) {
		t.Fatalf("hosted Services after the exposure: %q, want %s", got, hostedName)
	}
	// The management Service goes, by someone else's hand.
	if err := env.Kube.CoreV1().Services(cpNS).Delete(ctx, actions.ManagementServiceName(req.ID), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	undo := actions.Change{ID: "undo-rbk00001", Type: actions.TypeRollback, Cluster: req.Cluster, RequestedBy: "UREQUESTER1",
		Rollback: &actions.RollbackParams{Undo: *res.Undo}}
	if missing, err := agent.Access(ctx, dave, undo); err != nil || len(missing) != 1 {
		t.Fatalf("Access(dave, rollback) = %q, %v; want the delete of services named", missing, err)
	}
	x, err = agent.As(dave, identity.Extra(undo.ID, "UREQUESTER1", []string{"UDAVE00001"}))
	if err != nil {
		t.Fatal(err)
	}
	rb, err := x.Execute(ctx, undo)
	got := serviceNames(t, hosted.Kube, appNS)
	if !slices.Contains(got, hostedName) {
		as := ""
		if rb != nil {
			as = rb.As
		}
		t.Errorf("dave, who may not delete Services in %s, had the hosted Service %s deleted with the agent's admin kubeconfig (outcome %v, written as %q, err %v); want ErrRejected and nothing deleted",
			cpNS, hostedName, rb != nil && rb.Outcome == actions.OutcomeRolledBack, as, err)
	} else if !errors.Is(err, actions.ErrRejected) {
		t.Errorf("rollback as dave: %+v, %v; want ErrRejected", rb, err)
	}
}

// Someone who may patch the HostedCluster (attacker 4's peer: a mapped
// approver with the right, or anyone else with it) makes the pending fix
// themselves, marking it with the action id the proposal shows in Slack
// (hcpbot.io/action), before the agent runs it. The approver, carol, may
// not patch at all (Access says so; the check was not answered, or her
// right went since). Acting as carol, the executor finds its "own" mark
// on the value it would write, writes nothing (no request as carol ever
// reaches RBAC) and reports the change applied — written as Kubernetes
// user carol — with a Roll back: hcpbot's outcome, its audit record and
// the Event credit carol with a change she could not make and did not
// make. What should hold: acting as the approver, a change found in
// place is reported as theirs only after RBAC agreed to it (the dry-run
// patch as the approver, or Access), else refused as ErrRejected.
func TestI28BChangeFoundInPlaceIsCreditedToTheApprover(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	c, agent, rec := seededAgent(t, idMap)
	carol := identity.Identity{User: "carol"}
	req := patchRequest("fix-inpl0001", c, scenario.SeedNoProxy)
	if missing, err := agent.Access(ctx, carol, req); err != nil || len(missing) != 1 {
		t.Fatalf("Access(carol) = %q, %v; want the patch named", missing, err)
	}

	// Mallory writes the fix and the action's mark (as the admin here).
	after := noproxy.Merge(req.NoProxy.Expected, req.NoProxy.Add)
	body, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": map[string]any{actions.AnnotationAction: req.ID}},
		"spec":     map[string]any{"configuration": map[string]any{"proxy": map[string]any{"noProxy": after}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Dynamic.Resource(hypershift.HostedClusterGVR).Namespace(c.Namespace).Patch(ctx, c.Name, types.MergePatchType, body, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}

	rec.take()
	x, err := agent.As(carol, identity.Extra(req.ID, "UREQUESTER1", []string{"UCAROL0001"}))
	if err != nil {
		t.Fatal(err)
	}
	res, err := x.Execute(ctx, req)
	calls := rec.take()
	if err == nil && res.Outcome == actions.OutcomeApplied && res.As == "carol" {
		t.Errorf("carol, who may not patch the HostedCluster, is reported to have applied %s (written as %q, Undo %v); the executor's calls: %q — nothing was asked of RBAC as carol",
			req.ID, res.As, res.Undo != nil, calls)
	}
}
