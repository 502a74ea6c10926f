package notify

import (
	"errors"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
)

func TestStores(t *testing.T) {
	stores := map[string]func(t *testing.T) Store{
		"memory": func(*testing.T) Store { return NewMemoryStore() },
		"nats-kv": func(t *testing.T) Store {
			return kvStore(t, natstest.RunServer(t), "notify_contract")
		},
	}
	for name, mk := range stores {
		t.Run(name, func(t *testing.T) {
			s, ctx := mk(t), testContext(t)
			id := rootID("inc-1 with spaces/and*odd>chars")
			if _, _, err := s.Get(ctx, id); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Get of nothing: %v", err)
			}
			rev, err := s.Create(ctx, id, Record{Channel: "C1", Owner: "A", Claimed: time.Now()})
			if err != nil {
				t.Fatalf("Create: %v", err)
			}
			if _, err := s.Create(ctx, id, Record{Owner: "B"}); !errors.Is(err, ErrExists) {
				t.Fatalf("second Create: %v, want ErrExists", err)
			}
			rev2, err := s.Update(ctx, id, Record{Channel: "C1", TS: "1.1", Version: 3}, rev)
			if err != nil {
				t.Fatalf("Update: %v", err)
			}
			if _, err := s.Update(ctx, id, Record{TS: "2.2"}, rev); !errors.Is(err, ErrConflict) {
				t.Fatalf("stale Update: %v, want ErrConflict", err)
			}
			got, gotRev, err := s.Get(ctx, id)
			if err != nil || gotRev != rev2 || got.TS != "1.1" || got.Version != 3 || got.Channel != "C1" {
				t.Fatalf("Get = %+v rev %d (%v), want ts 1.1 v3 rev %d", got, gotRev, err, rev2)
			}
			if err := s.Delete(ctx, id, rev); !errors.Is(err, ErrConflict) {
				t.Fatalf("stale Delete: %v, want ErrConflict", err)
			}
			if err := s.Delete(ctx, id, rev2); err != nil {
				t.Fatalf("Delete: %v", err)
			}
			if _, _, err := s.Get(ctx, id); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Get after Delete: %v", err)
			}
			if _, err := s.Create(ctx, id, Record{Owner: "C"}); err != nil {
				t.Fatalf("Create after Delete: %v", err)
			}
		})
	}
}

// A claim left by an instance that died mid-post blocks the key for the
// lease, then is taken over; replies wait for the root meanwhile.
func TestDeadInstanceClaimIsTakenOverAfterLease(t *testing.T) {
	const ch, key = "C0LEASE", "inc-orphan"
	rec := slackrec.New(t, slackrec.WithRate(50, 10))
	store := NewMemoryStore()
	lease := 500 * time.Millisecond
	claimed := time.Now()
	if _, err := store.Create(t.Context(), rootID(key), Record{Channel: ch, Owner: "dead", Claimed: claimed}); err != nil {
		t.Fatal(err)
	}
	f := newSlack(t, rec, store, func(c *SlackConfig) {
		c.PostRate, c.ClaimLease, c.ClaimPoll = 20, lease, 20*time.Millisecond
	})
	mustUpsert(t, f.n, msg(ch, key, 1))
	mustReply(t, f.n, reply(ch, key, "r1"))
	run(t, f.n)
	waitUntil(t, "root and reply", func() bool {
		r := roots(rec, ch)[key]
		return len(r) == 1 && len(replyTexts(rec, ch, r[0].TS)) == 1
	})
	posted := rec.CallsTo("chat.postMessage")[0].Time
	t.Logf("root posted %v after the dead claim (lease %v)", posted.Sub(claimed).Round(time.Millisecond), lease)
	if posted.Sub(claimed) < lease {
		t.Errorf("root posted %v after the claim, before the lease of %v ran out", posted.Sub(claimed), lease)
	}
	rec2, _, err := store.Get(t.Context(), rootID(key))
	if err != nil || rec2.TS != roots(rec, ch)[key][0].TS || rec2.Owner != "" {
		t.Errorf("stored record = %+v (%v)", rec2, err)
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		name    string
		err     error
		retry   bool
		outcome string
	}{
		{"429", &slackRateLimited, true, outcomeRateLimited},
		{"500", slackStatus(500), true, outcomeRetry},
		{"503", slackStatus(503), true, outcomeRetry},
		{"404", slackStatus(404), false, outcomePermanent},
		{"channel_not_found", slackCode("channel_not_found"), false, outcomePermanent},
		{"not_in_channel", slackCode("not_in_channel"), false, outcomePermanent},
		{"invalid_blocks", slackCode("invalid_blocks"), false, outcomePermanent},
		{"internal_error", slackCode("internal_error"), true, outcomeRetry},
		{"network", errors.New("dial tcp: connection refused"), true, outcomeRetry},
	}
	for _, tt := range tests {
		retry, outcome := classify(tt.err)
		if retry != tt.retry || outcome != tt.outcome {
			t.Errorf("%s: classify = %v %s, want %v %s", tt.name, retry, outcome, tt.retry, tt.outcome)
		}
	}
}

