package notify

import (
	"net/http"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
)

// Attacks on Record.Since (b4d8384): faults at every step around a
// take-over, over the real KV store, must never post a root or reply
// twice when the dead instance's post can be found.

// deadRoot has an instance that died before the test post key's root to
// channel ago in the past, leaving its claim without ts in store (an old
// record, without Since); it returns the root's ts.
func deadRoot(t *testing.T, rec *slackrec.Recorder, store Store, ch, key string, ago time.Duration) string {
	t.Helper()
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
	return rootTS
}

// deadAgo is how long ago the dead instance posted.
const deadAgo = 10 * time.Minute

// deadRootKV is deadRoot deadAgo in the past over a KV store of its own
// NATS server.
func deadRootKV(t *testing.T, bucket, ch, key string) (*slackrec.Recorder, *KVStore, string) {
	t.Helper()
	rec := slackrec.New(t, slackrec.WithRate(50, 10))
	store := kvStore(t, natstest.RunServer(t), bucket)
	return rec, store, deadRoot(t, rec, store, ch, key, deadAgo)
}

// onlyDeadRoot checks that key has one root in ch, the dead instance's at
// rootTS, and that the store records it, once the root is recorded.
func onlyDeadRoot(t *testing.T, rec *slackrec.Recorder, store Store, ch, key, rootTS string) {
	t.Helper()
	waitUntil(t, "the root recorded", func() bool {
		r, _, err := store.Get(t.Context(), rootID(key))
		return err == nil && r.TS != ""
	})
	if got := len(roots(rec, ch)[key]); got != 1 {
		t.Errorf("%d roots for %s, want the dead instance's only", got, key)
	}
	if stored, _, err := store.Get(t.Context(), rootID(key)); err != nil || stored.TS != rootTS {
		t.Errorf("stored root = %+v (%v), want ts %s", stored, err, rootTS)
	}
}

// failLooks answers the first n calls to method with a retryable error
// (n < 0: all of them) and counts the calls.
func failLooks(method string, n int32, calls *atomic.Int32) *tap {
	return &tap{intercept: func(m string, _ url.Values) string {
		if m != method {
			return ""
		}
		if c := calls.Add(1); n < 0 || c <= n {
			return "internal_error"
		}
		return ""
	}}
}

func sinceConfig(id string) func(*SlackConfig) {
	return func(c *SlackConfig) {
		c.PostRate, c.ClaimLease, c.ClaimPoll = 20, 300*time.Millisecond, 20*time.Millisecond
		c.InstanceID = id
	}
}

// Attacker (a), (c): the dead instance's old record (no Since) is taken
// over by A, whose looks all fail; A stops; B takes A's claim over and
// its looks fail too; B restarts and takes its own claim over. Each
// take-over must keep the dead instance's claim time, so B's last look
// still finds the root posted ten minutes ago.
func TestTakeOversInARowLookFromTheFirstClaim(t *testing.T) {
	const ch, key, ago = "C0CHAIN", "inc-chain", deadAgo
	rec, store, rootTS := deadRootKV(t, "notify_since_chain", ch, key)

	claimedBy := func(owner string) func() bool {
		return func() bool {
			r, _, err := store.Get(t.Context(), rootID(key))
			return err == nil && r.Owner == owner
		}
	}
	for _, id := range []string{"replica-a", "replica-b"} {
		var looks atomic.Int32
		f := newSlackTap(t, rec, store, failLooks(methodHistory, -1, &looks), sinceConfig(id))
		mustUpsert(t, f.n, msg(ch, key, 2))
		stop := run(t, f.n)
		waitUntil(t, id+" taking the claim over and failing to look", func() bool {
			return looks.Load() >= 1 && claimedBy(id)()
		})
		stop()
		r, _, err := store.Get(t.Context(), rootID(key))
		if err != nil || r.Since.IsZero() || time.Since(r.Since) < ago-time.Minute {
			t.Fatalf("after %s the claim is %+v (%v), want Since the dead instance's claim, %v ago", id, r, err, ago)
		}
	}
	f := newSlack(t, rec, store, sinceConfig("replica-b")) // B restarted: its own claim
	mustUpsert(t, f.n, msg(ch, key, 2))
	run(t, f.n)
	onlyDeadRoot(t, rec, store, ch, key, rootTS)
}

// Attacker (b): two live replicas race for the dead instance's claim over
// one KV store, and each fails its first looks (so each may take the
// other's claim over after the lease, too). One root, the dead one's.
func TestReplicasRacingForATakenOverClaimPostOnce(t *testing.T) {
	const ch, key = "C0RACE", "inc-race"
	const ago = 10 * time.Minute
	rec := slackrec.New(t, slackrec.WithRate(50, 10))
	e := natstest.RunServer(t)
	store := kvStore(t, e, "notify_since_race")
	rootTS := deadRoot(t, rec, store, ch, key, ago)

	var fs []fixture
	for _, id := range []string{"replica-a", "replica-b"} {
		var looks atomic.Int32
		f := newSlackTap(t, rec, kvStore(t, e, "notify_since_race"), failLooks(methodHistory, 3, &looks), sinceConfig(id))
		mustUpsert(t, f.n, msg(ch, key, 2))
		fs = append(fs, f)
	}
	for _, f := range fs {
		run(t, f.n)
	}
	waitUntil(t, "both replicas done", func() bool { return fs[0].n.Pending() == 0 && fs[1].n.Pending() == 0 })
	onlyDeadRoot(t, rec, store, ch, key, rootTS)
}

