package notify

import (
	"context"
	"errors"
	"time"

	"github.com/rs/zerolog"
	"github.com/slack-go/slack"
)

// Delivery of one Key, in the order an Upsert meets it: resolve looks its
// root up in the store; deliver posts the root (rootPost) and later its
// replies (replyPost), one sequence for both; updateRoot sends newer
// renderings of a root that exists. The record-keeping (claims, finding
// a lost post, the ts) is the ledger's (ledger.go), the Slack call in
// call.go.

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

// resolve looks up k's root in the store.
func (q *chanQueue) resolve(ctx context.Context, k *keyQ) {
	actx, cancel := q.attemptCtx(ctx)
	defer cancel()
	r, err := q.s.ledger.root(actx, k.key)
	now := time.Now()
	if err != nil {
		q.storeFailed(k, now, err)
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	k.storeFails = 0
	switch {
	case r.posted:
		k.state, k.channel, k.ts, k.version, k.claimRev = rootKnown, r.rec.Channel, r.rec.TS, r.rec.Version, 0
		k.awaitRoot, k.orphaned = false, time.Time{}
	case r.busy:
		k.notBefore = now.Add(q.s.cfg.ClaimPoll)
	default: // nobody posted it: claim it, or renew / take over r's claim
		k.claimRev, k.claimedAt = r.claimRev, r.claimedAt
		q.absent(k, now)
	}
}

// absent notes that nobody posted k's root. With no rendering queued the
// replies wait for one, looking again now and then in case another
// instance posts it; those left behind a root dropped for want of the
// lease wait OrphanWait at most: the leader may never post that root.
func (q *chanQueue) absent(k *keyQ, now time.Time) {
	if k.upsert != nil {
		k.state = rootAbsent
		return
	}
	if !k.orphaned.IsZero() && now.Sub(k.orphaned) >= q.s.cfg.OrphanWait {
		n := len(k.replies)
		for len(k.replies) > 0 {
			q.popReply(k, k.replies[0])
		}
		k.state, k.orphaned = rootUnknown, time.Time{}
		q.s.m.dropped.WithLabelValues(kindReply).Add(float64(n))
		q.s.log.Info().Str("key", k.key).Int("replies_dropped", n).Dur("waited", q.s.cfg.OrphanWait).
			Msg("no root for the replies behind a root dropped for want of the lease; dropped")
		return
	}
	k.state, k.awaitRoot, k.notBefore = rootUnknown, true, now.Add(q.s.cfg.ClaimPoll)
}

// A post is one chat.postMessage of a Key: its root, or a reply in the
// root's thread. Both take the same steps (deliver); what differs between
// a root and a reply is said here, by rootPost and replyPost, and in the
// ledger's record of it.
type post struct {
	kind     string // kindRoot or kindReply: the metrics' label
	key      string
	channel  string
	threadTS string // a reply's root
	// replyID is a reply's ID, carried in the post's metadata and naming
	// its record; a reply without ID has none.
	replyID string
	// leaderOnly: a root of Message.LeaderOnly, posted only while
	// leading.
	leaderOnly bool
	// A root's rendering, recorded with its ts so that it is not sent
	// again as an update.
	version uint64
	digest  string
	// A root's claim that resolve found, to renew or take over at
	// claimedAt; 0: create one.
	claimRev  uint64
	claimedAt time.Time
	text      string
	blocks    []slack.Block
	form      *form     // the queued item's: Slack refused a longer one
	since     time.Time // when it was queued
	log       zerolog.Logger

	// settle takes the item off the queue (q.mu held) and returns the
	// number of replies dropped with it.
	settle func(o postOutcome, rec Record) (orphans int)
}

// postOutcome is how a post ended, for its settle.
type postOutcome int

const (
	postFound      postOutcome = iota // an earlier attempt's post, now recorded
	postSent                          // posted and recorded
	postSkipped                       // the store says it was posted already
	postRefused                       // Slack refused it for good
	postNotLeading                    // a leader-only root, and the lease is lost
)

// deliver takes a post's steps: claim its record (first writer wins, so
// two replicas never both post), look for the post of a claim taken over
// (an attempt may have died after Slack accepted it), post, and record
// the ts. A step that cannot go on leaves the item queued; it is picked
// again.
func (q *chanQueue) deliver(ctx context.Context, k *keyQ, p post) {
	actx, cancel := q.attemptCtx(ctx)
	defer cancel()

	if p.leaderOnly && !q.s.leading() {
		q.notLeading(actx, p, claimed{})
		return
	}
	c, err := q.s.ledger.claim(actx, p)
	now := time.Now()
	if err == nil && p.kind == kindRoot {
		// Keep the claim for the next attempt; lost, k is looked up again.
		q.mu.Lock()
		if c.lost {
			k.state, k.claimRev, k.createLost = rootUnknown, 0, true
		} else {
			// since, not now: a claim taken over keeps the time the
			// first one was made, for the next look if this one fails.
			k.claimRev, k.claimedAt = c.rev, c.since
		}
		q.mu.Unlock()
	}
	switch {
	case err != nil:
		q.storeFailed(k, now, err)
		return
	case c.posted:
		q.settle(p, postSkipped, Record{})
		q.s.m.deduplicated.Inc()
		return
	case c.wait > 0:
		q.mu.Lock()
		k.notBefore = now.Add(c.wait)
		q.mu.Unlock()
		return
	case c.lost:
		return
	}

	if c.takenOver {
		ts, method, err := q.s.ledger.find(actx, p, c.since)
		if err != nil {
			q.failed(time.Now(), method, k.key, err)
			return
		}
		if ts != "" {
			q.settle(p, postFound, q.s.ledger.record(actx, p, ts, c.rev, false))
			q.s.m.recovered.Inc()
			p.log.Info().Str("ts", ts).Msg("found the post of an earlier attempt; not posting again")
			return
		}
	}
	if p.leaderOnly && !q.s.leading() {
		// The lease ran out while the claim was made: it may have been
		// written after the next leader looked for this root. (A claim
		// taken over was looked for first, so the one left holds no
		// post made before it.)
		q.notLeading(actx, p, c)
		return
	}

	if !q.post.take(time.Now()) { // pick saw a token; only this worker spends them
		return
	}
	ts, retry, err := call(actx, q.s.m, methodPost, func(ctx context.Context) (string, error) {
		_, ts, err := q.s.cfg.Client.PostMessageContext(ctx, p.channel,
			options(p.text, p.blocks, *p.form, false, p.threadTS, metadata(k.key, p.replyID))...)
		return ts, err
	})
	now = time.Now()
	q.s.posted(p.channel, err, now)
	switch {
	case err == nil:
		q.settle(p, postSent, q.s.ledger.record(actx, p, ts, c.rev, true))
		q.s.m.latency.WithLabelValues(p.kind).Observe(now.Sub(p.since).Seconds())
		q.succeeded()
		p.log.Debug().Str("channel", p.channel).Str("ts", ts).Msg("posted")
	case fallback(err, p.form):
		p.log.Warn().Err(err).Uint8("form", uint8(*p.form)).Msg("Slack refused the message (blocks or text over a limit); retrying shorter")
	case !retry:
		if c.rev != 0 {
			q.s.ledger.release(actx, p, c.rev)
		}
		orphans := q.settle(p, postRefused, Record{})
		q.s.m.dropped.WithLabelValues(p.kind).Inc()
		q.s.m.dropped.WithLabelValues(kindReply).Add(float64(orphans))
		refusedLog(p.log, err).Str("channel", p.channel).Int("replies_dropped", orphans).
			Msg("Slack refused the post for good; dropped")
	default:
		q.failed(now, methodPost, k.key, err)
	}
}

// notLeading drops a leader-only root (see "Leader-only messages" in
// doc.go): a replica that does not hold the lease claims no root of the
// correlator's, since the leader, which asks HasRoot when it takes over,
// may not have seen the claim and may fold the incident into a storm with
// no message of its own; a root posted now would stay as it is, never
// updated. A claim c this attempt just created is released (nothing was
// posted under it); one renewed or taken over stays, for the leader's
// notifier to take over after ClaimLease: deliver looked for an earlier
// attempt's post under it first, and the leader's look covers what may
// land from its renewal on. The replies queued behind the root
// wait for a root another instance posts (resolve, absent), as any
// replies without a rendering do; their IDs are claimed before posting,
// so a reply the leader queues again is posted once.
func (q *chanQueue) notLeading(ctx context.Context, p post, c claimed) {
	if c.rev != 0 && !c.takenOver {
		q.s.ledger.release(ctx, p, c.rev)
	}
	q.settle(p, postNotLeading, Record{})
	q.s.m.notLeading.WithLabelValues(kindRoot).Inc()
	p.log.Info().Bool("claimed", c.rev != 0).Msg("not holding the lease: the root is left to the leader; dropped")
}

// settle runs p.settle under the lock and counts posts for ReplyShare:
// a reply sent resets the count of roots posted since the last one.
func (q *chanQueue) settle(p post, o postOutcome, rec Record) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	if o == postSent {
		if p.kind == kindReply {
			q.postsSinceReply = 0
		} else {
			q.postsSinceReply++
		}
	}
	return p.settle(o, rec)
}

