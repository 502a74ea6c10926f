package digest

import (
	"cmp"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bot/blockkit"
	"github.com/hcpbot/hcpbot/bot/notify"
	"github.com/hcpbot/hcpbot/bot/silence"
	"github.com/hcpbot/hcpbot/noproxy"
	"github.com/hcpbot/hcpbot/redact"
)

// Mode chooses how much a rendering carries.
type Mode int

const (
	// Compact is for Slack: a summary root and one thread reply per
	// cluster that needs action or has something in place, each bounded.
	Compact Mode = iota
	// Full is for the console: every cluster, every finding.
	Full
)

// Bounds of the compact rendering: a thread reply carries at most
// maxChunks sections of text, so a cluster with hundreds of findings
// cannot flood the thread.
const (
	maxChunks         = 3
	maxCompactActions = 10
	// maxCompactItems bounds the exposures and the silences listed per
	// reply in Slack.
	maxCompactItems = 10
	// maxCompactReason bounds a silence's reason in Slack (runes).
	maxCompactReason = 200
)

var icon = map[noproxy.Severity]string{
	noproxy.SeverityCritical: "🔴", noproxy.SeverityWarning: "🟠", noproxy.SeverityInfo: "🔵",
}

// Render returns the root message (Key, Channel and Version left to the
// caller) and its thread replies (Key and Channel too).
func Render(d Digest, name string, mode Mode) (notify.Message, []notify.Reply) {
	summary := clean(summaryText(d, name))
	root := notify.Message{Text: firstLine(summary), Blocks: sections(summary, maxChunks)}
	var replies []notify.Reply
	for _, s := range d.Sources {
		for _, c := range s.Clusters {
			// A compliant cluster with nothing in place gets no reply in
			// Slack: its informational findings are in the console digest.
			if mode == Compact && c.Compliant() && len(c.Fixed) == 0 && c.Incident == "" && len(c.Silences) == 0 && len(c.Exposures) == 0 && c.Unwatched == "" {
				continue
			}
			body := clean(clusterText(c, d, mode))
			limit := maxChunks
			if mode == Full {
				limit = 0
			}
			replies = append(replies, notify.Reply{
				ID: "cluster/" + c.Key.String(), Text: firstLine(body), Blocks: sections(body, limit),
			})
		}
	}
	if len(d.OtherExposures) > 0 || len(d.OtherSilences) > 0 {
		var b strings.Builder
		b.WriteString("*Exposures and silences on no cluster the bot knows*\n")
		writeExposures(&b, d.OtherExposures, mode, true)
		writeSilences(&b, d.OtherSilences, mode)
		body := clean(b.String())
		limit := maxChunks
		if mode == Full {
			limit = 0
		}
		replies = append(replies, notify.Reply{ID: "other", Text: firstLine(body), Blocks: sections(body, limit)})
	}
	if mode == Full && len(d.OtherActions) > 0 {
		var b strings.Builder
		b.WriteString("*Other actions since the last digest*\n")
		for _, a := range d.OtherActions {
			writeAction(&b, a)
		}
		body := clean(b.String())
		replies = append(replies, notify.Reply{ID: "actions", Text: firstLine(body), Blocks: sections(body, 0)})
	}
	return root, replies
}

// CompliantLine says in every digest what "compliant" means.
const CompliantLine = "_Compliant: no finding that needs action (🔴 🟠). Informational findings (🔵) never make a cluster non-compliant; incidents, silences, exposures and actions are listed, not judged._"

// maxSummaryItems bounds the findings the root lists under "Needs action";
// the clusters' replies have the rest.
const maxSummaryItems = 10

