package bot

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"github.com/hcpbot/hcpbot/bot/blockkit"
	"github.com/hcpbot/hcpbot/bot/diagnose"
)

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
