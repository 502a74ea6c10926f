package bot

import (
	"fmt"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"github.com/hcpbot/hcpbot/bot/blockkit"
	"github.com/hcpbot/hcpbot/bot/diagnose"
)

// maxEvidence lines go into the message; the rest belongs in the thread.
const maxEvidence = 8

// maxGlanceText bounds an evidence text in the message (runes): the
// thread has every line whole.
const maxGlanceText = 140

// Render builds an incident's message for a glance: the headline (what
// and where), the fields (cluster, management cluster, severity, since),
// the root cause in at most two sentences, the fix or how it rolls out,
// the evidence grouped by kind, and the buttons. The reasoning and every
// evidence line go to the thread (incidentReplies). The fallback text
// says the same as the headline, for notifications.
func Render(inc *Incident, now time.Time) (string, []slack.Block) {
	if !inc.Open() {
		return renderResolved(inc)
	}
	d := inc.Diagnoses[0]
	title, summary := d.Title, d.Short()
	rem := inc.Remedy
	if rem != nil && rem.Cause.Title != "" {
		// The fix's root cause stays the headline while the cluster
		// comes back: the diagnoses of the moment are its symptoms.
		title, summary = rem.Cause.Title, rem.Cause.RootCause
	}
	state := severityIcon[d.Severity] + " " + strings.ToUpper(string(d.Severity))
	switch {
	case rem == nil:
	case rem.Status == StatusRollingOut:
		state = "🛠 FIX APPLIED, ROLLING OUT"
	case rem.Status == StatusNotHealed:
		state = "⚠️ FIX APPLIED, NOT HEALED"
	case rem.Status == StatusRolledBack:
		state = "↩️ FIX ROLLED BACK"
	case rem.Status == StatusPaused:
		state = "⏸ FIX APPLIED, WAITING FOR THE PAUSE"
	}
	head := fmt.Sprintf("%s · %s — %s", state, inc.Cluster, title)
	blocks := []slack.Block{
		slack.NewHeaderBlock(blockkit.Plain(head)),
		slack.NewSectionBlock(nil, []*slack.TextBlockObject{
			blockkit.Field("Cluster", "`"+blockkit.EscapeText(inc.Cluster.Cluster.String())+"`"),
			blockkit.Field("Management cluster", "`"+blockkit.EscapeText(inc.Cluster.Source)+"`"),
			blockkit.Field("Severity", fmt.Sprintf("%s %s (confidence %s)", severityIcon[d.Severity], d.Severity, d.Confidence.Level)),
			blockkit.Field("Since", fmt.Sprintf("%s (%s)", d.Since(inc.Opened).UTC().Format("2006-01-02 15:04 UTC"), now.Sub(d.Since(inc.Opened)).Round(time.Minute))),
		}, nil),
		slack.NewSectionBlock(blockkit.Mrkdwn("*Root cause* — "+blockkit.EscapeText(summary)), nil, nil),
	}
	if rem != nil {
		blocks = append(blocks, slack.NewSectionBlock(blockkit.Mrkdwn(remedyText(rem)), nil, nil))
	} else if d.Fix != nil {
		fix := fmt.Sprintf("*Proposed fix* — %s `%s` noProxy:\n```%s```", d.Fix.Kind, d.Fix.Target, d.Fix.Diff)
		if d.Fix.Waits != "" {
			fix += "\n⏸ " + blockkit.EscapeText(d.Fix.Waits)
		}
		blocks = append(blocks, slack.NewSectionBlock(blockkit.Mrkdwn(fix), nil, nil))
	}
	if groups := groupEvidence(inc); len(groups) > 0 {
		label := "*Evidence*"
		if rem != nil {
			label = "*Still seen*"
		}
		blocks = append(blocks, slack.NewSectionBlock(blockkit.Mrkdwn(label+"\n"+strings.Join(groups, "\n")), nil, nil))
	}
	var ctx []string
	if s := inc.Silence; s != nil {
		ctx = append(ctx, fmt.Sprintf("🔕 Silenced by <@%s> until %s (`%s`)%s",
			blockkit.EscapeText(s.By), s.Until.UTC().Format("2006-01-02 15:04 UTC"), blockkit.EscapeText(s.ID), reasonSuffix(s.Reason)))
	}
	if inc.Storm != "" {
		ctx = append(ctx, fmt.Sprintf("Part of storm `%s`", inc.Storm))
	}
	if d.Trigger != nil && rem == nil {
		ctx = append(ctx, fmt.Sprintf("Began with the proxy edit seen %s", d.Trigger.At.UTC().Format("15:04 UTC")))
	}
	ctx = append(ctx, fmt.Sprintf("Incident `%s` · reasoning, every evidence line and next steps in the thread", inc.Key))
	blocks = append(blocks, slack.NewContextBlock("", mdList(ctx)...))
	blocks = append(blocks, slack.NewActionBlock("incident", incidentButtons(inc, d)...))
	return head, blockkit.ClampBlocks(blocks)
}

