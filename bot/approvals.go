package bot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/slack-go/slack"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/bot/approval"
	"github.com/hcpbot/hcpbot/bot/audit"
	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/noproxy"
	"github.com/hcpbot/hcpbot/redact"
)

// DefaultActionTimeout bounds the wait for an agent's answer. It exceeds
// actions.ExecuteTimeout so that the agent's own timeout, which says what
// happened, normally answers first; it stays under chatops'
// DefaultHandlerTimeout so that the user still gets a reply.
const DefaultActionTimeout = actions.ExecuteTimeout + 10*time.Second

// ErrNoAgent: the agent of the proposal's source did not answer. The
// action may or may not have run.
var ErrNoAgent = errors.New("the agent did not answer")

// Approvals carries out the commands that change clusters through the
// approval flow: proposals are stored in Store (which audits every
// transition), and an approved one is sent to the agent of its management
// cluster over NATS request/reply.
type Approvals struct {
	Store *approval.Store
	// Audit records refusals that never reach the Store (a proposal the
	// executor would refuse). Nil skips them.
	Audit audit.Appender
	NC    *nats.Conn
	// Timeout bounds the wait for the agent; 0 means DefaultActionTimeout.
	Timeout time.Duration
}

var _ Actions = (*Approvals)(nil)

// ProposeNoProxy implements Actions: it proposes the diagnosis' noProxy
// fix, plus the entries the user added, computed from the value the
// diagnosis saw (fix.Before) so that the agent refuses it if the cluster
// has changed since.
func (a *Approvals) ProposeNoProxy(ctx context.Context, k diagnose.Key, fix *diagnose.Fix, add []string, user string) chatops.Reply {
	req := actions.Request{
		Type:    actions.TypeNoProxyPatch,
		Cluster: actions.ClusterRef{Namespace: k.Cluster.Namespace, Name: k.Cluster.Name},
		NoProxy: &actions.NoProxyParams{Expected: fix.Before, Add: mergeEntries(fix.Before, fix.Add, add)},
	}
	if strings.HasPrefix(fix.Target, "Proxy/") {
		req.Cluster = actions.ClusterRef{Name: hypershift.ProxyName}
		req.NoProxy.Target = actions.TargetProxy
	}
	p, err := a.Store.Propose(ctx, req, user, approval.ForSource(k.Source))
	warning := ""
	switch {
	case errors.Is(err, approval.ErrAudit) && p.ID != "":
		// The proposal is stored; its approval will be audited (and
		// refused if that fails too).
		warning = "\n_Warning: the audit record of this proposal could not be written._"
	case err != nil:
		a.auditRefusal(ctx, k, user, err)
		if errors.Is(err, actions.ErrInvalid) {
			return chatops.Reply{Text: "Cannot propose that change: " + errText(err)}
		}
		return chatops.Reply{Text: "Could not store the proposal: " + errText(err)}
	}
	_, diff := noProxyDiff(req.NoProxy)
	text := fmt.Sprintf("%s proposes `%s` for %s: add %s to the noProxy.\n```%s```\nApprove with `/hcp approve %s` (or the Approve button), reject with `/hcp reject %s &lt;reason&gt;`. Expires %s.%s",
		mention(user), p.ID, esc(k.String()), esc(strings.Join(req.NoProxy.Add, ", ")), esc(diff), p.ID, p.ID,
		p.ExpiresAt.UTC().Format("15:04 UTC"), warning)
	return chatops.Reply{Text: text, InChannel: true}
}

// Approve implements Actions: only the approval that wins the proposal's
// compare-and-set sends it to the agent.
func (a *Approvals) Approve(ctx context.Context, id, user string) chatops.Reply {
	p, err := approval.ApproveAndRun(ctx, a.Store, approval.DispatcherFunc(a.dispatch), id, user)
	if text, refused := refusal("approve", esc(id), p, err); refused {
		return chatops.Reply{Text: text}
	}
	id = esc(id)
	var text string
	switch {
	case err == nil && p.Result != nil && p.Result.Outcome == actions.OutcomeUnchanged:
		text = fmt.Sprintf("`%s` approved by %s: nothing to change, %s", id, mention(user), esc(p.Result.Summary))
	case err == nil && p.Result != nil:
		text = fmt.Sprintf("`%s` approved by %s and %s: %s", id, mention(user), esc(string(p.Result.Outcome)), esc(p.Result.Summary))
		if p.Result.Diff != "" {
			text += "\n```" + esc(p.Result.Diff) + "```"
		}
	case err == nil:
		text = fmt.Sprintf("`%s` approved by %s and executed.", id, mention(user))
	case errors.Is(err, actions.ErrConflict):
		text = fmt.Sprintf("`%s` was not applied: the %s changed since the proposal; propose again%s.", id, targetKind(p.Request), proposeAgain(p.Request))
	case errors.Is(err, ErrNoAgent):
		text = fmt.Sprintf("`%s` is approved but the agent of %s did not answer, so whether it ran is unknown; it is marked failed. Check the cluster and propose again if needed (re-running is safe).", id, esc(p.Source))
	case errors.Is(err, approval.ErrAudit) && p.State == approval.StateExecuted:
		text = fmt.Sprintf("`%s` was executed, but its audit record could not be written: %s", id, errText(err))
	case errors.Is(err, approval.ErrAudit):
		text = fmt.Sprintf("`%s` was not run: the approval could not be written to the audit trail.", id)
	case errors.Is(err, actions.ErrInvalid), errors.Is(err, actions.ErrRejected),
		errors.Is(err, actions.ErrNotKubeVirt), errors.Is(err, actions.ErrPortCollision):
		text = fmt.Sprintf("`%s` was not applied: %s", id, errText(err))
	default:
		text = fmt.Sprintf("`%s` failed: %s", id, errText(err))
	}
	return chatops.Reply{Text: text, InChannel: true}
}

