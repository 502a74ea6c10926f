package notify

import (
	"net/http"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
)

// An instance died after Slack accepted its root and one reply but before
// their ts reached the store: the claims are left without ts. The instance
// that takes them over finds both posts by their metadata, updates the
// root and does not post either again.
func TestLostAnswerIsFoundNotPostedAgain(t *testing.T) {
	const ch, key = "C0RECOVER", "inc-lost"
	rec := slackrec.New(t, slackrec.WithRate(50, 10))
	store := NewMemoryStore()
	claimed := time.Now()
	dead := NewSlackClient("xoxb-test-token", rec.APIURL(), http.DefaultClient)
	_, rootTS, err := dead.PostMessageContext(t.Context(), ch, options(key+" v1", nil, formFull, false, "", metadata(key, ""))...)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := dead.PostMessageContext(t.Context(), ch, options("r1 text", nil, formFull, false, rootTS, metadata(key, "r1"))...); err != nil {
		t.Fatal(err)
	}
	// Someone else's post in between, with another key: not ours.
	if _, _, err := dead.PostMessageContext(t.Context(), ch, slack.MsgOptionText("other", false), metadata("inc-other", "")); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{rootID(key), replyID(key, "r1")} {
		if _, err := store.Create(t.Context(), id, Record{Channel: ch, Owner: "dead", Claimed: claimed}); err != nil {
			t.Fatal(err)
		}
	}

	f := newSlack(t, rec, store, func(c *SlackConfig) {
		c.PostRate, c.ClaimLease, c.ClaimPoll = 20, 300*time.Millisecond, 20*time.Millisecond
	})
	mustUpsert(t, f.n, msg(ch, key, 2))
	mustReply(t, f.n, reply(ch, key, "r1"))
	mustReply(t, f.n, reply(ch, key, "r2"))
	run(t, f.n)
	waitUntil(t, "the root updated and r2 posted", func() bool {
		m, ok := rec.Message(ch, rootTS)
		return ok && m.Updates > 0 && len(replyTexts(rec, ch, rootTS)) == 2
	})
	if got := len(roots(rec, ch)[key]); got != 1 {
		t.Errorf("%d roots for %s, want 1", got, key)
	}
	if got := okCalls(rec, "chat.postMessage"); got != 4 { // 3 before, r2 now
		t.Errorf("%d posts, want 4", got)
	}
	if got := counter(t, f.reg, "hcpbot_slack_recovered_posts_total", nil); got != 2 {
		t.Errorf("recovered %v posts, want 2", got)
	}
	stored, _, err := store.Get(t.Context(), rootID(key))
	if err != nil || stored.TS != rootTS {
		t.Errorf("stored root = %+v (%v), want ts %s", stored, err, rootTS)
	}
}
