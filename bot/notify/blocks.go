package notify

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/slack-go/slack"

	"github.com/hcpbot/hcpbot/bot/notify/blockkit"
)

// Slack's Block Kit and message limits, in characters (the table is
// package blockkit's, which also validates against it). Slack rejects a
// message over a block limit with invalid_blocks, which would lose the
// whole update, so the notifier clamps rather than trusts.
const (
	MaxBlocks          = blockkit.MaxBlocks          // blocks per message
	MaxSectionText     = blockkit.MaxSectionText     // a section's text
	MaxSectionFields   = blockkit.MaxSectionFields   // fields per section
	MaxFieldText       = blockkit.MaxFieldText       // one section field
	MaxHeaderText      = blockkit.MaxHeaderText      // a header's plain_text
	MaxContextElements = blockkit.MaxContextElements // elements of a context block
	MaxMessageText     = blockkit.MaxMessageText     // longer is msg_too_long
)

// ValidateBlocks says which of Block Kit's limits blocks break, as Slack
// would (a *blockkit.Error with code invalid_blocks); nil if none. What
// ClampBlocks returns passes, unless it breaks a limit clamping cannot
// repair (a duplicate block_id, an empty text, a mrkdwn header, ...).
func ValidateBlocks(blocks []slack.Block) error { return blockkit.ValidateBlocks(blocks) }

// ellipsis marks a cut; one character, so limits stay easy to reason about.
const ellipsis = "…"

// Truncate cuts s to at most limit characters (runes), marking the cut with
// "…". It never splits a rune, a mrkdwn link or mention ("<…>") or an HTML
// entity ("&amp;"), and closes a code block ("```") the cut left open, so a
// truncated text still renders instead of swallowing the rest of the
// message.
func Truncate(s string, limit int) string {
	if limit <= 0 {
		return ""
	}
	if utf8.RuneCountInString(s) <= limit {
		return s
	}
	r := []rune(s)
	if limit == 1 { // no room for niceties
		return string(r[:limit])
	}
	cut := safeCut(r, limit-1)
	if strings.Count(string(r[:cut]), "```")%2 == 1 {
		const closer = "\n```"
		cut = safeCut(r, max(limit-1-len(closer), 0))
		if strings.Count(string(r[:cut]), "```")%2 == 1 {
			return string(r[:cut]) + ellipsis + closer
		}
	}
	return string(r[:cut]) + ellipsis
}

// safeCut returns n, or less if the n-th rune falls inside "<…>" or an
// entity; a link is dropped whole rather than cut into broken markup.
func safeCut(r []rune, n int) int {
	n = min(n, len(r))
	head := r[:n]
	if lt := lastIndex(head, '<'); lt >= 0 && lastIndex(head, '>') < lt {
		n = lt
	}
	if amp := lastIndex(r[:n], '&'); amp >= 0 && n-amp <= 8 && lastIndex(r[:n], ';') < amp {
		n = amp
	}
	// Cutting after a lone newline or space only wastes the budget.
	for n > 0 && (r[n-1] == ' ' || r[n-1] == '\n') {
		n--
	}
	return n
}

func lastIndex(r []rune, c rune) int {
	for i := len(r) - 1; i >= 0; i-- {
		if r[i] == c {
			return i
		}
	}
	return -1
}

// SplitText splits s into chunks of at most limit characters, at line
// breaks where possible, for rendering long text as several sections
// instead of truncating it.
func SplitText(s string, limit int) []string {
	if limit <= 0 || s == "" {
		return nil
	}
	var out []string
	s = strings.TrimRight(s, "\n")
	for utf8.RuneCountInString(s) > limit {
		r := []rune(s)
		cut := lastIndex(r[:limit], '\n')
		if cut <= 0 {
			cut = safeCut(r, limit)
			if cut == 0 {
				cut = limit
			}
		}
		out = append(out, strings.TrimRight(string(r[:cut]), "\n"))
		s = strings.TrimLeft(string(r[cut:]), "\n")
	}
	if s != "" {
		out = append(out, s)
	}
	return out
}

