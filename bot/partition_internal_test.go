package bot

import (
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/testenv/syncbuf"
	"github.com/hcpbot/hcpbot/partition"
)

// The selector skips by the bot's configuration (Of) whatever the tag
// says, for untagged events, events tagged for the current count and for
// an earlier one; a tag for the current count that disagrees with Of is
// logged as an error once per source. Subjects that are no event subject
// are not skipped (they are decoded and dead-lettered). One group skips
// nothing.
func TestSelectorFollowsTheConfiguration(t *testing.T) {
	set := partition.Set{Count: 2}
	var src [2]string // a source of each group
	for i := 0; src[0] == "" || src[1] == ""; i++ {
		s := "mgmt-sel-" + string(rune('a'+i))
		if src[set.Of(s)] == "" {
			src[set.Of(s)] = s
		}
	}
	var logs syncbuf.Buffer
	sel := newSelector(set, 0, zerolog.New(&logs))
	subject := func(source string) string { return "hcpbot.events." + source + ".ns.hc.node" }
	for _, tc := range []struct {
		subject string
		skip    bool
	}{
		{subject(src[0]), false},
		{subject(src[1]), true},
		{event.TagSubject(subject(src[0]), event.Tag{Count: 2, Index: 0}), false},
		{event.TagSubject(subject(src[1]), event.Tag{Count: 2, Index: 1}), true},
		// Tagged before a repartition, for three groups: the tag is not read.
		{event.TagSubject(subject(src[1]), event.Tag{Count: 3, Index: 0}), true},
		// Tagged by a mapping that disagrees: Of wins, logged once.
		{event.TagSubject(subject(src[0]), event.Tag{Count: 2, Index: 1}), false},
		{event.TagSubject(subject(src[0]), event.Tag{Count: 2, Index: 1}), false},
		{event.TagSubject(subject(src[1]), event.Tag{Count: 2, Index: 0}), true},
		{"hcpbot.events.x", false},
		{"hcpbot.events." + src[1] + ".ns.hc.node.2", false},
	} {
		if got := sel.skip(tc.subject); got != tc.skip {
			t.Errorf("skip(%q) = %v, want %v", tc.subject, got, tc.skip)
		}
	}
	if n := strings.Count(logs.String(), `"level":"error"`); n != 2 {
		t.Errorf("%d errors logged, want one per source whose tag disagreed (2):\n%s", n, logs.String())
	}
	if one := newSelector(partition.Set{Count: 1}, 0, zerolog.Nop()); one.skip(subject(src[1])) {
		t.Error("one group skips an event")
	}
}
