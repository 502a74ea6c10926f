package bot

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
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
		if inc.Deleted {
			title = "cluster deleted"
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
	if s := inc.Silence; s != nil {
		blocks = append(blocks, slack.NewContextBlock("", md(fmt.Sprintf("🔕 Silenced by <@%s> until %s (`%s`)%s",
			chatops.EscapeText(s.By), s.Until.UTC().Format("2006-01-02 15:04 UTC"), chatops.EscapeText(s.ID), reasonSuffix(s.Reason)))))
	}
	if inc.Storm != "" {
		blocks = append(blocks, slack.NewContextBlock("", md(fmt.Sprintf("Part of storm `%s` (many clusters, one cause)", inc.Storm))))
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
		ev.WriteString(evidenceLine(e) + "\n")
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

// incidentReplies are the thread replies of a rendering: the full evidence
// under a new message (first), and afterwards what changed state since the
// main diagnosis shownTop and the evidence lines shown. Their IDs
// de-duplicate them (notify.Reply): a page's place, and for updates the
// hash of its text, so a restart that says the same again is not repeated.
func incidentReplies(inc *Incident, first bool, shownTop string, shown map[string]bool) []notify.Reply {
	lines := evidenceLines(inc)
	top := topOf(inc)
	reply := func(id, text string) notify.Reply {
		return notify.Reply{Key: inc.Key, Channel: inc.Channel, ID: id, Text: text}
	}
	var out []notify.Reply
	if first {
		if len(lines) > maxEvidence {
			for i, page := range notify.SplitText("*All evidence*\n"+strings.Join(lines, "\n"), notify.MaxSectionText) {
				out = append(out, reply(fmt.Sprintf("evidence-%d", i), page))
			}
		}
		return out
	}
	var fresh []string
	for _, l := range lines {
		if !shown[l] {
			fresh = append(fresh, l)
		}
	}
	var b strings.Builder
	if top != shownTop {
		switch {
		case !inc.Open():
			fmt.Fprintf(&b, "✅ Resolved at %s, after %s.\n", inc.Resolved.UTC().Format(time.RFC3339), inc.Resolved.Sub(inc.Opened).Round(time.Second))
		case shownTop == "resolved" || shownTop == "":
			fmt.Fprintf(&b, "Now: %s\n", top)
		default:
			fmt.Fprintf(&b, "Changed: %s → %s\n", shownTop, top)
		}
	}
	if len(fresh) > 0 && inc.Open() {
		b.WriteString("*New evidence*\n" + strings.Join(fresh, "\n"))
	}
	if b.Len() == 0 {
		return nil
	}
	for i, page := range notify.SplitText(b.String(), notify.MaxSectionText) {
		sum := sha256.Sum256([]byte(page))
		out = append(out, reply(fmt.Sprintf("upd-%d-%s", i, hex.EncodeToString(sum[:6])), page))
	}
	return out
}

// topOf is the main diagnosis as the thread names it: "resolved" once
// resolved.
func topOf(inc *Incident) string {
	if !inc.Open() {
		return "resolved"
	}
	if len(inc.Diagnoses) == 0 {
		return ""
	}
	d := inc.Diagnoses[0]
	return fmt.Sprintf("%s %s — %s", severityIcon[d.Severity], strings.ToUpper(string(d.Severity)), d.Title)
}

func evidenceLines(inc *Incident) []string {
	var out []string
	for _, d := range inc.Diagnoses {
		for _, e := range d.Evidence {
			out = append(out, evidenceLine(e))
		}
	}
	return out
}

func evidenceSet(inc *Incident) map[string]bool {
	m := map[string]bool{}
	for _, l := range evidenceLines(inc) {
		m[l] = true
	}
	return m
}

// digest identifies what a rendering shows. Rendered at a fixed time (the
// opening), durations stay out of it: a restarted bot that re-renders an
// incident nobody changed leaves its message alone (notify.Message.Digest).
func digest(text string, blocks []slack.Block) string {
	h := sha256.New()
	h.Write([]byte(text))
	if b, err := json.Marshal(blocks); err == nil {
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// evidenceLine is one evidence item as shown in messages and threads.
func evidenceLine(e diagnose.Evidence) string {
	return fmt.Sprintf("• `%s` %s — %s", e.At.UTC().Format("15:04:05"), chatops.EscapeText(e.Object), chatops.EscapeText(e.Text))
}

func reasonSuffix(reason string) string {
	if reason == "" {
		return ""
	}
	return ": " + chatops.EscapeText(reason)
}

// RenderStorm builds a storm's message: how many clusters, the cause they
// share, what they suffer from, and the fix; the clusters are listed in
// the thread (StormPage).
func RenderStorm(s *Storm, now time.Time) (string, []slack.Block) {
	open, byTitle, fixes := 0, map[string]int{}, 0
	var nodes diagnose.NodeImpact // summed over the open members
	var sev diagnose.Severity = diagnose.SeverityInfo
	for _, m := range s.Members {
		if !m.Open() {
			continue
		}
		open++
		if len(m.Diagnoses) == 0 {
			continue
		}
		d := m.Diagnoses[0]
		if n := d.Nodes; n != nil {
			nodes.Affected += n.Affected
			nodes.Total += n.Total
		}
		// Titles name their cluster: count kinds by rule.
		byTitle[ruleTitle(d)]++
		if d.Fix != nil {
			fixes++
		}
		if severityRank(d.Severity) < severityRank(sev) {
			sev = d.Severity
		}
	}
	md := func(t string) *slack.TextBlockObject {
		return slack.NewTextBlockObject(slack.MarkdownType, notify.Truncate(t, notify.MaxSectionText), false, false)
	}
	total := len(s.Members)
	if !s.Open() {
		text := fmt.Sprintf("✅ RESOLVED · storm of %d hosted clusters (after %s)", total, s.Resolved.Sub(s.Opened).Round(time.Second))
		return text, []slack.Block{
			slack.NewHeaderBlock(slack.NewTextBlockObject(slack.PlainTextType, notify.Truncate(text, notify.MaxHeaderText), false, false)),
			slack.NewSectionBlock(md("*Shared cause* — all of them "+s.Cause.Text), nil, nil),
			slack.NewContextBlock("", md(fmt.Sprintf("Opened %s · resolved %s · storm `%s`", s.Opened.UTC().Format(time.RFC3339), s.Resolved.UTC().Format(time.RFC3339), s.Key))),
		}
	}
	text := fmt.Sprintf("%s STORM · %d hosted clusters with one cause (%d open)", severityIcon[sev], total, open)
	titles := make([]string, 0, len(byTitle))
	for t := range byTitle {
		titles = append(titles, t)
	}
	slices.SortFunc(titles, func(a, b string) int {
		if byTitle[a] != byTitle[b] {
			return byTitle[b] - byTitle[a]
		}
		return strings.Compare(a, b)
	})
	var what strings.Builder
	for i, t := range titles {
		if i == 5 {
			fmt.Fprintf(&what, "• … %d more kinds\n", len(titles)-5)
			break
		}
		fmt.Fprintf(&what, "• %d × %s\n", byTitle[t], chatops.EscapeText(t))
	}
	blocks := []slack.Block{
		slack.NewHeaderBlock(slack.NewTextBlockObject(slack.PlainTextType, notify.Truncate(text, notify.MaxHeaderText), false, false)),
		slack.NewSectionBlock(md(fmt.Sprintf("*Shared cause* — all %d %s.", total, s.Cause.Text)), nil, nil),
		slack.NewSectionBlock(md("*Diagnoses*\n"+what.String()), nil, nil),
	}
	if nodes.Affected > 0 {
		blocks = append(blocks, slack.NewSectionBlock(md(fmt.Sprintf("*Nodes* — %s of %s nodes of these clusters are NotReady or not joining.",
			diagnose.FormatCount(nodes.Affected), diagnose.FormatCount(nodes.Total))), nil, nil))
	}
	if fixes > 0 {
		blocks = append(blocks, slack.NewSectionBlock(md(fmt.Sprintf(
			"*Proposed fix* — %d of them get a noProxy fix: `/hcp fix noproxy <cluster>` each (their incidents hold the diffs).", fixes)), nil, nil))
	}
	blocks = append(blocks, slack.NewContextBlock("", md(fmt.Sprintf(
		"Storm `%s` · first signal %s · open %s · every cluster is listed in the thread; `/hcp incidents` and `/hcp diagnose <cluster>` show each one",
		s.Key, s.Opened.UTC().Format(time.RFC3339), now.Sub(s.Opened).Round(time.Second)))))
	return text, notify.ClampBlocks(blocks)
}

// StormPage lists members [from, to) of a storm for its thread, one
// short line each (cluster and incident); a member whose diagnosis differs
// from the storm's main one says which it has.
func StormPage(s *Storm, from, to int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*Clusters %d–%d of the storm*\n", from+1, to)
	main := mainRule(s)
	for _, m := range s.Members[from:to] {
		b.WriteString(stormLine(m, main))
	}
	return b.String()
}

// stormPageBytes bounds the text of one storm page: far below Slack's
// message limit, and few pages, since each is a post (one per second).
const stormPageBytes = 12000

// stormPageEnd is where the thread page of a storm's members starting at
// from ends: at most `most` members and stormPageBytes of text (at least one
// member).
func stormPageEnd(s *Storm, from, most int) int {
	main := mainRule(s)
	to, size := from, 0
	for to < len(s.Members) && to-from < most {
		n := len(stormLine(s.Members[to], main))
		if to > from && size+n > stormPageBytes {
			break
		}
		size += n
		to++
	}
	return to
}

// stormLine is one member's line of a StormPage.
func stormLine(m *Incident, main string) string {
	what := ""
	switch {
	case m.Deleted:
		what = " — cluster deleted"
	case !m.Open():
		what = " — resolved"
	case len(m.Diagnoses) > 0 && m.Diagnoses[0].Rule != main:
		what = " — " + chatops.EscapeText(ruleTitle(m.Diagnoses[0]))
	}
	return fmt.Sprintf("• `%s` (`%s`)%s\n", chatops.EscapeText(m.Cluster.String()), m.Key, what)
}

// mainRule is the rule most open members of s are diagnosed with.
func mainRule(s *Storm) string {
	n := map[string]int{}
	best := ""
	for _, m := range s.Members {
		if m.Open() && len(m.Diagnoses) > 0 {
			r := m.Diagnoses[0].Rule
			n[r]++
			if n[r] > n[best] || (n[r] == n[best] && r < best) {
				best = r
			}
		}
	}
	return best
}

// ruleTitle is a diagnosis's kind without its cluster: the rule's summary,
// else (an unknown rule) its title.
func ruleTitle(d diagnose.Diagnosis) string {
	if t := diagnose.RuleSummary(d.Rule); t != "" {
		return t
	}
	return d.Title
}

func severityRank(s diagnose.Severity) int {
	switch s {
	case diagnose.SeverityCritical:
		return 0
	case diagnose.SeverityWarning:
		return 1
	}
	return 2
}
