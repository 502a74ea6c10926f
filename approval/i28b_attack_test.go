package approval_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/identity"
)

// The second attack review of issue 28 (acting as the approver): each
// test here failed when it was written, and names the attacker of
// docs/security.md it plays.

// writtenAs is what actions.Executor.As makes of the fake cluster: the
// writes of x, reported as made by user (Result.As). With cut, the write
// lands and its answer is lost (an HTTP/2 stream reset after the API
// server committed the patch): an error that does not say whether
// anything was written.
type writtenAs struct {
	*fakeExecutor
	user string
	cut  bool
}

var errCut = errors.New("stream error: stream ID 7; INTERNAL_ERROR; received from peer")

func (w writtenAs) Execute(ctx context.Context, ch actions.Change) (*actions.Result, error) {
	res, err := w.fakeExecutor.Execute(ctx, ch)
	switch {
	case err != nil:
		return nil, err
	case w.cut:
		return nil, errCut
	}
	res.As = w.user
	return res, nil
}

// No attacker, only the agent's own recovery, with identities.required:
// the change is written as alice (impersonated), the answer of the write
// is lost, and the agent, not knowing whether it wrote, reads the
// cluster with its own executor (agent.observe): the change is in
// place, and the outcome is recorded from that read — with Result.As
// empty, which result.go defines as "the agent's own" rights. The
// outcome in Slack, the agent's audit record and the Kubernetes Event
// then no longer say "written as Kubernetes user alice"; under
// identities.required they claim a change the agent never makes. The
// same happens past the deadline after a crash (a re-run that observes).
// What should hold: an outcome observed after an impersonated attempt
// names the identity that attempt wrote as (the approver's: actor(p)
// again), or says it is unknown — never the agent's own by omission.
//
// Resolved: agent.observe takes the identity the attempts wrote as
// (actor(p)) and reports a change found in place as written by it.
func TestI28BObservedOutcomeForgetsTheApprover(t *testing.T) {
	e := newEnv(t)
	m := identities(true)
	f := e.flow(fourEyes(), func(c *approval.Config) { c.Identities = m })
	var imp impersonation
	e.serve(func(c *approval.AgentConfig) {
		c.Identities = m
		c.Transient = transient
		c.As = func(id identity.Identity, extra map[string][]string) (approval.Executor, error) {
			_, _ = imp.acting(e.x)(id, extra)
			return writtenAs{fakeExecutor: e.x, user: id.User, cut: true}, nil
		}
	})
	e.serveChecks(m, func(context.Context, identity.Identity, actions.Change) ([]string, error) { return nil, nil })

	ctx := testContext(t)
	p, err := f.Propose(ctx, noProxyChange(), requester, approval.ForSource(source))
	if err != nil {
		t.Fatal(err)
	}
	var got outcome
	if _, err := f.Approve(ctx, p.ID, approver, approval.OnOutcome(got.fn)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the outcome", func() bool { return len(got.got()) == 1 })
	o := got.got()[0]
	if as, _ := imp.last(); as.User != "alice" || e.x.runs(p.ID) != 1 {
		t.Fatalf("the agent acted as %q, %d runs; want alice, once", as.User, e.x.runs(p.ID))
	}
	if o.State != approval.StateExecuted || o.Result == nil {
		t.Fatalf("outcome %s (%s), want executed", o.State, o.Reason)
	}
	var agentRecord *audit.Record
	for _, r := range e.records(p.ID) {
		if r.Kind == audit.KindExecuted && strings.HasSuffix(r.ID, ".agent") {
			agentRecord = &r
		}
	}
	if o.Result.As != "alice" {
		t.Errorf("the change was written as alice, the outcome says written as %q (empty: the agent's own rights, which identities.required forbids)", o.Result.As)
	}
	if agentRecord == nil || !strings.Contains(agentRecord.Reason, "written as Kubernetes user alice") {
		t.Errorf("the agent's audit record of the execution: %+v; want it to name alice as the Kubernetes user written as", agentRecord)
	}
}

// Whoever edits the agent's configuration (attacker 5), or no one — the
// agent's copy of the identities section (configs/deploy/agent/config.yaml,
// kept equal to the bot's by hand) lags behind — with identities.required
// off, the default. The bot maps alice, so it asks the agent whether her
// identity may make the change; the agent, which does not map her,
// answers with nothing missing (judgeCheck: "not required: the agent
// acts as itself, nothing to check"), the bot counts her approval without
// a note, and the agent makes the change with its own ServiceAccount.
// README: "mapped approvers are impersonated either way", and "a person
// who may not patch a HostedCluster cannot have the agent do it for
// them" — alice may not (the agent's Access would say so, were it asked
// as her). The fix of the first review binds the agent only under
// required (Decision.AsApprover). What should hold: an approval the bot
// resolved to an identity is sealed as such, and the agent that cannot
// resolve the same approver refuses it (and says so at the check) rather
// than act as itself.
//
// Resolved: the bot seals AsApprover whenever its map gives the approver
// an identity, and asks its checks as Required: the agent without the
// mapping answers NoIdentity, and refuses at the write.
func TestI28BMappedApproverActedForWithTheAgentsRights(t *testing.T) {
	e := newEnv(t)
	f := e.flow(fourEyes(), func(c *approval.Config) { c.Identities = identities(false) })
	var imp impersonation
	e.serve(func(c *approval.AgentConfig) {
		// The agent's copy lacks the section.
		c.As = imp.acting(e.x)
	})
	asked := make(chan identity.Identity, 10)
	e.serveChecks(identity.Map{}, func(_ context.Context, id identity.Identity, _ actions.Change) ([]string, error) {
		asked <- id
		return []string{"patch hostedclusters.hypershift.openshift.io in namespace clusters (name c1)"}, nil
	})
	ctx := testContext(t)
	p, err := f.Propose(ctx, noProxyChange(), requester, approval.ForSource(source))
	if err != nil {
		t.Fatal(err)
	}
	var got outcome
	p, err = f.Approve(ctx, p.ID, approver, approval.OnOutcome(got.fn))
	if err != nil {
		// Refused at the check: what should hold.
		t.Logf("alice's approval refused: %v", err)
		return
	}
	waitFor(t, 30*time.Second, "the outcome", func() bool { return len(got.got()) == 1 })
	as, _ := imp.last()
	if o := got.got()[0]; o.State == approval.StateExecuted && as.User == "" {
		t.Errorf("alice, whom the bot maps (and told nothing: note %q), had the change executed by the agent with its own rights (outcome %s, runs %d, access reviewed as her: %d)",
			p.IdentityNote, o.State, e.x.runs(p.ID), len(asked))
	}
}

// An approver without the Kubernetes rights (attacker 4), under
// approvals.required: 2. alice (mapped, may not patch) approves while the
// agent does not answer the identity check — restarting, or kept busy by
// checks replayed from a stream the bot's NATS user made (attacker 1):
// her approval counts, with the note that "RBAC decides at the write".
// bob (may patch) completes the decision, and the change is written as
// bob: RBAC at the write never judges alice. README: "a refusal names
// the missing permission before anything is sealed or written; the
// approval does not count", and an unanswered check "leaves the decision
// to RBAC at the write" — which holds only for the approver who
// completes. What should hold: an approval that counts was either
// allowed by the agent's check or is judged by RBAC at execution (the
// agent reviewing every counted approver's identity before the write, or
// the bot asking again, before it seals the completing approval, for the
// approvals whose check went unanswered).
//
// Resolved: the agent reviews every counted approver but the completing
// one before the write (AgentConfig.Access, agent.approversMay).
func TestI28BUncheckedApprovalNeverJudgedByRBAC(t *testing.T) {
	e := newEnv(t)
	m := identities(true)
	pol := fourEyes()
	pol.Approvals = 2
	f := e.flow(pol, func(c *approval.Config) {
		c.Identities, c.Groups = m, approval.StaticGroups{"S0OPS00001": {approver2}}
	})
	// alice may not patch, bob may: what the agent's Access (its
	// SubjectAccessReviews) says, at a check and before a write.
	access := func(_ context.Context, id identity.Identity, _ actions.Change) ([]string, error) {
		if id.User == "alice" {
			return []string{"patch hostedclusters.hypershift.openshift.io in namespace clusters (name c1)"}, nil
		}
		return nil, nil
	}
	var imp impersonation
	e.serve(func(c *approval.AgentConfig) {
		c.Identities = m
		c.As = imp.acting(e.x)
		c.Access = access // as cmd/hcpbot wires it: the executor's Access
	})
	ctx := testContext(t)
	p, err := f.Propose(ctx, noProxyChange(), requester, approval.ForSource(source))
	if err != nil {
		t.Fatal(err)
	}
	// Nobody answers checks yet.
	p, err = f.Approve(ctx, p.ID, approver)
	if err != nil || p.IdentityNote == "" {
		t.Fatalf("alice's approval without an answering agent: note %q, err %v", p.IdentityNote, err)
	}
	t.Logf("alice was told: %s", p.IdentityNote)
	// The agent answers from now on.
	e.serveChecks(m, access)
	var got outcome
	if _, err := f.Approve(ctx, p.ID, approver2, approval.OnOutcome(got.fn)); err != nil {
		t.Fatalf("bob's approval: %v", err)
	}
	waitFor(t, 30*time.Second, "the outcome", func() bool { return len(got.got()) == 1 })
	as, _ := imp.last()
	o := got.got()[0]
	if o.State == approval.StateExecuted {
		t.Errorf("executed as %q with approvers %v: alice's approval counted, though her identity may not make the change and no RBAC decision was ever made as her", as.User, o.Approvers)
	}
	// Resolved: the agent reviews every counted approver before the
	// write, and says whose approval does not count, and why.
	if o.State != approval.StateFailed || o.Code != approval.CodeNotPermitted || !strings.Contains(o.Reason, "the approval of "+approver+" does not count") ||
		!strings.Contains(o.Reason, "lacks patch hostedclusters") || e.x.runs(p.ID) != 0 {
		t.Errorf("outcome %s %s %q after %d runs; want failed, not-permitted, naming alice's approval and the permission", o.State, o.Code, o.Reason, e.x.runs(p.ID))
	}
}
