package command

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"
	"github.com/slack-go/slack"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bot/blockkit"
	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/redact"
)

// Changes carries out the commands that change clusters through the
// approval flow (package approval): it words what the flow answers. The
// flow seals, stores and audits every decision, and its loop sends the
// approved change to the agent and follows the outcome, which is posted
// into the conversation that approved it (chatops.Later) or, when none
// waits in this process, by Config.Outcomes.
type Changes struct {
	Flow *approval.Flow
	// Audit records refusals that never reach the flow (a proposal the
	// executor would refuse). Nil skips them.
	Audit audit.Appender
	// Log receives what has no user to tell; the zero Logger discards it.
	Log zerolog.Logger
}

// propose stores req for cluster k on behalf of user. ok is false when it
// could not be stored, with the answer to give. warning is set when the
// proposal is stored but its audit record is not (its approval will be
// audited, and refused if that fails too).
func (a *Changes) propose(ctx context.Context, k diagnose.Key, req actions.Change, user string, opts ...approval.ProposeOption) (p approval.Proposal, warning string, refused chatops.Reply, ok bool) {
	p, err := a.Flow.Propose(ctx, req, user, append(opts, approval.ForSource(k.Source))...)
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
		if errors.Is(err, actions.ErrInvalid) || errors.Is(err, actions.ErrNotKubeVirt) {
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
	approve := slack.NewButtonBlockElement(blockkit.ActionApprove, id, blockkit.Plain("Approve"))
	approve.Style = slack.StylePrimary
	reject := slack.NewButtonBlockElement(blockkit.ActionReject, id, blockkit.Plain("Reject"))
	reject.Style = slack.StyleDanger
	return chatops.Reply{Text: text, InChannel: true, Blocks: textBlocks(text, slack.NewActionBlock("decide-"+id, approve, reject))}
}

// textBlocks renders mrkdwn text as section blocks within Slack's limits,
// followed by extra blocks.
func textBlocks(text string, extra ...slack.Block) []slack.Block {
	return blockkit.ClampBlocks(append(blockkit.Sections(text), extra...))
}

// errText is an error for chat: credentials redacted, escaped for mrkdwn.
func errText(err error) string { return esc(redact.RedactText(err.Error())) }

// esc escapes text that did not come from this package (user input,
// cluster data) for Slack mrkdwn, so that it cannot ping or link.
func esc(s string) string { return blockkit.EscapeText(s) }

// escCode escapes text shown inside a code span or block.
func escCode(s string) string { return blockkit.EscapeCode(s) }
