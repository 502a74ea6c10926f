package blockkit

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/slack-go/slack"
)

func TestTruncate(t *testing.T) {
	tests := []struct {
		in    string
		limit int
		want  string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"0123456789abc", 10, "012345678…"},
		{"ääääääääääää", 5, "ääää…"}, // runes, not bytes
		{"see <https://example.com/very/long|the runbook> now", 20, "see…"},
		{"a &amp; b &amp; c", 12, "a &amp; b…"},
		{"log:\n```\nline one\nline two\n", 20, "log:\n```\nline o…\n```"}, // the code block is closed
		{"anything", 1, "a"},
		{"anything", 0, ""},
	}
	for _, tt := range tests {
		got := Truncate(tt.in, tt.limit)
		if got != tt.want {
			t.Errorf("Truncate(%q, %d) = %q, want %q", tt.in, tt.limit, got, tt.want)
		}
		if n := utf8.RuneCountInString(got); n > tt.limit {
			t.Errorf("Truncate(%q, %d) has %d runes", tt.in, tt.limit, n)
		}
	}
}

func TestSplitText(t *testing.T) {
	s := strings.Repeat("line of twenty chars\n", 10)
	parts := SplitText(s, 50)
	if strings.Join(parts, "\n") != strings.TrimSuffix(s, "\n") {
		t.Errorf("parts do not rejoin: %q", parts)
	}
	for _, p := range parts {
		if utf8.RuneCountInString(p) > 50 || strings.HasPrefix(p, "\n") {
			t.Errorf("bad part %q", p)
		}
	}
}

func TestClampBlocks(t *testing.T) {
	md := func(s string) *slack.TextBlockObject {
		return slack.NewTextBlockObject(slack.MarkdownType, s, false, false)
	}
	long := strings.Repeat("x", 5000)
	var fields []*slack.TextBlockObject
	for range 12 {
		fields = append(fields, md(long))
	}
	section := slack.NewSectionBlock(md(long), fields, nil)
	var in []slack.Block
	in = append(in, slack.NewHeaderBlock(slack.NewTextBlockObject(slack.PlainTextType, long, false, false)), section)
	for range 60 {
		in = append(in, slack.NewDividerBlock())
	}

	out := ClampBlocks(in)
	if len(out) != MaxBlocks {
		t.Fatalf("%d blocks, want %d", len(out), MaxBlocks)
	}
	if n := utf8.RuneCountInString(out[0].(*slack.HeaderBlock).Text.Text); n > MaxHeaderText {
		t.Errorf("header has %d chars", n)
	}
	s := out[1].(*slack.SectionBlock)
	if n := utf8.RuneCountInString(s.Text.Text); n > MaxSectionText {
		t.Errorf("section text has %d chars", n)
	}
	if len(s.Fields) != MaxSectionFields || utf8.RuneCountInString(s.Fields[0].Text) > MaxFieldText {
		t.Errorf("fields: %d, first %d chars", len(s.Fields), utf8.RuneCountInString(s.Fields[0].Text))
	}
	last, _ := json.Marshal(out[MaxBlocks-1])
	if !strings.Contains(string(last), "13 more blocks not shown") {
		t.Errorf("last block = %s", last)
	}
	// The caller's blocks are untouched.
	if section.Text.Text != long || len(section.Fields) != 12 || len(in) != 62 {
		t.Errorf("input modified")
	}
	if _, err := json.Marshal(out); err != nil {
		t.Errorf("marshal: %v", err)
	}
	// What ClampBlocks lets through, Slack accepts: the two share one table.
	if err := ValidateBlocks(out); err != nil {
		t.Errorf("clamped blocks break a limit: %v", err)
	}
	if err := ValidateBlocks(in); err == nil {
		t.Errorf("the unclamped blocks pass validation")
	}
}

// TestClampActions: buttons beyond Slack's 25 are dropped and long labels
// cut; the caller's buttons are untouched and the result validates.
func TestClampActions(t *testing.T) {
	long := strings.Repeat("y", 200)
	var btns []slack.BlockElement
	for i := range 30 {
		btns = append(btns, slack.NewButtonBlockElement(fmt.Sprintf("a%d", i), "v",
			slack.NewTextBlockObject(slack.PlainTextType, long, false, false)))
	}
	in := []slack.Block{slack.NewActionBlock("acts", btns...)}
	if err := ValidateBlocks(in); err == nil {
		t.Fatal("30 buttons of 200 characters pass validation")
	}
	out := ClampBlocks(in)
	if err := ValidateBlocks(out); err != nil {
		t.Errorf("clamped: %v", err)
	}
	if got := len(out[0].(*slack.ActionBlock).Elements.ElementSet); got != 25 {
		t.Errorf("%d elements, want 25", got)
	}

	// A message too long for Slack keeps its buttons at the end.
	var many []slack.Block
	for range 70 {
		many = append(many, slack.NewDividerBlock())
	}
	many = append(many, in[0])
	out = ClampBlocks(many)
	if len(out) != MaxBlocks || !isActions(out[MaxBlocks-1]) {
		t.Fatalf("%d blocks, last %T; want %d ending with the actions", len(out), out[len(out)-1], MaxBlocks)
	}
	if raw, _ := json.Marshal(out[MaxBlocks-2]); !strings.Contains(string(raw), "22 more blocks not shown") {
		t.Errorf("note = %s", raw)
	}
	if err := ValidateBlocks(out); err != nil {
		t.Errorf("clamped: %v", err)
	}
	if btns[0].(*slack.ButtonBlockElement).Text.Text != long {
		t.Errorf("input modified")
	}
}
