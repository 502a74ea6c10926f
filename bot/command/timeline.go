package command

import (
	"context"
	"fmt"
	"slices"

	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bot"
	"github.com/hcpbot/hcpbot/bot/chatops"
)

// timelineAudit bounds how many recent audit records `timeline` reads for
// the refusals and rejections of an incident's fix.
const timelineAudit = 500

// timeline answers `timeline <incident>`: the correlator's story of the
// incident, with the refusals and rejections the audit trail holds for its
// fix (who tried to approve and was not allowed, and why).
func (c *Handler) timeline(ctx context.Context, id string) chatops.Reply {
	inc, steps, ok := c.Bot.Timeline(id)
	if !ok {
		return chatops.Reply{Text: fmt.Sprintf("No incident `%s` is known (resolved incidents are kept until their cluster is quiet again).", esc(id))}
	}
	note := ""
	if c.Audit != nil && inc.Remedy != nil {
		recs, err := c.Audit.Recent(ctx, timelineAudit)
		if err != nil {
			note = "\n_The audit trail could not be read: refusals are left out._"
		}
		for _, r := range recs {
			if r.ActionID != inc.Remedy.ID {
				continue
			}
			switch r.Kind {
			case audit.KindRefused:
				steps = append(steps, bot.Step{At: r.Time, Text: fmt.Sprintf("fix `%s` refused: %s", r.ActionID, r.Reason), Actor: r.Actor})
			case audit.KindRejected:
				steps = append(steps, bot.Step{At: r.Time, Text: fmt.Sprintf("fix `%s` rejected: %s", r.ActionID, r.Reason), Actor: r.Actor})
			}
		}
		slices.SortStableFunc(steps, func(a, b bot.Step) int { return a.At.Compare(b.At) })
	}
	return chatops.Reply{Text: bot.TimelineText(&inc, steps) + note}
}
