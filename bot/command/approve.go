package command

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/bot/approval"
	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/redact"
)

// Approve decides proposal id for user: only the approval that wins the proposal's
// compare-and-set sends it to the agent. When the result does not come
// within Timeout, the answer says the request is queued, and the result
// is posted into the same conversation when it comes (chatops.Later).
func (a *Changes) Approve(ctx context.Context, id, user string) chatops.Reply {
	p, err := approval.ApproveAndRun(ctx, a.Store, approval.DispatcherFunc(a.dispatch), id, user)
	if text, refused := refusal("approve", esc(id), p, err); refused {
		return chatops.Reply{Text: text}
	}
	if errors.Is(err, actions.ErrQueued) {
		later := chatops.Later(ctx)
		a.startFollow(context.WithoutCancel(ctx), p, user, later)
		what := "the agent of " + esc(p.Source) + " has not picked it up yet"
		if errors.Is(err, actions.ErrNotSent) {
			what = "it could not be handed to NATS yet; the bot keeps sending it"
		}
		then := "The result will be posted here."
		if later == nil {
			then = "Its outcome will be in the audit trail (`/hcp audit`)."
		}
		return chatops.Reply{Text: fmt.Sprintf("`%s`%s approved by %s and queued: %s. %s It runs at most once, and not after %s.",
			esc(id), requestedBy(p, user), mention(user), what, then, p.DecidedAt.Add(actions.QueueHorizon).UTC().Format("15:04 UTC")), InChannel: true}
	}
	return a.outcome(ctx, p, user, err)
}

// requestedBy names the requester of a four-eyes approval, for the reply.
func requestedBy(p approval.Proposal, user string) string {
	if p.RequestedBy != "" && p.RequestedBy != user && !strings.HasPrefix(p.RequestedBy, actions.SystemRequesterPrefix) {
		return " (requested by " + mention(p.RequestedBy) + ")"
	}
	return ""
}

// outcome words the recorded outcome of approved proposal p (err is what
// running it returned).
func (a *Changes) outcome(ctx context.Context, p approval.Proposal, user string, err error) chatops.Reply {
	id := esc(p.ID)
	rolledBack := ""
	if err == nil && p.Request.Type == actions.TypeRollback && p.Request.Rollback != nil && p.Result != nil {
		rolledBack = a.markRolledBack(ctx, p)
	}
	// Both people of a four-eyes approval are named.
	requested := requestedBy(p, user)
	var text string
	switch {
	case err == nil && p.Result != nil && p.Result.Outcome == actions.OutcomeUnchanged:
		text = fmt.Sprintf("`%s`%s approved by %s: nothing to change, %s", id, requested, mention(user), esc(p.Result.Summary))
	case err == nil && p.Result != nil:
		text = fmt.Sprintf("`%s`%s approved by %s and %s: %s", id, requested, mention(user), esc(string(p.Result.Outcome)), esc(p.Result.Summary))
		if p.Result.Diff != "" {
			text += "\n```" + escCode(p.Result.Diff) + "```"
		}
	case err == nil:
		text = fmt.Sprintf("`%s`%s approved by %s and executed.", id, requested, mention(user))
	case errors.Is(err, actions.ErrConflict) && p.Request.Type == actions.TypeNoProxyPatch:
		text = fmt.Sprintf("`%s` was not applied: the %s changed since the proposal; propose again%s.", id, targetKind(p.Request), proposeAgain(p.Request))
	case errors.Is(err, actions.ErrUnauthorized):
		text = fmt.Sprintf("`%s` was refused by the agent of %s, which could not verify the approval: %s. Nothing was changed; the refusal is audited.", id, esc(p.Source), errText(err))
	case errors.Is(err, ErrNoAgent):
		text = fmt.Sprintf("`%s` is approved but the agent of %s recorded no result before its deadline; it refuses the request after that, so it will not run now. It is marked failed: check the cluster and propose again when the agent is back (re-running is safe).", id, esc(p.Source))
	case errors.Is(err, approval.ErrAudit) && p.State == approval.StateExecuted:
		text = fmt.Sprintf("`%s` was executed, but its audit record could not be written: %s", id, errText(err))
	case errors.Is(err, approval.ErrAudit):
		text = fmt.Sprintf("`%s` was not run: the approval could not be written to the audit trail.", id)
	case errors.Is(err, actions.ErrPortCollision):
		text = fmt.Sprintf("`%s` was not applied: %s%s", id, errText(err), collisionAdvice(p, err))
	case errors.Is(err, actions.ErrInvalid), errors.Is(err, actions.ErrRejected), errors.Is(err, actions.ErrConflict),
		errors.Is(err, actions.ErrNotKubeVirt):
		text = fmt.Sprintf("`%s` was not applied: %s", id, errText(err))
	default:
		text = fmt.Sprintf("`%s` failed: %s", id, errText(err))
	}
	text += rolledBack
	if err == nil && p.Result != nil && p.Result.Undo != nil && p.Request.Type != actions.TypeRollback {
		// An executed change can be undone: say how, and offer the button
		// (which proposes the rollback; it needs an approval of its own).
		text += fmt.Sprintf("\nUndo with `/hcp rollback %s` (needs approval).", id)
		btn := slack.NewButtonBlockElement(chatops.ActionRollback, p.ID, plainText("Roll back"))
		return chatops.Reply{Text: text, InChannel: true, Blocks: textBlocks(text, slack.NewActionBlock("undo-"+p.ID, btn))}
	}
	return chatops.Reply{Text: text, InChannel: true}
}

