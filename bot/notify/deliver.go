package notify

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/slack-go/slack"
)

// defaultRetryAfter is the pause after a 429 that came without a
// Retry-After header; Slack always sends one, so this is a safety net.
const defaultRetryAfter = 10 * time.Second

// transientCodes are Slack error codes (HTTP 200, "ok": false) worth
// retrying. Every other code is permanent: retrying channel_not_found,
// not_in_channel, invalid_blocks, is_archived, invalid_auth... forever
// would block the Key and never succeed.
var transientCodes = map[string]bool{
	"internal_error":      true,
	"fatal_error":         true,
	"service_unavailable": true,
	"request_timeout":     true,
	"ratelimited":         true,
	"team_added_to_org":   true,
}

// classify says, like alertmanager's notifiers, whether a failed call is
// worth retrying: 429s, 5xx, network errors and timeouts are; Slack's
// application errors and client-side encoding errors are not.
func classify(err error) (retry bool, outcome string) {
	if _, limited := retryAfter(err); limited {
		return true, outcomeRateLimited
	}
	var sc slack.StatusCodeError
	if errors.As(err, &sc) {
		return sc.Code >= http.StatusInternalServerError, outcomeFor(sc.Code >= http.StatusInternalServerError)
	}
	var se slack.SlackErrorResponse
	if errors.As(err, &se) {
		return transientCodes[se.Err], outcomeFor(transientCodes[se.Err])
	}
	if errorCode(err) == "invalid_blocks" {
		return false, outcomePermanent
	}
	return true, outcomeRetry
}

func outcomeFor(retry bool) string {
	if retry {
		return outcomeRetry
	}
	return outcomePermanent
}

// retryAfter returns how long Slack asked us to wait, if it did.
func retryAfter(err error) (time.Duration, bool) {
	var rl *slack.RateLimitedError
	if errors.As(err, &rl) {
		return max(rl.RetryAfter, time.Second), true
	}
	var sc slack.StatusCodeError
	if errors.As(err, &sc) && sc.Code == http.StatusTooManyRequests {
		return defaultRetryAfter, true
	}
	return 0, false
}

// errorCode is Slack's error code; blocks slack-go could not even encode
// count as invalid_blocks.
func errorCode(err error) string {
	var se slack.SlackErrorResponse
	if errors.As(err, &se) {
		return se.Err
	}
	var me *json.MarshalerError
	var ue *json.UnsupportedValueError
	var te *json.UnsupportedTypeError
	if errors.As(err, &me) || errors.As(err, &ue) || errors.As(err, &te) {
		return "invalid_blocks"
	}
	return ""
}

// attemptCtx bounds one attempt. It is detached from the worker's context
// so that stopping never abandons a call halfway: a post whose answer we
// dropped would leave a root this instance cannot record, and the next
// instance would post it again.
func (q *chanQueue) attemptCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), q.s.cfg.AttemptTimeout)
}

// call makes one Slack call and reports, like alertmanager's notifiers,
// whether a failure is worth retrying.
func (q *chanQueue) call(ctx context.Context, method string, fn func(context.Context) (string, error)) (ts string, retry bool, err error) {
	ts, err = fn(ctx)
	outcome := outcomeOK
	if err != nil {
		retry, outcome = classify(err)
	}
	q.s.m.calls.WithLabelValues(method, outcome).Inc()
	return ts, retry, err
}

// options renders a message for chat.postMessage or chat.update.
func options(text string, blocks []slack.Block, textOnly, update bool, threadTS string, extra ...slack.MsgOption) []slack.MsgOption {
	if text == "" {
		text = Truncate(PlainText(blocks), MaxSectionText)
	}
	if text == "" {
		text = "(no text)"
	}
	opts := []slack.MsgOption{slack.MsgOptionText(text, false)}
	switch {
	case !textOnly && len(blocks) > 0:
		opts = append(opts, slack.MsgOptionBlocks(blocks...))
	case update:
		// chat.update keeps what it is not sent: clear the old blocks, or
		// they would go on showing a stale rendering.
		opts = append(opts, slack.MsgOptionBlocks())
	}
	if threadTS != "" {
		opts = append(opts, slack.MsgOptionTS(threadTS))
	}
	return append(opts, extra...)
}

// fallback arranges a text-only retry of an item whose blocks Slack
// rejected; it is tried once.
func fallback(err error, blocks []slack.Block, textOnly *bool) bool {
	if errorCode(err) != "invalid_blocks" || len(blocks) == 0 || *textOnly {
		return false
	}
	*textOnly = true
	return true
}

