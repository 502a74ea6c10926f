package actions_test

import (
	"context"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
)

// A change is validated once when the bot proposes it and once when the
// agent executes it, whatever the hops in between: proposed and approved
// through the bot's flow (Propose validates), sealed and queued, consumed
// by the agent, read from the approval store, permitted and executed
// (Execute validates, its paths past it do not) on a real API server.
func TestValidatedOnceAtEachBoundary(t *testing.T) {
	env.Need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := scenario.BehindProxy(env.Namespace(t), "once")
	seedCluster(t, c)
	validations := actions.CountValidations(t, func(r actions.Change) bool { return r.Cluster.Namespace == c.Namespace })

	source := "mgmt-once"
	srv := natstest.RunServer(t)
	connect := func() *bus.Conn {
		conn, err := bus.Connect(ctx, bus.Config{URLs: []string{srv.ClientURL()}}, natstest.Logger(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(conn.Close)
		return conn
	}
	botConn, agentConn := connect(), connect()
	signer, err := approval.NewEphemeralSigner()
	if err != nil {
		t.Fatal(err)
	}
	trail, err := audit.Open(ctx, botConn.JS)
	if err != nil {
		t.Fatal(err)
	}
	flow, err := approval.NewFlow(ctx, botConn.JS, approval.Config{Signer: signer, Trail: trail, Log: natstest.Logger(t),
		Policy: approval.Policy{Approvers: []string{"U0APPROVER"}}})
	if err != nil {
		t.Fatal(err)
	}
	x, _, _ := executor(t)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{}, 2)
	go func() { _ = flow.Run(rctx); done <- struct{}{} }()
	go func() {
		_ = approval.Serve(rctx, agentConn.JS, approval.AgentConfig{Source: source, Executor: x, Log: natstest.Logger(t),
			Trust: approval.Trust{Keys: []string{signer.PublicKey()}}})
		done <- struct{}{}
	}()
	t.Cleanup(func() { stop(); <-done; <-done })

	run := func(id string) approval.Proposal {
		t.Helper()
		outcome := make(chan approval.Proposal, 1)
		if _, err := flow.Approve(ctx, id, "U0APPROVER", approval.OnOutcome(func(p approval.Proposal) { outcome <- p })); err != nil {
			t.Fatal(err)
		}
		select {
		case p := <-outcome:
			return p
		case <-ctx.Done():
			t.Fatal("no outcome")
		}
		return approval.Proposal{}
	}
	p, err := flow.Propose(ctx, actions.Change{Type: actions.TypeNoProxyPatch, Cluster: actions.ClusterRef{Namespace: c.Namespace, Name: c.Name},
		NoProxy: &actions.NoProxyParams{Expected: scenario.SeedNoProxy, Add: []string{"kubernetes", "172.31.0.0/16", "10.132.0.0/14"}}},
		"U0REQUESTER", approval.ForSource(source))
	if err != nil {
		t.Fatal(err)
	}
	if n := validations(actions.TypeNoProxyPatch); n != 1 {
		t.Errorf("proposed: validated %d times, want 1 (the bot's boundary)", n)
	}
	if p = run(p.ID); p.State != approval.StateExecuted || p.Result.Outcome != actions.OutcomeApplied {
		t.Fatalf("outcome %s %+v: %s", p.State, p.Result, p.Reason)
	}
	if n := validations(actions.TypeNoProxyPatch); n != 2 {
		t.Errorf("sent, received and executed: validated %d times, want 2 (once by the bot, once by the agent)", n)
	}

	rb, _, err := flow.ProposeRollback(ctx, p.ID, "U0REQUESTER")
	if err != nil {
		t.Fatal(err)
	}
	if rb = run(rb.ID); rb.State != approval.StateExecuted || rb.Result.Outcome != actions.OutcomeRolledBack {
		t.Fatalf("rollback outcome %s %+v: %s", rb.State, rb.Result, rb.Reason)
	}
	if got, _ := readHC(t, c.Namespace, c.Name); got != scenario.SeedNoProxy {
		t.Fatalf("noProxy after rollback = %q, want %q", got, scenario.SeedNoProxy)
	}
	if n := validations(actions.TypeRollback); n != 2 {
		t.Errorf("rollback: validated %d times, want 2 (once by the bot, once by the agent)", n)
	}
}
