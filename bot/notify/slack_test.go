package notify

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
)

// The first Upsert posts the root, later ones edit it in place, coalesced;
// replies wait for the root, go into its thread in order, once each.
func TestUpsertPostsThenUpdatesCoalescedWithOrderedReplies(t *testing.T) {
	const ch, key = "C0INCIDENTS", "inc-7f3a"
	rec := slackrec.New(t) // Slack's own limits: 1 post/s burst 3, 50 updates/min
	store := kvStore(t, natstest.RunServer(t), "notify_basic")
	// One update token per half second: the five upserts below arrive
	// within microseconds, so at most two chat.update calls can carry them.
	f := newSlack(t, rec, store, func(c *SlackConfig) { c.UpdateRate, c.UpdateBurst = 2, 1 })

	// Queued before Run: the reply must wait for the root.
	mustReply(t, f.n, reply(ch, key, "r1"))
	mustUpsert(t, f.n, Message{Key: key, Channel: ch, Version: 1, Text: key + " v1",
		Blocks: []slack.Block{slack.NewHeaderBlock(slack.NewTextBlockObject(slack.PlainTextType, "API unreachable", false, false))}})
	mustReply(t, f.n, reply(ch, key, "r1")) // duplicate ID: dropped
	run(t, f.n)

	waitUntil(t, "root and first reply", func() bool {
		r := roots(rec, ch)[key]
		return len(r) == 1 && len(replyTexts(rec, ch, r[0].TS)) == 1
	})
	root := roots(rec, ch)[key][0]
	if root.Text != key+" v1" || !strings.Contains(string(root.Blocks), "API unreachable") {
		t.Fatalf("root = %q %s", root.Text, root.Blocks)
	}
	if n := okCalls(rec, "chat.postMessage"); n != 2 {
		t.Fatalf("postMessage calls = %d, want 2 (root, r1)", n)
	}

	for v := uint64(2); v <= 6; v++ {
		mustUpsert(t, f.n, msg(ch, key, v))
	}
	mustReply(t, f.n, reply(ch, key, "r2"))
	mustReply(t, f.n, reply(ch, key, "r3"))
	mustReply(t, f.n, reply(ch, key, "r2")) // still queued: dropped

	waitUntil(t, "v6 shown and all replies", func() bool {
		m, _ := rec.Message(ch, root.TS)
		return m.Text == key+" v6" && len(replyTexts(rec, ch, root.TS)) == 3 && f.n.Pending() == 0
	})
	m, _ := rec.Message(ch, root.TS)
	updates := len(rec.CallsTo("chat.update"))
	posts := okCalls(rec, "chat.postMessage")
	t.Logf("6 upserts, 3 replies (+2 duplicates) → %d chat.postMessage, %d chat.update, %d 429s, %d violations",
		posts, updates, rec.RateLimited(), rec.Violations())
	if len(roots(rec, ch)) != 1 || len(roots(rec, ch)[key]) != 1 {
		t.Errorf("roots = %v, want exactly one", roots(rec, ch))
	}
	if posts != 4 {
		t.Errorf("postMessage calls = %d, want 4 (root + 3 replies)", posts)
	}
	if updates < 1 || updates > 2 || m.Updates != okCalls(rec, "chat.update") {
		t.Errorf("chat.update calls = %d (message says %d), want 1 or 2 for 5 coalesced upserts", updates, m.Updates)
	}
	if len(m.Blocks) != 0 && string(m.Blocks) != "[]" {
		// The newest rendering has no blocks: v1's header must be gone.
		t.Errorf("blocks after updates = %s, want none", m.Blocks)
	}
	if rec.RateLimited() > 1 {
		t.Errorf("429s = %d, want at most 1", rec.RateLimited())
	}
	if got := replyTexts(rec, ch, root.TS); !slices.Equal(got, []string{"r1", "r2", "r3"}) {
		t.Errorf("thread = %v, want [r1 r2 r3]", got)
	}
	if rec.Violations() != 0 {
		t.Errorf("violations = %d", rec.Violations())
	}
	if got := counter(t, f.reg, "hcpbot_slack_calls_total", map[string]string{"method": "chat.update", "outcome": "ok"}); int(got) != updates {
		t.Errorf("metric chat.update ok = %v, want %d", got, updates)
	}
	if got := counter(t, f.reg, "hcpbot_slack_deduplicated_total", nil); got != 2 {
		t.Errorf("deduplicated = %v, want 2", got)
	}
	if got := counter(t, f.reg, "hcpbot_slack_delivery_latency_seconds", map[string]string{"kind": "reply"}); got != 3 {
		t.Errorf("reply latency samples = %v, want 3", got)
	}
}

