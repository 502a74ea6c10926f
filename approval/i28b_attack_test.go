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