// failed pauses the channel after a retryable failure: for a 429 exactly
// as long as Slack asked, also stopping the method's own budget (chat.update
// for the whole workspace); otherwise with capped, jittered backoff.
func (q *chanQueue) failed(now time.Time, method, key string, err error) {
	var until time.Time
	ev := q.s.log.Warn().Err(err).Str("method", method).Str("channel", q.channel).Str("key", key)
	if ra, limited := retryAfter(err); limited {
		until = now.Add(ra)
		q.s.m.retryAfter.Add(ra.Seconds())
		if method == methodUpdate {
			q.s.update.block(until)
		} else {
			q.post.block(until)
		}
		ev.Dur("retry_after", ra).Msg("Slack rate limit: pausing")
	} else {
		q.mu.Lock()
		q.failures++
		n := q.failures
		q.mu.Unlock()
		d := backoff(n, q.s.cfg.BackoffBase, q.s.cfg.BackoffMax)
		until = now.Add(d)
		ev.Int("failures", n).Dur("backoff", d).Msg("Slack call failed: retrying")
	}
	q.mu.Lock()
	if until.After(q.pausedUntil) {
		q.pausedUntil = until
	}
	q.mu.Unlock()
}

func (q *chanQueue) succeeded() {
	q.mu.Lock()
	q.failures = 0
	q.mu.Unlock()
}

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
	rec, rev, err := q.s.store.Get(actx, rootID(k.key))
	now := time.Now()
	if err != nil && !errors.Is(err, ErrNotFound) {
		q.storeFailed(k, now, err)
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	k.storeFails = 0
	switch {
	case err != nil: // not found
		k.claimRev = 0
		q.absent(k, now)
	case rec.TS != "":
		k.state, k.channel, k.ts, k.version, k.claimRev = rootKnown, rec.Channel, rec.TS, rec.Version, 0
		k.awaitRoot = false
	case rec.Owner == q.s.cfg.InstanceID || now.Sub(rec.Claimed) >= q.s.cfg.ClaimLease:
		// Our own claim from an attempt that failed, or one whose holder
		// is presumed dead: renew or take it over.
		k.claimRev, k.claimedAt = rev, rec.Claimed
		q.absent(k, now)
	default:
		// Another instance is posting this root; its ts will show up.
		k.notBefore = now.Add(q.s.cfg.ClaimPoll)
	}
}

