package approval_test

import (
	"errors"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/bot/approval"
)

func exposeRequest(svc string) actions.Change {
	return actions.Change{
		Type:    actions.TypeExposeNodePort,
		Cluster: cluster,
		Expose:  &actions.ExposeParams{Namespace: "shop", Service: svc, Ports: []actions.ExposePort{{Port: 8080}}},
	}
}

// exposeResult is what the executor reports for an expose.
func exposeResult(id, svc string, nodePort int32) actions.Result {
	return actions.Result{
		ActionID: id, Type: actions.TypeExposeNodePort, Outcome: actions.OutcomeApplied,
		Summary: "exposed shop/" + svc,
		Created: []actions.ObjectRef{
			{Cluster: actions.ClusterHosted, Kind: "Service", Namespace: "shop", Name: "hcpbot-" + id},
			{Cluster: actions.ClusterManagement, Kind: "Service", Namespace: "clusters-c1", Name: "hcpbot-" + id},
		},
		Ports: []actions.ExposedPort{{Protocol: "TCP", Port: 8080, NodePort: nodePort}},
		Undo:  &actions.Undo{ActionID: id, Type: actions.TypeExposeNodePort, Cluster: cluster, Expose: &actions.ExposeUndo{HostedNamespace: "shop"}},
	}
}

// run proposes req, approves it and, unless execute is false, marks it
// executed with the result res makes from its id.
func run(t *testing.T, e *env, s *approval.Store, req actions.Change, res func(id string) actions.Result) approval.Proposal {
	t.Helper()
	ctx := testContext(t)
	p, err := s.Propose(ctx, req, requester, approval.ForSource("mgmt-1"))
	if err != nil {
		t.Fatalf("Propose: %v", err)
	}
	if p, err = s.Approve(ctx, p.ID, approver, e.clock.Now()); err != nil {
		t.Fatalf("Approve: %v", err)
	}
	if res == nil {
		return p
	}
	e.clock.Add(time.Second)
	if p, err = s.MarkExecuted(ctx, p.ID, res(p.ID)); err != nil {
		t.Fatalf("MarkExecuted: %v", err)
	}
	return p
}

// Exposures lists executed expose proposals only: not pending or failed
// ones, not other action types, not those rolled back (marked, or undone
// by an executed rollback whose marking of the original never happened).
func TestExposures(t *testing.T) {
	e := newEnv(t)
	s := e.store(defaultPolicy(), nil)
	ctx := testContext(t)

	if got, err := s.Exposures(ctx); err != nil || len(got) != 0 {
		t.Fatalf("empty bucket: %v, %v", got, err)
	}

	web := run(t, e, s, exposeRequest("web"), func(id string) actions.Result { return exposeResult(id, "web", 30080) })
	e.clock.Add(time.Minute)
	api := run(t, e, s, exposeRequest("api"), func(id string) actions.Result { return exposeResult(id, "api", 30081) })
	// Rolled back and marked so.
	gone := run(t, e, s, exposeRequest("gone"), func(id string) actions.Result { return exposeResult(id, "gone", 30082) })
	if _, err := s.MarkRolledBack(ctx, gone.ID, approver2, actions.Result{ActionID: gone.ID, Type: actions.TypeRollback, Outcome: actions.OutcomeRolledBack}); err != nil {
		t.Fatal(err)
	}
	// Undone by an executed rollback, original still marked executed.
	undone := run(t, e, s, exposeRequest("undone"), func(id string) actions.Result { return exposeResult(id, "undone", 30083) })
	run(t, e, s, actions.Change{Type: actions.TypeRollback, Cluster: cluster, Rollback: &actions.RollbackParams{Undo: *undone.Result.Undo}},
		func(id string) actions.Result {
			return actions.Result{ActionID: id, Type: actions.TypeRollback, Outcome: actions.OutcomeRolledBack}
		})
	// Approved, never executed; failed; a noProxy patch; pending.
	run(t, e, s, exposeRequest("approved"), nil)
	failed := run(t, e, s, exposeRequest("failed"), nil)
	if _, err := s.MarkFailed(ctx, failed.ID, "port taken", nil); err != nil {
		t.Fatal(err)
	}
	run(t, e, s, noProxyRequest(), func(id string) actions.Result {
		return actions.Result{ActionID: id, Type: actions.TypeNoProxyPatch, Outcome: actions.OutcomeApplied}
	})
	if _, err := s.Propose(ctx, exposeRequest("pending"), requester); err != nil {
		t.Fatal(err)
	}

	got, err := s.Exposures(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].ID != web.ID || got[1].ID != api.ID {
		t.Fatalf("exposures %+v, want %s and %s", got, web.ID, api.ID)
	}
	p := got[0]
	if p.RequestedBy != requester || p.DecidedBy != approver || p.Source != "mgmt-1" ||
		!p.ExecutedAt.Equal(web.ExecutedAt) || p.ExecutedAt.IsZero() || p.Executed() != p.ExecutedAt ||
		p.Result == nil || len(p.Result.Ports) != 1 || p.Result.Ports[0].NodePort != 30080 {
		t.Errorf("exposure %+v", p)
	}
	if !got[1].ExecutedAt.After(got[0].ExecutedAt) {
		t.Errorf("not ordered by execution: %v, %v", got[0].ExecutedAt, got[1].ExecutedAt)
	}

	// Bounded: past the bound the answer is partial and says so.
	defer approval.SetMaxListed(3)()
	part, err := s.Exposures(ctx)
	if !errors.Is(err, approval.ErrTruncated) || len(part) > 2 {
		t.Errorf("bounded list: %d exposures, %v; want ErrTruncated", len(part), err)
	}
}