func TestUpsertAndReplyValidateAndBound(t *testing.T) {
	rec := slackrec.New(t)
	f := newSlack(t, rec, nil, func(c *SlackConfig) { c.MaxPendingReplies = 2 })
	for _, m := range []Message{
		{Channel: "C", Text: "x", Version: 1}, {Key: "k", Text: "x", Version: 1},
		{Key: "k", Channel: "C", Version: 1}, {Key: "k", Channel: "C", Text: "x"},
	} {
		if err := f.n.Upsert(t.Context(), m); !errors.Is(err, ErrInvalid) {
			t.Errorf("Upsert(%+v) = %v, want ErrInvalid", m, err)
		}
	}
	mustReply(t, f.n, reply("C", "k", "1"))
	mustReply(t, f.n, reply("C", "k", "2"))
	if err := f.n.Reply(t.Context(), reply("C", "k", "3")); !errors.Is(err, ErrQueueFull) {
		t.Errorf("third reply: %v, want ErrQueueFull", err)
	}
}

// HasRoots answers as HasRoot does, key by key, from one listing of the
// store's roots: a claim counts, a deleted root does not, a reply is no
// root. Delivered holds only once the root shows the digest asked and
// every reply asked has been posted.
func TestHasRootsAndDelivered(t *testing.T) {
	stores := map[string]func(t *testing.T) Store{
		"memory":  func(*testing.T) Store { return NewMemoryStore() },
		"nats-kv": func(t *testing.T) Store { return kvStore(t, natstest.RunServer(t), "notify_roots") },
	}
	for name, mk := range stores {
		t.Run(name, func(t *testing.T) {
			st, ctx := mk(t), testContext(t)
			s, err := NewSlack(SlackConfig{Client: NewSlackClient("xoxb-test", slackrec.New(t).APIURL(), nil), Store: st})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := st.Create(ctx, rootID("posted"), Record{Channel: "C1", TS: "1.1", Digest: "d1"}); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Create(ctx, rootID("claimed"), Record{Owner: "A", Claimed: time.Now()}); err != nil {
				t.Fatal(err)
			}
			rev, err := st.Create(ctx, rootID("deleted"), Record{Owner: "A", Claimed: time.Now()})
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Delete(ctx, rootID("deleted"), rev); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Create(ctx, replyID("reply-only", "r1"), Record{Channel: "C1", TS: "1.2"}); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Create(ctx, replyID("posted", "r1"), Record{Channel: "C1", TS: "1.3"}); err != nil {
				t.Fatal(err)
			}
			keys := []string{"posted", "claimed", "deleted", "reply-only", "never"}
			got, err := s.HasRoots(ctx, keys)
			if err != nil {
				t.Fatal(err)
			}
			for i, k := range keys {
				want, err := s.HasRoot(ctx, k)
				if err != nil || got[i] != want || want != (k == "posted" || k == "claimed") {
					t.Errorf("HasRoots[%s] = %v, HasRoot %v (%v)", k, got[i], want, err)
				}
			}
			for _, c := range []struct {
				key, digest string
				replies     []string
				want        bool
			}{
				{"posted", "d1", []string{"r1"}, true},
				{"posted", "d1", nil, true},
				{"posted", "d2", nil, false},                  // shows another rendering
				{"posted", "d1", []string{"r1", "r2"}, false}, // r2 not posted
				{"claimed", "", nil, false},                   // a claim is no delivery
				{"never", "d1", nil, false},
			} {
				if d, err := s.Delivered(ctx, c.key, c.digest, c.replies); err != nil || d != c.want {
					t.Errorf("Delivered(%s, %s, %v) = %v (%v), want %v", c.key, c.digest, c.replies, d, err, c.want)
				}
			}
		})
	}
}
