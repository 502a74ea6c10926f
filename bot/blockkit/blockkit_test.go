package blockkit

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestValidate checks each limit on both sides of it: at the limit the
// message passes, one over it fails at the path named.
func TestValidate(t *testing.T) {
	x := func(n int) string { return strings.Repeat("x", n) }
	md := func(s string) string { return fmt.Sprintf(`{"type":"mrkdwn","text":%q}`, s) }
	pt := func(s string) string { return fmt.Sprintf(`{"type":"plain_text","text":%q}`, s) }
	button := func(id, label, value string) string {
		return fmt.Sprintf(`{"type":"button","action_id":%q,"text":%s,"value":%q}`, id, pt(label), value)
	}
	repeat := func(n int, f func(i int) string) string {
		var parts []string
		for i := range n {
			parts = append(parts, f(i))
		}
		return strings.Join(parts, ",")
	}
	divider := func(int) string { return `{"type":"divider"}` }
	tests := []struct {
		name   string
		blocks string
		path   string // "" means valid
	}{
		{"50 blocks", "[" + repeat(50, divider) + "]", ""},
		{"51 blocks", "[" + repeat(51, divider) + "]", "blocks"},
		{"section 3000", `[{"type":"section","text":` + md(x(3000)) + `}]`, ""},
		{"section 3001", `[{"type":"section","text":` + md(x(3001)) + `}]`, "blocks[0].text.text"},
		{"section runes", `[{"type":"section","text":` + md(strings.Repeat("ä", 3000)) + `}]`, ""},
		{"section empty text", `[{"type":"section","text":` + md("") + `}]`, "blocks[0].text.text"},
		{"section neither", `[{"type":"section"}]`, "blocks[0]"},
		{"10 fields of 2000", `[{"type":"section","fields":[` + repeat(10, func(int) string { return md(x(2000)) }) + `]}]`, ""},
		{"11 fields", `[{"type":"section","fields":[` + repeat(11, func(int) string { return md("f") }) + `]}]`, "blocks[0].fields"},
		{"field 2001", `[{"type":"section","fields":[` + md(x(2001)) + `]}]`, "blocks[0].fields[0].text"},
		{"header 150", `[{"type":"header","text":` + pt(x(150)) + `}]`, ""},
		{"header 151", `[{"type":"header","text":` + pt(x(151)) + `}]`, "blocks[0].text.text"},
		{"header mrkdwn", `[{"type":"header","text":` + md("h") + `}]`, "blocks[0].text.type"},
		{"emoji on mrkdwn", `[{"type":"section","text":{"type":"mrkdwn","text":"t","emoji":true}}]`, "blocks[0].text.emoji"},
		{"bad text type", `[{"type":"section","text":{"type":"markdown","text":"t"}}]`, "blocks[0].text.type"},
		{"context 10", `[{"type":"context","elements":[` + repeat(10, func(int) string { return md("c") }) + `]}]`, ""},
		{"context 11", `[{"type":"context","elements":[` + repeat(11, func(int) string { return md("c") }) + `]}]`, "blocks[0].elements"},
		{"context empty", `[{"type":"context","elements":[]}]`, "blocks[0].elements"},
		{"context image", `[{"type":"context","elements":[{"type":"image","image_url":"https://x/i.png","alt_text":"i"}]}]`, ""},
		{"actions 25", `[{"type":"actions","elements":[` + repeat(25, func(i int) string { return button(fmt.Sprint(i), "b", "v") }) + `]}]`, ""},
		{"actions 26", `[{"type":"actions","elements":[` + repeat(26, func(i int) string { return button(fmt.Sprint(i), "b", "v") }) + `]}]`, "blocks[0].elements"},
		{"button text 75", `[{"type":"actions","elements":[` + button("a", x(75), "v") + `]}]`, ""},
		{"button text 76", `[{"type":"actions","elements":[` + button("a", x(76), "v") + `]}]`, "blocks[0].elements[0].text.text"},
		{"button value 2000", `[{"type":"actions","elements":[` + button("a", "b", x(2000)) + `]}]`, ""},
		{"button value 2001", `[{"type":"actions","elements":[` + button("a", "b", x(2001)) + `]}]`, "blocks[0].elements[0].value"},
		{"button mrkdwn", `[{"type":"actions","elements":[{"type":"button","action_id":"a","text":` + md("b") + `}]}]`, "blocks[0].elements[0].text.type"},
		{"button style", `[{"type":"actions","elements":[{"type":"button","action_id":"a","text":` + pt("b") + `,"style":"green"}]}]`, "blocks[0].elements[0].style"},
		{"action_id 255", `[{"type":"actions","elements":[` + button(x(255), "b", "v") + `]}]`, ""},
		{"action_id 256", `[{"type":"actions","elements":[` + button(x(256), "b", "v") + `]}]`, "blocks[0].elements[0].action_id"},
		{"action_id twice", `[{"type":"actions","elements":[` + button("a", "b", "v") + `]},{"type":"actions","elements":[` + button("a", "c", "v") + `]}]`, "blocks[1].elements[0].action_id"},
		{"accessory action_id twice", `[{"type":"section","text":` + md("s") + `,"accessory":` + button("a", "b", "v") + `},{"type":"actions","elements":[` + button("a", "c", "v") + `]}]`, "blocks[1].elements[0].action_id"},
		{"block_id 255", `[{"type":"divider","block_id":"` + x(255) + `"}]`, ""},
		{"block_id 256", `[{"type":"divider","block_id":"` + x(256) + `"}]`, "blocks[0].block_id"},
		{"block_id twice", `[{"type":"divider","block_id":"d"},{"type":"divider","block_id":"d"}]`, "blocks[1].block_id"},
		{"confirm", `[{"type":"actions","elements":[{"type":"button","action_id":"a","text":` + pt("b") +
			`,"confirm":{"title":` + pt(x(100)) + `,"text":` + md(x(300)) + `,"confirm":` + pt(x(30)) + `,"deny":` + pt(x(30)) + `}}]}]`, ""},
		{"confirm title 101", `[{"type":"actions","elements":[{"type":"button","action_id":"a","text":` + pt("b") +
			`,"confirm":{"title":` + pt(x(101)) + `,"text":` + md("t") + `,"confirm":` + pt("y") + `,"deny":` + pt("n") + `}}]}]`, "blocks[0].elements[0].confirm.title.text"},
		{"unknown type", `[{"type":"sektion"}]`, "blocks[0].type"},
		{"not an array", `{"type":"divider"}`, "blocks"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Validate([]byte(tt.blocks))
			if tt.path == "" {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				return
			}
			var be *Error
			if !errors.As(err, &be) || be.Code != ErrInvalidBlocks {
				t.Fatalf("want invalid_blocks at %s, got %v", tt.path, err)
			}
			for _, v := range be.Violations {
				if v.Path == tt.path {
					return
				}
			}
			t.Errorf("no violation at %s: %v", tt.path, err)
		})
	}
}

func TestValidateMessage(t *testing.T) {
	if err := ValidateMessage(strings.Repeat("x", MaxMessageText), nil); err != nil {
		t.Errorf("40,000 characters: %v", err)
	}
	var be *Error
	if err := ValidateMessage(strings.Repeat("x", MaxMessageText+1), nil); !errors.As(err, &be) || be.Code != ErrMsgTooLong {
		t.Errorf("40,001 characters: %v, want msg_too_long", err)
	}
	if err := ValidateMessage("t", []byte(`[{"type":"header","text":{"type":"mrkdwn","text":"h"}}]`)); !errors.As(err, &be) || be.Code != ErrInvalidBlocks {
		t.Errorf("mrkdwn header: %v, want invalid_blocks", err)
	}
}
