package blockkit

import (
	"fmt"
	"unicode/utf8"

	"github.com/slack-go/slack"
)

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
	els := e.ElementSet[:min(len(e.ElementSet), MaxActionsElements)]
	out := &slack.BlockElements{ElementSet: make([]slack.BlockElement, len(els))}
	for i, el := range els {
		if btn, isButton := el.(*slack.ButtonBlockElement); isButton && btn != nil {
			c := *btn
			c.Text = clampText(c.Text, MaxButtonText)
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
			e = clampText(t, MaxContextText)
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