func summaryText(d Digest, name string) string {
	var b strings.Builder
	clusters, bad := 0, len(d.NonCompliant())
	var unwatched []ClusterReport
	for _, s := range d.Sources {
		clusters += len(s.Clusters)
		for _, c := range s.Clusters {
			if c.Unwatched != "" {
				unwatched = append(unwatched, c)
			}
		}
	}
	fmt.Fprintf(&b, "📋 Proxy digest %s · %d %s: %d %s action, %d compliant\n", name, clusters, plural(clusters, "hosted cluster"), bad, oneOrMany(bad, "needs", "need"), clusters-bad)
	b.WriteString(CompliantLine + "\n")
	fmt.Fprintf(&b, "Findings that need action: %s %d critical · %s %d warning · informational: %s %d\n",
		icon[noproxy.SeverityCritical], d.Action[noproxy.SeverityCritical],
		icon[noproxy.SeverityWarning], d.Action[noproxy.SeverityWarning],
		icon[noproxy.SeverityInfo], d.Informational)
	if d.First {
		b.WriteString("Trend: first digest, nothing to compare with\n")
	} else {
		fmt.Fprintf(&b, "Trend since %s: %d new, %d fixed\n", d.Since.UTC().Format(time.RFC3339), d.New, d.Fixed)
	}
	items := d.NeedsAction()
	if len(items)+len(unwatched)+len(d.OtherExposures) > 0 {
		b.WriteString("*Needs action* — most severe first, then clusters with an open incident, then the oldest:\n")
		for i, it := range items {
			if i == maxSummaryItems {
				fmt.Fprintf(&b, "… and %d more in the clusters' replies\n", len(items)-i)
				break
			}
			fmt.Fprintf(&b, "%d. %s `%s` on %s: `%s`%s%s", i+1, icon[it.Finding.Severity], it.Key.Cluster, it.Key.Source, it.Finding.Code,
				entryText(it.Finding.Entry), age(it.Finding, d))
			if it.Incident != "" {
				b.WriteString(" · 🚨 open incident")
			}
			b.WriteString("\n")
		}
		for _, c := range unwatched {
			fmt.Fprintf(&b, "🙈 `%s` on %s is not watched by hcpbot: give the agent its admin kubeconfig (why in its reply)\n", c.Key.Cluster, c.Key.Source)
		}
		if n := len(d.OtherExposures); n > 0 {
			fmt.Fprintf(&b, "🔌 %d %s on no cluster the bot knows: nobody watches %s (below)\n", n, plural(n, "NodePort exposure"), oneOrMany(n, "it", "them"))
		}
	}
	for _, s := range d.Sources {
		var names []string
		for _, c := range s.Clusters {
			if !c.Compliant() {
				names = append(names, fmt.Sprintf("`%s` (%d)", c.Key.Cluster, c.NeedingAction()))
			}
		}
		if len(names) > 0 {
			fmt.Fprintf(&b, "• *%s*: needs action: %s · %d compliant", s.Name, strings.Join(names, ", "), len(s.Clusters)-len(names))
		} else {
			fmt.Fprintf(&b, "• *%s*: %d clusters, all compliant", s.Name, len(s.Clusters))
		}
		inc, sil, exp, unw := s.counts()
		for _, c := range []struct {
			n          int
			icon, what string
		}{{unw, "🙈", "unwatched cluster"}, {inc, "🚨", "open incident"}, {sil, "🔕", "silence"}, {exp, "🔌", "NodePort exposure"}} {
			if c.n > 0 {
				fmt.Fprintf(&b, " · %s %d %s", c.icon, c.n, plural(c.n, c.what))
			}
		}
		b.WriteString("\n")
	}
	if len(d.OtherExposures)+len(d.OtherSilences) > 0 {
		b.WriteString("• On no cluster the bot knows:")
		sep := " "
		if n := len(d.OtherExposures); n > 0 {
			fmt.Fprintf(&b, "%s🔌 %d %s", sep, n, plural(n, "NodePort exposure"))
			sep = " · "
		}
		if n := len(d.OtherSilences); n > 0 {
			fmt.Fprintf(&b, "%s🔕 %d %s", sep, n, plural(n, "silence"))
		}
		b.WriteString("\n")
	}
	if d.ExposuresIncomplete {
		b.WriteString("⚠️ The NodePort exposures could not all be read; the list may be incomplete.\n")
	}
	for _, m := range d.Missing {
		b.WriteString("⚠️ " + redact.RedactText(m) + "\n")
	}
	fmt.Fprintf(&b, "_At %s_", d.At.UTC().Format(time.RFC3339))
	return b.String()
}

// maxEntryText bounds a finding's entry in a line (runes).
const maxEntryText = 80

