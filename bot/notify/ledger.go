package notify

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/slack-go/slack"
)

// The ledger is delivery's record-keeping, the part that makes one post
// per root and reply across restarts and replicas (see "One root per Key"
// in doc.go): it claims a record before a post (first writer wins, so two
// replicas never both post it), takes over a claim a dead replica left and
// looks for the post that replica may have made, remembers the ts Slack
// gave, and reads it back. The per-channel queue (chanQueue) calls it and
// keeps only what it learnt about its Keys.
type ledger struct {
	store  Store
	client SlackAPI // to find a post whose ts was never recorded
	m      *metrics
	log    zerolog.Logger
	owner  string        // this instance, in its claims
	lease  time.Duration // after this, another instance takes a claim over
	poll   time.Duration // how long to leave another instance's claim alone
}

// claim claims p's record (a reply without ID has none). A root's is the
// claim root found (p.claimRev) renewed or taken over, or a new one.
func (l *ledger) claim(ctx context.Context, p post) (claimed, error) {
	switch {
	case p.kind == kindRoot:
		return l.claimRoot(ctx, p.key, p.channel, p.claimRev, p.claimedAt)
	case p.replyID != "":
		return l.claimReply(ctx, replyID(p.key, p.replyID), p.channel)
	}
	return claimed{}, nil
}

// find looks for p in Slack, posted since a claim taken over was made:
// its ts, or "" if it is not there. method is the Slack method it used.
func (l *ledger) find(ctx context.Context, p post, since time.Time) (ts, method string, err error) {
	if p.kind == kindRoot {
		ts, err = l.findRoot(ctx, p.channel, p.key, since)
		return ts, methodHistory, err
	}
	ts, err = l.findReply(ctx, p.channel, p.threadTS, p.key, p.replyID)
	return ts, methodReplies, err
}

// record writes p's ts to its claim at rev: posted by this attempt, or
// found. It returns the record in force.
func (l *ledger) record(ctx context.Context, p post, ts string, rev uint64, posted bool) Record {
	rec := Record{Channel: p.channel, TS: ts}
	switch {
	case p.kind == kindRoot:
		if posted {
			// A post found shows what an earlier attempt rendered: no
			// version, so the queued rendering goes out as an update.
			rec.Version, rec.Digest = p.version, p.digest
		}
		return l.recordRoot(ctx, p.key, rec, rev, posted)
	case p.replyID != "":
		if _, err := l.store.Update(ctx, replyID(p.key, p.replyID), rec, rev); err != nil {
			// The claim stays: this instance is its owner and will not
			// post again; others wait a lease, then may (logged).
			p.log.Warn().Err(err).Msg("could not record the reply")
		}
		return rec
	}
	return Record{}
}

// release gives up p's claim at rev after Slack definitely refused the
// post, so another instance need not wait for the lease.
func (l *ledger) release(ctx context.Context, p post, rev uint64) {
	id := rootID(p.key)
	if p.kind != kindRoot {
		id = replyID(p.key, p.replyID)
	}
	if err := l.store.Delete(ctx, id, rev); err != nil {
		l.log.Debug().Err(err).Msg("releasing claim failed; it will expire")
	}
}

// rootLook is what the store says of a Key's root.
type rootLook struct {
	rec    Record // posted: the record with its ts
	posted bool
	busy   bool // another live instance holds the claim: its ts will show up
	// claimRev is a claim to renew (ours, from an attempt that failed) or
	// take over (its holder is presumed dead), made at claimedAt; 0: none,
	// create one.
	claimRev  uint64
	claimedAt time.Time
}

// root looks up key's root.
func (l *ledger) root(ctx context.Context, key string) (rootLook, error) {
	rec, rev, err := l.store.Get(ctx, rootID(key))
	switch {
	case errors.Is(err, ErrNotFound):
		return rootLook{}, nil
	case err != nil:
		return rootLook{}, err
	case rec.TS != "":
		return rootLook{rec: rec, posted: true}, nil
	case rec.Owner == l.owner || time.Since(rec.Claimed) >= l.lease:
		return rootLook{claimRev: rev, claimedAt: rec.claimSince()}, nil
	}
	return rootLook{busy: true}, nil
}

// rootID and replyID name records. Keys and reply ids come from the
// correlator and may hold characters NATS KV keys do not allow; a hash is
// always a valid key and of bounded length. 128 bits make collisions moot.
// The stores' rootLister knows the "root." prefix.
func rootID(key string) string { return "root." + digest(key) }

func replyID(key, id string) string { return "reply." + digest(key) + "." + digest(id) }

func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:16])
}

// rootRecord reads key's root record and its revision as they are, or
// ErrNotFound.
func (l *ledger) rootRecord(ctx context.Context, key string) (Record, uint64, error) {
	return l.store.Get(ctx, rootID(key))
}

// claimed is how a claim ended.
type claimed struct {
	rev    uint64        // the claim's revision: ours to post; 0 for a post without record
	lost   bool          // another instance got there first: look again
	posted bool          // the record has its ts: posted already
	wait   time.Duration // another live instance holds the claim: look again then
	// takenOver: made before this attempt (by an earlier one or a dead
	// instance), first at since (Record.Since); its post may have landed.
	takenOver bool
	since     time.Time
}

