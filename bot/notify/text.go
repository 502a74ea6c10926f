package notify

import (
	"cmp"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/slack-go/slack"
)

// PlainText renders blocks as readable plain text: headers underlined,
// section text and fields ("Label: value"), context lines, dividers. The
// console notifier prints it, and the Slack notifier derives a fallback
// text from it when a message has blocks but no text; mrkdwn is left as
// it is, since Slack renders the fallback.
func PlainText(blocks []slack.Block) string { return TextStyle{}.PlainText(blocks) }

// TextStyle is how PlainText spells what Block Kit shows by layout, for
// a reader other than the console notifier (e.g. chatops' terminal
// console). Every block type is walked in one place, here; the zero
// TextStyle is PlainText's.
type TextStyle struct {
	// Heading writes a header's text; nil: the text underlined with "=".
	Heading func(string) string
	// Rule is a divider; "": "---".
	Rule string
	// Context joins the parts of a context block; nil: "(a · b)".
	Context func([]string) string
	// Inline rewrites every text before it is laid out, e.g. mrkdwn links
	// into readable ones; nil: as it is.
	Inline func(string) string
	// Button writes a button: a section's accessory, the elements of an
	// actions block. nil: buttons are not shown, an actions block is
	// named like any block without text ("[actions block]").
	Button func(*slack.ButtonBlockElement) string
}

// PlainText renders blocks as plain text in style s.
func (s TextStyle) PlainText(blocks []slack.Block) string {
	var b strings.Builder
	for _, bl := range blocks {
		s.block(&b, bl)
	}
	return strings.TrimRight(b.String(), "\n")
}

func (s TextStyle) block(b *strings.Builder, bl slack.Block) {
	switch v := bl.(type) {
	case *slack.HeaderBlock:
		if v != nil {
			s.block(b, *v)
		}
	case slack.HeaderBlock:
		if t := s.text(v.Text); t != "" {
			b.WriteString(s.heading(t) + "\n")
		}
	case *slack.SectionBlock:
		if v != nil {
			s.block(b, *v)
		}
	case slack.SectionBlock:
		if t := s.text(v.Text); t != "" {
			b.WriteString(t + "\n")
		}
		for _, f := range v.Fields {
			b.WriteString("  " + field(s.text(f)) + "\n")
		}
		if v.Accessory != nil && v.Accessory.ButtonElement != nil && s.Button != nil {
			b.WriteString(s.Button(v.Accessory.ButtonElement) + "\n")
		}
	case *slack.ContextBlock:
		if v != nil {
			s.block(b, *v)
		}
	case slack.ContextBlock:
		var parts []string
		for _, e := range v.ContextElements.Elements {
			switch el := e.(type) {
			case *slack.TextBlockObject:
				parts = append(parts, s.text(el))
			case *slack.ImageBlockElement:
				parts = append(parts, "["+el.AltText+"]")
			}
		}
		if len(parts) > 0 {
			b.WriteString(s.context(parts) + "\n")
		}
	case *slack.DividerBlock, slack.DividerBlock:
		b.WriteString(cmp.Or(s.Rule, "---") + "\n")
	case *slack.MarkdownBlock:
		if v != nil {
			b.WriteString(s.inline(v.Text) + "\n")
		}
	case *slack.ActionBlock:
		if line := s.buttons(v); line != "" {
			b.WriteString(line + "\n")
			return
		}
		fmt.Fprintf(b, "[%s block]\n", bl.BlockType())
	case nil:
	default:
		fmt.Fprintf(b, "[%s block]\n", bl.BlockType())
	}
}

// buttons is an actions block's buttons on one line, "" without any (or
// without a Button style).
func (s TextStyle) buttons(v *slack.ActionBlock) string {
	if v == nil || v.Elements == nil || s.Button == nil {
		return ""
	}
	var parts []string
	for _, e := range v.Elements.ElementSet {
		if btn, ok := e.(*slack.ButtonBlockElement); ok {
			parts = append(parts, s.Button(btn))
		}
	}
	return strings.Join(parts, "  ")
}

func (s TextStyle) text(t *slack.TextBlockObject) string {
	if t == nil {
		return ""
	}
	return s.inline(strings.TrimSpace(t.Text))
}

func (s TextStyle) inline(t string) string {
	if s.Inline == nil {
		return t
	}
	return s.Inline(t)
}

func (s TextStyle) heading(t string) string {
	if s.Heading == nil {
		return t + "\n" + strings.Repeat("=", utf8.RuneCountInString(t))
	}
	return s.Heading(t)
}

func (s TextStyle) context(parts []string) string {
	if s.Context == nil {
		return "(" + strings.Join(parts, " · ") + ")"
	}
	return s.Context(parts)
}

// field renders the usual "*Label*\nvalue" section field as "Label: value".
func field(s string) string {
	label, value, found := strings.Cut(s, "\n")
	if !found {
		return s
	}
	label = strings.Trim(label, "*_ ")
	return label + ": " + strings.ReplaceAll(value, "\n", " ")
}
