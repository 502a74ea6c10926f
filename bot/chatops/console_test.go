package chatops

import (
	"bytes"
	"context"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/hcpbot/hcpbot/bot/blockkit"
	"github.com/slack-go/slack"
)

func TestConsole(t *testing.T) {
	h := newFakeHandler()
	h.reply = func(req any) Reply {
		r := req.(Request)
		if _, ok := r.Command.(Incidents); ok {
			return Reply{
				Text: "fallback",
				Blocks: []slack.Block{
					slack.NewHeaderBlock(slack.NewTextBlockObject(slack.PlainTextType, "Open incidents", false, false)),
					slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType,
						"*inc-0a1b2c* <https://console.example/c|clusters/example> &lt;degraded&gt; for <@U0ALICE>", false, false), nil, nil),
					slack.NewDividerBlock(),
					slack.NewContextBlock("", slack.NewTextBlockObject(slack.MarkdownType, "since 10:02", false, false)),
					slack.NewActionBlock("approval",
						slack.NewButtonBlockElement(blockkit.ActionApprove, "act-7f3k9q", slack.NewTextBlockObject(slack.PlainTextType, "Approve", false, false)),
						slack.NewButtonBlockElement(blockkit.ActionDetails, "inc-0a1b2c", slack.NewTextBlockObject(slack.PlainTextType, "Details", false, false))),
				},
			}
		}
		return Reply{Text: "ok: " + r.Command.String() + " as " + r.UserID}
	}
	in := strings.Join([]string{
		"# a comment",
		"",
		"/hcp status clusters/example",
		"incidents",
		"status clusters/example;rm -rf /",
		"/hcp",
		"help silence",
		"/hcpstatus",
		strings.Repeat("x", maxConsoleLine+10),
		"audit 5\r",
		"quit",
		"status never/reached",
	}, "\n")
	var out bytes.Buffer
	c := &Console{In: strings.NewReader(in), Out: &out, Handler: h, UserID: "ops-admin"}
	if err := c.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		"ok: status clusters/example as ops-admin\n",
		"== Open incidents ==\n*inc-0a1b2c* clusters/example (https://console.example/c) <degraded> for @U0ALICE\n----\nsince 10:02\n" +
			"[Approve: /hcp approve act-7f3k9q]  [Details: /hcp diagnose inc-0a1b2c]\n",
		"too many arguments\nusage: /hcp status [cluster]\n",
		"/hcp fix noproxy <cluster> [--add ENTRY,...] — propose",
		"Usage: `/hcp silence <cluster|incident-id> <duration> [reason...]`",
		"unknown command \"/hcpstatus\"",
		"line longer than",
		"ok: audit 5 as ops-admin\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "never") {
		t.Errorf("read past quit:\n%s", got)
	}
	cmds := h.commands()
	if len(cmds) != 3 {
		t.Fatalf("handler got %d commands", len(cmds))
	}
	want := Origin{Transport: TransportConsole, UserID: "ops-admin", UserName: "ops-admin"}
	if !reflect.DeepEqual(cmds[0].Origin, want) {
		t.Errorf("origin = %#v", cmds[0].Origin)
	}
}

func TestConsoleDefaultsAndCancel(t *testing.T) {
	h := newFakeHandler()
	var out bytes.Buffer
	if err := (&Console{In: strings.NewReader("incidents"), Out: &out, Handler: h}).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if cmds := h.commands(); len(cmds) != 1 || cmds[0].UserID != DefaultConsoleUser {
		t.Errorf("commands = %#v", cmds)
	}
	if out.String() != "echo: incidents\n" {
		t.Errorf("out = %q", out.String())
	}

	pr, pw := io.Pipe()
	defer pw.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- (&Console{In: pr, Out: io.Discard, Handler: h}).Run(ctx) }()
	cancel()
	select {
	case err := <-done:
		if err != context.Canceled {
			t.Errorf("Run = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run ignored cancel")
	}
	if err := (&Console{}).Run(context.Background()); err == nil {
		t.Error("Run without In/Out/Handler succeeded")
	}
}

func TestPlainTextAndEscaping(t *testing.T) {
	if got := PlainText(Reply{Text: "<!here> see <#C0OPS|ops> and <https://x.example>"}, nil); got != "@here see #ops and https://x.example" {
		t.Errorf("PlainText = %q", got)
	}
	if got := blockkit.EscapeText("a<b>&<!channel>"); got != "a&lt;b&gt;&amp;&lt;!channel&gt;" {
		t.Errorf("blockkit.EscapeText = %q", got)
	}
	// More than 50 blocks are cut to 50, saying so.
	var blocks []slack.Block
	for range 60 {
		blocks = append(blocks, slack.NewDividerBlock())
	}
	w := Reply{Blocks: blocks}.wire()
	if len(w.Blocks) != blockkit.MaxBlocks || w.Text == "" {
		t.Errorf("%d blocks, text %q", len(w.Blocks), w.Text)
	}
	if !strings.Contains(PlainText(Reply{Blocks: w.Blocks}, nil), "11 more blocks not shown") {
		t.Errorf("truncation not said: %q", PlainText(Reply{Blocks: w.Blocks}, nil))
	}
	if len(blocks) != 60 {
		t.Error("wire changed the caller's blocks")
	}
	// A text Slack would refuse (msg_too_long) is cut to its limit.
	if w := (Reply{Text: strings.Repeat("x", 50000)}).wire(); utf8.RuneCountInString(w.Text) != blockkit.MaxMessageText {
		t.Errorf("text of %d characters, want %d", utf8.RuneCountInString(w.Text), blockkit.MaxMessageText)
	}
}

