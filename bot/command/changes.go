package bot

import (
	"context"
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/slack-go/slack"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/bot/approval"
	"github.com/hcpbot/hcpbot/bot/audit"
	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/bot/notify"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/noproxy"
	"github.com/hcpbot/hcpbot/redact"
)

// DefaultResultWait is how long Approve waits for the agent's result
// before it answers that the request is queued (the result then follows
// in the same conversation). Most actions take a few API calls; the
// wait stays well under chatops' DefaultHandlerTimeout.
const DefaultResultWait = 20 * time.Second

// ErrNoAgent: the agent of the proposal's source did not pick its
// request up before the request's deadline; the agent refuses it after
// that, so it did not run.
var ErrNoAgent = errors.New("the agent did not pick the request up")

// errNotQueued: the request could not be confirmed as stored in the
// actions stream (NATS unreachable). It may be stored; the recovery sweep
// (RunRecovery) sends it again, which is safe.
var errNotQueued = errors.New("the request is not confirmed as queued yet")

// Approvals carries out the commands that change clusters through the
// approval flow: proposals are stored in Store (which audits every
// transition), and an approved one is queued for the agent of its
// management cluster as a durable message (actions.Client); the agent's
// result is read back by action id.
type Approvals struct {
	Store *approval.Store
	// Audit records refusals that never reach the Store (a proposal the
	// executor would refuse). Nil skips them.
	Audit audit.Appender
	// Queue sends requests to the agents and reads their results.
	Queue *actions.Client
	// Signer seals every request it sends with the approval it carries
	// out; agents refuse anything unsealed. Required to dispatch.
	Signer *actions.Signer
	// Timeout bounds Approve's wait for the result before it answers
	// "queued"; 0 means DefaultResultWait.
	Timeout time.Duration
	// Log receives what has no user to tell (the expiry sweep's
	// failures); the zero Logger discards it.
	Log zerolog.Logger

	// following holds the ids whose result this process waits for
	// (follow), so that the recovery sweep starts one wait per action.
	mu        sync.Mutex
	following map[string]bool
}

var (
	_ Actions         = (*Approvals)(nil)
	_ ExposeActions   = (*Approvals)(nil)
	_ RollbackActions = (*Approvals)(nil)
)

// ProposeNoProxy implements Actions: it proposes the diagnosis' noProxy
// fix, plus the entries the user added, computed from the value the
// diagnosis saw (fix.Before) so that the agent refuses it if the cluster
// has changed since.
func (a *Approvals) ProposeNoProxy(ctx context.Context, k diagnose.Key, fix *diagnose.Fix, add []string, user string) chatops.Reply {
	req := noProxyRequest(k, fix, add)
	p, warning, refused, ok := a.propose(ctx, k, req, user)
	if !ok {
		return refused
	}
	_, diff := noProxyDiff(req.NoProxy)
	text := fmt.Sprintf("%s proposes `%s` for %s: add %s to the noProxy.\n```%s```\n%s%s",
		mention(user), p.ID, esc(k.String()), esc(strings.Join(req.NoProxy.Add, ", ")), escCode(diff), howToDecide(p), warning)
	return proposalReply(p.ID, text)
}

// DiagnosisRequester is who requested a fix approved straight from its
// incident message without four-eyes: the diagnosis, not a person.
const DiagnosisRequester = actions.SystemRequesterPrefix + "diagnosis"

// fixPrefix names the proposals made by an incident's Approve button.
const fixPrefix = "fix-"

