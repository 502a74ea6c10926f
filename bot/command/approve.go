package command

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/slack-go/slack"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/bot/blockkit"
	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/redact"
)

// Approve adds user's approval to proposal id and answers at once. When
// it completes the decision the flow sends the change to the agent, and
// the outcome is posted into the same conversation when it comes
// (chatops.Later), or into the channel by whichever replica records it.
func (a *Changes) Approve(ctx context.Context, id, user string, opts ...approval.DecideOption) chatops.Reply {
	later := chatops.Later(ctx)
	if later != nil {
		opts = append(opts, approval.OnOutcome(func(p approval.Proposal) { later(Outcome(p)) }))
	}
	p, err := a.Flow.Approve(ctx, id, user, opts...)
	if text, refused := refusal("approve", esc(id), p, err); refused {
		return chatops.Reply{Text: text}
	}
	switch {
	case errors.Is(err, approval.ErrAudit):
		return chatops.Reply{Text: fmt.Sprintf("Your approval of `%s` was not made: it could not be written to the audit trail first. Nothing runs off the record; try again.", esc(id))}
	case err != nil:
		return chatops.Reply{Text: fmt.Sprintf("Could not approve `%s`: %s", esc(id), errText(err))}
	case p.State == approval.StatePending:
		// With the proposal's buttons: on a button press this replaces
		// the proposal, and the next approver presses Approve there.
		need := p.Needed()
		return proposalReply(p.ID, fmt.Sprintf("`%s`%s approved by %s (%d of %d approvals): %d more approver(s) needed — press Approve or `/hcp approve %s`.",
			esc(id), requestedBy(p), blockkit.Mention(user), len(p.Approvers), need, need-len(p.Approvers), esc(id)))
	}
	then := "The outcome will be posted here."
	if later == nil {
		then = "The outcome will be posted in the channel and is in the audit trail (`/hcp audit`)."
	}
	if p.IdentityNote != "" {
		then += "\n_Note: " + esc(p.IdentityNote) + "._"
	}
	return chatops.Reply{Text: fmt.Sprintf("`%s`%s approved by %s and sent to the agent of %s. It runs at most once, and not after %s. %s",
		esc(id), requestedBy(p), approvedBy(p), esc(p.Source), p.Deadline().UTC().Format("15:04 UTC"), then), InChannel: true}
}

// requestedBy names the person who requested p, for the reply.
func requestedBy(p approval.Proposal) string {
	if p.RequestedBy != "" && !strings.HasPrefix(p.RequestedBy, approval.SystemRequesterPrefix) && !slices.Contains(p.Approvers, p.RequestedBy) {
		return " (requested by " + blockkit.Mention(p.RequestedBy) + ")"
	}
	return ""
}

// approvedBy names every person whose approval counted.
func approvedBy(p approval.Proposal) string {
	names := make([]string, len(p.Approvers))
	for i, a := range p.Approvers {
		names[i] = blockkit.Mention(a)
	}
	if len(names) == 0 {
		return "nobody"
	}
	return strings.Join(names, " and ")
}

// Outcome words what became of approved proposal p, for the conversation
// that approved it or for the channel.
func Outcome(p approval.Proposal) chatops.Reply {
	id := esc(p.ID)
	who := requestedBy(p) + " approved by " + approvedBy(p)
	err := p.Failure()
	var text string
	switch {
	case p.State == approval.StateExecuted && p.Result != nil && p.Result.Outcome == actions.OutcomeUnchanged:
		text = fmt.Sprintf("`%s`%s: nothing to change, %s", id, who, esc(p.Result.Summary))
	case (p.State == approval.StateExecuted || p.State == approval.StateRolledBack) && p.Result != nil:
		text = fmt.Sprintf("`%s`%s and %s: %s", id, who, esc(string(p.Result.Outcome)), esc(p.Result.Summary))
		if p.Result.As != "" {
			text += fmt.Sprintf(" (written as Kubernetes user `%s`)", esc(p.Result.As))
		}
		if p.Result.Diff != "" {
			text += "\n```" + escCode(p.Result.Diff) + "```"
		}
		if p.Change.Type == actions.TypeRollback && p.Change.Rollback != nil {
			text += fmt.Sprintf("\n`%s` is now rolled back.", esc(p.Change.Rollback.Undo.ActionID))
		}
	case p.State == approval.StateExecuted:
		text = fmt.Sprintf("`%s`%s and executed.", id, who)
	case errors.Is(err, actions.ErrConflict) && p.Change.Type == actions.TypeNoProxyPatch:
		text = fmt.Sprintf("`%s` was not applied: the %s changed since the proposal; propose again%s.", id, targetKind(p.Change), proposeAgain(p.Change))
	case errors.Is(err, approval.ErrUnauthorized):
		text = fmt.Sprintf("`%s` was refused by the agent of %s, which could not verify the approval: %s. Nothing was changed; the refusal is audited.", id, esc(p.Source), errText(err))
	case errors.Is(err, approval.ErrNoAnswer):
		text = fmt.Sprintf("`%s` is approved but no agent of %s picked it up before %s; it refuses the request after that, so it did not run. Check the agent and propose again.", id, esc(p.Source), p.Deadline().UTC().Format("15:04 UTC"))
	case errors.Is(err, approval.ErrUnknown):
		text = fmt.Sprintf("`%s`: the outcome is unknown. %s", id, errText(err))
	case errors.Is(err, actions.ErrPortCollision):
		text = fmt.Sprintf("`%s` was not applied: %s%s", id, errText(err), collisionAdvice(p, err))
	case errors.Is(err, actions.ErrInvalid), errors.Is(err, actions.ErrRejected), errors.Is(err, actions.ErrConflict),
		errors.Is(err, actions.ErrNotKubeVirt), errors.Is(err, approval.ErrTooLate), errors.Is(err, approval.ErrNoIdentity):
		text = fmt.Sprintf("`%s` was not applied: %s", id, errText(err))
	case err != nil:
		text = fmt.Sprintf("`%s` failed: %s", id, errText(err))
	default:
		text = fmt.Sprintf("`%s` is %s.", id, esc(string(p.State)))
	}
	if p.State == approval.StateExecuted && p.Result != nil && p.Result.Undo != nil && p.Change.Type != actions.TypeRollback {
		// An executed change can be undone: say how, and offer the button
		// (which proposes the rollback; it needs an approval of its own).
		text += fmt.Sprintf("\nUndo with `/hcp rollback %s` (needs approval).", id)
		btn := slack.NewButtonBlockElement(blockkit.ActionRollback, p.ID, blockkit.Plain("Roll back"))
		return chatops.Reply{Text: text, InChannel: true, Blocks: textBlocks(text, slack.NewActionBlock("undo-"+p.ID, btn))}
	}
	return chatops.Reply{Text: text, InChannel: true}
}

