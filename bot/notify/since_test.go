package notify

import (
	"net/http"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
)

// A double fault: an instance died after Slack accepted its root, ten
// minutes ago, and the instance that takes the claim over fails to look
// for that post once. The next look must still start from the dead
// instance's claim, not from the renewal: otherwise the post is outside
// the window and the root is posted a second time.
func TestTakenOverClaimIsLookedForFromItsFirstClaim(t *testing.T) {
	const ch, key = "C0DOUBLE", "inc-double-fault"
	const ago = 10 * time.Minute
	rec := slackrec.New(t, slackrec.WithRate(50, 10))
	store := NewMemoryStore()
	dead := NewSlackClient("xoxb-test-token", rec.APIURL(), http.DefaultClient)
	_, ts, err := dead.PostMessageContext(t.Context(), ch, options(key+" v1", nil, formFull, false, "", metadata(key, ""))...)
	if err != nil {
		t.Fatal(err)
	}
	rootTS, err := rec.Backdate(ch, ts, ago)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Create(t.Context(), rootID(key), Record{Channel: ch, Owner: "dead", Claimed: time.Now().Add(-ago)}); err != nil {
		t.Fatal(err)
	}
	var looks atomic.Int32
	tp := &tap{intercept: func(method string, _ url.Values) string {
		if method == methodHistory && looks.Add(1) == 1 {
			return "internal_error" // retried
		}
		return ""
	}}
	f := newSlackTap(t, rec, store, tp, func(c *SlackConfig) {
		c.PostRate, c.ClaimLease, c.ClaimPoll = 20, 300*time.Millisecond, 20*time.Millisecond
	})
	mustUpsert(t, f.n, msg(ch, key, 2))
	run(t, f.n)
	waitUntil(t, "the root recorded", func() bool {
		r, _, err := store.Get(t.Context(), rootID(key))
		return err == nil && r.TS != ""
	})
	if n := looks.Load(); n < 2 {
		t.Fatalf("%d looks in the history, want the failed one and another", n)
	}
	if got := len(roots(rec, ch)[key]); got != 1 {
		t.Errorf("%d roots for %s, want the dead instance's only", got, key)
	}
	if stored, _, err := store.Get(t.Context(), rootID(key)); err != nil || stored.TS != rootTS {
		t.Errorf("stored root = %+v (%v), want ts %s", stored, err, rootTS)
	}
}