// ApproveFix implements FixApprover: the Approve button of an incident
// message, whose diff the approver is looking at. A non-approver is
// refused before anything is proposed (and audited).
//
// Without four-eyes the presser's approval is enough: the fix is proposed
// on the diagnosis' behalf and approved as user in one step.
//
// With four-eyes two people must approve, and the diagnosis is not one of
// them: the first press proposes the fix with the presser as requester (their
// approval) and says that one more approver is needed; a press by another
// approver, on this button or the proposal's, approves it and runs it. The
// proposal of a fix has an id derived from its content, so that every
// press on the incident meets the same pending proposal.
func (a *Approvals) ApproveFix(ctx context.Context, k diagnose.Key, fix *diagnose.Fix, user string) chatops.Reply {
	if err := a.Store.Authorize(ctx, user); err != nil {
		a.auditRefusal(ctx, k, user, fmt.Errorf("approve the diagnosed fix: %w", err))
		text, _ := refusal("approve", "the fix of "+esc(k.String()), approval.Proposal{}, err)
		return chatops.Reply{Text: text}
	}
	req := noProxyRequest(k, fix, nil)
	if !a.Store.FourEyes() {
		p, warning, refused, ok := a.propose(ctx, k, req, DiagnosisRequester)
		if !ok {
			return refused
		}
		r := a.Approve(ctx, p.ID, user)
		r.Text += warning
		return r
	}
	// The proposal of this fix is the first of its ids (fixID, by
	// generation) that is not decided yet: every press meets the same
	// pending one, and a fix needed again after a rejection or expiry
	// gets the next id. Two attempts per id: a concurrent first press by
	// someone else may create it between our read and our write.
	for gen, attempt := 0, 0; gen < maxFixGenerations; {
		req.ID = fixID(k, req, gen)
		p, err := a.Store.Get(ctx, req.ID)
		switch {
		case err == nil && p.State == approval.StatePending && !p.Expired(time.Now()):
			if p.RequestedBy == user {
				return chatops.Reply{Text: fmt.Sprintf("You already approved the fix of %s (`%s`). Four-eyes rule: another approver has to approve it too.", esc(k.String()), esc(p.ID))}
			}
			return a.Approve(ctx, p.ID, user)
		case err == nil:
			gen, attempt = gen+1, 0
			continue
		case !errors.Is(err, approval.ErrNotFound):
			return chatops.Reply{Text: "Could not read the proposal: " + errText(err)}
		}
		p, err = a.Store.Propose(ctx, req, user, approval.ForSource(k.Source))
		if errors.Is(err, approval.ErrExists) && attempt == 0 {
			attempt++
			continue
		}
		return a.firstApproval(ctx, k, req, p, user, err)
	}
	return chatops.Reply{Text: fmt.Sprintf("The fix of %s was proposed %d times already; propose it with `/hcp fix noproxy %s`.", esc(k.String()), maxFixGenerations, esc(k.Cluster.String()))}
}

// maxFixGenerations bounds how often one diagnosed fix is proposed from
// its incident's button (each rejection or expiry moves to the next id).
const maxFixGenerations = 16

// firstApproval answers the first press under four-eyes: the proposal
// Propose stored (or why not).
func (a *Approvals) firstApproval(ctx context.Context, k diagnose.Key, req actions.Request, p approval.Proposal, user string, err error) chatops.Reply {
	warning, refused, ok := a.stored(ctx, k, user, p, err, "Could not store the proposal: ")
	if !ok {
		return refused
	}
	_, diff := noProxyDiff(req.NoProxy)
	text := fmt.Sprintf("%s approved the fix of %s as `%s` (1 of 2 approvals): add %s to the noProxy.\n```%s```\n"+
		"Four-eyes rule: one more approver is needed — press Approve (here or on the incident) or `/hcp approve %s`; reject with `/hcp reject %s &lt;reason&gt;`. Expires %s.%s",
		mention(user), esc(k.String()), p.ID, esc(strings.Join(req.NoProxy.Add, ", ")), escCode(diff), p.ID, p.ID,
		p.ExpiresAt.UTC().Format("15:04 UTC"), warning)
	return proposalReply(p.ID, text)
}

// fixID is the id of generation gen of the proposal of a diagnosed fix:
// the same cluster, starting value and entries give the same ids.
func fixID(k diagnose.Key, req actions.Request, gen int) string {
	h := sha256.New()
	for _, s := range []string{k.Source, req.Cluster.String(), string(req.NoProxy.Target), req.NoProxy.Expected, strings.Join(req.NoProxy.Add, ","), strconv.Itoa(gen)} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return fixPrefix + fixIDEncoding.EncodeToString(h.Sum(nil)[:10])
}

var fixIDEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// noProxyRequest is the action that applies fix, plus the entries the user
// added, computed from the value the diagnosis saw (fix.Before) so that the
// agent refuses it if the cluster has changed since.
func noProxyRequest(k diagnose.Key, fix *diagnose.Fix, add []string) actions.Request {
	req := actions.Request{
		Type:    actions.TypeNoProxyPatch,
		Cluster: actions.ClusterRef{Namespace: k.Cluster.Namespace, Name: k.Cluster.Name},
		NoProxy: &actions.NoProxyParams{Expected: fix.Before, Add: mergeEntries(fix.Before, fix.Add, add)},
	}
	if strings.HasPrefix(fix.Target, "Proxy/") {
		req.Cluster = actions.ClusterRef{Name: hypershift.ProxyName}
		req.NoProxy.Target = actions.TargetProxy
	}
	return req
}

// howToDecide tells approvers what to do with proposal p, and until when.
func howToDecide(p approval.Proposal) string {
	return fmt.Sprintf("Approve with `/hcp approve %s` (or the Approve button), reject with `/hcp reject %s &lt;reason&gt;`. Expires %s.",
		p.ID, p.ID, p.ExpiresAt.UTC().Format("15:04 UTC"))
}

// proposalReply shows a proposal to the channel with Approve and Reject
// buttons carrying its id; Text stays the whole message (the notification
// fallback, and what the console prints).
func proposalReply(id, text string) chatops.Reply {
	approve := slack.NewButtonBlockElement(chatops.ActionApprove, id, plainText("Approve"))
	approve.Style = slack.StylePrimary
	reject := slack.NewButtonBlockElement(chatops.ActionReject, id, plainText("Reject"))
	reject.Style = slack.StyleDanger
	return chatops.Reply{Text: text, InChannel: true, Blocks: textBlocks(text, slack.NewActionBlock("decide-"+id, approve, reject))}
}

// textBlocks renders mrkdwn text as section blocks within Slack's limits,
// followed by extra blocks.
func textBlocks(text string, extra ...slack.Block) []slack.Block {
	var blocks []slack.Block
	for _, part := range notify.SplitText(text, notify.MaxSectionText) {
		blocks = append(blocks, slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, part, false, false), nil, nil))
	}
	return notify.ClampBlocks(append(blocks, extra...))
}

func plainText(s string) *slack.TextBlockObject {
	return slack.NewTextBlockObject(slack.PlainTextType, s, false, false)
}

// ProposeExpose implements ExposeActions: it proposes publishing the hosted
// Service p names through NodePorts (seed 004) and shows exactly which two
// Services the agent will create. hc is the bot's view of the
// HostedCluster (nil if it has none yet): a cluster known not to run on
// KubeVirt is refused here rather than after the approval.
func (a *Approvals) ProposeExpose(ctx context.Context, k diagnose.Key, hc *event.HostedClusterState, params actions.ExposeParams, user string) chatops.Reply {
	if hc != nil && hc.Platform != "" && hc.Platform != hypershift.PlatformKubeVirt {
		err := fmt.Errorf("%w: %s runs on platform %s; NodePort exposure forwards to KubeVirt virt-launcher pods, which only the KubeVirt platform has", actions.ErrNotKubeVirt, k, hc.Platform)
		a.auditRefusal(ctx, k, user, err)
		return chatops.Reply{Text: "Cannot propose that change: " + errText(err)}
	}
	// The id is chosen here because the management Service is named
	// after it, and the proposal shows that name.
	req := actions.Request{
		ID:      approval.NewID(),
		Type:    actions.TypeExposeNodePort,
		Cluster: actions.ClusterRef{Namespace: k.Cluster.Namespace, Name: k.Cluster.Name},
		Expose:  &params,
	}
	p, warning, refused, ok := a.propose(ctx, k, req, user)
	if !ok {
		return refused
	}
	infraID := "&lt;spec.infraID&gt;"
	if hc != nil && hc.InfraID != "" {
		infraID = esc(hc.InfraID)
	}
	text := fmt.Sprintf("%s proposes `%s` for %s: expose Service `%s/%s` of the hosted cluster through NodePorts.\n%s\n%s%s",
		mention(user), p.ID, esc(k.String()), esc(params.Namespace), esc(params.Service),
		exposePlan(p.ID, k, params, infraID), howToDecide(p), warning)
	return proposalReply(p.ID, text)
}