// A storm: 30 keys at once into one channel, paced at exactly the rate the
// recorder enforces.
func TestStormOfThirtyKeysInOneChannel(t *testing.T) {
	const ch, keys = "C0STORM", 30
	// Ten posts a second and ten updates a second on both sides keep the
	// test short; what matters is that our pace equals Slack's.
	rec := slackrec.New(t, slackrec.WithRate(10, 3), slackrec.WithUpdateRate(10, 5))
	store := kvStore(t, natstest.RunServer(t), "notify_storm")
	f := newSlack(t, rec, store, func(c *SlackConfig) {
		c.PostRate, c.PostBurst = 10, 2 // bursts one below Slack's, as the defaults
		c.UpdateRate, c.UpdateBurst = 10, 4
	})
	run(t, f.n)

	key := func(i int) string { return fmt.Sprintf("inc-%02d", i) }
	start := time.Now()
	for i := range keys {
		mustUpsert(t, f.n, msg(ch, key(i), 1))
		mustReply(t, f.n, reply(ch, key(i), "a-"+key(i)))
		mustUpsert(t, f.n, msg(ch, key(i), 2)) // folds into v1 if still queued
	}
	waitUntil(t, "30 roots and their first replies", func() bool {
		rs := roots(rec, ch)
		if len(rs) < keys {
			return false
		}
		for _, r := range rs {
			if len(replyTexts(rec, ch, r[0].TS)) < 1 {
				return false
			}
		}
		return true
	})
	wave1 := time.Since(start)
	for i := range keys {
		mustUpsert(t, f.n, msg(ch, key(i), 3))
		mustReply(t, f.n, reply(ch, key(i), "b-"+key(i)))
	}
	waitUntil(t, "all keys at v3 with both replies", func() bool {
		if f.n.Pending() != 0 {
			return false
		}
		for k, r := range roots(rec, ch) {
			m, _ := rec.Message(ch, r[0].TS)
			if m.Text != k+" v3" || len(replyTexts(rec, ch, r[0].TS)) != 2 {
				return false
			}
		}
		return true
	})

	rs := roots(rec, ch)
	posts, updates := rec.CallsTo("chat.postMessage"), rec.CallsTo("chat.update")
	lastRoot, firstReply := -1, -1
	for i, c := range posts {
		if c.Status != http.StatusOK {
			continue
		}
		if c.Form.Get("thread_ts") == "" {
			lastRoot = i
		} else if firstReply < 0 {
			firstReply = i
		}
	}
	t.Logf("%d keys: %d messages in %v total (wave 1 in %v); calls: %d chat.postMessage, %d chat.update; 429s %d; violations %d; last root at post #%d, first reply at post #%d",
		keys, len(rec.Messages(ch)), time.Since(start).Round(time.Millisecond), wave1.Round(time.Millisecond),
		len(posts), len(updates), rec.RateLimited(), rec.Violations(), lastRoot+1, firstReply+1)
	if len(rs) != keys {
		t.Errorf("roots for %d keys, want %d", len(rs), keys)
	}
	for k, r := range rs {
		if len(r) != 1 {
			t.Errorf("%s has %d roots", k, len(r))
			continue
		}
		if got, want := replyTexts(rec, ch, r[0].TS), []string{"a-" + k, "b-" + k}; !slices.Equal(got, want) {
			t.Errorf("%s thread = %v, want %v", k, got, want)
		}
	}
	if len(rec.Messages(ch)) != 3*keys {
		t.Errorf("%d messages, want %d: duplicates", len(rec.Messages(ch)), 3*keys)
	}
	if rec.Violations() != 0 {
		t.Errorf("violations = %d, want 0", rec.Violations())
	}
	if rec.RateLimited() > 3 {
		t.Errorf("429s = %d, want at most 3", rec.RateLimited())
	}
	// v2 was queued before the roots went out: it is what they show first,
	// so wave 1 needed no update at all; wave 2 needs one per key. On a
	// loaded machine a root can go out before its v2 is queued, costing one
	// more update: coalescing is about not paying one update per upsert.
	if len(updates) > keys+keys/5+rec.RateLimited() {
		t.Errorf("chat.update calls = %d, want about %d", len(updates), keys)
	}
	if firstReply < 0 || firstReply < 3 {
		t.Errorf("first reply at post #%d: new roots should go first", firstReply+1)
	}
}