// collisionAdvice says what to do about refused node ports: propose again
// on the free ones the agent found (the command, when the request chose
// the refused ports), or move the hosted NodePort Service's own.
func collisionAdvice(p approval.Proposal, err error) string {
	var pc *actions.PortCollisionError
	x := p.Request.Expose
	if !errors.As(err, &pc) || x == nil || len(pc.Alternatives) == 0 {
		return ""
	}
	if pc.Forwarded {
		return fmt.Sprintf("\n`%s/%s` is of type NodePort in the hosted cluster, so its own node ports are forwarded: give it free ones there (nearest: %s), or free them in the management cluster, then propose again.",
			esc(x.Namespace), esc(x.Service), actions.JoinPorts(pc.Alternatives))
	}
	if again, ok := exposeAgain(p, pc); ok {
		return fmt.Sprintf("\nPropose again on free node ports: `/hcp %s`", esc(again))
	}
	return fmt.Sprintf("\nPropose again choosing free node ports with `nodeports` (nearest: %s).", actions.JoinPorts(pc.Alternatives))
}

// exposeAgain is the expose command of p with each refused node port
// replaced by its alternative; false when a refused port was not one the
// request chose (the hosted API server allocated it).
func exposeAgain(p approval.Proposal, pc *actions.PortCollisionError) (string, bool) {
	x := p.Request.Expose
	cmd := chatops.Expose{
		Cluster:   chatops.ClusterRef{Mgmt: p.Source, Namespace: p.Request.Cluster.Namespace, Name: p.Request.Cluster.Name},
		Namespace: x.Namespace, Service: x.Service,
	}
	nodePorts := slices.Clone(x.NodePorts)
	if len(x.Ports) > 0 {
		nodePorts = nil
		for _, ep := range x.Ports {
			cmd.Ports = append(cmd.Ports, ep.Port)
			nodePorts = append(nodePorts, ep.NodePort)
		}
	}
	for i, prob := range pc.Ports {
		j := slices.Index(nodePorts, prob.NodePort)
		if j < 0 || i >= len(pc.Alternatives) {
			return "", false
		}
		nodePorts[j] = pc.Alternatives[i]
	}
	// Node ports left to the hosted API server pair as 0 with their
	// port; the grammar has no place for them past the last chosen one.
	for len(nodePorts) > 0 && nodePorts[len(nodePorts)-1] == 0 {
		nodePorts = nodePorts[:len(nodePorts)-1]
	}
	if slices.Contains(nodePorts, 0) {
		return "", false
	}
	cmd.NodePorts = nodePorts
	s := cmd.String()
	if _, err := chatops.Parse(s); err != nil {
		return "", false
	}
	return s, true
}

