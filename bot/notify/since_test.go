package notify

import (
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
	rootTS := deadRoot(t, rec, store, ch, key, ago)
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
	onlyDeadRoot(t, rec, store, ch, key, rootTS)
	if n := looks.Load(); n < 2 {
		t.Fatalf("%d looks in the history, want the failed one and another", n)
	}
}