// incidentButtons are an open incident's buttons: Approve the proposed fix
// (none once a fix ran), Roll back a fix that did not heal, Silence, Details.
func incidentButtons(inc *Incident, d diagnose.Diagnosis) []slack.BlockElement {
	var buttons []slack.BlockElement
	switch rem := inc.Remedy; {
	case (rem == nil || rem.Status == StatusRolledBack) && d.Fix != nil:
		approve := slack.NewButtonBlockElement(blockkit.ActionApprove, inc.Key, blockkit.Plain("Approve fix"))
		approve.Style = slack.StylePrimary
		buttons = append(buttons, approve)
	case rem != nil && rem.Status == StatusNotHealed:
		rollback := slack.NewButtonBlockElement(blockkit.ActionRollback, rem.ID, blockkit.Plain("Roll back fix"))
		rollback.Style = slack.StyleDanger
		buttons = append(buttons, rollback)
	}
	return append(buttons,
		slack.NewButtonBlockElement(blockkit.ActionSilence, inc.Key, blockkit.Plain("Silence")),
		slack.NewButtonBlockElement(blockkit.ActionDetails, inc.Key, blockkit.Plain("Details")))
}

// remedyText is the fix section of an incident whose fix ran.
func remedyText(rem *Remedy) string {
	var b strings.Builder
	switch rem.Status {
	case StatusNotHealed:
		fmt.Fprintf(&b, "*Fix applied, not healed* — %s. Roll it back below (approved as any change), or look at the evidence.\n", blockkit.EscapeText(rem.Why))
	case StatusRolledBack:
		fmt.Fprintf(&b, "*Fix rolled back* %s by %s.\n", rem.RolledBackAt.UTC().Format("15:04 UTC"), who(rem.RolledBackBy))
	case StatusPaused:
		// Progress below says what waits and the command that lifts it.
		b.WriteString("*Fix applied — waiting for the pause:* HyperShift rolls nothing out while reconciliation is paused\n")
	default:
		b.WriteString("*Fix applied — rolling out*\n")
	}
	fmt.Fprintf(&b, "`%s` %s %s, approved by %s", rem.ID, rem.Kind, rem.ExecutedAt.UTC().Format("15:04 UTC"), who(rem.ApprovedBy))
	if rem.RequestedBy != "" && rem.RequestedBy != rem.ApprovedBy {
		fmt.Fprintf(&b, ", requested by %s", who(rem.RequestedBy))
	}
	if rem.Status != StatusRolledBack {
		fmt.Fprintf(&b, "\n*Progress* — %s", blockkit.EscapeText(rem.Rollout.String()))
	}
	return b.String()
}

// renderResolved is a resolved incident's message: the story in one
// screen. With a fix: the root cause it fixed, the fix, who asked and who
// approved, and how long fixing and healing took.
func renderResolved(inc *Incident) (string, []slack.Block) {
	title := "resolved"
	if len(inc.Diagnoses) > 0 {
		title = inc.Diagnoses[0].Title
	}
	rem := inc.Remedy
	if rem != nil && rem.Cause.Title != "" {
		title = rem.Cause.Title
	}
	if inc.Deleted {
		title = "cluster deleted"
	}
	text := fmt.Sprintf("✅ RESOLVED · %s — %s (after %s)", inc.Cluster, title, inc.Resolved.Sub(inc.Opened).Round(time.Second))
	blocks := []slack.Block{slack.NewHeaderBlock(blockkit.Plain(text))}
	if rem != nil && !inc.Deleted {
		fields := []*slack.TextBlockObject{
			blockkit.Field("Fix", fmt.Sprintf("`%s` (%s)", rem.ID, rem.Kind)),
			blockkit.Field("Approved by", who(rem.ApprovedBy)),
			blockkit.Field("Time to fix", rem.ExecutedAt.Sub(inc.Opened).Round(time.Second).String()),
			blockkit.Field("Time to heal", inc.Resolved.Sub(rem.ExecutedAt).Round(time.Second).String()),
		}
		if rem.RequestedBy != "" && rem.RequestedBy != rem.ApprovedBy {
			fields = append(fields, blockkit.Field("Requested by", who(rem.RequestedBy)))
		}
		if cause := rem.Cause.RootCause; cause != "" {
			blocks = append(blocks, slack.NewSectionBlock(blockkit.Mrkdwn("*Root cause* — "+blockkit.EscapeText(cause)), nil, nil))
		}
		blocks = append(blocks, slack.NewSectionBlock(nil, fields, nil))
		if rem.Diff != "" {
			blocks = append(blocks, slack.NewSectionBlock(blockkit.Mrkdwn("*Change*\n```"+blockkit.EscapeText(rem.Diff)+"```"), nil, nil))
		}
		if !rem.RolledBackAt.IsZero() {
			blocks = append(blocks, slack.NewContextBlock("", blockkit.Mrkdwn(fmt.Sprintf("The fix was rolled back %s by %s.",
				rem.RolledBackAt.UTC().Format(time.RFC3339), who(rem.RolledBackBy)))))
		}
	}
	blocks = append(blocks, slack.NewContextBlock("", blockkit.Mrkdwn(fmt.Sprintf("First symptom %s · resolved %s · incident `%s` · `/hcp timeline %s`",
		inc.Opened.UTC().Format(time.RFC3339), inc.Resolved.UTC().Format(time.RFC3339), inc.Key, inc.Key))))
	return text, blockkit.ClampBlocks(blocks)
}

