package notify

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/slack-go/slack"

	"github.com/hcpbot/hcpbot/bot/blockkit"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
)

// A channel Slack refuses for a reason only a person can fix: each item is
// tried once and dropped (no retry loop), the error counted per call, the
// channel listed by Unpostable until a post there succeeds again.
func TestUnpostableChannels(t *testing.T) {
	tests := []struct {
		name  string
		set   func(rec *slackrec.Recorder, ch string)
		error string
	}{
		{"not found", func(rec *slackrec.Recorder, ch string) { rec.SetChannel(ch, slackrec.ChannelNotFound) }, "channel_not_found"},
		{"not a member", func(rec *slackrec.Recorder, ch string) { rec.SetChannel(ch, slackrec.ChannelNotMember) }, "not_in_channel"},
		{"archived", func(rec *slackrec.Recorder, ch string) { rec.SetChannel(ch, slackrec.ChannelArchived) }, "is_archived"},
		{"token revoked", func(rec *slackrec.Recorder, _ string) { rec.RevokeToken("") }, "token_revoked"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const ch = "C0BAD"
			rec := slackrec.New(t, slackrec.WithRate(50, 10), slackrec.WithUpdateRate(50, 10))
			f := newSlack(t, rec, NewMemoryStore(), func(c *SlackConfig) {
				c.PostRate, c.UpdateRate = 20, 20
				c.BackoffBase, c.BackoffMax = 10*time.Millisecond, 50*time.Millisecond
			})
			// A root posted before the channel went bad, then updated.
			mustUpsert(t, f.n, msg(ch, "inc-old", 1))
			run(t, f.n)
			waitUntil(t, "the first root", func() bool { return f.n.Pending() == 0 && len(rec.Messages(ch)) == 1 })
			before := time.Now()
			tt.set(rec, ch)

			mustUpsert(t, f.n, msg(ch, "inc-old", 2))
			// The reply is queued before its root's rendering: a reply
			// arriving after its root was refused would wait for a root
			// that nobody posts (by design: another instance may), and
			// which of the two happens would depend on the worker's pace.
			mustReply(t, f.n, reply(ch, "inc-a", "r1"))
			mustUpsert(t, f.n, msg(ch, "inc-a", 1))
			mustUpsert(t, f.n, msg(ch, "inc-b", 1))
			waitUntil(t, "drained", func() bool { return f.n.Pending() == 0 })

			// One call per item: the update and two roots; the reply was
			// dropped with its root, never tried.
			calls := len(rec.Calls()) - 1
			if calls != 3 {
				t.Errorf("%d calls after the channel went bad, want 3 (no retries)", calls)
			}
			if got := counter(t, f.reg, "hcpbot_slack_errors_total", map[string]string{"error": tt.error}); got != 3 {
				t.Errorf("hcpbot_slack_errors_total{error=%q} = %v, want 3", tt.error, got)
			}
			if got := counter(t, f.reg, "hcpbot_slack_dropped_total", nil); got != 4 {
				t.Errorf("dropped = %v, want 4 (update, 2 roots, 1 reply)", got)
			}
			up := f.n.Unpostable()
			if len(up) != 1 || up[0].Channel != ch || up[0].Error != tt.error || up[0].Since.Before(before) {
				t.Fatalf("Unpostable = %+v, want %s: %s since the change", up, ch, tt.error)
			}
			if got := counter(t, f.reg, "hcpbot_slack_unpostable_channels", nil); got != 1 {
				t.Errorf("hcpbot_slack_unpostable_channels = %v", got)
			}

			// Fixed (bot invited, channel unarchived, app reinstalled): the
			// next rendering goes out and the channel is no longer listed.
			rec.Reset()
			mustUpsert(t, f.n, msg(ch, "inc-a", 2))
			waitUntil(t, "posted again", func() bool { return f.n.Pending() == 0 && len(rec.Messages(ch)) == 1 })
			if up := f.n.Unpostable(); len(up) != 0 {
				t.Errorf("Unpostable after a post = %+v", up)
			}
			if got := counter(t, f.reg, "hcpbot_slack_unpostable_channels", nil); got != 0 {
				t.Errorf("hcpbot_slack_unpostable_channels = %v after recovery", got)
			}
		})
	}
}