// exposePlan lists the Services actions.Expose will create for request id.
// infraID must be escaped already.
func exposePlan(id string, k diagnose.Key, params actions.ExposeParams, infraID string) string {
	ports := "all ports of the Service"
	if len(params.Ports) > 0 {
		ps := make([]string, len(params.Ports))
		for i, p := range params.Ports {
			ps[i] = fmt.Sprint(p.Port)
		}
		ports = "port " + strings.Join(ps, ", ")
		if len(ps) > 1 {
			ports = "ports " + strings.Join(ps, ", ")
		}
	}
	cpNS := hypershift.ControlPlaneNamespace(k.Cluster.Namespace, k.Cluster.Name)
	return fmt.Sprintf("Will create, labelled `%s=%s`:\n"+
		"• hosted cluster: Service `%s/%s`, type NodePort, selecting the pods of `%s/%s` (its selector), %s; the hosted API server allocates a node port for each\n"+
		"• management cluster: Service `%s/%s`, type NodePort, selecting `%s=%s,%s=%s` (the cluster's virt-launcher pods), one port per hosted node port N with port = targetPort = nodePort = N\n"+
		"Reachable afterwards on any management node at those node ports. Refused at execution if a node port is already taken in the management cluster.",
		actions.LabelActionID, id,
		esc(params.Namespace), esc(actions.HostedServiceName(params.Service)), esc(params.Namespace), esc(params.Service), ports,
		esc(cpNS), esc(actions.ManagementServiceName(id)),
		hypershift.LabelClusterName, infraID, hypershift.LabelKubeVirt, hypershift.VirtLauncher)
}

// rollbackPrefix names rollback proposals. The first rollback proposal of
// action act-X is rbk-X, so that proposing the same rollback twice finds
// the first one instead of making a second.
const rollbackPrefix = "rbk-"

func rollbackID(actionID string) string {
	_, suffix, _ := strings.Cut(actionID, "-")
	return rollbackPrefix + suffix
}

