package command

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bot/blockkit"
	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/redact"
)

// moreLineRunes is room for the line saying how many problems were not
// listed.
const moreLineRunes = 80

// AuditVerifier checks the whole audit trail; *audit.Verifier implements
// it.
type AuditVerifier interface {
	Verify(ctx context.Context) (audit.Report, error)
}

var _ AuditVerifier = (*audit.Verifier)(nil)

// auditVerify answers `audit verify`: that the trail is whole, or its
// problems, the first ones listed, as many as fit one message.
func (c *Handler) auditVerify(ctx context.Context) chatops.Reply {
	if c.AuditVerifier == nil {
		return unavailable(chatops.AuditVerify{})
	}
	r, err := c.AuditVerifier.Verify(ctx)
	if err != nil {
		return chatops.Reply{Text: "Could not verify the audit trail: " + blockkit.EscapeText(redact.RedactText(err.Error()))}
	}
	scope := fmt.Sprintf("%d records on %d subjects since seq %d", r.Records, r.Subjects, r.FirstSeq)
	var notes []string
	if r.Legacy > 0 {
		notes = append(notes, fmt.Sprintf("%d unchained records from before the chain", r.Legacy))
	}
	if r.AgedOut > 0 {
		notes = append(notes, fmt.Sprintf("%d subjects begin after older records aged out", r.AgedOut))
	}
	if r.SignaturesChecked {
		notes = append(notes, fmt.Sprintf("%d bot signatures verified", r.Signed))
	} else {
		notes = append(notes, "signatures not checked (no trusted key)")
	}
	if r.OK() {
		return chatops.Reply{Text: "Audit trail verified: " + scope + ", no gap, no broken link (" + strings.Join(notes, "; ") + ")."}
	}
	head := fmt.Sprintf("*Audit trail verification found %d problems* in %s (%s):", r.ProblemCount, scope, strings.Join(notes, "; "))
	// The whole reply fits one section: the head and the "more" line
	// come out of the listing's share.
	budget := auditTextRunes - utf8.RuneCountInString(head) - moreLineRunes
	var b strings.Builder
	shown := 0
	for _, p := range r.Problems {
		line := strings.Join(strings.Fields(p.String()), " ")
		if rs := []rune(line); len(rs) > auditLineRunes {
			line = string(rs[:auditLineRunes-1]) + "…"
		}
		line = blockkit.EscapeCode(line)
		if utf8.RuneCountInString(b.String())+utf8.RuneCountInString(line)+1 > budget {
			break
		}
		b.WriteString(line + "\n")
		shown++
	}
	text := head + "\n```\n" + b.String() + "```"
	if left := r.ProblemCount - shown; left > 0 {
		text += fmt.Sprintf("\n… and %d more.", left)
	}
	return chatops.Reply{Text: text}
}