// ClampBlocks returns a copy of blocks within Slack's limits: texts are
// truncated with Truncate, surplus fields, context and actions elements
// dropped, and beyond MaxBlocks the tail is replaced by a context block
// saying how many blocks were left out — except a last actions block (a
// message's buttons), which is kept after it. The input is not modified.
// Unknown block types pass unchanged.
func ClampBlocks(blocks []slack.Block) []slack.Block {
	if blocks == nil {
		return nil
	}
	if len(blocks) <= MaxBlocks {
		out := make([]slack.Block, len(blocks))
		for i, b := range blocks {
			out[i] = clampBlock(b)
		}
		return out
	}
	var tail []slack.Block
	if last := blocks[len(blocks)-1]; isActions(last) {
		tail = []slack.Block{clampBlock(last)}
	}
	keep := MaxBlocks - 1 - len(tail)
	out := make([]slack.Block, 0, MaxBlocks)
	for _, b := range blocks[:keep] {
		out = append(out, clampBlock(b))
	}
	out = append(out, slack.NewContextBlock("",
		slack.NewTextBlockObject(slack.MarkdownType,
			fmt.Sprintf("_%d more blocks not shown_", len(blocks)-keep-len(tail)), false, false)))
	return append(out, tail...)
}

func isActions(b slack.Block) bool {
	switch v := b.(type) {
	case *slack.ActionBlock:
		return v != nil
	case slack.ActionBlock:
		return true
	}
	return false
}

func clampBlock(b slack.Block) slack.Block {
	switch v := b.(type) {
	case *slack.SectionBlock:
		if v == nil {
			return b
		}
		c := clampSection(*v)
		return &c
	case slack.SectionBlock:
		return clampSection(v)
	case *slack.HeaderBlock:
		if v == nil {
			return b
		}
		c := *v
		c.Text = clampText(c.Text, MaxHeaderText)
		return &c
	case slack.HeaderBlock:
		v.Text = clampText(v.Text, MaxHeaderText)
		return v
	case *slack.ContextBlock:
		if v == nil {
			return b
		}
		c := clampContext(*v)
		return &c
	case slack.ContextBlock:
		return clampContext(v)
	case *slack.ActionBlock:
		if v == nil || v.Elements == nil {
			return b
		}
		c := *v
		c.Elements = clampActions(v.Elements)
		return &c
	case slack.ActionBlock:
		if v.Elements != nil {
			v.Elements = clampActions(v.Elements)
		}
		return v
	}
	return b
}

// clampActions drops elements beyond Slack's limit and shortens button
// labels. A button's value is data, never cut: one too long breaks the
// message (ValidateBlocks says so) rather than the button.
func clampActions(e *slack.BlockElements) *slack.BlockElements {
	els := e.ElementSet[:min(len(e.ElementSet), blockkit.MaxActionsElements)]
	out := &slack.BlockElements{ElementSet: make([]slack.BlockElement, len(els))}
	for i, el := range els {
		if btn, isButton := el.(*slack.ButtonBlockElement); isButton && btn != nil {
			c := *btn
			c.Text = clampText(c.Text, blockkit.MaxButtonText)
			el = &c
		}
		out.ElementSet[i] = el
	}
	return out
}

func clampSection(s slack.SectionBlock) slack.SectionBlock {
	s.Text = clampText(s.Text, MaxSectionText)
	if s.Fields != nil {
		fields := s.Fields[:min(len(s.Fields), MaxSectionFields)]
		s.Fields = make([]*slack.TextBlockObject, len(fields))
		for i, f := range fields {
			s.Fields[i] = clampText(f, MaxFieldText)
		}
	}
	return s
}

func clampContext(c slack.ContextBlock) slack.ContextBlock {
	els := c.ContextElements.Elements
	els = els[:min(len(els), MaxContextElements)]
	c.ContextElements.Elements = make([]slack.MixedElement, len(els))
	for i, e := range els {
		if t, isText := e.(*slack.TextBlockObject); isText {
			e = clampText(t, blockkit.MaxContextText)
		}
		c.ContextElements.Elements[i] = e
	}
	return c
}

// clampText copies t only when it must change, keeping the caller's object
// untouched.
func clampText(t *slack.TextBlockObject, limit int) *slack.TextBlockObject {
	if t == nil || utf8.RuneCountInString(t.Text) <= limit {
		return t
	}
	c := *t
	c.Text = Truncate(c.Text, limit)
	return &c
}