// Attacker (d): a reply the dead instance posted ten minutes ago under a
// recorded root, its claim left without ts; A takes the claim over and
// fails every look in the thread, then stops; B takes A's claim over.
func TestTakenOverReplyIsFoundAfterFailedLooks(t *testing.T) {
	const ch, key = "C0REPLYDF", "inc-reply-double"
	const ago = 10 * time.Minute
	rec := slackrec.New(t, slackrec.WithRate(50, 10))
	store := kvStore(t, natstest.RunServer(t), "notify_since_reply")
	dead := NewSlackClient("xoxb-test-token", rec.APIURL(), http.DefaultClient)
	_, rootTS, err := dead.PostMessageContext(t.Context(), ch, options(key+" v1", nil, formFull, false, "", metadata(key, ""))...)
	if err != nil {
		t.Fatal(err)
	}
	_, replyTS, err := dead.PostMessageContext(t.Context(), ch, options("r1", nil, formFull, false, rootTS, metadata(key, "r1"))...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Create(t.Context(), rootID(key), Record{Channel: ch, TS: rootTS, Version: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Create(t.Context(), replyID(key, "r1"), Record{Channel: ch, Owner: "dead", Claimed: time.Now().Add(-ago)}); err != nil {
		t.Fatal(err)
	}

	var looks atomic.Int32
	a := newSlackTap(t, rec, store, failLooks(methodReplies, -1, &looks), sinceConfig("replica-a"))
	mustReply(t, a.n, reply(ch, key, "r1"))
	stop := run(t, a.n)
	waitUntil(t, "A taking the reply's claim over and failing to look", func() bool {
		r, _, err := store.Get(t.Context(), replyID(key, "r1"))
		return looks.Load() >= 1 && err == nil && r.Owner == "replica-a"
	})
	stop()
	if r, _, err := store.Get(t.Context(), replyID(key, "r1")); err != nil || time.Since(r.Since) < ago-time.Minute {
		t.Errorf("the reply's claim after A = %+v (%v), want Since the dead instance's claim", r, err)
	}

	b := newSlack(t, rec, store, sinceConfig("replica-b"))
	mustReply(t, b.n, reply(ch, key, "r1"))
	mustReply(t, b.n, reply(ch, key, "r2"))
	run(t, b.n)
	waitUntil(t, "r2 posted", func() bool { return len(replyTexts(rec, ch, rootTS)) >= 2 })
	if got := replyTexts(rec, ch, rootTS); len(got) != 2 || got[0] != "r1" || got[1] != "r2" {
		t.Errorf("thread = %q, want [r1 r2]: r1 once", got)
	}
	if r, _, err := store.Get(t.Context(), replyID(key, "r1")); err != nil || r.TS != replyTS {
		t.Errorf("r1's record = %+v (%v), want ts %s", r, err, replyTS)
	}
}

// Attacker (e): a replica takes the dead leader's claim over while it
// leads, fails to look, and has lost the lease by its next attempt, so it
// drops the root and leaves the claim (renewed by it) for the leader. The
// leader takes it over after the lease and must look from the dead
// instance's claim, not from the follower's renewal.
func TestLeaderOnlyClaimLeftByAFollowerKeepsTheFirstClaim(t *testing.T) {
	const ch, key, ago = "C0LEADSINCE", "inc-lead-since", deadAgo
	rec, store, rootTS := deadRootKV(t, "notify_since_leader", ch, key)

	var asked, looks atomic.Int32
	follower := newSlackTap(t, rec, store, failLooks(methodHistory, -1, &looks), func(c *SlackConfig) {
		sinceConfig("follower")(c)
		c.Leading = func() bool { return asked.Add(1) <= 2 } // both looks of the first attempt
	})
	mustUpsert(t, follower.n, leaderOnly(ch, key, 2))
	run(t, follower.n)
	waitUntil(t, "the follower dropping the root", func() bool {
		return counter(t, follower.reg, "hcpbot_slack_not_leading_total", nil) == 1 && follower.n.Pending() == 0
	})
	r, _, err := store.Get(t.Context(), rootID(key))
	if err != nil || r.Owner != "follower" || looks.Load() < 1 {
		t.Fatalf("claim after the follower = %+v (%v), %d looks; want the follower's, after a failed look", r, err, looks.Load())
	}

	leader := newSlack(t, rec, store, sinceConfig("leader"))
	mustUpsert(t, leader.n, leaderOnly(ch, key, 2))
	run(t, leader.n)
	onlyDeadRoot(t, rec, store, ch, key, rootTS)
}
