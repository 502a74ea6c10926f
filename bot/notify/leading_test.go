package notify

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
)

// leaderOnly is msg marked as the correlator marks its incidents and
// storms.
func leaderOnly(channel, key string, v uint64) Message {
	m := msg(channel, key, v)
	m.LeaderOnly = true
	return m
}

// A replica that does not hold the lease posts no root of the
// correlator's: the leader, taking over, asked HasRoot and found none, and
// may have folded the incident into a storm; a root posted now would be a
// message nobody updates. It claims nothing either (HasRoot stays false),
// while the roots of digests, refusals and outcomes (not LeaderOnly) go
// out from whichever replica runs them. The replies queued behind the
// dropped root wait for the root another instance posts, and a reply the
// leader queues again under the same ID is posted once.
func TestLeaderOnlyRootsWaitForTheLease(t *testing.T) {
	const ch = "C0LEASE"
	ctx := testContext(t)
	srv := natstest.RunServer(t)
	rec := slackrec.New(t, slackrec.WithRate(50, 10))
	fast := func(c *SlackConfig) {
		c.PostRate, c.PostBurst = 50, 10
		c.BackoffBase, c.BackoffMax, c.ClaimPoll = 10*time.Millisecond, 50*time.Millisecond, 20*time.Millisecond
	}
	old := newSlack(t, rec, kvStore(t, srv, "notify_lease"), func(c *SlackConfig) {
		fast(c)
		c.Leading = func() bool { return false }
	})
	mustUpsert(t, old.n, leaderOnly(ch, "inc-old", 1))
	mustReply(t, old.n, reply(ch, "inc-old", "evidence-1"))
	others := []string{"digest-daily", "refusals-2026-12-06", "outcome-p1"}
	for _, key := range others {
		mustUpsert(t, old.n, msg(ch, key, 1))
	}
	run(t, old.n)
	waitUntil(t, "the other roots posted and the incident's dropped", func() bool {
		return len(roots(rec, ch)) == len(others) &&
			counter(t, old.reg, "hcpbot_slack_not_leading_total", map[string]string{"kind": kindRoot}) == 1
	})
	if rs := roots(rec, ch)["inc-old"]; len(rs) != 0 {
		t.Fatalf("a replica not holding the lease posted the incident's root: %+v", rs)
	}
	if ok, err := old.n.HasRoot(ctx, "inc-old"); err != nil || ok {
		t.Fatalf("HasRoot(inc-old) = %v, %v after the drop; want false: nothing claimed", ok, err)
	}

	// The leader posts the root and queues the evidence again, and more.
	leader := newSlack(t, rec, kvStore(t, srv, "notify_lease"), func(c *SlackConfig) {
		fast(c)
		c.Leading = func() bool { return true }
	})
	mustUpsert(t, leader.n, leaderOnly(ch, "inc-old", 2))
	mustReply(t, leader.n, reply(ch, "inc-old", "evidence-1"))
	mustReply(t, leader.n, reply(ch, "inc-old", "evidence-2"))
	run(t, leader.n)
	waitUntil(t, "the leader's root and both replies", func() bool {
		rs := roots(rec, ch)["inc-old"]
		return len(rs) == 1 && len(replyTexts(rec, ch, rs[0].TS)) >= 2 && old.n.Pending() == 0
	})
	rs := roots(rec, ch)["inc-old"]
	if !strings.HasPrefix(rs[0].Text, "inc-old v2") {
		t.Errorf("the root shows %q, want the leader's v2", rs[0].Text)
	}
	seen := map[string]int{}
	for _, r := range replyTexts(rec, ch, rs[0].TS) {
		seen[r]++
	}
	if seen["evidence-1"] != 1 || seen["evidence-2"] != 1 || len(seen) != 2 {
		t.Errorf("thread replies %v, want evidence-1 and evidence-2 once each", seen)
	}
	if n := len(roots(rec, ch)); n != len(others)+1 {
		t.Errorf("%d roots, want %d", n, len(others)+1)
	}

	// An update of the incident from the replica that does not lead is
	// dropped too: the leader renders it when it takes over.
	mustUpsert(t, old.n, leaderOnly(ch, "inc-old", 3))
	waitUntil(t, "the update dropped", func() bool {
		return counter(t, old.reg, "hcpbot_slack_not_leading_total", nil) == 2 && old.n.Pending() == 0
	})
	if n := okCalls(rec, "chat.update"); n != 0 {
		t.Errorf("%d chat.update calls, want none", n)
	}
}