// claimRecord creates a claim record at id, or renews / takes over the
// one at revision rev, first made at since (zero: a new claim, made now).
// It returns the claim's revision and since, or lost when another instance
// got there first.
func (l *ledger) claimRecord(ctx context.Context, id, channel string, rev uint64, since time.Time) (newRev uint64, first time.Time, lost bool, err error) {
	r := Record{Channel: channel, Owner: l.owner, Claimed: time.Now(), Since: since}
	if r.Since.IsZero() {
		r.Since = r.Claimed
	}
	if rev == 0 {
		newRev, err = l.store.Create(ctx, id, r)
	} else {
		newRev, err = l.store.Update(ctx, id, r, rev)
	}
	if errors.Is(err, ErrExists) || errors.Is(err, ErrConflict) {
		return 0, time.Time{}, true, nil
	}
	return newRev, r.Since, false, err
}

// claimRoot claims key's root: creates the claim (rev 0), or renews /
// takes over the one root found at rev, first made at since.
func (l *ledger) claimRoot(ctx context.Context, key, channel string, rev uint64, since time.Time) (claimed, error) {
	if rev == 0 {
		since = time.Time{}
	}
	newRev, first, lost, err := l.claimRecord(ctx, rootID(key), channel, rev, since)
	switch {
	case err != nil:
		return claimed{}, err
	case lost:
		return claimed{lost: true}, nil
	}
	return claimed{rev: newRev, takenOver: rev != 0, since: first}, nil
}

// claimReply claims reply record id. A reply has no look-up step of its
// own (root is the root's): a lost create is inspected at once.
func (l *ledger) claimReply(ctx context.Context, id, channel string) (claimed, error) {
	rev, first, lost, err := l.claimRecord(ctx, id, channel, 0, time.Time{})
	if err != nil || !lost {
		return claimed{rev: rev, since: first}, err
	}
	rec, cur, err := l.store.Get(ctx, id)
	switch {
	case errors.Is(err, ErrNotFound):
		return claimed{lost: true}, nil
	case err != nil:
		return claimed{}, err
	case rec.TS != "":
		return claimed{posted: true}, nil
	case rec.Owner != l.owner && time.Since(rec.Claimed) < l.lease:
		return claimed{wait: l.poll}, nil
	}
	rev, first, lost, err = l.claimRecord(ctx, id, channel, cur, rec.claimSince())
	return claimed{rev: rev, lost: lost, takenOver: !rec.Claimed.IsZero(), since: first}, err
}

// recordRoot records a delivered root at revision rev (0: create), merging
// with what another instance wrote meanwhile: a claim is overwritten, a
// newer version is kept, and a different ts means two roots were posted
// (see deliver); the stored one wins so that all instances update the
// same message. It returns the record in force.
func (l *ledger) recordRoot(ctx context.Context, key string, rec Record, rev uint64, posted bool) Record {
	id := rootID(key)
	var err error
	for attempt := 1; attempt <= 5; attempt++ {
		if rev == 0 {
			_, err = l.store.Create(ctx, id, rec)
		} else {
			_, err = l.store.Update(ctx, id, rec, rev)
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
		cur, curRev, gerr := l.store.Get(ctx, id)
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
				l.m.duplicateRoots.Inc()
				l.log.Error().Str("key", key).Str("ts", rec.TS).Str("stored_ts", cur.TS).
					Msg("root posted twice: another instance took over the claim; keeping the stored one")
			}
			return cur
		case cur.Version >= rec.Version:
			return cur
		}
		rev = curRev
	}
	l.log.Error().Err(err).Str("key", key).Str("ts", rec.TS).
		Msg("could not record the root in the store; a restarted instance may post it again")
	return rec
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

// Slack has no idempotency key, so a post whose answer was lost (the
// instance died, or the call timed out after Slack accepted it) leaves a
// claim without ts in the store. Every post carries Slack message
// metadata naming its Key (and reply ID), and whoever takes such a claim
// over first looks for the post in the channel's history (roots) or the
// root's thread (replies): found, its ts is recorded and nothing is
// posted again. This needs the channels:history / groups:history scopes;
// without them the lookup fails and the post is retried later.

// metadataEvent is the event_type of the metadata on hcpbot's posts.
const metadataEvent = "hcpbot_notification"

// lookupPages bounds the history read by one lookup (200 messages each).
const lookupPages = 5

func metadata(key, reply string) slack.MsgOption {
	p := map[string]any{"key": key}
	if reply != "" {
		p["reply"] = reply
	}
	return slack.MsgOptionMetadata(slack.SlackMetadata{EventType: metadataEvent, EventPayload: p})
}

func carries(m slack.Message, key, reply string) bool {
	md := m.Metadata
	if md.EventType != metadataEvent || md.EventPayload["key"] != key {
		return false
	}
	got, _ := md.EventPayload["reply"].(string)
	return got == reply
}

// slackTS is t as a Slack timestamp ("seconds.micros").
func slackTS(t time.Time) string {
	return strconv.FormatInt(t.Unix(), 10) + fmt.Sprintf(".%06d", t.Nanosecond()/1000)
}