func targetKind(req actions.Change) string {
	if req.NoProxy != nil && req.NoProxy.Target == actions.TargetProxy {
		return "Proxy/cluster"
	}
	return "HostedCluster"
}

// proposeAgain names the command that proposes a fresh fix, when there is
// one.
func proposeAgain(req actions.Change) string {
	if req.Type != actions.TypeNoProxyPatch || req.Cluster.Namespace == "" {
		return ""
	}
	return " with `/hcp fix noproxy " + esc(req.Cluster.String()) + "`"
}

// Reject rejects proposal id for user, with reason.
func (a *Changes) Reject(ctx context.Context, id, reason, user string) chatops.Reply {
	p, err := a.Store.Reject(ctx, id, user, reason, time.Now())
	if text, refused := refusal("reject", esc(id), p, err); refused {
		return chatops.Reply{Text: text}
	}
	if err != nil && !errors.Is(err, approval.ErrAudit) {
		return chatops.Reply{Text: fmt.Sprintf("Could not reject `%s`: %s", esc(id), errText(err))}
	}
	text := fmt.Sprintf("`%s` rejected by %s", esc(id), mention(user))
	if reason != "" {
		text += ": " + esc(redact.RedactText(reason))
	}
	return chatops.Reply{Text: text, InChannel: true}
}

// refusal words the decisions the Store refused; refused is false for
// anything else (success, or a failure after the approval). id must be
// escaped already.
func refusal(verb, id string, p approval.Proposal, err error) (text string, refused bool) {
	switch {
	case err == nil:
		return "", false
	case errors.Is(err, approval.ErrNotFound):
		return fmt.Sprintf("There is no proposal `%s` (mistyped, or too old).", id), true
	case errors.Is(err, approval.ErrNotApprover):
		return fmt.Sprintf("You are not allowed to %s `%s`: ask one of the approvers.", verb, id), true
	case errors.Is(err, approval.ErrOwnRequest) && strings.HasPrefix(p.RequestedBy, actions.SystemRequesterPrefix):
		return fmt.Sprintf("Four-eyes rule: `%s` was proposed by the diagnosis, not a person; propose it again (Approve fix or `/hcp fix noproxy`), and a second approver approves.", id), true
	case errors.Is(err, approval.ErrOwnRequest):
		return fmt.Sprintf("Four-eyes rule: you proposed `%s`, so someone else has to approve it.", id), true
	case errors.Is(err, approval.ErrTampered):
		return fmt.Sprintf("`%s` was not approved: its seal does not verify — the record was changed outside hcpbot after it was proposed, or it was sealed with another key (a restarted `hcpbot all` without approvals.signingKey makes a new one). Propose it again; if the key did not change, tell whoever runs NATS.", id), true
	case errors.Is(err, approval.ErrExpired):
		return fmt.Sprintf("`%s` expired before it was decided; propose the fix again.", id), true
	case errors.Is(err, approval.ErrAlreadyDecided):
		by := ""
		if p.DecidedBy != "" {
			by = " by " + mention(p.DecidedBy)
		}
		return fmt.Sprintf("`%s` was already decided: it is %s%s.", id, esc(string(p.State)), by), true
	case errors.Is(err, approval.ErrGroupLookup):
		return fmt.Sprintf("Could not check approver group membership, so `%s` was not decided; try again later.", id), true
	case errors.Is(err, approval.ErrWrongCluster):
		return fmt.Sprintf("`%s` is for another cluster.", id), true
	}
	return "", false
}
