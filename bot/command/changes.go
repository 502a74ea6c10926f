package command

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/slack-go/slack"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bot/approval"
	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/bot/notify"
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

// Changes carries out the commands that change clusters through the
// approval flow: proposals are stored in Store (which audits every
// transition), and an approved one is queued for the agent of its
// management cluster as a durable message (actions.Client); the agent's
// result is read back by action id.
type Changes struct {
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

// RunExpiry marks pending proposals past their expiry as expired (and
// audits them) every interval until ctx ends. Every replica may run it:
// each proposal is expired once (compare-and-set in the Store).
func (a *Changes) RunExpiry(ctx context.Context, every time.Duration) error {
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
func (a *Changes) propose(ctx context.Context, k diagnose.Key, req actions.Change, user string, opts ...approval.ProposeOption) (p approval.Proposal, warning string, refused chatops.Reply, ok bool) {
	p, err := a.Store.Propose(ctx, req, user, append(opts, approval.ForSource(k.Source))...)
	warning, refused, ok = a.stored(ctx, k, user, p, err, "Could not store the proposal: ")
	return p, warning, refused, ok
}

// stored judges what Store.Propose returned, for the reply: ok, with a
// warning when only the audit record failed; else the refusal to answer
// (audited), couldNot leading the error.
func (a *Changes) stored(ctx context.Context, k diagnose.Key, user string, p approval.Proposal, err error, couldNot string) (warning string, refused chatops.Reply, ok bool) {
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

func (a *Changes) auditRefusal(ctx context.Context, k diagnose.Key, user string, cause error) {
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

// errText is an error for chat: credentials redacted, escaped for mrkdwn.
func errText(err error) string { return esc(redact.RedactText(err.Error())) }

// esc escapes text that did not come from this package (user input,
// cluster data) for Slack mrkdwn, so that it cannot ping or link.
func esc(s string) string { return chatops.EscapeText(s) }

// escCode escapes text shown inside a code span or block.
func escCode(s string) string { return chatops.EscapeCode(s) }

// mention renders a Slack user id as a mention.
func mention(user string) string { return "<@" + esc(user) + ">" }
