package bot

import (
	"fmt"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/bot/notify"
)

// maxEvidence lines go into the message; the rest belongs in the thread.
const maxEvidence = 8

var severityIcon = map[diagnose.Severity]string{
	diagnose.SeverityCritical: "🔴", diagnose.SeverityWarning: "🟠", diagnose.SeverityInfo: "🔵",
}

// Render builds an incident's message: fallback text and Block Kit within
// Slack's limits.
func Render(inc *Incident, now time.Time) (string, []slack.Block) {
	cluster := inc.Cluster.String()
	if !inc.Open() {
		title := "resolved"
		if len(inc.Diagnoses) > 0 {
			title = inc.Diagnoses[0].Title
		}
		text := fmt.Sprintf("✅ RESOLVED · %s — %s (after %s)", cluster, title, inc.Resolved.Sub(inc.Opened).Round(time.Second))
		return text, []slack.Block{
			slack.NewHeaderBlock(slack.NewTextBlockObject(slack.PlainTextType, notify.Truncate(text, notify.MaxHeaderText), false, false)),
			slack.NewContextBlock("", slack.NewTextBlockObject(slack.MarkdownType,
				fmt.Sprintf("Opened %s · resolved %s · incident `%s`", inc.Opened.UTC().Format(time.RFC3339), inc.Resolved.UTC().Format(time.RFC3339), inc.Key), false, false)),
		}
	}
	d := inc.Diagnoses[0]
	text := fmt.Sprintf("%s %s · %s — %s", severityIcon[d.Severity], strings.ToUpper(string(d.Severity)), cluster, d.Title)
	md := func(s string) *slack.TextBlockObject {
		return slack.NewTextBlockObject(slack.MarkdownType, notify.Truncate(s, notify.MaxSectionText), false, false)
	}
	blocks := []slack.Block{
		slack.NewHeaderBlock(slack.NewTextBlockObject(slack.PlainTextType, notify.Truncate(text, notify.MaxHeaderText), false, false)),
		slack.NewSectionBlock(md("*Root cause*\n"+chatops.EscapeText(d.RootCause)), nil, nil),
		slack.NewContextBlock("", md(fmt.Sprintf("Confidence *%s* — %s · incident `%s` · open %s",
			d.Confidence.Level, chatops.EscapeText(d.Confidence.Why), inc.Key, now.Sub(inc.Opened).Round(time.Second)))),
	}
	if d.Trigger != nil {
		blocks = append(blocks, slack.NewSectionBlock(md(fmt.Sprintf("*Trigger* — proxy edit seen %s: noProxy `%s` → `%s`",
			d.Trigger.At.UTC().Format(time.RFC3339), chatops.EscapeText(d.Trigger.OldNoProxy), chatops.EscapeText(d.Trigger.NewNoProxy))), nil, nil))
	}
	var ev strings.Builder
	for i, e := range d.Evidence {
		if i == maxEvidence {
			fmt.Fprintf(&ev, "… and %d more (see thread)\n", len(d.Evidence)-maxEvidence)
			break
		}
		fmt.Fprintf(&ev, "• `%s` %s — %s\n", e.At.UTC().Format("15:04:05"), chatops.EscapeText(e.Object), chatops.EscapeText(e.Text))
	}
	if ev.Len() > 0 {
		blocks = append(blocks, slack.NewSectionBlock(md("*Evidence*\n"+ev.String()), nil, nil))
	}
	if d.Fix != nil {
		blocks = append(blocks, slack.NewSectionBlock(md(fmt.Sprintf("*Proposed fix* — %s `%s` noProxy:\n```%s```",
			d.Fix.Kind, d.Fix.Target, d.Fix.Diff)), nil, nil))
	}
	if len(d.NextSteps) > 0 {
		blocks = append(blocks, slack.NewSectionBlock(md("*Next steps*\n• "+chatops.EscapeText(strings.Join(d.NextSteps, "\n• "))), nil, nil))
	}
	for _, other := range inc.Diagnoses[1:] {
		blocks = append(blocks, slack.NewContextBlock("", md(fmt.Sprintf("Also: %s %s", severityIcon[other.Severity], chatops.EscapeText(other.Title)))))
	}
	var buttons []slack.BlockElement
	if d.Fix != nil {
		approve := slack.NewButtonBlockElement(chatops.ActionApprove, inc.Key, slack.NewTextBlockObject(slack.PlainTextType, "Approve fix", false, false))
		approve.Style = slack.StylePrimary
		buttons = append(buttons, approve)
	}
	buttons = append(buttons,
		slack.NewButtonBlockElement(chatops.ActionSilence, inc.Key, slack.NewTextBlockObject(slack.PlainTextType, "Silence", false, false)),
		slack.NewButtonBlockElement(chatops.ActionDetails, inc.Key, slack.NewTextBlockObject(slack.PlainTextType, "Details", false, false)))
	blocks = append(blocks, slack.NewActionBlock("incident", buttons...))
	return text, notify.ClampBlocks(blocks)
}
