package approval_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/identity"
)

// The fourth attack review of issue 28 (the fixes of the third): each
// test here failed when it was written, and names the attacker of
// docs/security.md it plays.

// unreadableAfterWrite is the impersonating executor of a cluster whose
// hosted admin kubeconfig Secret went between the write and the
// observation: the write as the approver lands and its answer is lost,
// and Observe then fails where actions.HostedRESTConfig does — on the
// agent's own read of the Secret, before anything is asked as the
// approver.
type unreadableAfterWrite struct{ writtenAs }

func (u unreadableAfterWrite) Observe(context.Context, actions.Change) (*actions.Result, bool, error) {
	return nil, false, fmt.Errorf("%w: Secret clusters/c1-admin-kubeconfig not found", actions.ErrKubeconfig)
}

// Whoever can write Secrets in the HostedCluster's namespace (the
// kubeconfig Secret's attacker of docs/security.md), or HyperShift
// rotating it: the change is written as alice, the answer is lost, and
// the Secret is deleted before the agent reads the cluster. The third
// review's observe reports every "definite" error of an Observe made with
// the acting executor as "what the cluster holds is not alice's change
// to report" — but nothingWritten's list holds ErrKubeconfig, a failure
// of the agent's own read, not a refusal of alice's dry run. Before, the
// same read failure was "outcome unknown" (code unknown: look at the
// cluster); now the outcome asserts the cluster holds something not
// hers, with code internal, while her exposure is in place: a port open
// with no Undo to close it. What should hold: only
// a refusal of the dry run as the approver (ErrRejected) is "not theirs
// to report"; a read that failed is unknown. Fix: in agent.observe, test
// errors.Is(err, actions.ErrRejected) instead of nothingWritten(err).
//
// Resolved: only a refusal (actions.ErrRejected) of what was found is
// reported as not the approver's; other errors stay unknown.
func TestI28DObserveReadFailureReportedAsNotTheApprovers(t *testing.T) {
	e := newEnv(t)
	m := identities(true)
	f := e.flow(fourEyes(), func(c *approval.Config) { c.Identities = m })
	e.serve(func(c *approval.AgentConfig) {
		c.Identities = m
		c.Transient = transient
		c.As = func(id identity.Identity, _ map[string][]string) (approval.Executor, error) {
			return unreadableAfterWrite{writtenAs{fakeExecutor: e.x, user: id.User, cut: true}}, nil
		}
	})
	e.serveChecks(m, func(context.Context, identity.Identity, actions.Change) ([]string, error) { return nil, nil })

	ctx := testContext(t)
	// An exposure: the observation reads the hosted cluster through the
	// admin kubeconfig Secret.
	expose := actions.Change{Type: actions.TypeExposeNodePort, Cluster: cluster,
		Expose: &actions.ExposeParams{Namespace: "petclinic", Service: "petclinic"}}
	p, err := f.Propose(ctx, expose, requester, approval.ForSource(source))
	if err != nil {
		t.Fatal(err)
	}
	var got outcome
	if _, err := f.Approve(ctx, p.ID, approver, approval.OnOutcome(got.fn)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the outcome", func() bool { return len(got.got()) == 1 })
	o := got.got()[0]
	if e.x.runs(p.ID) != 1 {
		t.Fatalf("%d runs, want 1", e.x.runs(p.ID))
	}
	if o.Code != approval.CodeUnknown || strings.Contains(o.Reason, "not alice's change") {
		t.Errorf("outcome %s, code %q: %s — the change was written as alice and only the agent's read of the cluster failed afterwards; want code unknown, not a claim that the cluster holds something not hers",
			o.State, o.Code, o.Reason)
	}
}
