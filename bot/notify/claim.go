package notify

import (
	"context"
	"errors"
	"time"
)

// The store side of delivery: claims (who may post a root or reply) and
// records (its ts once posted). See "One root per Key" in doc.go.

// storeFailed backs one key off after a store error: without the store we
// cannot tell whether a root exists, and guessing would post duplicates.
func (q *chanQueue) storeFailed(k *keyQ, now time.Time, err error) {
	q.mu.Lock()
	k.storeFails++
	d := backoff(k.storeFails, q.s.cfg.BackoffBase, q.s.cfg.BackoffMax)
	k.notBefore = now.Add(d)
	q.mu.Unlock()
	q.s.log.Warn().Err(err).Str("key", k.key).Dur("backoff", d).Msg("notify store failed: retrying")
}

// claim creates a claim record at id, or renews / takes over the one at
// revision rev. It returns the claim's revision, or lost when another
// instance got there first.
func (q *chanQueue) claim(ctx context.Context, id, channel string, rev uint64) (newRev uint64, lost bool, err error) {
	r := Record{Channel: channel, Owner: q.s.cfg.InstanceID, Claimed: time.Now()}
	if rev == 0 {
		newRev, err = q.s.store.Create(ctx, id, r)
	} else {
		newRev, err = q.s.store.Update(ctx, id, r, rev)
	}
	if errors.Is(err, ErrExists) || errors.Is(err, ErrConflict) {
		return 0, true, nil
	}
	return newRev, false, err
}

// release gives up a claim after Slack definitely refused the post, so
// another instance need not wait for the lease.
func (q *chanQueue) release(ctx context.Context, id string, rev uint64) {
	if err := q.s.store.Delete(ctx, id, rev); err != nil {
		q.s.log.Debug().Err(err).Msg("releasing claim failed; it will expire")
	}
}

// claimed is how a claim ended.
type claimed struct {
	rev    uint64        // the claim's revision: ours to post; 0 for a post without record
	lost   bool          // another instance got there first: look again
	posted bool          // the record has its ts: posted already
	wait   time.Duration // another live instance holds the claim: look again then
	// takenOver: the claim was made before, at since, by this instance's
	// earlier attempt or one presumed dead; its post may have landed.
	takenOver bool
	since     time.Time
}

// claimRoot claims k's root: creates the claim, or renews / takes over
// the one resolve found (k.claimRev). Lost, k is looked up again.
func (q *chanQueue) claimRoot(ctx context.Context, k *keyQ, channel string) (claimed, error) {
	c := claimed{takenOver: k.claimRev != 0, since: k.claimedAt}
	rev, lost, err := q.claim(ctx, rootID(k.key), channel, k.claimRev)
	now := time.Now()
	switch {
	case err != nil:
		return claimed{}, err
	case lost:
		q.mu.Lock()
		k.state, k.claimRev = rootUnknown, 0
		q.mu.Unlock()
		return claimed{lost: true}, nil
	}
	q.mu.Lock()
	k.claimRev, k.claimedAt = rev, now
	q.mu.Unlock()
	c.rev = rev
	return c, nil
}

// claimReply claims reply record id. A reply has no look-up step of its
// own (resolve is the root's): a lost create is inspected at once.
func (q *chanQueue) claimReply(ctx context.Context, id, channel string) (claimed, error) {
	rev, lost, err := q.claim(ctx, id, channel, 0)
	if err != nil || !lost {
		return claimed{rev: rev}, err
	}
	rec, cur, err := q.s.store.Get(ctx, id)
	switch {
	case errors.Is(err, ErrNotFound):
		return claimed{lost: true}, nil
	case err != nil:
		return claimed{}, err
	case rec.TS != "":
		return claimed{posted: true}, nil
	case rec.Owner != q.s.cfg.InstanceID && time.Since(rec.Claimed) < q.s.cfg.ClaimLease:
		return claimed{wait: q.s.cfg.ClaimPoll}, nil
	}
	rev, lost, err = q.claim(ctx, id, channel, cur)
	return claimed{rev: rev, lost: lost, takenOver: !rec.Claimed.IsZero(), since: rec.Claimed}, err
}

// save records a delivered root at revision rev (0: create), merging with
// what another instance wrote meanwhile: a claim is overwritten, a newer
// version is kept, and a different ts means two roots were posted (see
// deliver); the stored one wins so that all instances update the same
// message. It returns the record in force.
func (q *chanQueue) save(ctx context.Context, key string, rec Record, rev uint64, posted bool) Record {
	id := rootID(key)
	var err error
	for attempt := 1; attempt <= 5; attempt++ {
		if rev == 0 {
			_, err = q.s.store.Create(ctx, id, rec)
		} else {
			_, err = q.s.store.Update(ctx, id, rec, rev)
		}
		if err == nil {
			return rec
		}
		if !errors.Is(err, ErrExists) && !errors.Is(err, ErrConflict) {
			if !sleepCtx(ctx, backoff(attempt, 50*time.Millisecond, time.Second)) {
				break
			}
			continue
		}
		cur, curRev, gerr := q.s.store.Get(ctx, id)
		switch {
		case errors.Is(gerr, ErrNotFound):
			rev = 0
			continue
		case gerr != nil:
			err = gerr
			continue
		case cur.TS == "":
			// A claim taken over while our post was in flight.
		case cur.TS != rec.TS:
			if posted {
				q.s.m.duplicateRoots.Inc()
				q.s.log.Error().Str("key", key).Str("ts", rec.TS).Str("stored_ts", cur.TS).
					Msg("root posted twice: another instance took over the claim; keeping the stored one")
			}
			return cur
		case cur.Version >= rec.Version:
			return cur
		}
		rev = curRev
	}
	q.s.log.Error().Err(err).Str("key", key).Str("ts", rec.TS).
		Msg("could not record the root in the store; a restarted instance may post it again")
	return rec
}
