package command

import (
	"context"
	"errors"
	"fmt"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/bot/blockkit"
	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/redact"
)

// ProposeRollback proposes undoing executed action id. Undoing changes
// the cluster like any other action, so it is proposed and needs its own
// approvals (four-eyes included) before the agent runs it; what it
// restores is the agent's own record of the original (approval's
// ProposeRollback). Once it ran, the original is marked rolled back.
func (a *Changes) ProposeRollback(ctx context.Context, id, user string, opts ...approval.ProposeOption) chatops.Reply {
	p, orig, err := a.Flow.ProposeRollback(ctx, id, user, opts...)
	eid := esc(id)
	switch {
	case errors.Is(err, approval.ErrNotFound):
		return chatops.Reply{Text: fmt.Sprintf("There is no action `%s` (mistyped, or too old to roll back).", eid)}
	case errors.Is(err, approval.ErrIsRollback):
		return chatops.Reply{Text: fmt.Sprintf("`%s` is itself a rollback; propose the original change again instead.", eid)}
	case errors.Is(err, approval.ErrRolledBack):
		return chatops.Reply{Text: fmt.Sprintf("`%s` was already rolled back by %s.", eid, blockkit.Mention(orig.RolledBackBy))}
	case errors.Is(err, approval.ErrNotExecuted):
		return chatops.Reply{Text: fmt.Sprintf("`%s` is %s; only executed actions can be rolled back.", eid, esc(string(orig.State)))}
	case errors.Is(err, approval.ErrNothingToUndo):
		return chatops.Reply{Text: fmt.Sprintf("`%s` changed nothing, so there is nothing to roll back.", eid)}
	case errors.Is(err, approval.ErrRollbackProposed):
		return chatops.Reply{Text: fmt.Sprintf("The rollback of `%s` is already proposed as `%s` (%s).", eid, esc(p.ID), esc(string(p.State)))}
	}
	k := diagnose.Key{Source: orig.Source, Cluster: event.ClusterRef{Namespace: orig.Change.Cluster.Namespace, Name: orig.Change.Cluster.Name}}
	warning, refused, ok := a.stored(ctx, k, user, p, err, "Could not propose the rollback: ")
	if !ok {
		return refused
	}
	undo := p.Change.Rollback.Undo
	text := fmt.Sprintf("%s proposes `%s`: roll back `%s` (%s) on %s — %s.\n%s%s",
		blockkit.Mention(user), p.ID, eid, esc(string(undo.Type)), esc(k.String()), esc(redact.RedactText(undoSummary(undo))), howToDecide(p), warning)
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