// Reject implements Actions.
func (a *Approvals) Reject(ctx context.Context, id, reason, user string) chatops.Reply {
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

// dispatch sends p's request to the agent of p.Source and maps its reply
// back onto actions' sentinel errors.
func (a *Approvals) dispatch(ctx context.Context, p approval.Proposal) (actions.Result, error) {
	subject, err := event.ActionRequestSubject(p.Source)
	if err != nil {
		return actions.Result{}, fmt.Errorf("proposal %s names no usable management cluster: %w", p.ID, err)
	}
	data, err := json.Marshal(p.Request)
	if err != nil {
		return actions.Result{}, fmt.Errorf("encode request %s: %w", p.ID, err)
	}
	timeout := a.Timeout
	if timeout <= 0 {
		timeout = DefaultActionTimeout
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	msg, err := a.NC.RequestWithContext(rctx, subject, data)
	if err != nil {
		return actions.Result{}, fmt.Errorf("%w: %s: %w", ErrNoAgent, p.Source, err)
	}
	var r actions.Reply
	if err := json.Unmarshal(msg.Data, &r); err != nil {
		return actions.Result{}, fmt.Errorf("%w: undecodable reply from %s: %w", actions.ErrInternal, p.Source, err)
	}
	var res actions.Result
	if r.Result != nil {
		res = *r.Result
	}
	return res, r.Err()
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
	case errors.Is(err, approval.ErrOwnRequest):
		return fmt.Sprintf("Four-eyes rule: you proposed `%s`, so someone else has to approve it.", id), true
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

func (a *Approvals) auditRefusal(ctx context.Context, k diagnose.Key, user string, cause error) {
	if a.Audit == nil {
		return
	}
	// Best effort: the user is told either way, and the cause is in the
	// reply; the audit package redacts the reason.
	_ = a.Audit.Append(ctx, audit.Record{
		ID: audit.NewID(), Time: time.Now(), Actor: user, Kind: audit.KindRefused,
		Cluster: k.Cluster.String(), Source: k.Source, Summary: "propose refused", Reason: cause.Error(),
	})
}

// mergeEntries returns fix's entries followed by the user's extra ones,
// without duplicates or entries the value already holds.
func mergeEntries(before string, fix, extra []string) []string {
	have := map[string]bool{}
	for _, e := range noproxy.Parse(before) {
		have[e.Text] = true
	}
	out := make([]string, 0, len(fix)+len(extra))
	for _, e := range slices.Concat(fix, extra) {
		if e = strings.TrimSpace(e); e == "" || have[e] {
			continue
		}
		have[e] = true
		out = append(out, e)
	}
	return out
}

// noProxyDiff shows the proposed value change the way approval's audit
// records do.
func noProxyDiff(n *actions.NoProxyParams) (after, diff string) {
	after = strings.Join(n.Add, ",")
	if n.Expected != "" {
		after = n.Expected + "," + after
	}
	return after, fmt.Sprintf("- noProxy: %s\n+ noProxy: %s", n.Expected, after)
}

func targetKind(req actions.Request) string {
	if req.NoProxy != nil && req.NoProxy.Target == actions.TargetProxy {
		return "Proxy/cluster"
	}
	return "HostedCluster"
}

// proposeAgain names the command that proposes a fresh fix, when there is
// one.
func proposeAgain(req actions.Request) string {
	if req.Type != actions.TypeNoProxyPatch || req.Cluster.Namespace == "" {
		return ""
	}
	return " with `/hcp fix noproxy " + esc(req.Cluster.String()) + "`"
}

// errText is an error for chat: credentials redacted, escaped for mrkdwn.
func errText(err error) string { return esc(redact.RedactText(err.Error())) }

// esc escapes text that did not come from this package (user input,
// cluster data) for Slack mrkdwn, so that it cannot ping or link.
func esc(s string) string { return chatops.EscapeText(s) }

// mention renders a Slack user id as a mention.
func mention(user string) string { return "<@" + esc(user) + ">" }

// SlackGroups resolves approver groups with Slack's usergroups.users.list,
// read at each approval so that membership changes apply at once.
type SlackGroups struct{ Client GroupMembersLister }

// GroupMembersLister is the part of *slack.Client SlackGroups uses.
type GroupMembersLister interface {
	GetUserGroupMembersContext(ctx context.Context, group string, opts ...slack.GetUserGroupMembersOption) ([]string, error)
}

var _ approval.Groups = SlackGroups{}

// GroupMembers implements approval.Groups.
func (g SlackGroups) GroupMembers(ctx context.Context, groupID string) ([]string, error) {
	members, err := g.Client.GetUserGroupMembersContext(ctx, groupID)
	if err != nil {
		return nil, fmt.Errorf("slack usergroups.users.list %s: %w", groupID, err)
	}
	return members, nil
}
