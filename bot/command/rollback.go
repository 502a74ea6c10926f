package command

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/bot/approval"
	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/redact"
)

// rollbackPrefix names rollback proposals. The first rollback proposal of
// action act-X is rbk-X, so that proposing the same rollback twice finds
// the first one instead of making a second.
const rollbackPrefix = "rbk-"

func rollbackID(actionID string) string {
	_, suffix, _ := strings.Cut(actionID, "-")
	return rollbackPrefix + suffix
}

// ProposeRollback proposes undoing executed action id. Undoing an executed action
// changes the cluster like any other action, so it is proposed and needs
// an approver's approval (four-eyes included) before the agent runs it;
// approving it marks the original action rolled back. Every step is
// audited by the Store like any proposal.
func (a *Changes) ProposeRollback(ctx context.Context, id, user string) chatops.Reply {
	orig, err := a.Store.Get(ctx, id)
	switch {
	case errors.Is(err, approval.ErrNotFound):
		return chatops.Reply{Text: fmt.Sprintf("There is no action `%s` (mistyped, or too old to roll back).", esc(id))}
	case err != nil:
		return chatops.Reply{Text: "Could not read the action: " + errText(err)}
	}
	id = esc(id)
	switch {
	case orig.Request.Type == actions.TypeRollback:
		return chatops.Reply{Text: fmt.Sprintf("`%s` is itself a rollback; propose the original change again instead.", id)}
	case orig.State == approval.StateRolledBack:
		return chatops.Reply{Text: fmt.Sprintf("`%s` was already rolled back by %s.", id, mention(orig.RolledBackBy))}
	case orig.State != approval.StateExecuted:
		return chatops.Reply{Text: fmt.Sprintf("`%s` is %s; only executed actions can be rolled back.", id, esc(string(orig.State)))}
	case orig.Result == nil || orig.Result.Undo == nil:
		return chatops.Reply{Text: fmt.Sprintf("`%s` changed nothing, so there is nothing to roll back.", id)}
	}
	undo := *orig.Result.Undo
	req := actions.Change{
		ID: rollbackID(orig.ID), Type: actions.TypeRollback, Cluster: undo.Cluster,
		Rollback: &actions.RollbackParams{Undo: undo},
	}
	k := diagnose.Key{Source: orig.Source, Cluster: event.ClusterRef{Namespace: undo.Cluster.Namespace, Name: undo.Cluster.Name}}
	p, err := a.Store.Propose(ctx, req, user, approval.ForSource(orig.Source))
	if errors.Is(err, approval.ErrExists) {
		prev, gerr := a.Store.Get(ctx, req.ID)
		if gerr == nil && (prev.State == approval.StatePending || prev.State == approval.StateApproved || prev.State == approval.StateExecuted) {
			return chatops.Reply{Text: fmt.Sprintf("The rollback of `%s` is already proposed as `%s` (%s).", id, prev.ID, esc(string(prev.State)))}
		}
		// The first rollback proposal was rejected, expired or failed:
		// this one gets an id of its own.
		req.ID = rollbackPrefix + strings.TrimPrefix(approval.NewID(), "act-")
		p, err = a.Store.Propose(ctx, req, user, approval.ForSource(orig.Source))
	}
	warning, refused, ok := a.stored(ctx, k, user, p, err, "Could not propose the rollback: ")
	if !ok {
		return refused
	}
	text := fmt.Sprintf("%s proposes `%s`: roll back `%s` (%s) on %s — %s.\n%s%s",
		mention(user), p.ID, id, esc(string(undo.Type)), esc(k.String()), esc(redact.RedactText(undoSummary(undo))), howToDecide(p), warning)
	return proposalReply(p.ID, text)
}

// undoSummary says what a rollback will do.
func undoSummary(u actions.Undo) string {
	switch {
	case u.Expose != nil:
		return fmt.Sprintf("delete the Services labelled %s=%s in %s (management cluster) and %s (hosted cluster)",
			actions.LabelActionID, u.ActionID, hypershift.ControlPlaneNamespace(u.Cluster.Namespace, u.Cluster.Name), u.Expose.HostedNamespace)
	case u.NoProxy != nil:
		return fmt.Sprintf("restore noProxy %q, only if it still is %q", u.NoProxy.Previous, u.NoProxy.Written)
	}
	return "undo it"
}

// markRolledBack records on the original action that the executed
// rollback proposal p undid it, and returns a sentence for the reply.
func (a *Changes) markRolledBack(ctx context.Context, p approval.Proposal) string {
	orig := p.Request.Rollback.Undo.ActionID
	// Recorded even if the caller has given up: the rollback happened.
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	_, err := a.Store.MarkRolledBack(mctx, orig, p.DecidedBy, *p.Result)
	switch {
	case err == nil:
		return fmt.Sprintf("\n`%s` is now rolled back.", esc(orig))
	case errors.Is(err, approval.ErrWrongState):
		return fmt.Sprintf("\n`%s` was already marked rolled back (or is not executed).", esc(orig))
	case errors.Is(err, approval.ErrAudit):
		return fmt.Sprintf("\n`%s` is now rolled back, but that could not be written to the audit trail.", esc(orig))
	}
	return fmt.Sprintf("\n`%s` could not be marked rolled back: %s", esc(orig), errText(err))
}