// The lease may run out between the check and the claim: the claim may
// then be written after the next leader looked, so it is released and
// nothing posted. Leading answers true once (the check before the claim),
// false after (the check after it).
func TestLeaderOnlyClaimMadeAsTheLeaseRanOut(t *testing.T) {
	const ch, key = "C0LEASE2", "inc-lost-while-claiming"
	rec := slackrec.New(t, slackrec.WithRate(50, 10))
	store := kvStore(t, natstest.RunServer(t), "notify_lease_claim")
	var asked atomic.Int32
	f := newSlack(t, rec, store, func(c *SlackConfig) {
		c.Leading = func() bool { return asked.Add(1) == 1 }
	})
	mustUpsert(t, f.n, leaderOnly(ch, key, 1))
	run(t, f.n)
	waitUntil(t, "the root dropped", func() bool {
		return counter(t, f.reg, "hcpbot_slack_not_leading_total", nil) == 1 && f.n.Pending() == 0
	})
	if n := asked.Load(); n != 2 {
		t.Errorf("Leading asked %d times, want 2 (before and after the claim)", n)
	}
	if n := okCalls(rec, "chat.postMessage"); n != 0 {
		t.Errorf("%d posts, want none", n)
	}
	if _, _, err := store.Get(testContext(t), rootID(key)); !errors.Is(err, ErrNotFound) {
		t.Errorf("the claim made as the lease ran out was not released: %v", err)
	}
}

// A root claimed by another instance, its post in flight (a record
// without ts), counts as a root for HasRoot: a new leader taking over
// while the old one's claimed post is in flight keeps that incident's
// message, and the old one's post goes out (its claim was made while it
// led).
func TestHasRootCountsAClaimInFlight(t *testing.T) {
	ctx := testContext(t)
	store := NewMemoryStore()
	if _, err := store.Create(ctx, rootID("inc-in-flight"), Record{Channel: "C1", Owner: "old-leader", Claimed: time.Now()}); err != nil {
		t.Fatal(err)
	}
	f := newSlack(t, slackrec.New(t), store, nil)
	if ok, err := f.n.HasRoot(ctx, "inc-in-flight"); err != nil || !ok {
		t.Errorf("HasRoot of a claim in flight = %v, %v; want true", ok, err)
	}
}

// Roots queued behind the channel's post budget (Slack's one post a
// second) when the lease is lost are dropped when their turn comes, not
// posted, and leave no claim. Leading answers true for the first root's
// two looks (before and after its claim), false after: the lease is lost
// while the others wait for a token, whatever the machine's pace.
func TestLeaderOnlyRootsQueuedBehindThePaceWhenTheLeaseIsLost(t *testing.T) {
	const ch = "C0LEASE3"
	ctx := testContext(t)
	rec := slackrec.New(t)
	var asked atomic.Int32
	f := newSlack(t, rec, kvStore(t, natstest.RunServer(t), "notify_lease_pace"), func(c *SlackConfig) {
		c.PostRate, c.PostBurst = 1, 1
		c.Leading = func() bool { return asked.Add(1) <= 2 }
	})
	keys := []string{"inc-pace-1", "inc-pace-2", "inc-pace-3"}
	for _, key := range keys {
		mustUpsert(t, f.n, leaderOnly(ch, key, 1))
	}
	run(t, f.n)
	waitUntil(t, "the first root posted, the others dropped", func() bool {
		return counter(t, f.reg, "hcpbot_slack_not_leading_total", map[string]string{"kind": kindRoot}) == 2 && f.n.Pending() == 0
	})
	rs := roots(rec, ch) // round robin: which one went first is the queue's
	if len(rs) != 1 {
		t.Fatalf("%d roots posted, want the first alone", len(rs))
	}
	for _, key := range keys {
		if _, posted := rs[key]; posted {
			continue
		}
		if ok, err := f.n.HasRoot(ctx, key); err != nil || ok {
			t.Errorf("HasRoot(%s) = %v, %v; want false: dropped unclaimed", key, ok, err)
		}
	}
}