// Slack answers 429 (with Retry-After), then 500s, then hangs: everything is
// delivered afterwards, once, and nothing is sent while Slack asked us to
// wait.
func TestFailuresAreRetriedWithoutHammeringOrDuplicates(t *testing.T) {
	const ch, keys = "C0FAIL", 5
	rec := slackrec.New(t, slackrec.WithRate(50, 10), slackrec.WithUpdateRate(50, 10))
	store := kvStore(t, natstest.RunServer(t), "notify_fail")
	f := newSlack(t, rec, store, func(c *SlackConfig) {
		c.PostRate, c.PostBurst = 20, 5
		c.UpdateRate, c.UpdateBurst = 20, 5
		c.AttemptTimeout = 300 * time.Millisecond
		c.BackoffBase, c.BackoffMax = 20*time.Millisecond, 200*time.Millisecond
	})
	key := func(i int) string { return fmt.Sprintf("inc-%d", i) }
	wave := func(v uint64) {
		for i := range keys {
			mustUpsert(t, f.n, msg(ch, key(i), v))
			mustReply(t, f.n, reply(ch, key(i), fmt.Sprintf("r%d", v)))
		}
	}
	okAfter := func(since time.Time) bool {
		return f.tap.count(func(ex exchange) bool { return ex.status == http.StatusOK && ex.start.After(since) }) > 0
	}

	// Phase 1: 429 with Retry-After.
	rec.FailFor(slackrec.FailRateLimited, 1500*time.Millisecond)
	wave(1)
	run(t, f.n)
	waitUntil(t, "a 429", func() bool {
		return f.tap.count(func(ex exchange) bool { return ex.status == http.StatusTooManyRequests }) > 0
	})
	waitUntil(t, "delivery after the 429", func() bool { return okAfter(time.Time{}) })

	// Phase 2: 500s.
	p2 := time.Now()
	rec.FailFor(slackrec.FailServerError, 800*time.Millisecond)
	wave(2)
	waitUntil(t, "a 500", func() bool {
		return f.tap.count(func(ex exchange) bool { return ex.status == http.StatusInternalServerError }) > 0
	})
	waitUntil(t, "delivery after the 500s", func() bool { return okAfter(p2.Add(800 * time.Millisecond)) })

	// Phase 3: calls hang past our attempt timeout.
	p3 := time.Now()
	rec.FailFor(slackrec.FailTimeout, time.Second)
	wave(3)
	waitUntil(t, "a timed-out call", func() bool {
		return f.tap.count(func(ex exchange) bool { return ex.status == 0 && ex.start.After(p3) }) > 0
	})

	waitUntil(t, "everything delivered", func() bool {
		if f.n.Pending() != 0 {
			return false
		}
		rs := roots(rec, ch)
		for i := range keys {
			r := rs[key(i)]
			if len(r) == 0 {
				return false
			}
			m, _ := rec.Message(ch, r[0].TS)
			if m.Text != key(i)+" v3" || len(replyTexts(rec, ch, r[0].TS)) != 3 {
				return false
			}
		}
		return true
	})

	exs := f.tap.exchanges()
	count := func(status int) int {
		return f.tap.count(func(ex exchange) bool { return ex.status == status })
	}
	inWindows := f.tap.inRetryAfterWindows()
	var ra []time.Duration
	for _, ex := range exs {
		if ex.status == http.StatusTooManyRequests {
			ra = append(ra, ex.retryAfter)
		}
	}
	t.Logf("%d calls: %d ok, %d 429 (Retry-After %v), %d 500, %d timed out; calls inside Retry-After windows: %d; violations: %d; messages: %d",
		len(exs), count(http.StatusOK), count(http.StatusTooManyRequests), ra, count(http.StatusInternalServerError),
		count(0), inWindows, rec.Violations(), len(rec.Messages(ch)))
	if inWindows != 0 || rec.Violations() != 0 {
		t.Errorf("calls inside Retry-After windows = %d, recorder violations = %d; want 0", inWindows, rec.Violations())
	}
	rs := roots(rec, ch)
	for i := range keys {
		if r := rs[key(i)]; len(r) != 1 {
			t.Errorf("%s: %d roots, want 1", key(i), len(r))
		} else if got := replyTexts(rec, ch, r[0].TS); !slices.Equal(got, []string{"r1", "r2", "r3"}) {
			t.Errorf("%s thread = %v, want [r1 r2 r3]", key(i), got)
		}
	}
	if len(rec.Messages(ch)) != 4*keys {
		t.Errorf("%d messages, want %d", len(rec.Messages(ch)), 4*keys)
	}
	if got := counter(t, f.reg, "hcpbot_slack_retry_after_seconds_total", nil); got < 1 {
		t.Errorf("retry_after_seconds_total = %v", got)
	}
	if got := counter(t, f.reg, "hcpbot_slack_calls_total", map[string]string{"outcome": "retryable_error"}); got < 2 {
		t.Errorf("retryable errors counted = %v", got)
	}
}

