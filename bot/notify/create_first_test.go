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

// answerLost is a store whose first root Create is written but answered
// with an error (a NATS timeout after the server stored it); or, with
// unwritten, not written either.
type answerLost struct {
	Store
	unwritten bool
	failed    atomic.Bool
}

func (s *answerLost) Create(ctx context.Context, id string, r Record) (uint64, error) {
	if strings.HasPrefix(id, "root.") && s.failed.CompareAndSwap(false, true) {
		if !s.unwritten {
			if _, err := s.Store.Create(ctx, id, r); err != nil {
				return 0, err
			}
		}
		return 0, errors.New("nats: timeout")
	}
	return s.Store.Create(ctx, id, r)
}

// A new Key's root is claimed by create first (no look-up before it).
// A store failure on that create, written or not, leaves one root: the
// claim written under a lost answer is this instance's own, renewed and
// posted once (its post looked for first); one not written is created
// again.
func TestCreateFirstStoreFailureOneRoot(t *testing.T) {
	for _, unwritten := range []bool{false, true} {
		name := "written, answer lost"
		if unwritten {
			name = "not written"
		}
		t.Run(name, func(t *testing.T) {
			const ch, key = "C0CREATE", "inc-create-first"
			rec := slackrec.New(t, slackrec.WithRate(50, 10))
			store := &answerLost{Store: kvStore(t, natstest.RunServer(t), "notify_create_first"), unwritten: unwritten}
			f := newSlack(t, rec, store, func(c *SlackConfig) {
				c.BackoffBase, c.BackoffMax, c.ClaimPoll = 10*time.Millisecond, 50*time.Millisecond, 20*time.Millisecond
			})
			mustUpsert(t, f.n, msg(ch, key, 1))
			mustReply(t, f.n, reply(ch, key, "r1"))
			run(t, f.n)
			waitUntil(t, "the root and its reply posted", func() bool {
				rs := roots(rec, ch)[key]
				return len(rs) > 0 && len(replyTexts(rec, ch, rs[0].TS)) == 1
			})
			if !store.failed.Load() {
				t.Fatal("the create did not fail")
			}
			if got := len(roots(rec, ch)[key]); got != 1 {
				t.Errorf("%d roots for %s, want 1", got, key)
			}
			stored, _, err := store.Get(t.Context(), rootID(key))
			if err != nil || stored.TS != roots(rec, ch)[key][0].TS {
				t.Errorf("stored root = %+v (%v), want the one posted", stored, err)
			}
		})
	}
}
