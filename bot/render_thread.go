package bot

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/hcpbot/hcpbot/bot/blockkit"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/bot/notify"
)

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