// collisionAdvice says what to do about refused node ports: propose again
// on the free ones the agent found (the command, when the request chose
// the refused ports), or move the hosted NodePort Service's own.
func collisionAdvice(p approval.Proposal, err error) string {
	var pc *actions.PortCollisionError
	x := p.Change.Expose
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
	x := p.Change.Expose
	cmd := chatops.Expose{
		Cluster:   chatops.ClusterRef{Mgmt: p.Source, Namespace: p.Change.Cluster.Namespace, Name: p.Change.Cluster.Name},
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
	p, err := a.Flow.Reject(ctx, id, user, reason)
	if text, refused := refusal("reject", esc(id), p, err); refused {
		return chatops.Reply{Text: text}
	}
	if err != nil && !errors.Is(err, approval.ErrAudit) {
		return chatops.Reply{Text: fmt.Sprintf("Could not reject `%s`: %s", esc(id), errText(err))}
	}
	text := fmt.Sprintf("`%s` rejected by %s", esc(id), blockkit.Mention(user))
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
	case errors.Is(err, approval.ErrOwnRequest) && strings.HasPrefix(p.RequestedBy, approval.SystemRequesterPrefix):
		return fmt.Sprintf("Four-eyes rule: `%s` was proposed by the diagnosis, not a person; propose it again (Approve fix or `/hcp fix noproxy`), and a second approver approves.", id), true
	case errors.Is(err, approval.ErrOwnRequest):
		return fmt.Sprintf("Four-eyes rule: you proposed `%s`, so someone else has to approve it.", id), true
	case errors.Is(err, approval.ErrForged), errors.Is(err, approval.ErrUntrustedKey):
		return fmt.Sprintf("`%s` was not decided: its record in the approval store does not verify — it was changed outside hcpbot, by someone without the bot's key. It is reported in the audit trail; tell whoever runs NATS, and propose the change again.", id), true
	case errors.Is(err, approval.ErrStale):
		return fmt.Sprintf("`%s` was sealed with a key this bot no longer has (a restarted `hcpbot all` without approvals.signingKey makes a new one, and so does a key rotation); propose it again.", id), true
	case errors.Is(err, approval.ErrLegacy):
		return fmt.Sprintf("`%s` was proposed by an older hcpbot, before decisions were sealed; propose it again.", id), true
	case errors.Is(err, approval.ErrAlreadyApproved):
		return fmt.Sprintf("You already approved `%s`: another approver has to add theirs.", id), true
	case errors.Is(err, approval.ErrExpired):
		return fmt.Sprintf("`%s` expired before it was decided; propose the fix again.", id), true
	case errors.Is(err, approval.ErrAlreadyDecided):
		by := ""
		if p.DecidedBy != "" {
			by = " by " + blockkit.Mention(p.DecidedBy)
		}
		return fmt.Sprintf("`%s` was already decided: it is %s%s.", id, esc(string(p.State)), by), true
	case errors.Is(err, approval.ErrNotPermitted):
		return fmt.Sprintf("Your approval of `%s` does not count: %s. Kubernetes RBAC decides what your identity may change; ask for the permission, or another approver.", id, errText(err)), true
	case errors.Is(err, approval.ErrNoIdentity):
		return fmt.Sprintf("Your approval of `%s` does not count: %s. With `identities.required` changes run only as the approver's own Kubernetes identity; `/hcp whoami` shows yours.", id, errText(err)), true
	case errors.Is(err, approval.ErrGroupLookup):
		return fmt.Sprintf("Could not check approver group membership, so `%s` was not decided; try again later.", id), true
	case errors.Is(err, approval.ErrWrongCluster):
		return fmt.Sprintf("`%s` is for another cluster.", id), true
	}
	return "", false
}
