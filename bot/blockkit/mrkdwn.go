package blockkit

import (
	"strings"

	"github.com/slack-go/slack"
)

// EscapeText escapes the three characters Slack's mrkdwn gives a meaning
// to (&, <, >), so user input cannot form links or mentions such as
// <!channel>.
func EscapeText(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// EscapeCode is EscapeText for text shown inside a code span or block
// (`…`, ```…```): a backtick in it would end the span and let the rest
// pass for the bot's own words, and bidirectional controls could reorder
// what is shown. Backticks become ˋ (U+02CB); the controls are dropped.
func EscapeCode(s string) string {
	return codeReplacer.Replace(EscapeText(s))
}

var codeReplacer = strings.NewReplacer("`", "ˋ",
	"\u202a", "", "\u202b", "", "\u202c", "", "\u202d", "", "\u202e", "",
	"\u2066", "", "\u2067", "", "\u2068", "", "\u2069", "")

// Mention is mrkdwn that mentions the Slack user with this ID (escaped:
// an ID is data, and must not close the mention early).
func Mention(user string) string { return "<@" + EscapeText(user) + ">" }

// Mrkdwn is a mrkdwn text object, cut (Truncate) to a section's limit.
func Mrkdwn(s string) *slack.TextBlockObject {
	return slack.NewTextBlockObject(slack.MarkdownType, Truncate(s, MaxSectionText), false, false)
}

// Plain is a plain_text object (a header's, a button's), cut to a
// header's limit.
func Plain(s string) *slack.TextBlockObject {
	return slack.NewTextBlockObject(slack.PlainTextType, Truncate(s, MaxHeaderText), false, false)
}

// Field is a section field: its label in bold over its value (mrkdwn),
// cut to a field's limit.
func Field(label, value string) *slack.TextBlockObject {
	return slack.NewTextBlockObject(slack.MarkdownType, Truncate("*"+label+"*\n"+value, MaxFieldText), false, false)
}

// Sections is mrkdwn text as section blocks, split (SplitText) at line
// breaks where it is longer than a section may be, instead of cut; none
// for no text.
func Sections(text string) []slack.Block {
	var blocks []slack.Block
	for _, c := range SplitText(text, MaxSectionText) {
		blocks = append(blocks, slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, c, false, false), nil, nil))
	}
	return blocks
}