// findRoot returns the ts of key's root if one was posted to channel since
// the claim was made (with a minute of clock skew to spare), "" if not.
func (l *ledger) findRoot(ctx context.Context, channel, key string, claimed time.Time) (string, error) {
	params := &slack.GetConversationHistoryParameters{
		ChannelID: channel, Oldest: slackTS(claimed.Add(-time.Minute)), Limit: 200, IncludeAllMetadata: true,
	}
	for range lookupPages {
		var resp *slack.GetConversationHistoryResponse
		_, _, err := call(ctx, l.m, methodHistory, func(ctx context.Context) (string, error) {
			var err error
			resp, err = l.client.GetConversationHistoryContext(ctx, params)
			return "", err
		})
		if err != nil {
			return "", fmt.Errorf("look for the root of %q: %w", key, err)
		}
		for _, m := range resp.Messages {
			if carries(m, key, "") && (m.ThreadTimestamp == "" || m.ThreadTimestamp == m.Timestamp) {
				return m.Timestamp, nil
			}
		}
		if !resp.HasMore || resp.ResponseMetaData.NextCursor == "" {
			return "", nil
		}
		params.Cursor = resp.ResponseMetaData.NextCursor
	}
	return "", nil
}

// findReply returns the ts of reply id in the thread of rootTS, "" if it
// is not there.
func (l *ledger) findReply(ctx context.Context, channel, rootTS, key, id string) (string, error) {
	params := &slack.GetConversationRepliesParameters{ChannelID: channel, Timestamp: rootTS, Limit: 200, IncludeAllMetadata: true}
	for range lookupPages {
		var msgs []slack.Message
		var more bool
		var cursor string
		_, _, err := call(ctx, l.m, methodReplies, func(ctx context.Context) (string, error) {
			var err error
			msgs, more, cursor, err = l.client.GetConversationRepliesContext(ctx, params)
			return "", err
		})
		if err != nil {
			return "", fmt.Errorf("look for reply %q of %q: %w", id, key, err)
		}
		for _, m := range msgs {
			if carries(m, key, id) {
				return m.Timestamp, nil
			}
		}
		if !more || cursor == "" {
			return "", nil
		}
		params.Cursor = cursor
	}
	return "", nil
}

// Reading it back, for the correlator.

// hasRoots says which of keys have a root (HasRoots): a store that lists
// its roots is read once, and only the keys it lists are looked up one by
// one.
func (l *ledger) hasRoots(ctx context.Context, keys []string) ([]bool, error) {
	var listed map[string]bool
	if lister, ok := l.store.(rootLister); ok {
		var err error
		if listed, err = lister.rootIDs(ctx); err != nil {
			return nil, err
		}
	}
	out := make([]bool, len(keys))
	for i, key := range keys {
		if listed != nil && !listed[rootID(key)] {
			continue
		}
		r, err := l.hasRoot(ctx, key)
		if err != nil {
			return nil, err
		}
		out[i] = r
	}
	return out, nil
}

// delivered says whether key's root shows digest and replyIDs were posted
// (Delivered): a claim is not a delivery (its post may still fail), a root
// is delivered once its record holds the digest, a reply once its record
// has a ts.
func (l *ledger) delivered(ctx context.Context, key, digest string, replyIDs []string) (bool, error) {
	posted := func(id string) (Record, bool, error) {
		r, _, err := l.store.Get(ctx, id)
		switch {
		case errors.Is(err, ErrNotFound):
			return Record{}, false, nil
		case err != nil:
			return Record{}, false, fmt.Errorf("notify: look up %s of %q: %w", id, key, err)
		}
		return r, r.TS != "", nil
	}
	r, ok, err := posted(rootID(key))
	if err != nil || !ok || digest == "" || r.Digest != digest {
		return false, err
	}
	for _, id := range replyIDs {
		if _, ok, err := posted(replyID(key, id)); err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

// firstPosted reads the time of key's root from its Slack ts (FirstPosted), which is the
// time Slack stored the message (seconds since the epoch, then a dot and
// a part that only makes it unique).
func (l *ledger) firstPosted(ctx context.Context, key string) (time.Time, bool, error) {
	r, _, err := l.store.Get(ctx, rootID(key))
	switch {
	case errors.Is(err, ErrNotFound):
		return time.Time{}, false, nil
	case err != nil:
		return time.Time{}, false, fmt.Errorf("notify: look up root of %q: %w", key, err)
	}
	sec, _, _ := strings.Cut(r.TS, ".")
	n, err := strconv.ParseInt(sec, 10, 64)
	if err != nil || n <= 0 {
		return time.Time{}, false, nil
	}
	return time.Unix(n, 0).UTC(), true, nil
}

// hasRoot says whether key has a root record (HasRoot): a claimed root counts,
// since its post may be in flight.
func (l *ledger) hasRoot(ctx context.Context, key string) (bool, error) {
	_, _, err := l.store.Get(ctx, rootID(key))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, ErrNotFound):
		return false, nil
	}
	return false, fmt.Errorf("notify: look up root of %q: %w", key, err)
}
