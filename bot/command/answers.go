package command

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bot/blockkit"
	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/noproxy"
	"github.com/hcpbot/hcpbot/redact"
)

// incidents lists storms (one line each: their members are listed in the
// storm's thread) and then every other incident, within one Slack reply.
func (c *Handler) incidents() chatops.Reply {
	var b strings.Builder
	for _, s := range c.Bot.Storms() {
		state := "OPEN"
		if !s.Resolved.IsZero() {
			state = "resolved"
		}
		fmt.Fprintf(&b, "%s  %-8s storm of %d clusters: all %s (each listed in its thread; `/hcp diagnose <cluster>` for one)\n",
			s.Key, state, len(s.Members), s.Cause.Text)
	}
	left := 0
	for _, inc := range c.Bot.Incidents() {
		if inc.Storm != "" {
			continue
		}
		if b.Len() > maxReply {
			left++
			continue
		}
		state := "OPEN"
		if !inc.Open() {
			state = "resolved"
		}
		title := ""
		if len(inc.Diagnoses) > 0 {
			title = inc.Diagnoses[0].Title
		}
		fmt.Fprintf(&b, "%s  %-8s %s — %s\n", inc.Key, state, inc.Cluster, blockkit.EscapeText(title))
	}
	if left > 0 {
		fmt.Fprintf(&b, "… and %d more incidents; `/hcp status <cluster>` shows one\n", left)
	}
	if b.Len() == 0 {
		return chatops.Reply{Text: "No incidents."}
	}
	return chatops.Reply{Text: b.String()}
}

// maxReply keeps a listing inside one readable Slack message.
const maxReply = 3500

// maxRefusedShown bounds the refused silences `status` lists: each is an
// attack or a migration, one or a hundred say the same.
const maxRefusedShown = 5

// refusedSilences says, first in `status`, which records of the silences
// bucket silence nothing and which silences someone deleted or replaced:
// somebody wrote the bucket without the bot's signing key, and a person
// must see it, not only the log.
func (c *Handler) refusedSilences(b *strings.Builder) {
	if c.Silences == nil {
		return
	}
	list, more := c.Silences.Refused(c.now())
	for i, r := range list {
		if i == maxRefusedShown {
			more += len(list) - i
			break
		}
		what := "silence record `" + escCode(clip(r.Key, 40)) + "` refused, it silences nothing: "
		switch {
		case r.Kept != nil:
			what = "silence `" + escCode(r.Kept.ID) + "` tampered with, still applied: "
		case r.Missing:
			what = "silence `" + escCode(r.Key) + "` deleted: "
		case r.Incomplete:
			what = "silences deleted before this replica started may be unlisted: "
		}
		fmt.Fprintf(b, "%s%s (seen %s)\n", what, esc(redact.RedactText(clip(r.Reason, 300))), r.Seen.UTC().Format("2006-01-02 15:04 UTC"))
	}
	if more > 0 {
		fmt.Fprintf(b, "… and %d more refused silence records (the bot's log names each)\n", more)
	}
	if len(list) > 0 {
		b.WriteString("Refused silence records are written by someone holding the bot's NATS credentials without its signing key (or by an hcpbot of before silences were sealed: re-create those with `/hcp silence`).\n")
	}
}

func clip(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}

// diagnose answers with the first diagnosis in full, the others by title,
// then what every rule made of the cluster (fired, explained by an earlier
// rule, not seen and what it looks for) and the proactive warnings: one
// screen that says why the bot thinks what it thinks.
func (c *Handler) diagnose(k diagnose.Key) chatops.Reply {
	diags, ok := c.Bot.Diagnose(k)
	if !ok {
		return chatops.Reply{Text: "Unknown cluster " + k.String()}
	}
	var b strings.Builder
	if len(diags) == 0 {
		b.WriteString(k.String() + ": no problem found.")
	} else {
		d := diags[0]
		fmt.Fprintf(&b, "*%s*\n%s\nConfidence: %s — %s", d.Title, d.RootCause, d.Confidence.Level, d.Confidence.Why)
		if d.Fix != nil {
			b.WriteString("\nProposed fix:\n```" + d.Fix.Diff + "```")
		}
		for _, o := range diags[1:] {
			fmt.Fprintf(&b, "\nAlso (%s): %s", o.Severity, o.Title)
		}
	}
	if verdicts, ok := c.Bot.Explain(k); ok && len(verdicts) > 0 {
		b.WriteString("\n*Rules*")
		for _, v := range verdicts {
			switch v.Outcome {
			case diagnose.OutcomeFired:
				fmt.Fprintf(&b, "\n• `%s` fired: %s", v.Rule, v.Title)
			case diagnose.OutcomeExplained:
				fmt.Fprintf(&b, "\n• `%s` sees a problem explained by `%s`", v.Rule, v.ExplainedBy)
			default:
				fmt.Fprintf(&b, "\n• `%s` ruled out, looks for: %s", v.Rule, v.LooksFor)
			}
		}
	}
	if hc, ok := c.Bot.HostedCluster(k); ok {
		if ws := diagnose.Warnings(hc, c.now()); len(ws) > 0 {
			b.WriteString("\n*Warnings*")
			for _, w := range ws {
				fmt.Fprintf(&b, "\n• %s `%s`: %s (fix: %s)", w.Severity, w.Code, w.Reason, w.Fix)
			}
		}
	}
	return chatops.Reply{Text: blockkit.EscapeText(b.String())}
}