// absent notes that nobody posted k's root. With no rendering queued the
// replies wait for one, looking again now and then in case another
// instance posts it.
func (q *chanQueue) absent(k *keyQ, now time.Time) {
	if k.upsert != nil {
		k.state = rootAbsent
		return
	}
	k.state, k.awaitRoot, k.notBefore = rootUnknown, true, now.Add(q.s.cfg.ClaimPoll)
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

// postRoot claims k's root and posts it.
//
// The claim (a Create in the shared store: first writer wins) is what
// keeps two instances from both posting; the ts is written right after
// the post. An instance that dies (or loses its answer) after Slack
// accepted the post leaves a claim without ts; whoever takes it over
// (after ClaimLease, or this instance on its next attempt) first looks
// for the post by its metadata (recover.go) and updates it instead of
// posting a second root.
func (q *chanQueue) postRoot(ctx context.Context, t task) {
	k, up := t.k, t.up
	msg := up.msg
	id := rootID(k.key)
	actx, cancel := q.attemptCtx(ctx)
	defer cancel()

	takeover, claimedAt := k.claimRev != 0, k.claimedAt
	rev, lost, err := q.claim(actx, id, msg.Channel, k.claimRev)
	now := time.Now()
	switch {
	case err != nil:
		q.storeFailed(k, now, err)
		return
	case lost:
		q.mu.Lock()
		k.state, k.claimRev = rootUnknown, 0
		q.mu.Unlock()
		return
	}
	q.mu.Lock()
	k.claimRev, k.claimedAt = rev, now
	q.mu.Unlock()
	if takeover {
		// The claim's post may have landed: find it before posting again.
		ts, err := q.findRoot(actx, msg.Channel, k.key, claimedAt)
		if err != nil {
			q.failed(time.Now(), methodHistory, k.key, err)
			return
		}
		if ts != "" {
			rec := q.save(actx, k.key, Record{Channel: msg.Channel, TS: ts}, rev, false)
			q.mu.Lock()
			k.state, k.channel, k.ts, k.version, k.claimRev = rootKnown, rec.Channel, rec.TS, rec.Version, 0
			q.mu.Unlock()
			q.s.m.recovered.Inc()
			q.s.log.Info().Str("key", k.key).Str("ts", ts).Msg("found the root an earlier attempt posted; updating it")
			return // the queued rendering goes out as an update
		}
	}
	if !q.post.take(now) { // pick saw a token; only this worker spends them
		return
	}

	ts, retry, err := q.call(actx, methodPost, func(ctx context.Context) (string, error) {
		_, ts, err := q.s.cfg.Client.PostMessageContext(ctx, msg.Channel,
			options(msg.Text, msg.Blocks, up.textOnly, false, "", metadata(k.key, ""))...)
		return ts, err
	})
	now = time.Now()
	if err == nil {
		rec := q.save(actx, k.key, Record{Channel: msg.Channel, TS: ts, Version: msg.Version, Digest: msg.Digest}, rev, true)
		q.mu.Lock()
		k.state, k.channel, k.ts, k.version, k.claimRev = rootKnown, rec.Channel, rec.TS, rec.Version, 0
		q.removeUpsert(k, up)
		q.postsSinceReply++
		q.mu.Unlock()
		q.s.m.latency.WithLabelValues(kindRoot).Observe(now.Sub(up.since).Seconds())
		q.succeeded()
		q.s.log.Debug().Str("key", k.key).Str("channel", msg.Channel).Str("ts", ts).Uint64("version", msg.Version).Msg("root posted")
		return
	}
	if fallback(err, msg.Blocks, &up.textOnly) {
		q.s.log.Warn().Err(err).Str("key", k.key).Msg("Slack rejected the blocks; retrying with text only")
		return
	}
	if !retry {
		q.release(actx, id, rev)
		q.mu.Lock()
		k.state, k.claimRev = rootUnknown, 0
		q.removeUpsert(k, up)
		dropped := len(k.replies)
		// The replies have nothing to hang under. A later rendering of the
		// Key tries again from scratch.
		for len(k.replies) > 0 {
			q.popReply(k, k.replies[0])
		}
		q.mu.Unlock()
		q.s.m.dropped.WithLabelValues(kindRoot).Inc()
		q.s.m.dropped.WithLabelValues(kindReply).Add(float64(dropped))
		q.s.log.Error().Err(err).Str("key", k.key).Str("channel", msg.Channel).Int("replies_dropped", dropped).
			Msg("Slack refused the root message for good; dropped")
		return
	}
	q.failed(now, methodPost, k.key, err)
}

// updateRoot replaces the root's content with the newest rendering.
func (q *chanQueue) updateRoot(ctx context.Context, t task) {
	k, up := t.k, t.up
	msg := up.msg
	actx, cancel := q.attemptCtx(ctx)
	defer cancel()

	// Read the record fresh: another instance may have delivered a newer
	// version meanwhile, and an older one must not overwrite it.
	channel, ts := k.channel, k.ts
	rec, rev, err := q.s.store.Get(actx, rootID(k.key))
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

	_, retry, err := q.call(actx, methodUpdate, func(ctx context.Context) (string, error) {
		_, ts, _, err := q.s.cfg.Client.UpdateMessageContext(ctx, channel, ts,
			options(msg.Text, msg.Blocks, up.textOnly, true, "")...)
		return ts, err
	})
	now := time.Now()
	if err == nil {
		saved := q.save(actx, k.key, Record{Channel: channel, TS: ts, Version: msg.Version, Digest: msg.Digest}, rev, false)
		q.mu.Lock()
		k.channel, k.ts, k.version = saved.Channel, saved.TS, max(saved.Version, msg.Version)
		q.removeUpsert(k, up)
		q.mu.Unlock()
		q.s.m.latency.WithLabelValues(kindUpdate).Observe(now.Sub(up.since).Seconds())
		q.succeeded()
		return
	}
	if fallback(err, msg.Blocks, &up.textOnly) {
		q.s.log.Warn().Err(err).Str("key", k.key).Msg("Slack rejected the blocks; retrying with text only")
		return
	}
	if !retry {
		// E.g. message_not_found: someone deleted the root. This rendering
		// is dropped; the next one tries again.
		q.mu.Lock()
		q.removeUpsert(k, up)
		q.mu.Unlock()
		q.s.m.dropped.WithLabelValues(kindUpdate).Inc()
		q.s.log.Error().Err(err).Str("key", k.key).Str("channel", channel).Uint64("version", msg.Version).
			Msg("Slack refused the update for good; dropped")
		return
	}
	q.failed(now, methodUpdate, k.key, err)
}

// save records a delivered root at revision rev (0: create), merging with
// what another instance wrote meanwhile: a claim is overwritten, a newer
// version is kept, and a different ts means two roots were posted (see
// postRoot); the stored one wins so that all instances update the same
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

// postReply posts the head reply of k into the root's thread.
func (q *chanQueue) postReply(ctx context.Context, t task) {
	k, rep := t.k, t.rep
	r := rep.r
	actx, cancel := q.attemptCtx(ctx)
	defer cancel()

	var id string
	var rev uint64
	if r.ID != "" {
		id = replyID(k.key, r.ID)
		var skip bool
		var wait time.Duration
		var err error
		var claimed time.Time
		rev, skip, wait, claimed, err = q.claimReply(actx, id, k.channel)
		now := time.Now()
		switch {
		case err != nil:
			q.storeFailed(k, now, err)
			return
		case skip:
			q.mu.Lock()
			q.popReply(k, rep)
			q.mu.Unlock()
			q.s.m.deduplicated.Inc()
			return
		case wait > 0:
			q.mu.Lock()
			k.notBefore = now.Add(wait)
			q.mu.Unlock()
			return
		case rev == 0:
			return // lost a race on the claim: look again
		}
		if !claimed.IsZero() {
			// A taken-over claim: its post may have landed.
			ts, err := q.findReply(actx, k.channel, k.ts, k.key, r.ID)
			if err != nil {
				q.failed(time.Now(), methodReplies, k.key, err)
				return
			}
			if ts != "" {
				if _, err := q.s.store.Update(actx, id, Record{Channel: k.channel, TS: ts}, rev); err != nil {
					q.s.log.Warn().Err(err).Str("key", k.key).Str("reply", r.ID).Msg("could not record the reply")
				}
				q.mu.Lock()
				q.popReply(k, rep)
				q.mu.Unlock()
				q.s.m.recovered.Inc()
				return
			}
		}
	}
	if !q.post.take(time.Now()) {
		return
	}

	ts, retry, err := q.call(actx, methodPost, func(ctx context.Context) (string, error) {
		_, ts, err := q.s.cfg.Client.PostMessageContext(ctx, k.channel,
			options(r.Text, r.Blocks, rep.textOnly, false, k.ts, metadata(k.key, r.ID))...)
		return ts, err
	})
	now := time.Now()
	if err == nil {
		if id != "" {
			if _, err := q.s.store.Update(actx, id, Record{Channel: k.channel, TS: ts}, rev); err != nil {
				// The claim stays: this instance is its owner and will not
				// post again; others wait a lease, then may (logged).
				q.s.log.Warn().Err(err).Str("key", k.key).Str("reply", r.ID).Msg("could not record the reply")
			}
		}
		q.mu.Lock()
		q.popReply(k, rep)
		q.postsSinceReply = 0
		q.mu.Unlock()
		q.s.m.latency.WithLabelValues(kindReply).Observe(now.Sub(rep.since).Seconds())
		q.succeeded()
		return
	}
	if fallback(err, r.Blocks, &rep.textOnly) {
		q.s.log.Warn().Err(err).Str("key", k.key).Str("reply", r.ID).Msg("Slack rejected the blocks; retrying with text only")
		return
	}
	if !retry {
		if id != "" {
			q.release(actx, id, rev)
		}
		q.mu.Lock()
		q.popReply(k, rep)
		q.mu.Unlock()
		q.s.m.dropped.WithLabelValues(kindReply).Inc()
		q.s.log.Error().Err(err).Str("key", k.key).Str("reply", r.ID).Msg("Slack refused the reply for good; dropped")
		return
	}
	q.failed(now, methodPost, k.key, err)
}

// claimReply claims reply record id. skip: it was posted already; wait:
// another live instance holds it; rev 0 without either: lost a race.
// claimed is set when an earlier claim was taken over: its time.
func (q *chanQueue) claimReply(ctx context.Context, id, channel string) (rev uint64, skip bool, wait time.Duration, claimed time.Time, err error) {
	rev, lost, err := q.claim(ctx, id, channel, 0)
	if err != nil || !lost {
		return rev, false, 0, time.Time{}, err
	}
	rec, cur, err := q.s.store.Get(ctx, id)
	switch {
	case errors.Is(err, ErrNotFound):
		return 0, false, 0, time.Time{}, nil
	case err != nil:
		return 0, false, 0, time.Time{}, err
	case rec.TS != "":
		return 0, true, 0, time.Time{}, nil
	case rec.Owner != q.s.cfg.InstanceID && time.Since(rec.Claimed) < q.s.cfg.ClaimLease:
		return 0, false, q.s.cfg.ClaimPoll, time.Time{}, nil
	}
	rev, _, err = q.claim(ctx, id, channel, cur)
	return rev, false, 0, rec.Claimed, err
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