// A claim taken over (its holder presumed dead) as the lease runs out is
// not released: the dead holder's post may have landed. It is looked for
// first, as for any claim taken over, so the claim left holds no post
// made before it, and the leader's notifier, taking it over in turn,
// looks from then on. Leading answers true twice (the create that finds
// the claim, the take-over), false after.
func TestLeaderOnlyClaimTakenOverAsTheLeaseRanOut(t *testing.T) {
	const ch, key = "C0LEASE4", "inc-dead-claim"
	ctx := testContext(t)
	rec := slackrec.New(t, slackrec.WithRate(50, 10))
	store := kvStore(t, natstest.RunServer(t), "notify_lease_takeover")
	if _, err := store.Create(ctx, rootID(key), Record{Channel: ch, Owner: "dead-replica", Claimed: time.Now().Add(-time.Minute)}); err != nil {
		t.Fatal(err)
	}
	var asked atomic.Int32
	f := newSlack(t, rec, store, func(c *SlackConfig) {
		c.ClaimLease = 30 * time.Second
		c.Leading = func() bool { return asked.Add(1) <= 2 }
	})
	mustUpsert(t, f.n, leaderOnly(ch, key, 1))
	run(t, f.n)
	waitUntil(t, "the root dropped", func() bool {
		return counter(t, f.reg, "hcpbot_slack_not_leading_total", nil) == 1 && f.n.Pending() == 0
	})
	if n := okCalls(rec, "conversations.history"); n != 1 {
		t.Errorf("%d history look-ups, want 1: the dead holder's post is looked for before the drop", n)
	}
	if n := okCalls(rec, "chat.postMessage"); n != 0 {
		t.Errorf("%d posts, want none", n)
	}
	got, _, err := store.Get(ctx, rootID(key))
	if err != nil || got.TS != "" || got.Owner == "dead-replica" {
		t.Errorf("the claim left = %+v (%v), want this instance's, without ts", got, err)
	}
	if ok, err := f.n.HasRoot(ctx, key); err != nil || !ok {
		t.Errorf("HasRoot = %v, %v; want true: the claim stays for the leader to take over", ok, err)
	}
}

// The replies queued behind a leader-only root dropped for want of the
// lease wait for the leader's root, but not for ever: the leader may
// never post one for that Key (it folded the incident into a storm, or
// it healed unposted), and the replica that dropped it would otherwise
// keep them queued (counted against MaxPendingReplies) and look the Key
// up in the store every ClaimPoll for as long as it runs, one more Key
// per root dropped at each handover. After OrphanWait with no root and
// no new rendering they are dropped (hcpbot_slack_dropped_total{reply}).
func TestRepliesBehindADroppedRootDoNotWaitForEver(t *testing.T) {
	const ch, key = "C0ORPHAN", "inc-folded-into-a-storm"
	rec := slackrec.New(t, slackrec.WithRate(50, 10))
	store := &countingStore{Store: kvStore(t, natstest.RunServer(t), "notify_orphans")}
	f := newSlack(t, rec, store, func(c *SlackConfig) {
		c.ClaimPoll, c.OrphanWait = 20*time.Millisecond, 300*time.Millisecond
		c.Leading = func() bool { return false }
	})
	mustUpsert(t, f.n, leaderOnly(ch, key, 1))
	mustReply(t, f.n, reply(ch, key, "evidence-0"))
	run(t, f.n)
	waitUntil(t, "the root dropped", func() bool {
		return counter(t, f.reg, "hcpbot_slack_not_leading_total", nil) == 1
	})
	deadline := time.Now().Add(10 * time.Second)
	for f.n.Pending() != 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := f.n.Pending(); n != 0 {
		t.Fatalf("%d replies still queued 10 s after their root was dropped (%d store reads so far): nobody will post that root", n, store.gets.Load())
	}
	if n := counter(t, f.reg, "hcpbot_slack_dropped_total", map[string]string{"kind": kindReply}); n != 1 {
		t.Errorf("hcpbot_slack_dropped_total{reply} = %v, want 1", n)
	}
	reads := store.gets.Load()
	time.Sleep(200 * time.Millisecond)
	if n := store.gets.Load() - reads; n > 0 {
		t.Errorf("%d store reads after the replies were dropped", n)
	}
	if n := okCalls(rec, "chat.postMessage"); n != 0 {
		t.Errorf("%d posts, want none", n)
	}
}

// countingStore counts the reads of a store.
type countingStore struct {
	Store
	gets atomic.Int64
}

func (s *countingStore) Get(ctx context.Context, id string) (Record, uint64, error) {
	s.gets.Add(1)
	return s.Store.Get(ctx, id)
}