// rootPost is the post of k's root with rendering up, claimed where
// resolve left k (k.claimRev).
func (q *chanQueue) rootPost(k *keyQ, up *upsertItem) post {
	msg := up.msg
	return post{
		kind: kindRoot, key: k.key, channel: msg.Channel, leaderOnly: msg.LeaderOnly,
		version: msg.Version, digest: msg.Digest, claimRev: k.claimRev, claimedAt: k.claimedAt,
		text: msg.Text, blocks: msg.Blocks, form: &up.form, since: up.since,
		log: q.s.log.With().Str("key", k.key).Uint64("version", msg.Version).Logger(),
		settle: func(o postOutcome, rec Record) int {
			if o == postFound || o == postSent {
				k.state, k.channel, k.ts, k.version, k.claimRev = rootKnown, rec.Channel, rec.TS, rec.Version, 0
				if o == postSent {
					q.removeUpsert(k, up)
				}
				return 0
			}
			if o == postNotLeading {
				// The replies stay and wait for the leader's root,
				// OrphanWait at most (absent).
				k.state, k.claimRev = rootUnknown, 0
				if len(k.replies) > 0 {
					k.orphaned = time.Now()
				}
				q.removeUpsert(k, up)
				return 0
			}
			// Refused. The replies have nothing to hang under; a later
			// rendering of the Key tries again from scratch.
			k.state, k.claimRev = rootUnknown, 0
			q.removeUpsert(k, up)
			orphans := len(k.replies)
			for len(k.replies) > 0 {
				q.popReply(k, k.replies[0])
			}
			return orphans
		},
	}
}