// A new instance (new process: new notifier, new connection, same bucket)
// continues where a stopped one left off and posts no root twice.
func TestRestartDoesNotRepostRoots(t *testing.T) {
	const ch, keys, bucket = "C0RESTART", 10, "notify_restart"
	e := natstest.RunServer(t)
	rec := slackrec.New(t, slackrec.WithRate(50, 10), slackrec.WithUpdateRate(50, 10))
	key := func(i int) string { return fmt.Sprintf("inc-%d", i) }
	cfg := func(id string) func(*SlackConfig) {
		return func(c *SlackConfig) {
			c.InstanceID = id
			c.PostRate, c.PostBurst = 4, 1 // slow enough to stop it mid-queue
			c.UpdateRate = 20
			c.ClaimLease, c.ClaimPoll = 2*time.Second, 50*time.Millisecond
		}
	}

	a := newSlack(t, rec, kvStore(t, e, bucket), cfg("A"))
	for i := range keys {
		mustUpsert(t, a.n, msg(ch, key(i), 1))
		mustReply(t, a.n, reply(ch, key(i), "r1"))
	}
	stopA := run(t, a.n)
	waitUntil(t, "A posts a few roots", func() bool { return len(roots(rec, ch)) >= 3 })
	stopA()
	postedByA := len(roots(rec, ch))
	leftByA := a.n.Pending()
	if err := a.n.Upsert(t.Context(), msg(ch, key(0), 9)); err != ErrStopped {
		t.Errorf("Upsert after stop: %v, want ErrStopped", err)
	}

	b := newSlack(t, rec, kvStore(t, e, bucket), cfg("B"))
	for i := range keys { // the correlator replays its state
		mustUpsert(t, b.n, msg(ch, key(i), 2))
		mustReply(t, b.n, reply(ch, key(i), "r1"))
		mustReply(t, b.n, reply(ch, key(i), "r2"))
	}
	run(t, b.n)
	waitUntil(t, "B finishes", func() bool {
		if b.n.Pending() != 0 || len(roots(rec, ch)) < keys {
			return false
		}
		for k, r := range roots(rec, ch) {
			m, _ := rec.Message(ch, r[0].TS)
			if m.Text != k+" v2" {
				return false
			}
		}
		return true
	})

	rs := roots(rec, ch)
	t.Logf("A posted %d roots and left %d items; total %d roots for %d keys, %d chat.update, %d messages",
		postedByA, leftByA, len(rs), keys, len(rec.CallsTo("chat.update")), len(rec.Messages(ch)))
	if leftByA == 0 {
		t.Errorf("A was not stopped mid-queue")
	}
	for i := range keys {
		r := rs[key(i)]
		if len(r) != 1 {
			t.Errorf("%s: %d roots, want 1", key(i), len(r))
			continue
		}
		if got := replyTexts(rec, ch, r[0].TS); !slices.Equal(got, []string{"r1", "r2"}) {
			t.Errorf("%s thread = %v, want [r1 r2]", key(i), got)
		}
	}
	// Roots A posted show v1 and need one update each; B posts the others
	// with v2 directly.
	if n := len(rec.CallsTo("chat.update")); n != postedByA {
		t.Errorf("chat.update calls = %d, want %d (one per root A posted)", n, postedByA)
	}
}