// ProposeRollback implements RollbackActions. Undoing an executed action
// changes the cluster like any other action, so it is proposed and needs
// an approver's approval (four-eyes included) before the agent runs it;
// approving it marks the original action rolled back. Every step is
// audited by the Store like any proposal.
func (a *Approvals) ProposeRollback(ctx context.Context, id, user string) chatops.Reply {
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
	req := actions.Request{
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

// RunExpiry marks pending proposals past their expiry as expired (and
// audits them) every interval until ctx ends. Every replica may run it:
// each proposal is expired once (compare-and-set in the Store).
func (a *Approvals) RunExpiry(ctx context.Context, every time.Duration) error {
	if every <= 0 {
		return fmt.Errorf("bot: expiry interval %v must be positive", every)
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		n, err := a.Store.Expire(ctx, time.Now())
		if err != nil && ctx.Err() == nil {
			a.Log.Warn().Err(err).Int("expired", n).Msg("proposal expiry sweep failed")
		} else if n > 0 {
			a.Log.Info().Int("expired", n).Msg("proposals expired")
		}
	}
}

// propose stores req for cluster k on behalf of user. ok is false when it
// could not be stored, with the answer to give. warning is set when the
// proposal is stored but its audit record is not (its approval will be
// audited, and refused if that fails too).
func (a *Approvals) propose(ctx context.Context, k diagnose.Key, req actions.Request, user string) (p approval.Proposal, warning string, refused chatops.Reply, ok bool) {
	p, err := a.Store.Propose(ctx, req, user, approval.ForSource(k.Source))
	warning, refused, ok = a.stored(ctx, k, user, p, err, "Could not store the proposal: ")
	return p, warning, refused, ok
}

// stored judges what Store.Propose returned, for the reply: ok, with a
// warning when only the audit record failed; else the refusal to answer
// (audited), couldNot leading the error.
func (a *Approvals) stored(ctx context.Context, k diagnose.Key, user string, p approval.Proposal, err error, couldNot string) (warning string, refused chatops.Reply, ok bool) {
	switch {
	case errors.Is(err, approval.ErrAudit) && p.ID != "":
		return "\n_Warning: the audit record of this proposal could not be written._", chatops.Reply{}, true
	case err != nil:
		a.auditRefusal(ctx, k, user, err)
		if errors.Is(err, actions.ErrInvalid) {
			return "", chatops.Reply{Text: "Cannot propose that change: " + errText(err)}, false
		}
		return "", chatops.Reply{Text: couldNot + errText(err)}, false
	}
	return "", chatops.Reply{}, true
}

// Approve implements Actions: only the approval that wins the proposal's
// compare-and-set sends it to the agent. When the result does not come
// within Timeout, the answer says the request is queued, and the result
// is posted into the same conversation when it comes (chatops.Later).
func (a *Approvals) Approve(ctx context.Context, id, user string) chatops.Reply {
	p, err := approval.ApproveAndRun(ctx, a.Store, approval.DispatcherFunc(a.dispatch), id, user)
	if text, refused := refusal("approve", esc(id), p, err); refused {
		return chatops.Reply{Text: text}
	}
	if errors.Is(err, actions.ErrQueued) {
		later := chatops.Later(ctx)
		a.startFollow(context.WithoutCancel(ctx), p, user, later)
		what := "the agent of " + esc(p.Source) + " has not picked it up yet"
		if errors.Is(err, errNotQueued) {
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
func (a *Approvals) outcome(ctx context.Context, p approval.Proposal, user string, err error) chatops.Reply {
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
	case errors.Is(err, actions.ErrInvalid), errors.Is(err, actions.ErrRejected), errors.Is(err, actions.ErrConflict),
		errors.Is(err, actions.ErrNotKubeVirt), errors.Is(err, actions.ErrPortCollision):
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

// follow waits for the result of queued proposal p until its deadline
// (plus actions.ResultGrace), records it and posts the outcome with
// later (when set). A proposal still without a result then is marked
// failed: the agent refuses it after its deadline, so it will not run.
func (a *Approvals) follow(ctx context.Context, p approval.Proposal, user string, later chatops.LaterFunc) {
	wctx, cancel := context.WithDeadline(ctx, deadline(p).Add(actions.ResultGrace))
	defer cancel()
	r, err := a.Queue.Wait(wctx, p.Source, p.ID)
	if err != nil && ctx.Err() != nil {
		// Stopping (the process shuts down): whoever runs the recovery
		// sweep next records it.
		return
	}
	var res actions.Result
	switch {
	case err != nil:
		err = fmt.Errorf("%w: %s: not picked up before %s", ErrNoAgent, p.Source, deadline(p).UTC().Format(time.RFC3339))
	case r.Result != nil:
		res, err = *r.Result, r.Err()
	default:
		err = r.Err()
	}
	rp, rerr := approval.Record(ctx, a.Store, p, res, err)
	if errors.Is(rerr, approval.ErrWrongState) {
		// Recorded by someone else (the recovery sweep of a replica).
		rp, rerr = a.Store.Get(ctx, p.ID)
		if rerr == nil && rp.State == approval.StateExecuted {
			err = nil
		}
	}
	a.Log.Info().Str("action", p.ID).Str("state", string(rp.State)).AnErr("outcome", err).Msg("queued action answered")
	if later != nil {
		if rerr != nil && err == nil {
			err = rerr
		}
		later(a.outcome(ctx, rp, user, err))
	}
}

// startFollow runs follow for p unless this process already waits for
// its result.
func (a *Approvals) startFollow(ctx context.Context, p approval.Proposal, user string, later chatops.LaterFunc) {
	a.mu.Lock()
	if a.following[p.ID] {
		a.mu.Unlock()
		return
	}
	if a.following == nil {
		a.following = map[string]bool{}
	}
	a.following[p.ID] = true
	a.mu.Unlock()
	go func() {
		defer func() {
			a.mu.Lock()
			delete(a.following, p.ID)
			a.mu.Unlock()
		}()
		a.follow(ctx, p, user, later)
	}()
}

// deadline is when the agent stops accepting p's request.
func deadline(p approval.Proposal) time.Time { return p.DecidedAt.Add(actions.QueueHorizon) }

// DefaultRecoveryInterval is how often RunRecovery looks for approved
// proposals without a recorded outcome.
const DefaultRecoveryInterval = 30 * time.Second

// RunRecovery finds approved proposals without a recorded outcome, at
// once and then every interval until ctx ends: those whose result is in
// the results bucket are recorded; those still within their deadline
// are sent again (a bot stopped right after the approval never sent
// them); those past it are marked failed. Every replica may run it: a
// request sent again is dropped by the stream's de-duplication (its
// message id is the action id), the agent answers a request it already
// ran from its recorded result, and the recording is a compare-and-set
// that one caller wins. So each action runs at most once, and none is
// left behind by a replica that died.
func (a *Approvals) RunRecovery(ctx context.Context, interval time.Duration) error {
	if interval <= 0 {
		return fmt.Errorf("bot: recovery interval %v must be positive", interval)
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		a.recover(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (a *Approvals) recover(ctx context.Context) {
	ps, err := a.Store.Approved(ctx)
	if err != nil && ctx.Err() == nil {
		a.Log.Warn().Err(err).Msg("recovery: cannot list approved proposals")
	}
	now := time.Now()
	for _, p := range ps {
		log := a.Log.With().Str("action", p.ID).Str("source", p.Source).Logger()
		r, err := a.Queue.Result(ctx, p.Source, p.ID)
		switch {
		case err == nil:
			var res actions.Result
			if r.Result != nil {
				res = *r.Result
			}
			_, rerr := approval.Record(ctx, a.Store, p, res, r.Err())
			log.Info().AnErr("outcome", r.Err()).AnErr("record", rerr).Msg("recovery: result recorded")
		case !errors.Is(err, actions.ErrNoResult):
			log.Warn().Err(err).Msg("recovery: cannot read the result")
		case now.After(deadline(p).Add(actions.ResultGrace)):
			_, rerr := approval.Record(ctx, a.Store, p, actions.Result{},
				fmt.Errorf("%w: %s: not picked up before %s", ErrNoAgent, p.Source, deadline(p).UTC().Format(time.RFC3339)))
			log.Warn().AnErr("record", rerr).Msg("recovery: not picked up before its deadline; marked failed")
		case now.Before(deadline(p)):
			if err := a.send(ctx, p); err != nil {
				log.Warn().Err(err).Msg("recovery: request not sent")
				continue
			}
			log.Debug().Msg("recovery: request sent again (dropped as a duplicate if queued or run)")
			// Its result is recorded as soon as it comes.
			a.startFollow(ctx, p, p.DecidedBy, nil)
		}
	}
}

// markRolledBack records on the original action that the executed
// rollback proposal p undid it, and returns a sentence for the reply.
func (a *Approvals) markRolledBack(ctx context.Context, p approval.Proposal) string {
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

// dispatch queues p's request for the agent of p.Source and waits up to
// Timeout for its result, mapping it back onto actions' sentinel errors;
// without a result by then the error wraps actions.ErrQueued.
func (a *Approvals) dispatch(ctx context.Context, p approval.Proposal) (actions.Result, error) {
	if err := a.send(ctx, p); err != nil {
		if errors.Is(err, errNotQueued) {
			return actions.Result{}, fmt.Errorf("%w: %w", actions.ErrQueued, err)
		}
		return actions.Result{}, err
	}
	wait := a.Timeout
	if wait <= 0 {
		wait = DefaultResultWait
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	r, err := a.Queue.Wait(wctx, p.Source, p.ID)
	if err != nil {
		return actions.Result{}, err
	}
	var res actions.Result
	if r.Result != nil {
		res = *r.Result
	}
	return res, r.Err()
}

// send seals p's request, issued now with p's deadline (DecidedAt +
// actions.QueueHorizon, the same in every copy), and queues it with the
// action id as message id. A copy sent again is sealed afresh, so its
// signature is fresh while its deadline is not extended.
func (a *Approvals) send(ctx context.Context, p approval.Proposal) error {
	if _, err := event.ActionRequestSubject(p.Source); err != nil {
		return fmt.Errorf("proposal %s names no usable management cluster: %w", p.ID, err)
	}
	if a.Signer == nil {
		return fmt.Errorf("%w: no signing key configured, so the agent would refuse %s", actions.ErrUnauthorized, p.ID)
	}
	if a.Queue == nil {
		return fmt.Errorf("%w: no action queue configured", actions.ErrInternal)
	}
	att, err := p.Attestation()
	if err != nil {
		return err
	}
	data, err := a.Signer.SealUntil(p.Request, att, time.Now(), deadline(p))
	if err != nil {
		return err
	}
	if err := a.Queue.Send(ctx, p.Source, p.ID, data); err != nil {
		return fmt.Errorf("%w: %w", errNotQueued, err)
	}
	return nil
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

// escCode escapes text shown inside a code span or block.
func escCode(s string) string { return chatops.EscapeCode(s) }

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
