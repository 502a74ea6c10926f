package command_test

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/internal/testenv/golden"
)

// TestGoldenBlockKit compares the replies of the approval flow that carry
// buttons — a proposal (Approve / Reject), the first approval of an
// incident's fix under four-eyes, the outcome of an executed change (Roll
// back), posted into the approving conversation — with testdata/golden
// (rewrite with -update), checking each against Block Kit's limits.
// Proposal ids and expiry times vary by run and are fixed before the
// comparison.
func TestGoldenBlockKit(t *testing.T) {
	e := newApprovals(t, "mgmt-1")
	e.agent.setAnswer(func(req actions.Change) (*actions.Result, error) {
		return &actions.Result{ActionID: req.ID, Type: req.Type, Outcome: actions.OutcomeApplied,
			Summary: "added " + strings.Join(req.NoProxy.Add, ", "), Diff: "+ kubernetes",
			Undo: &actions.Undo{ActionID: req.ID, Type: req.Type, Cluster: req.Cluster,
				NoProxy: &actions.NoProxyUndo{Previous: req.NoProxy.Expected, Written: "written", ResourceVersion: "42"}}}, nil
	})
	fixed := []golden.Option{
		golden.Replace(actionID, "act-aaaaaaaaaaaaaaaa"),
		golden.Replace(regexp.MustCompile(`Expires \d\d:\d\d UTC`), "Expires 09:00 UTC"),
	}
	ctx := context.Background()

	id, r := e.propose(t, "mgmt-1", "example.com")
	golden.BlockKit(t, "proposal", r.Text, r.Blocks, fixed...)

	r = e.approvals.ApproveFix(ctx, key("mgmt-1"), nil, fix(), approver1)
	golden.BlockKit(t, "fix-first-approval", r.Text, r.Blocks, fixed...)

	var conv later
	e.approvals.Approve(conv.ctx(), id, approver1)
	r = conv.wait(t, "and applied")
	golden.BlockKit(t, "executed", r.Text, r.Blocks, fixed...)
}
