package command

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bot"
	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/bot/notify"
	"github.com/hcpbot/hcpbot/event"
)

// timelineLead is how long before an incident opened its trail is read:
// a fix proposed for the first symptom before the incident was posted
// (the group wait) still belongs to it.
const timelineLead = 10 * time.Minute

// timeline answers `timeline <incident>`: detection, the first post,
// each change of diagnosis and rollout (the correlator's story, from the
// events), then from the audit trail — read whole from before the
// incident opened, not a window of recent records — every proposal,
// approval, rejection, refusal, expiry and execution about its cluster,
// the agent's own records included, and the resolution.
func (c *Handler) timeline(ctx context.Context, id string) chatops.Reply {
	inc, steps, ok := c.Bot.Timeline(id)
	if !ok {
		return chatops.Reply{Text: fmt.Sprintf("No incident `%s` is known (resolved incidents are kept until their cluster is quiet again).", esc(id))}
	}
	note := ""
	if c.Audit != nil {
		trail, err := c.trailOf(ctx, inc)
		switch {
		case err != nil && len(trail) == 0:
			note = "\n_The audit trail could not be read: the approval steps are those the approval store holds._"
		default:
			if err != nil {
				note = "\n_The audit trail was read in part: " + errText(err) + "_"
			}
			// The trail tells the fix's story whole: the correlator's
			// own remedy steps would repeat part of it.
			steps = append(c.eventSteps(inc), trail...)
		}
	}
	if pt, ok := c.Delivery.(notify.PostTimes); ok {
		if at, ok, err := pt.FirstPosted(ctx, inc.Key); err == nil && ok {
			steps = append(steps, bot.Step{At: at, Text: "first posted to the channel"})
		}
	}
	slices.SortStableFunc(steps, func(a, b bot.Step) int { return a.At.Compare(b.At) })
	return chatops.Reply{Text: bot.TimelineText(&inc, steps) + note}
}

// trailOf reads the audit records of inc's cluster, from its management
// cluster's subjects, as timeline steps.
func (c *Handler) trailOf(ctx context.Context, inc bot.Incident) ([]bot.Step, error) {
	var subjects []string
	if s, err := event.AuditSubject(inc.Cluster.Source); err == nil {
		subjects = append(subjects, s)
	}
	if s, err := event.AgentAuditSubject(inc.Cluster.Source); err == nil {
		subjects = append(subjects, s)
	}
	recs, err := c.Audit.Since(ctx, inc.Opened.Add(-timelineLead), subjects...)
	if err != nil && !errors.Is(err, audit.ErrTooMany) {
		return nil, err
	}
	cluster := inc.Cluster.Cluster.String()
	// The agent's record of an execution is the execution; the bot's
	// (the outcome it recorded) is told only when the agent's is missing.
	byAgent := map[string]bool{}
	for _, r := range recs {
		if r.Kind == audit.KindExecuted && strings.HasSuffix(r.ID, agentRecordSuffix) {
			byAgent[r.ActionID] = true
		}
	}
	var out []bot.Step
	for _, r := range recs {
		if r.Cluster != cluster || (!inc.Open() && r.Time.After(inc.Resolved)) {
			continue
		}
		if r.Kind == audit.KindExecuted && !strings.HasSuffix(r.ID, agentRecordSuffix) && byAgent[r.ActionID] {
			continue
		}
		if s, ok := trailStep(r); ok {
			out = append(out, s)
		}
	}
	return out, err
}

// agentRecordSuffix ends the ID of the agent's own record of an
// execution (approval's agent).
const agentRecordSuffix = ".agent"

// trailStep words one audit record for the timeline.
func trailStep(r audit.Record) (bot.Step, bool) {
	what := "a change"
	if r.ActionID != "" {
		what = "fix `" + r.ActionID + "`"
	}
	var text string
	switch r.Kind {
	case audit.KindProposed:
		text = fmt.Sprintf("%s proposed: %s", what, r.Summary)
	case audit.KindApproved:
		text = fmt.Sprintf("%s approved", what)
		if i := lastParen(r.Summary); i != "" {
			text += " " + i
		}
	case audit.KindRejected:
		text = fmt.Sprintf("%s rejected: %s", what, r.Reason)
	case audit.KindRefused:
		text = fmt.Sprintf("%s refused: %s (%s)", what, r.Reason, r.Summary)
	case audit.KindExpired:
		text = fmt.Sprintf("%s expired undecided", what)
	case audit.KindExecuted:
		text = fmt.Sprintf("%s executed by the agent: %s", what, r.Summary)
	case audit.KindFailed:
		text = fmt.Sprintf("%s failed: %s", what, r.Reason)
	case audit.KindRolledBack:
		text = fmt.Sprintf("%s rolled back: %s", what, r.Summary)
	case audit.KindForged:
		text = fmt.Sprintf("%s: a forged approval record was refused", what)
	default:
		return bot.Step{}, false
	}
	return bot.Step{At: r.Time, Text: text, Actor: r.Actor}, true
}

// lastParen is the "(approval k of n)" a record's summary ends with.
func lastParen(s string) string {
	if i := len(s) - 1; i > 0 && s[i] == ')' {
		for j := i; j >= 0; j-- {
			if s[j] == '(' {
				return s[j:]
			}
		}
	}
	return ""
}
