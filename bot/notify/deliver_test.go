package notify

import (
	"slices"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
)

// The one post sequence (deliver) for replies: a reply with an ID is
// claimed and recorded, so a restarted instance finds it posted and skips
// it; a reply without ID opted out of de-duplication: it has no record
// and is posted every time it is queued.
func TestDeliverReplyRecordsOnlyWithID(t *testing.T) {
	const ch, key = "C0DELIVER", "inc-deliver"
	rec := slackrec.New(t, slackrec.WithRate(50, 10))
	store := NewMemoryStore()
	fast := func(c *SlackConfig) { c.PostRate, c.ClaimPoll = 20, 20*time.Millisecond }
	records := func() int {
		store.mu.Lock()
		defer store.mu.Unlock()
		return len(store.recs)
	}

	first := newSlack(t, rec, store, fast)
	mustUpsert(t, first.n, msg(ch, key, 1))
	mustReply(t, first.n, reply(ch, key, "r1"))
	mustReply(t, first.n, Reply{Key: key, Channel: ch, Text: "no id"})
	stop := run(t, first.n)
	waitUntil(t, "root and both replies", func() bool { return len(rec.Messages(ch)) == 3 })
	stop()
	if got := records(); got != 2 { // the root and r1
		t.Errorf("%d records after the first run, want 2 (root, r1)", got)
	}

	second := newSlack(t, rec, store, fast)
	mustUpsert(t, second.n, msg(ch, key, 1))
	mustReply(t, second.n, reply(ch, key, "r1"))
	mustReply(t, second.n, Reply{Key: key, Channel: ch, Text: "no id"})
	run(t, second.n)
	waitUntil(t, "the replies handled", func() bool { return second.n.Pending() == 0 && len(rec.Messages(ch)) == 4 })

	root := roots(rec, ch)[key]
	if len(root) != 1 {
		t.Fatalf("%d roots, want 1", len(root))
	}
	if got := replyTexts(rec, ch, root[0].TS); !slices.Equal(got, []string{"r1", "no id", "no id"}) {
		t.Errorf("thread = %q, want r1 once and the reply without ID twice", got)
	}
	if got := counter(t, second.reg, "hcpbot_slack_deduplicated_total", nil); got != 1 {
		t.Errorf("deduplicated = %v, want 1 (r1, found in the store)", got)
	}
	if got := records(); got != 2 {
		t.Errorf("%d records, want 2: a reply without ID leaves none", got)
	}
}