// replyPost is the post of k's head reply rep into the root's thread.
func (q *chanQueue) replyPost(k *keyQ, rep *replyItem) post {
	r := rep.r
	return post{
		kind: kindReply, key: k.key, channel: k.channel, threadTS: k.ts, replyID: r.ID,
		text: r.Text, blocks: r.Blocks, form: &rep.form, since: rep.since,
		log: q.s.log.With().Str("key", k.key).Str("reply", r.ID).Logger(),
		settle: func(postOutcome, Record) int {
			q.popReply(k, rep)
			return 0
		},
	}
}

// updateRoot replaces the root's content with the newest rendering.
func (q *chanQueue) updateRoot(ctx context.Context, t task) {
	k, up := t.k, t.up
	msg := up.msg
	if msg.LeaderOnly && !q.s.leading() {
		// The leader renders it again when it takes over.
		q.mu.Lock()
		q.removeUpsert(k, up)
		q.mu.Unlock()
		q.s.m.notLeading.WithLabelValues(kindUpdate).Inc()
		q.s.log.Debug().Str("key", k.key).Uint64("version", msg.Version).Msg("not holding the lease: update dropped")
		return
	}
	actx, cancel := q.attemptCtx(ctx)
	defer cancel()

	// Read the record fresh: another instance may have delivered a newer
	// version meanwhile, and an older one must not overwrite it.
	channel, ts := k.channel, k.ts
	rec, rev, err := q.s.ledger.rootRecord(actx, k.key)
	switch {
	case errors.Is(err, ErrNotFound):
		rev = 0 // lost (TTL): what this process knows is all there is
	case err != nil:
		q.storeFailed(k, time.Now(), err)
		return
	case rec.TS != "":
		channel, ts = rec.Channel, rec.TS
		if rec.Version >= msg.Version {
			q.mu.Lock()
			k.channel, k.ts, k.version = channel, ts, rec.Version
			q.removeUpsert(k, up)
			q.mu.Unlock()
			q.s.m.coalesced.Inc()
			return
		}
		if msg.Digest != "" && rec.Digest == msg.Digest {
			// The message shows this already (a replay after a restart):
			// an update would change nothing but durations.
			q.mu.Lock()
			k.channel, k.ts = channel, ts
			q.removeUpsert(k, up)
			q.mu.Unlock()
			q.s.m.unchanged.Inc()
			return
		}
	}
	// Taken only now, so a stale rendering costs no budget. The budget is
	// shared with the other channels: the token pick saw may be gone.
	if !q.s.update.take(time.Now()) {
		return
	}

	_, retry, err := call(actx, q.s.m, methodUpdate, func(ctx context.Context) (string, error) {
		_, ts, _, err := q.s.cfg.Client.UpdateMessageContext(ctx, channel, ts,
			options(msg.Text, msg.Blocks, up.form, true, "")...)
		return ts, err
	})
	now := time.Now()
	q.s.posted(channel, err, now)
	if err == nil {
		saved := q.s.ledger.recordRoot(actx, k.key, Record{Channel: channel, TS: ts, Version: msg.Version, Digest: msg.Digest}, rev, false)
		q.mu.Lock()
		k.channel, k.ts, k.version = saved.Channel, saved.TS, max(saved.Version, msg.Version)
		q.removeUpsert(k, up)
		q.mu.Unlock()
		q.s.m.latency.WithLabelValues(kindUpdate).Observe(now.Sub(up.since).Seconds())
		q.succeeded()
		return
	}
	if fallback(err, &up.form) {
		q.s.log.Warn().Err(err).Str("key", k.key).Uint8("form", uint8(up.form)).Msg("Slack refused the message (blocks or text over a limit); retrying shorter")
		return
	}
	if !retry {
		// E.g. message_not_found: someone deleted the root. This rendering
		// is dropped; the next one tries again.
		q.mu.Lock()
		q.removeUpsert(k, up)
		q.mu.Unlock()
		q.s.m.dropped.WithLabelValues(kindUpdate).Inc()
		refusedLog(q.s.log, err).Str("key", k.key).Str("channel", channel).Uint64("version", msg.Version).
			Msg("Slack refused the update for good; dropped")
		return
	}
	q.failed(now, methodUpdate, k.key, err)
}

// refusedLog is the log event of an item Slack refused for good: an error,
// except when the channel refuses everything, which posted logged once
// for the channel.
func refusedLog(log zerolog.Logger, err error) *zerolog.Event {
	if unpostable(err) {
		return log.Debug().Err(err)
	}
	return log.Error().Err(err)
}
