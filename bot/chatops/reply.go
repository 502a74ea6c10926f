package chatops

import (
	"regexp"
	"strings"

	"github.com/slack-go/slack"

	"github.com/hcpbot/hcpbot/bot/blockkit"
	"github.com/hcpbot/hcpbot/bot/notify"
)

// Reply is what the bot answers. The zero Reply says nothing: a command is
// acknowledged silently, an action posts nothing.
type Reply struct {
	// Text is Slack mrkdwn; with Blocks it is the notification fallback.
	// Text that came from users must be escaped (blockkit.EscapeText).
	Text   string
	Blocks []slack.Block
	// InChannel shows the reply to the whole channel; by default only the
	// user who typed the command or pressed the button sees it.
	InChannel bool
	// ReplaceOriginal replaces the message that carried the pressed button
	// (actions, or later posts to a command's response_url).
	ReplaceOriginal bool
}

// IsZero reports whether r says nothing.
func (r Reply) IsZero() bool { return r.Text == "" && len(r.Blocks) == 0 }

// wireReply is the JSON Slack reads from a command's HTTP answer, a Socket
// Mode acknowledgement, or a post to a response_url.
type wireReply struct {
	ResponseType    string        `json:"response_type"`
	Text            string        `json:"text,omitempty"`
	Blocks          []slack.Block `json:"blocks,omitempty"`
	ReplaceOriginal bool          `json:"replace_original"`
}

func (r Reply) wire() wireReply {
	w := wireReply{ResponseType: slack.ResponseTypeEphemeral, Text: r.Text, Blocks: r.Blocks, ReplaceOriginal: r.ReplaceOriginal}
	if r.InChannel {
		w.ResponseType = slack.ResponseTypeInChannel
	}
	// Slack refuses the whole message beyond its limits (50 blocks, long
	// texts); showing the first ones and saying so beats showing nothing.
	w.Blocks = blockkit.ClampBlocks(w.Blocks)
	if w.Text == "" && len(w.Blocks) > 0 {
		// The notification fallback. Slack reads it as mrkdwn, so it keeps
		// the blocks' escaping: the console's rendering (PlainText) undoes
		// it, and user text escaped with blockkit.EscapeText would turn back into
		// mentions such as <!channel>.
		w.Text = blockkit.Truncate(notify.PlainText(w.Blocks), blockkit.MaxSectionText)
	}
	w.Text = blockkit.Truncate(w.Text, blockkit.MaxMessageText) // longer is msg_too_long
	return w
}

var workingReply = Reply{Text: "Working on it…"}

// usageReply answers a *UsageError, visible only to its author.
func usageReply(e *UsageError) Reply {
	return Reply{Text: blockkit.EscapeText(e.Hint) + "\nUsage: `" + blockkit.EscapeText(e.Usage) + "`"}
}

// helpReply answers help locally: the grammar is this package's business.
func helpReply(c ShowHelp) Reply {
	if c.Topic != "" {
		return Reply{Text: "Usage: `" + blockkit.EscapeText(Usage(c.Topic)) + "`"}
	}
	return Reply{Text: "```\n" + blockkit.EscapeText(Help()) + "\n```"}
}

// buttonCommands maps button action ids to the command a console user
// types instead.
var buttonCommands = map[string]string{
	blockkit.ActionApprove:  "approve",
	blockkit.ActionReject:   "reject",
	blockkit.ActionRollback: "rollback",
	blockkit.ActionDetails:  "diagnose",
}

// PlainText renders a reply for a terminal: Block Kit flattened to lines
// (notify's renderer, in ConsoleStyle), mrkdwn links and mentions to
// readable text, buttons as the command that does the same (or their
// action id and value). users (name → user ID, as Console.Users) names
// the people mentioned; nil leaves their IDs.
func PlainText(r Reply, users map[string]string) string {
	st := ConsoleStyle(users)
	if s := st.PlainText(r.Blocks); s != "" {
		return s
	}
	return st.Inline(r.Text)
}

// ConsoleStyle is how a terminal spells what Slack renders: a mention of
// one of users (name → user ID) as @name, code blocks as indented text,
// links as their text with the URL, Slack's escaping undone, buttons as
// the commands that do the same. The console notifier uses it too.
func ConsoleStyle(users map[string]string) notify.TextStyle {
	names := make(map[string]string, len(users))
	for name, id := range users {
		names[id] = name
	}
	return notify.TextStyle{
		Heading: func(t string) string { return "== " + t + " ==" },
		Rule:    "----",
		Context: func(parts []string) string { return strings.Join(parts, " · ") },
		Inline:  func(s string) string { return unMrkdwn(s, names) },
		Button:  buttonText,
	}
}

func buttonText(b *slack.ButtonBlockElement) string {
	label := b.ActionID
	if b.Text != nil {
		label = b.Text.Text
	}
	if cmd, ok := buttonCommands[b.ActionID]; ok && ValidID(b.Value) {
		return "[" + label + ": " + Prefix + " " + cmd + " " + b.Value + "]"
	}
	if b.ActionID == blockkit.ActionSilence && ValidID(b.Value) {
		return "[" + label + ": " + Prefix + " silence " + b.Value + " 4h]"
	}
	if b.URL != "" {
		return "[" + label + ": " + b.URL + "]"
	}
	return "[" + label + ": " + b.ActionID + " " + b.Value + "]"
}

// slackLinkRE matches mrkdwn's <target|label> and <target>.
var slackLinkRE = regexp.MustCompile(`<([^<>|]*)(?:\|([^<>]*))?>`)

// fenceRE matches a mrkdwn code block, its fences and the line ends
// just inside them.
var fenceRE = regexp.MustCompile("(?s)```\n?(.*?)\n?```")

// unfence writes each code block as its lines indented by four spaces, on
// lines of their own.
func unfence(s string) string {
	ms := fenceRE.FindAllStringSubmatchIndex(s, -1)
	if ms == nil {
		return s
	}
	var b strings.Builder
	last := 0
	for _, m := range ms {
		b.WriteString(s[last:m[0]])
		if m[0] > 0 && s[m[0]-1] != '\n' {
			b.WriteByte('\n')
		}
		for i, l := range strings.Split(s[m[2]:m[3]], "\n") {
			if i > 0 {
				b.WriteByte('\n')
			}
			b.WriteString("    " + l)
		}
		if m[1] < len(s) && s[m[1]] != '\n' {
			b.WriteByte('\n')
		}
		last = m[1]
	}
	b.WriteString(s[last:])
	return b.String()
}

// unMrkdwn turns Slack's mrkdwn into what Slack shows, as plain text: a
// code block as lines indented by four spaces on lines of their own,
// mentions of a user in names (ID → name) as @name, links as their label
// and target, and its escaping undone.
func unMrkdwn(s string, names map[string]string) string {
	s = unfence(s)
	s = slackLinkRE.ReplaceAllStringFunc(s, func(m string) string {
		sub := slackLinkRE.FindStringSubmatch(m)
		target, label := sub[1], sub[2]
		switch {
		case strings.HasPrefix(target, "@"):
			if name, ok := names[target[1:]]; ok {
				return "@" + name
			}
			if label != "" {
				return "@" + label
			}
			return target
		case strings.HasPrefix(target, "#"):
			if label != "" {
				return target[:1] + label
			}
			return target
		case strings.HasPrefix(target, "!"):
			if label != "" {
				return label
			}
			return "@" + strings.TrimPrefix(target, "!")
		case label != "" && label != target:
			return label + " (" + target + ")"
		}
		return target
	})
	return strings.NewReplacer("&lt;", "<", "&gt;", ">", "&amp;", "&").Replace(s)
}