// Two instances on the same store, fed the same items at the same time,
// post one root per key and each reply once.
func TestTwoReplicasPostOneRootPerKey(t *testing.T) {
	const ch, keys, bucket = "C0HA", 10, "notify_ha"
	e := natstest.RunServer(t)
	rec := slackrec.New(t, slackrec.WithRate(50, 10), slackrec.WithUpdateRate(50, 10))
	key := func(i int) string { return fmt.Sprintf("inc-%d", i) }
	cfg := func(id string) func(*SlackConfig) {
		return func(c *SlackConfig) {
			c.InstanceID = id
			c.PostRate, c.PostBurst = 20, 5
			c.UpdateRate, c.UpdateBurst = 20, 5
			c.ClaimPoll = 20 * time.Millisecond
		}
	}
	a := newSlack(t, rec, kvStore(t, e, bucket), cfg("A"))
	b := newSlack(t, rec, kvStore(t, e, bucket), cfg("B"))
	run(t, a.n)
	run(t, b.n)
	for i := range keys {
		for _, f := range []fixture{a, b} {
			mustUpsert(t, f.n, msg(ch, key(i), 1))
			mustReply(t, f.n, reply(ch, key(i), "r1"))
		}
	}
	for i := range keys {
		for _, f := range []fixture{b, a} {
			mustUpsert(t, f.n, msg(ch, key(i), 2))
			mustReply(t, f.n, reply(ch, key(i), "r2"))
		}
	}
	waitUntil(t, "both drained", func() bool {
		if a.n.Pending() != 0 || b.n.Pending() != 0 || len(roots(rec, ch)) < keys {
			return false
		}
		for k, r := range roots(rec, ch) {
			m, _ := rec.Message(ch, r[0].TS)
			if m.Text != k+" v2" {
				return false
			}
		}
		return true
	})
	rs := roots(rec, ch)
	posts := func(f fixture) float64 {
		return counter(t, f.reg, "hcpbot_slack_calls_total", map[string]string{"method": "chat.postMessage", "outcome": "ok"})
	}
	t.Logf("2 replicas × %d keys: %d roots, %d messages; posts A=%v B=%v; chat.update %d; dedup A=%v B=%v",
		keys, len(rs), len(rec.Messages(ch)), posts(a), posts(b), len(rec.CallsTo("chat.update")),
		counter(t, a.reg, "hcpbot_slack_deduplicated_total", nil), counter(t, b.reg, "hcpbot_slack_deduplicated_total", nil))
	for i := range keys {
		r := rs[key(i)]
		if len(r) != 1 {
			t.Errorf("%s: %d roots, want 1", key(i), len(r))
			continue
		}
		got := replyTexts(rec, ch, r[0].TS)
		if !slices.Equal(got, []string{"r1", "r2"}) {
			t.Errorf("%s thread = %v, want [r1 r2]", key(i), got)
		}
	}
	if len(rec.Messages(ch)) != 3*keys {
		t.Errorf("%d messages, want %d", len(rec.Messages(ch)), 3*keys)
	}
	for _, f := range []fixture{a, b} {
		if got := counter(t, f.reg, "hcpbot_slack_duplicate_roots_total", nil); got != 0 {
			t.Errorf("duplicate roots = %v", got)
		}
	}
}

// Blocks Slack rejects are sent once more as text only; a channel the bot
// cannot post to drops the item and its replies instead of retrying forever.
func TestPermanentErrors(t *testing.T) {
	const ch, gone = "C0PERM", "C0GONE"
	rec := slackrec.New(t, slackrec.WithRate(50, 10), slackrec.WithUpdateRate(50, 10))
	tp := &tap{intercept: func(method string, form url.Values) string {
		switch {
		case form.Get("channel") == gone:
			return "channel_not_found"
		case strings.Contains(form.Get("blocks"), "REJECT-ME"):
			return "invalid_blocks"
		}
		return ""
	}}
	f := newSlackTap(t, rec, NewMemoryStore(), tp, func(c *SlackConfig) {
		c.PostRate, c.UpdateRate = 20, 20
		c.BackoffBase, c.BackoffMax = 10*time.Millisecond, 50*time.Millisecond
	})
	bad := []slack.Block{slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, "REJECT-ME", false, false), nil, nil)}
	mustUpsert(t, f.n, Message{Key: "inc-bad", Channel: ch, Version: 1, Text: "inc-bad v1", Blocks: bad})
	mustReply(t, f.n, Reply{Key: "inc-bad", Channel: ch, ID: "e1", Text: "evidence", Blocks: bad})
	mustUpsert(t, f.n, msg(gone, "inc-gone", 1))
	mustReply(t, f.n, reply(gone, "inc-gone", "g1"))
	run(t, f.n)

	waitUntil(t, "drained", func() bool { return f.n.Pending() == 0 && len(rec.Messages(ch)) == 2 })
	root := roots(rec, ch)["inc-bad"]
	if len(root) != 1 || root[0].Text != "inc-bad v1" || len(root[0].Blocks) != 0 {
		t.Fatalf("root = %+v, want the text alone", root)
	}
	if got := replyTexts(rec, ch, root[0].TS); !slices.Equal(got, []string{"evidence"}) {
		t.Errorf("thread = %v", got)
	}
	goneCalls := tp.count(func(ex exchange) bool { return ex.method == "chat.postMessage" }) - len(rec.CallsTo("chat.postMessage"))
	t.Logf("intercepted calls (invalid_blocks + channel_not_found): %d", goneCalls)
	if goneCalls != 3 { // 2 rejected block sets + 1 channel_not_found; the reply never tried
		t.Errorf("intercepted calls = %d, want 3", goneCalls)
	}
	if got := counter(t, f.reg, "hcpbot_slack_dropped_total", nil); got != 2 {
		t.Errorf("dropped = %v, want 2 (root and its reply in %s)", got, gone)
	}
}