// Two people at one console: "as NAME" switches whom the following
// commands run as (user ID and name), the prompt says who it is, and an
// unknown name changes nothing.
func TestConsoleUsers(t *testing.T) {
	h := newFakeHandler()
	h.reply = func(req any) Reply {
		r := req.(Request)
		return Reply{Text: "ok: " + r.Command.String() + " as " + r.UserID + "/" + r.UserName}
	}
	in := strings.Join([]string{"approve act-7f3k9q", "as bob", "approve act-7f3k9q", "as mallory", "approve act-8g4m2r", "as alice", "audit"}, "\n")
	var out bytes.Buffer
	c := &Console{In: strings.NewReader(in), Out: &out, Handler: h, Prompt: "hcp> ", UserID: "U0000ALICE",
		Users: map[string]string{"alice": "U0000ALICE", "bob": "U00000BOB"}}
	if err := c.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := "[alice] hcp> ok: approve act-7f3k9q as U0000ALICE/alice\n" +
		"[alice] hcp> now acting as bob (U00000BOB)\n" +
		"[bob] hcp> ok: approve act-7f3k9q as U00000BOB/bob\n" +
		"[bob] hcp> no user \"mallory\" at this console; users: alice, bob\n" +
		"[bob] hcp> ok: approve act-8g4m2r as U00000BOB/bob\n" +
		"[bob] hcp> now acting as alice (U0000ALICE)\n" +
		"[alice] hcp> ok: audit as U0000ALICE/alice\n" +
		"[alice] hcp> "
	if got := out.String(); got != want {
		t.Errorf("console output:\n%s\nwant:\n%s", got, want)
	}
	// Without Users, "as" is no command of its own.
	out.Reset()
	c = &Console{In: strings.NewReader("as bob\n"), Out: &out, Handler: h}
	if err := c.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "now acting") {
		t.Errorf("as switched users on a console without Users: %q", out.String())
	}
}

// The notification fallback of a reply with blocks only is Slack mrkdwn:
// it keeps the blocks' escaping, so user text escaped with blockkit.EscapeText
// stays text, where the console's rendering (which undoes the escaping
// for a terminal) would have made it a mention again.
func TestWireFallbackKeepsEscaping(t *testing.T) {
	user := blockkit.EscapeText("<!channel> look")
	r := Reply{Blocks: []slack.Block{
		slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, "reason: "+user, false, false), nil, nil),
	}}
	w := r.wire()
	if strings.Contains(w.Text, "<!channel>") || !strings.Contains(w.Text, "&lt;!channel&gt; look") {
		t.Errorf("fallback text %q, want the escaped user text", w.Text)
	}
	// The console shows it readable, and as text.
	if got := PlainText(r, nil); got != "reason: <!channel> look" {
		t.Errorf("PlainText = %q", got)
	}
}

// Fields read "Label: value" on the console, as in the console notifier
// (one renderer, notify.TextStyle); links in them are resolved.
func TestPlainTextFields(t *testing.T) {
	md := func(s string) *slack.TextBlockObject {
		return slack.NewTextBlockObject(slack.MarkdownType, s, false, false)
	}
	r := Reply{Blocks: []slack.Block{
		slack.NewSectionBlock(md("*inc-0a1b2c*"), []*slack.TextBlockObject{
			md("*Cluster*\n<https://console.example/c|clusters/example>"), md("*Platform*\nKubeVirt"),
		}, slack.NewAccessory(slack.NewButtonBlockElement(blockkit.ActionApprove, "act-7f3k9q", slack.NewTextBlockObject(slack.PlainTextType, "Approve", false, false)))),
	}}
	want := "*inc-0a1b2c*\n  Cluster: clusters/example (https://console.example/c)\n  Platform: KubeVirt\n[Approve: /hcp approve act-7f3k9q]"
	if got := PlainText(r, nil); got != want {
		t.Errorf("PlainText =\n%s\nwant\n%s", got, want)
	}
}

// The console shows what Slack shows: a mention as the person's name, a
// code block as indented lines (no fences), a link as its text and URL.
func TestConsoleRendersAsSlackShows(t *testing.T) {
	users := map[string]string{"alice": "U0000ALICE", "bob": "U00000BOB"}
	for _, tc := range []struct{ in, want string }{
		{"approved by <@U0000ALICE> and <@U00000BOB>", "approved by @alice and @bob"},
		{"asked by <@U0STRANGER>", "asked by @U0STRANGER"},
		{"*Proposed fix* — noProxy:\n```- a\n+ a,kubernetes```", "*Proposed fix* — noProxy:\n    - a\n    + a,kubernetes"},
		{"diff: ```- a\n+ b``` then more", "diff: \n    - a\n    + b\n then more"},
		{"see <https://x.example/runbook|the runbook>", "see the runbook (https://x.example/runbook)"},
		{"one\n\ntwo", "one\n\ntwo"},
	} {
		if got := PlainText(Reply{Text: tc.in}, users); got != tc.want {
			t.Errorf("PlainText(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