// noProxyCheck answers, from the cluster's live noProxy, whether each client
// family sends https:// and http:// requests to host:port through the
// proxy. Proxy URLs are shown as event stored them (credentials masked).
func (c *Handler) noProxyCheck(k diagnose.Key, host string, port int32) chatops.Reply {
	hc, ok := c.Bot.HostedCluster(k)
	if !ok {
		return chatops.Reply{Text: fmt.Sprintf("No HostedCluster state for %s yet.", k)}
	}
	p := hc.Proxy
	var b strings.Builder
	target := host
	if port != 0 {
		target = net.JoinHostPort(host, portOr(port, 0))
	}
	fmt.Fprintf(&b, "*%s* → `%s`, noProxy `%s`\n", k, target, redact.RedactText(p.NoProxy))
	for _, s := range []struct {
		scheme, proxy string
		port          int32
	}{{"https", p.HTTPSProxy, 443}, {"http", p.HTTPProxy, 80}} {
		u := s.scheme + "://" + net.JoinHostPort(host, portOr(port, s.port))
		if s.proxy == "" {
			fmt.Fprintf(&b, "• `%s`: no %s proxy configured, every client goes direct\n", u, s.scheme)
			continue
		}
		fmt.Fprintf(&b, "• `%s` (proxy `%s`):\n", u, redact.RedactURL(s.proxy))
		for _, cl := range noproxy.AllClients() {
			v, err := noproxy.Explain(cl, p.NoProxy, u)
			if err != nil {
				fmt.Fprintf(&b, "    %s: cannot tell (%v)\n", cl, err)
				continue
			}
			line := fmt.Sprintf("    %s: *%s*", cl, v.Decision)
			if v.Entry != "" {
				line += fmt.Sprintf(" (entry `%s`)", v.Entry)
			}
			if v.Why != "" {
				line += " — " + v.Why
			}
			b.WriteString(line + "\n")
		}
	}
	return chatops.Reply{Text: blockkit.EscapeText(redact.RedactText(b.String()))}
}

func portOr(port, def int32) string {
	if port == 0 {
		port = def
	}
	return strconv.Itoa(int(port))
}

// auditLineRunes and auditTextRunes keep `audit` within what one Slack
// message shows: each entry on one line of at most auditLineRunes, all in
// one code block of at most auditTextRunes (a section block's limit).
const (
	auditLineRunes = 400
	auditTextRunes = 2900
)

// audit shows the newest n entries of the audit trail, newest first,
// redacted, as many as fit one message.
func (c *Handler) audit(ctx context.Context, n int) chatops.Reply {
	if c.Audit == nil {
		return unavailable(chatops.Audit{N: n})
	}
	if n <= 0 {
		n = DefaultAuditEntries
	}
	recs, err := c.Audit.Recent(ctx, n)
	if err != nil {
		return chatops.Reply{Text: "Could not read the audit trail: " + errText(err)}
	}
	if len(recs) == 0 {
		return chatops.Reply{Text: "The audit trail is empty."}
	}
	var b strings.Builder
	shown := 0
	for _, r := range recs {
		line := strings.Join(strings.Fields(audit.Redact(r).String()), " ")
		if rs := []rune(line); len(rs) > auditLineRunes {
			line = string(rs[:auditLineRunes-1]) + "…"
		}
		// Escaped for mrkdwn; backticks would end the code block.
		line = esc(strings.ReplaceAll(line, "`", "'"))
		if utf8.RuneCountInString(b.String())+utf8.RuneCountInString(line)+1 > auditTextRunes {
			break
		}
		b.WriteString(line + "\n")
		shown++
	}
	head := fmt.Sprintf("Last %d audit entries, newest first:", shown)
	if shown < len(recs) {
		head = fmt.Sprintf("Last %d audit entries, newest first (%d more did not fit; ask for fewer):", shown, len(recs)-shown)
	}
	return chatops.Reply{Text: head + "\n```\n" + b.String() + "```"}
}