func entryText(entry string) string {
	if entry == "" {
		return ""
	}
	// Redacted before cutting, so no cut can hide a credential from
	// clean's redaction.
	return fmt.Sprintf(" (`%s`)", blockkit.Truncate(redact.RedactText(entry), maxEntryText))
}

// age says how long a finding has been seen: new, or since its first
// digest; nothing in a first digest.
func age(f Finding, d Digest) string {
	switch {
	case f.New:
		return " 🆕"
	case d.First || !f.Since.Before(d.At):
		return ""
	}
	return " · since " + f.Since.UTC().Format(time.DateOnly)
}

func clusterText(c ClusterReport, d Digest, mode Mode) string {
	var b strings.Builder
	state := "✅ compliant"
	if n := c.NeedingAction(); n > 0 {
		state = fmt.Sprintf("❌ needs action (%d)", n)
	}
	if !c.Proxy {
		state += " (no proxy)"
	}
	fmt.Fprintf(&b, "*%s* on %s — %s\n", c.Key.Cluster, c.Key.Source, state)
	if c.Unwatched != "" {
		// Why the bot is blind inside the cluster, before anything else.
		fmt.Fprintf(&b, "🙈 Not watched by hcpbot: %s\n", c.Unwatched)
	}
	// What is in place first: bounded in Compact, so hundreds of findings
	// cannot push it out of the thread reply.
	if c.Incident != "" {
		fmt.Fprintf(&b, "🚨 Open incident `%s`: %s\n", c.Incident, c.IncidentTitle)
	}
	writeExposures(&b, c.Exposures, mode, false)
	writeSilences(&b, c.Silences, mode)
	// What needs action, ranked as in the root, before what is only
	// informational: Compact's bound cuts the informational ones first.
	var action []Item
	var info []Finding
	for _, f := range c.Findings {
		if f.Class == NeedsAction {
			action = append(action, Item{Key: c.Key, Finding: f, Incident: c.Incident})
		} else {
			info = append(info, f)
		}
	}
	sortItems(action)
	if len(action) > 0 {
		b.WriteString("*Needs action*\n")
	}
	for _, it := range action {
		// The fix is what makes it actionable: shown in Slack too.
		writeFinding(&b, it.Finding, d, true)
	}
	if len(info) > 0 {
		b.WriteString("*Informational*\n")
	}
	for _, f := range info {
		writeFinding(&b, f, d, mode == Full)
	}
	for _, fx := range c.Fixed {
		fmt.Fprintf(&b, "✅ fixed: `%s`\n", fx)
	}
	if len(c.PoolsUnhealthy) > 0 {
		fmt.Fprintf(&b, "NodePools unhealthy: %s\n", strings.Join(c.PoolsUnhealthy, ", "))
	} else if mode == Full {
		b.WriteString("NodePools: no problem diagnosed\n")
	}
	for i, a := range c.Actions {
		if mode == Compact && i == maxCompactActions {
			fmt.Fprintf(&b, "… and %d more actions\n", len(c.Actions)-i)
			break
		}
		writeAction(&b, a)
	}
	return b.String()
}

func writeFinding(b *strings.Builder, f Finding, d Digest, fix bool) {
	// Informational findings all wear 🔵, as the compliant line says; a
	// lint's own severity stays readable in words.
	mark, sev := icon[f.Severity], ""
	if f.Class == Informational {
		mark = icon[noproxy.SeverityInfo]
		if f.Severity != noproxy.SeverityInfo {
			sev = fmt.Sprintf(" (lint: %s)", f.Severity)
		}
	}
	fmt.Fprintf(b, "%s `%s`%s%s %s", mark, f.Code, sev, age(f, d), f.Reason)
	if f.Entry != "" {
		fmt.Fprintf(b, " (`%s`)", f.Entry)
	}
	b.WriteString("\n")
	if fix && f.Fix != "" {
		fmt.Fprintf(b, "    fix: %s\n", f.Fix)
	}
}