// Blocks the recorder refuses as Slack would (a duplicate block_id, which
// clamping cannot repair) go out once more as the text alone.
func TestInvalidBlocksFallBackToText(t *testing.T) {
	const ch = "C0BLOCKS"
	rec := slackrec.New(t, slackrec.WithRate(50, 10))
	rec.ExpectInvalid()
	f := newSlack(t, rec, NewMemoryStore(), func(c *SlackConfig) { c.PostRate = 20 })
	md := slack.NewTextBlockObject(slack.MarkdownType, "part", false, false)
	dup := []slack.Block{slack.NewSectionBlock(md, nil, nil, slack.SectionBlockOptionBlockID("same")),
		slack.NewSectionBlock(md, nil, nil, slack.SectionBlockOptionBlockID("same"))}
	mustUpsert(t, f.n, Message{Key: "inc-dup", Channel: ch, Version: 1, Text: "inc-dup v1", Blocks: dup})
	run(t, f.n)
	waitUntil(t, "posted", func() bool { return f.n.Pending() == 0 && len(rec.Messages(ch)) == 1 })

	m := rec.Messages(ch)[0]
	if m.Text != "inc-dup v1" || len(m.Blocks) != 0 {
		t.Errorf("posted %+v, want the text alone", m)
	}
	if v := rec.BlockViolations(); len(v) != 1 || !strings.Contains(v[0].Detail, "block_id") {
		t.Errorf("BlockViolations = %v", v)
	}
	if got := counter(t, f.reg, "hcpbot_slack_errors_total", map[string]string{"error": "invalid_blocks"}); got != 1 {
		t.Errorf("errors{invalid_blocks} = %v, want 1", got)
	}
	if up := f.n.Unpostable(); len(up) != 0 {
		t.Errorf("a refused form made the channel unpostable: %+v", up)
	}
}

// A text Slack finds too long (msg_too_long: its hard limit can be below
// the 40,000 characters we cut to, e.g. counted after escaping) goes out
// once more as the text alone, cut to fallbackText.
func TestMsgTooLongFallsBack(t *testing.T) {
	const ch = "C0LONG"
	rec := slackrec.New(t, slackrec.WithRate(50, 10))
	tp := &tap{intercept: func(method string, form url.Values) string {
		if method == methodPost && utf8.RuneCountInString(form.Get("text")) > 10000 {
			return "msg_too_long"
		}
		return ""
	}}
	f := newSlackTap(t, rec, NewMemoryStore(), tp, func(c *SlackConfig) { c.PostRate = 20 })
	blocks := []slack.Block{slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, "summary", false, false), nil, nil)}
	mustUpsert(t, f.n, Message{Key: "inc-long", Channel: ch, Version: 1, Text: strings.Repeat("evidence line\n", 2000), Blocks: blocks})
	run(t, f.n)
	waitUntil(t, "posted", func() bool { return f.n.Pending() == 0 && len(rec.Messages(ch)) == 1 })

	m := rec.Messages(ch)[0]
	if n := utf8.RuneCountInString(m.Text); n > fallbackText || len(m.Blocks) != 0 || !strings.HasPrefix(m.Text, "evidence line") {
		t.Errorf("posted %d characters, blocks %s; want the text alone within %d", n, m.Blocks, fallbackText)
	}
	if got := counter(t, f.reg, "hcpbot_slack_errors_total", map[string]string{"error": "msg_too_long"}); got != 1 {
		t.Errorf("errors{msg_too_long} = %v, want 1", got)
	}
}

