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

	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/bot/blockkit"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/bot/notify"
)

// maxEvidence lines go into the message; the rest belongs in the thread.
const maxEvidence = 8

// maxGlanceText bounds an evidence text in the message (runes): the
// thread has every line whole.
const maxGlanceText = 140

var severityIcon = map[diagnose.Severity]string{
	diagnose.SeverityCritical: "🔴", diagnose.SeverityWarning: "🟠", diagnose.SeverityInfo: "🔵",
}

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

func who(user string) string {
	switch {
	case user == "":
		return "unknown"
	case strings.HasPrefix(user, approval.SystemRequesterPrefix):
		return blockkit.EscapeText(user)
	}
	return blockkit.Mention(user)
}

func mdList(parts []string) []slack.MixedElement {
	out := make([]slack.MixedElement, 0, len(parts))
	for _, p := range parts {
		out = append(out, blockkit.Mrkdwn(p))
	}
	return out
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
		// One reply under a new message: the reasoning and every
		// evidence line (more pages only past Slack's section limit).
		var b strings.Builder
		if inc.Open() && len(inc.Diagnoses) > 0 {
			b.WriteString(reasoning(inc.Diagnoses[0]))
		}
		if len(lines) > 0 {
			b.WriteString("*All evidence*\n" + strings.Join(lines, "\n"))
		}
		if b.Len() > 0 {
			for i, page := range blockkit.SplitText(b.String(), blockkit.MaxSectionText) {
				out = append(out, reply(fmt.Sprintf("evidence-%d", i), page))
			}
		}
		return out
	}
	if !inc.Open() && inc.Remedy != nil {
		// The story, as a postmortem draft, once the fix healed it.
		for i, page := range blockkit.SplitText(TimelineText(inc, inc.Timeline()), blockkit.MaxSectionText) {
			out = append(out, reply(fmt.Sprintf("timeline-%d", i), page))
		}
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
	for i, page := range blockkit.SplitText(b.String(), blockkit.MaxSectionText) {
		sum := sha256.Sum256([]byte(page))
		out = append(out, reply(fmt.Sprintf("upd-%d-%s", i, hex.EncodeToString(sum[:6])), page))
	}
	return out
}

// reasoning is the thread's account of a diagnosis: the full root cause,
// why the bot is as sure as it says, what triggered it, and next steps.
func reasoning(d diagnose.Diagnosis) string {
	var b strings.Builder
	if d.RootCause != "" {
		fmt.Fprintf(&b, "*Why* — %s\n", blockkit.EscapeText(d.RootCause))
	}
	if d.Confidence.Level != "" {
		fmt.Fprintf(&b, "*Confidence %s* — %s\n", d.Confidence.Level, blockkit.EscapeText(d.Confidence.Why))
	}
	if t := d.Trigger; t != nil {
		fmt.Fprintf(&b, "*Trigger* — proxy edit seen %s: noProxy `%s` → `%s`\n",
			t.At.UTC().Format(time.RFC3339), blockkit.EscapeText(t.OldNoProxy), blockkit.EscapeText(t.NewNoProxy))
	}
	if len(d.NextSteps) > 0 {
		b.WriteString("*Next steps*\n• " + blockkit.EscapeText(strings.Join(d.NextSteps, "\n• ")) + "\n")
	}
	return b.String()
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
	return fmt.Sprintf("• `%s` %s — %s", e.At.UTC().Format("15:04:05"), blockkit.EscapeText(e.Object), blockkit.EscapeText(e.Text))
}

func reasonSuffix(reason string) string {
	if reason == "" {
		return ""
	}
	return ": " + blockkit.EscapeText(reason)
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
	total := len(s.Members)
	if !s.Open() {
		text := fmt.Sprintf("✅ RESOLVED · storm of %d hosted clusters (after %s)", total, s.Resolved.Sub(s.Opened).Round(time.Second))
		return text, []slack.Block{
			slack.NewHeaderBlock(blockkit.Plain(text)),
			slack.NewSectionBlock(blockkit.Mrkdwn("*Shared cause* — all of them "+blockkit.EscapeText(s.Cause.Text)), nil, nil),
			slack.NewContextBlock("", blockkit.Mrkdwn(fmt.Sprintf("Opened %s · resolved %s · storm `%s`", s.Opened.UTC().Format(time.RFC3339), s.Resolved.UTC().Format(time.RFC3339), s.Key))),
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
		fmt.Fprintf(&what, "• %d × %s\n", byTitle[t], blockkit.EscapeText(t))
	}
	blocks := []slack.Block{
		slack.NewHeaderBlock(blockkit.Plain(text)),
		slack.NewSectionBlock(blockkit.Mrkdwn(fmt.Sprintf("*Shared cause* — all %d %s.", total, blockkit.EscapeText(s.Cause.Text))), nil, nil),
		slack.NewSectionBlock(blockkit.Mrkdwn("*Diagnoses*\n"+what.String()), nil, nil),
	}
	if nodes.Affected > 0 {
		blocks = append(blocks, slack.NewSectionBlock(blockkit.Mrkdwn(fmt.Sprintf("*Nodes* — %s of %s nodes of these clusters are NotReady or not joining.",
			diagnose.FormatCount(nodes.Affected), diagnose.FormatCount(nodes.Total))), nil, nil))
	}
	if fixes > 0 {
		blocks = append(blocks, slack.NewSectionBlock(blockkit.Mrkdwn(fmt.Sprintf(
			"*Proposed fix* — %d of them get a noProxy fix: `/hcp fix noproxy <cluster>` each (their incidents hold the diffs).", fixes)), nil, nil))
	}
	blocks = append(blocks, slack.NewContextBlock("", blockkit.Mrkdwn(fmt.Sprintf(
		"Storm `%s` · first signal %s · open %s · every cluster is listed in the thread; `/hcp incidents` and `/hcp diagnose <cluster>` show each one",
		s.Key, s.Opened.UTC().Format(time.RFC3339), now.Sub(s.Opened).Round(time.Second)))))
	return text, blockkit.ClampBlocks(blocks)
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
		what = " — " + blockkit.EscapeText(ruleTitle(m.Diagnoses[0]))
	}
	return fmt.Sprintf("• `%s` (`%s`)%s\n", blockkit.EscapeText(m.Cluster.String()), m.Key, what)
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