// The default pace against Slack's own limits (the recorder's defaults):
// a burst of new roots in one channel goes out at about one a second
// without a single 429. Slow by nature, so skipped with -short.
func TestDefaultPaceMeetsSlackLimits(t *testing.T) {
	if testing.Short() {
		t.Skip("takes about 10s at Slack's real pace")
	}
	const ch, keys = "C0DEFAULT", 12
	rec := slackrec.New(t)
	f := newSlack(t, rec, nil, nil)
	for i := range keys {
		mustUpsert(t, f.n, msg(ch, fmt.Sprintf("inc-%02d", i), 1))
	}
	start := time.Now()
	run(t, f.n)
	waitUntil(t, "all roots", func() bool { return f.n.Pending() == 0 })
	took := time.Since(start)
	t.Logf("%d roots in %v at the default pace: %d calls, %d 429s, %d violations",
		keys, took.Round(time.Millisecond), len(rec.Calls()), rec.RateLimited(), rec.Violations())
	if len(roots(rec, ch)) != keys || rec.RateLimited() != 0 || rec.Violations() != 0 {
		t.Errorf("roots %d, 429s %d, violations %d; want %d, 0, 0", len(roots(rec, ch)), rec.RateLimited(), rec.Violations(), keys)
	}
	if floor := time.Duration(keys-DefaultPostBurst) * time.Second; took < floor-100*time.Millisecond {
		t.Errorf("took %v, faster than 1/s after the burst (%v)", took, floor)
	}
}

// A rendering whose Digest equals the one delivered last is not sent
// (a correlator replaying its state after a restart: only durations
// differ), also by another instance sharing the store; a new Digest, or
// none, is.
func TestUnchangedDigestNotSent(t *testing.T) {
	const ch, key, bucket = "C0DIGEST", "inc-1", "notify_digest"
	e := natstest.RunServer(t)
	rec := slackrec.New(t)
	with := func(v uint64, digest string) Message {
		m := msg(ch, key, v)
		m.Digest = digest
		return m
	}
	text := func() string {
		rs := roots(rec, ch)[key]
		if len(rs) != 1 {
			return ""
		}
		m, _ := rec.Message(ch, rs[0].TS)
		return m.Text
	}

	a := newSlack(t, rec, kvStore(t, e, bucket), nil)
	mustUpsert(t, a.n, with(1, "d1"))
	stopA := run(t, a.n)
	waitUntil(t, "the root is posted", func() bool { return text() == key+" v1" })
	stopA()

	b := newSlack(t, rec, kvStore(t, e, bucket), nil)
	run(t, b.n)
	mustUpsert(t, b.n, with(2, "d1"))
	waitUntil(t, "the unchanged rendering is dropped", func() bool {
		return counter(t, b.reg, "hcpbot_slack_unchanged_total", nil) == 1 && b.n.Pending() == 0
	})
	if n := len(rec.CallsTo("chat.update")); n != 0 || text() != key+" v1" {
		t.Errorf("%d chat.update, message %q: the unchanged rendering was sent", n, text())
	}
	mustUpsert(t, b.n, with(3, "d2"))
	waitUntil(t, "a changed rendering is sent", func() bool { return text() == key+" v3" })
	mustUpsert(t, b.n, with(4, ""))
	waitUntil(t, "a rendering without digest is sent", func() bool { return text() == key+" v4" })
	if n := len(roots(rec, ch)[key]); n != 1 {
		t.Errorf("%d roots, want 1", n)
	}
}
