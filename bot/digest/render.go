package digest

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"github.com/hcpbot/hcpbot/bot/audit"
	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/bot/notify"
	"github.com/hcpbot/hcpbot/noproxy"
	"github.com/hcpbot/hcpbot/redact"
)

// Mode chooses how much a rendering carries.
type Mode int

const (
	// Compact is for Slack: a summary root and one thread reply per
	// non-compliant cluster, each bounded.
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
			if mode == Compact && c.Compliant() && len(c.Fixed) == 0 {
				continue
			}
			body := clean(clusterText(c, mode))
			limit := maxChunks
			if mode == Full {
				limit = 0
			}
			replies = append(replies, notify.Reply{
				ID: "cluster/" + c.Key.String(), Text: firstLine(body), Blocks: sections(body, limit),
			})
		}
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

func summaryText(d Digest, name string) string {
	var b strings.Builder
	clusters, bad := 0, d.NonCompliant()
	for _, s := range d.Sources {
		clusters += len(s.Clusters)
	}
	fmt.Fprintf(&b, "📋 Proxy digest %s · %d hosted clusters, %d not compliant\n", name, clusters, len(bad))
	fmt.Fprintf(&b, "Findings: %s %d critical · %s %d warning · %s %d info\n",
		icon[noproxy.SeverityCritical], d.Counts[noproxy.SeverityCritical],
		icon[noproxy.SeverityWarning], d.Counts[noproxy.SeverityWarning],
		icon[noproxy.SeverityInfo], d.Counts[noproxy.SeverityInfo])
	if d.First {
		b.WriteString("Trend: first digest, nothing to compare with\n")
	} else {
		fmt.Fprintf(&b, "Trend since %s: %d new, %d fixed\n", d.Since.UTC().Format(time.RFC3339), d.New, d.Fixed)
	}
	for _, s := range d.Sources {
		var names []string
		for _, c := range s.Clusters {
			if !c.Compliant() {
				names = append(names, fmt.Sprintf("`%s` (%d)", c.Key.Cluster, len(c.Findings)))
			}
		}
		if len(names) > 0 {
			fmt.Fprintf(&b, "• *%s*: not compliant: %s\n", s.Name, strings.Join(names, ", "))
		} else {
			fmt.Fprintf(&b, "• *%s*: %d clusters, all compliant\n", s.Name, len(s.Clusters))
		}
	}
	fmt.Fprintf(&b, "_At %s_", d.At.UTC().Format(time.RFC3339))
	return b.String()
}

func clusterText(c ClusterReport, mode Mode) string {
	var b strings.Builder
	state := "✅ compliant"
	if !c.Compliant() {
		state = "❌ not compliant"
	}
	if !c.Proxy {
		state += " (no proxy)"
	}
	fmt.Fprintf(&b, "*%s* on %s — %s\n", c.Key.Cluster, c.Key.Source, state)
	for _, f := range c.Findings {
		isNew := ""
		if f.New {
			isNew = " 🆕"
		}
		fmt.Fprintf(&b, "%s `%s`%s %s", icon[f.Severity], f.Code, isNew, f.Reason)
		if f.Entry != "" {
			fmt.Fprintf(&b, " (`%s`)", f.Entry)
		}
		b.WriteString("\n")
		if mode == Full && f.Fix != "" {
			fmt.Fprintf(&b, "    fix: %s\n", f.Fix)
		}
	}
	for _, fx := range c.Fixed {
		fmt.Fprintf(&b, "✅ fixed: `%s`\n", fx)
	}
	if len(c.PoolsUnhealthy) > 0 {
		fmt.Fprintf(&b, "NodePools unhealthy: %s\n", strings.Join(c.PoolsUnhealthy, ", "))
	} else if mode == Full {
		b.WriteString("NodePools: no problem diagnosed\n")
	}
	if c.Incident != "" {
		fmt.Fprintf(&b, "Open incident `%s`: %s\n", c.Incident, c.IncidentTitle)
	}
	for _, s := range c.Silenced {
		fmt.Fprintf(&b, "Silenced: %s\n", s)
	}
	for _, e := range c.Exposures {
		fmt.Fprintf(&b, "NodePort %d → %s, opened by <@%s> at %s\n", e.NodePort, e.Service, e.CreatedBy, e.CreatedAt.UTC().Format(time.RFC3339))
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
	return mention.ReplaceAllString(chatops.EscapeText(redact.RedactText(s)), "<@$1>")
}

// mention matches an escaped user mention; Slack user ids are U… or W…
// followed by upper-case letters and digits, so nothing a user typed can
// turn into markup through it.
var mention = regexp.MustCompile(`&lt;@([UW][A-Z0-9]+)&gt;`)

// sections splits text into section blocks within Slack's limits; limit
// > 0 caps their number and says what was left out.
func sections(text string, limit int) []slack.Block {
	chunks := notify.SplitText(text, notify.MaxSectionText)
	if limit > 0 && len(chunks) > limit {
		left := len(chunks) - limit
		chunks = append(chunks[:limit:limit], fmt.Sprintf("_… %d more sections left out; the console digest has everything._", left))
	}
	blocks := make([]slack.Block, 0, len(chunks))
	for _, c := range chunks {
		blocks = append(blocks, slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, c, false, false), nil, nil))
	}
	return notify.ClampBlocks(blocks)
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return notify.Truncate(s, notify.MaxHeaderText)
}