func oneOrMany(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func plural(n int, what string) string {
	if n == 1 {
		return what
	}
	return what + "s"
}

// writeSilences lists silences: target, by, until, reason (redacted by
// the silence store; clean redacts again).
func writeSilences(b *strings.Builder, ss []silence.Silence, mode Mode) {
	for i, s := range ss {
		if mode == Compact && i == maxCompactItems {
			fmt.Fprintf(b, "… and %d more silences\n", len(ss)-i)
			break
		}
		target := "cluster `" + s.Cluster + "`"
		if s.Cluster == "" {
			target = "incident `" + s.Incident + "`"
		}
		fmt.Fprintf(b, "🔕 Silenced %s by <@%s> until %s", target, s.CreatedBy, s.ExpiresAt.UTC().Format(time.RFC3339))
		if s.Reason != "" {
			reason := s.Reason
			if mode == Compact {
				// Redacted before cutting, so no cut can hide a credential
				// from clean's redaction.
				reason = blockkit.Truncate(redact.RedactText(reason), maxCompactReason)
			}
			b.WriteString(": " + reason)
		}
		if mode == Full {
			fmt.Fprintf(b, " (`%s`, since %s)", s.ID, s.CreatedAt.UTC().Format(time.RFC3339))
		}
		b.WriteString("\n")
	}
}

// writeExposures lists NodePort exposures: Service, ports, who asked, who
// approved, when, the action id; Full adds the objects created. cluster
// names each exposure's cluster (for those not under a cluster heading).
func writeExposures(b *strings.Builder, es []Exposure, mode Mode, cluster bool) {
	for i, e := range es {
		if mode == Compact && i == maxCompactItems {
			fmt.Fprintf(b, "… and %d more NodePort exposures\n", len(es)-i)
			break
		}
		ports := make([]string, len(e.Ports))
		for j, p := range e.Ports {
			ports[j] = fmt.Sprintf("%d→%d/%s", p.Port, p.NodePort, cmp.Or(p.Protocol, "TCP"))
		}
		fmt.Fprintf(b, "🔌 NodePort exposure of Service `%s`", e.Service)
		if cluster {
			fmt.Fprintf(b, " on `%s`", e.Key)
		}
		fmt.Fprintf(b, " (%s), requested by <@%s>, approved by <@%s>, executed %s (`%s`)\n",
			cmp.Or(strings.Join(ports, ", "), "no ports recorded"), e.RequestedBy, e.ApprovedBy, e.ExecutedAt.UTC().Format(time.RFC3339), e.ActionID)
		if mode == Full {
			for _, o := range e.Created {
				fmt.Fprintf(b, "    created %s\n", o)
			}
		}
	}
}

func writeAction(b *strings.Builder, a audit.Record) {
	fmt.Fprintf(b, "Action %s %s", a.Time.UTC().Format(time.RFC3339), a.Kind)
	if a.ActionID != "" {
		fmt.Fprintf(b, " `%s`", a.ActionID)
	}
	if a.Actor != "" {
		fmt.Fprintf(b, " by <@%s>", a.Actor)
	}
	if a.Summary != "" {
		b.WriteString(": " + a.Summary)
	}
	b.WriteString("\n")
}

// clean escapes mrkdwn control characters in the free text we did not
// write and redacts any URL credentials, wherever they came from. Mentions
// we built ("<@U…>") are restored after escaping.
func clean(s string) string {
	return mention.ReplaceAllString(blockkit.EscapeText(redact.RedactText(s)), "<@$1>")
}

// mention matches an escaped user mention; Slack user ids are U… or W…
// followed by upper-case letters and digits, so nothing a user typed can
// turn into markup through it.
var mention = regexp.MustCompile(`&lt;@([UW][A-Z0-9]+)&gt;`)

// sections splits text into section blocks within Slack's limits; limit
// > 0 caps their number and says what was left out.
func sections(text string, limit int) []slack.Block {
	blocks := blockkit.Sections(text)
	if limit > 0 && len(blocks) > limit {
		left := len(blocks) - limit
		blocks = append(blocks[:limit:limit], blockkit.Sections(fmt.Sprintf("_… %d more sections left out; the console digest has everything._", left))...)
	}
	return blockkit.ClampBlocks(blocks)
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return blockkit.Truncate(s, blockkit.MaxHeaderText)
}