// Slack's undocumented limit on a message's total size (text and blocks:
// msg_blocks_too_long, seen at 11-13k characters; bolt-js #2509, #2867),
// as the recorder answers it: the root goes out as its text alone, and an
// update of it too. Nothing is dropped.
func TestMsgBlocksTooLongFallsBack(t *testing.T) {
	const ch = "C0BLOCKS"
	rec := slackrec.New(t, slackrec.WithRate(50, 10), slackrec.WithMessageSizeLimit(12000))
	rec.ExpectInvalid()
	f := newSlackTap(t, rec, NewMemoryStore(), &tap{}, func(c *SlackConfig) { c.PostRate = 20 })
	// Blocks near Block Kit's per-section limit, many of them: each
	// valid, together over the total.
	var blocks []slack.Block
	for i := range 8 {
		blocks = append(blocks, slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, fmt.Sprintf("evidence %d\n%s", i, strings.Repeat("x", 2500)), false, false), nil, nil))
	}
	mustUpsert(t, f.n, Message{Key: "inc-big", Channel: ch, Version: 1, Text: "summary: proxy tunnel down", Blocks: blocks})
	run(t, f.n)
	waitUntil(t, "posted", func() bool { return f.n.Pending() == 0 && len(rec.Messages(ch)) == 1 })
	m := rec.Messages(ch)[0]
	if m.Text != "summary: proxy tunnel down" || len(m.Blocks) != 0 {
		t.Errorf("posted %q with blocks %s; want the text alone", m.Text, m.Blocks)
	}
	if got := counter(t, f.reg, "hcpbot_slack_errors_total", map[string]string{"error": "msg_blocks_too_long"}); got != 1 {
		t.Errorf("errors{msg_blocks_too_long} = %v, want 1", got)
	}

	// Its update, refused the same way: the text alone, cut to
	// fallbackText, and the old blocks cleared.
	mustUpsert(t, f.n, Message{Key: "inc-big", Channel: ch, Version: 2, Text: "summary v2\n" + strings.Repeat("evidence line\n", 1000), Blocks: blocks})
	waitUntil(t, "updated", func() bool {
		m, _ := rec.Message(ch, rec.Messages(ch)[0].TS)
		return f.n.Pending() == 0 && m.Updates == 1
	})
	m, _ = rec.Message(ch, rec.Messages(ch)[0].TS)
	if n := utf8.RuneCountInString(m.Text); n > fallbackText || !strings.HasPrefix(m.Text, "summary v2") || len(m.Blocks) > 2 {
		t.Errorf("updated to %d characters %q…, blocks %s; want the text alone", n, blockkit.Truncate(m.Text, 40), m.Blocks)
	}
	if got := counter(t, f.reg, "hcpbot_slack_dropped_total", map[string]string{"kind": kindUpdate}); got != 0 {
		t.Errorf("dropped{update} = %v, want none", got)
	}
}

// A reply that every longer form of is refused (msg_too_long under any
// size) is posted shortened: a message is never dropped for its size.
func TestSizeRefusalNeverDrops(t *testing.T) {
	const ch = "C0SHORT"
	rec := slackrec.New(t, slackrec.WithRate(50, 10))
	tp := &tap{intercept: func(method string, form url.Values) string {
		if method == methodPost && utf8.RuneCountInString(form.Get("text")) > shortText+len(shortNote) {
			return "msg_too_long"
		}
		return ""
	}}
	f := newSlackTap(t, rec, NewMemoryStore(), tp, func(c *SlackConfig) { c.PostRate = 20 })
	mustUpsert(t, f.n, Message{Key: "inc-short", Channel: ch, Version: 1, Text: strings.Repeat("root line\n", 500)})
	run(t, f.n)
	waitUntil(t, "posted", func() bool { return f.n.Pending() == 0 && len(rec.Messages(ch)) == 1 })
	m := rec.Messages(ch)[0]
	if !strings.HasPrefix(m.Text, "root line") || !strings.HasSuffix(m.Text, shortNote) {
		t.Errorf("posted %q", m.Text)
	}
	if got := counter(t, f.reg, "hcpbot_slack_dropped_total", map[string]string{"kind": kindRoot}); got != 0 {
		t.Errorf("dropped{root} = %v, want none", got)
	}
}