// groupEvidence sums an incident's evidence up by kind, one line each:
// "3 nodes NotReady since 11:04:05 (w-0, w-1, w-2)"; a kind with a single
// item shows that item.
func groupEvidence(inc *Incident) []string {
	type group struct {
		n     int
		first diagnose.Evidence
		names []string
	}
	names := func(g *group) string {
		s := strings.Join(g.names, ", ")
		if g.n > len(g.names) {
			s += ", …"
		}
		return s
	}
	var order []string
	var nodes *diagnose.NodeImpact // the first diagnosis that counts nodes
	groups := map[string]*group{}
	for _, d := range inc.Diagnoses {
		if nodes == nil {
			nodes = d.Nodes
		}
		for _, e := range d.Evidence {
			g := groups[e.Kind]
			if g == nil {
				g = &group{first: e}
				groups[e.Kind] = g
				order = append(order, e.Kind)
			}
			g.n++
			if e.At.Before(g.first.At) {
				g.first = e
			}
			if len(g.names) < 3 {
				g.names = append(g.names, e.Object[strings.LastIndexByte(e.Object, '/')+1:])
			}
		}
	}
	out := make([]string, 0, len(order))
	for i, k := range order {
		if i == maxEvidence {
			out = append(out, fmt.Sprintf("• … %d more kinds (see thread)", len(order)-maxEvidence))
			break
		}
		g := groups[k]
		if k == "node" && nodes != nil && nodes.Text != "" {
			out = append(out, fmt.Sprintf("• %s — first `%s` (%s)", blockkit.EscapeText(nodes.Text), g.first.At.UTC().Format("15:04:05"), blockkit.EscapeText(names(g))))
			continue
		}
		if g.n == 1 {
			// One line at a glance; the whole of it is in the thread.
			e := g.first
			if r := []rune(e.Text); len(r) > maxGlanceText {
				e.Text = string(r[:maxGlanceText]) + "…"
			}
			out = append(out, evidenceLine(e))
			continue
		}
		out = append(out, fmt.Sprintf("• %d × %s — first `%s` (%s)", g.n, kindLabel(k), g.first.At.UTC().Format("15:04:05"), blockkit.EscapeText(names(g))))
	}
	return out
}

// kindLabel names an evidence kind in a grouped line.
func kindLabel(kind string) string {
	switch kind {
	case "node":
		return "nodes NotReady or not joining"
	case "crashloop":
		return "pods crashlooping"
	case "apiserver-proxy":
		return "kube-apiserver-proxy pods in tunnel mode"
	case "nodepool":
		return "NodePools unhealthy"
	case "virt-launcher":
		return "virt-launcher pods"
	}
	return kind
}

// mdList makes the context block's elements, one per part.
func mdList(parts []string) []slack.MixedElement {
	out := make([]slack.MixedElement, 0, len(parts))
	for _, p := range parts {
		out = append(out, blockkit.Mrkdwn(p))
	}
	return out
}

// reasonSuffix ends the silence line with its reason, if one was given.
func reasonSuffix(reason string) string {
	if reason == "" {
		return ""
	}
	return ": " + blockkit.EscapeText(reason)
}
