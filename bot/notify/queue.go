package notify

import (
	"context"
	"sync"
	"time"
)

// opKind is what a key needs next. Its value doubles as an index into the
// round-robin cursors of chanQueue.
type opKind int

const (
	opNone    opKind = iota
	opResolve        // look the root up in the store (no Slack call)
	opRoot           // claim and post the root: chat.postMessage
	opUpdate         // chat.update of the root
	opReply          // thread reply: chat.postMessage with thread_ts
	numOps
)

// rootState is what this process knows about a key's root message.
type rootState int

const (
	rootUnknown rootState = iota // not looked up yet
	rootAbsent                   // not posted; this instance may claim it
	rootKnown                    // posted; ts known
)

type upsertItem struct {
	msg   Message
	since time.Time // enqueue time of the oldest rendering folded in
	seq   uint64    // queue position of the first rendering folded in
	form  form      // Slack refused a longer form: send this one
}

type replyItem struct {
	r     Reply
	since time.Time
	seq   uint64
	form  form
}

// keyQ is the queue of one Key: at most one pending rendering (newer ones
// replace it in place, keeping its position) and a FIFO of replies. The
// head is whichever was queued first, so a reply queued after rendering N
// is posted after the root shows N or newer.
//
// Items are replaced, never modified, by the enqueueing side, so the
// worker may use an item it picked without the lock. The fields below
// the line are written by the worker only, under the lock.
type keyQ struct {
	key       string
	upsert    *upsertItem
	replies   []*replyItem
	ids       map[string]struct{} // IDs of the queued replies
	notBefore time.Time           // waiting: another instance's claim, store errors
	awaitRoot bool                // replies waiting for a root nobody has posted yet
	// orphaned is when a leader-only root was dropped with replies
	// behind it (notLeading); they wait OrphanWait for a root (absent).
	orphaned time.Time
	// createLost: a claim by create was lost, so the store is
	// looked up first from now on (see head).
	createLost bool

	state    rootState
	channel  string // of the root, from the store once known
	ts       string
	version  uint64 // newest version delivered
	claimRev uint64 // revision of a claim to renew or take over; 0: create one
	// claimedAt is when the claim at claimRev was first made (however
	// often renewed or taken over since): a post since then
	// may have landed without its ts being recorded.
	claimedAt  time.Time
	storeFails int
}

func (k *keyQ) empty() bool { return k.upsert == nil && len(k.replies) == 0 }

type task struct {
	kind opKind
	k    *keyQ
	up   *upsertItem
	rep  *replyItem
}

// chanQueue is the queue and worker of one channel. One worker means at
// most one call in flight per channel, which keeps per-Key order without
// further locking and makes Slack's per-channel limit easy to honour.
type chanQueue struct {
	s       *Slack
	channel string
	post    *gate // chat.postMessage in this channel
	wake    chan struct{}

	mu              sync.Mutex
	keys            map[string]*keyQ
	ring            []*keyQ // keys in arrival order, for round robin
	cursor          [numOps]int
	seq             uint64
	pausedUntil     time.Time // 429 or backoff: no call at all in this channel
	failures        int       // consecutive retryable failures
	postsSinceReply int
}

func newChanQueue(s *Slack, channel string) *chanQueue {
	return &chanQueue{
		s:       s,
		channel: channel,
		post:    newGate(s.cfg.PostRate, s.cfg.PostBurst),
		wake:    make(chan struct{}, 1),
		keys:    map[string]*keyQ{},
	}
}

func (q *chanQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *chanQueue) keyq(key string) *keyQ {
	k := q.keys[key]
	if k == nil {
		k = &keyQ{key: key, ids: map[string]struct{}{}}
		q.keys[key] = k
		q.ring = append(q.ring, k)
	}
	return k
}

func (q *chanQueue) addUpsert(m Message, now time.Time) {
	q.mu.Lock()
	k := q.keys[m.Key]
	switch {
	case k != nil && k.upsert != nil && m.Version < k.upsert.msg.Version,
		k != nil && k.upsert == nil && k.state == rootKnown && m.Version <= k.version:
		q.mu.Unlock()
		q.s.m.coalesced.Inc()
		return
	case k != nil && k.upsert != nil:
		k.upsert = &upsertItem{msg: m, since: k.upsert.since, seq: k.upsert.seq}
		q.s.m.coalesced.Inc()
	default:
		k = q.keyq(m.Key)
		q.seq++
		k.upsert = &upsertItem{msg: m, since: now, seq: q.seq}
		q.s.m.depth.Inc()
	}
	if k.awaitRoot {
		k.awaitRoot, k.notBefore = false, time.Time{}
	}
	k.orphaned = time.Time{}
	q.mu.Unlock()
	q.signal()
}

func (q *chanQueue) addReply(r Reply, now time.Time) {
	q.mu.Lock()
	k := q.keyq(r.Key)
	if r.ID != "" {
		if _, dup := k.ids[r.ID]; dup {
			q.mu.Unlock()
			q.s.m.deduplicated.Inc()
			return
		}
		k.ids[r.ID] = struct{}{}
	}
	q.seq++
	k.replies = append(k.replies, &replyItem{r: r, since: now, seq: q.seq})
	q.s.m.depth.Inc()
	q.s.pending.Add(1)
	q.mu.Unlock()
	q.signal()
}

func (q *chanQueue) pending() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for _, k := range q.ring {
		n += len(k.replies)
		if k.upsert != nil {
			n++
		}
	}
	return n
}

// The removers below run with q.mu held.

func (q *chanQueue) removeUpsert(k *keyQ, up *upsertItem) {
	if k.upsert == up {
		k.upsert = nil
		q.s.m.depth.Dec()
	}
}

func (q *chanQueue) popReply(k *keyQ, rep *replyItem) {
	if len(k.replies) == 0 || k.replies[0] != rep {
		return
	}
	k.replies[0] = nil
	k.replies = k.replies[1:]
	delete(k.ids, rep.r.ID)
	q.s.m.depth.Dec()
	q.s.pending.Add(-1)
}

// replyDue says whether k's waiting reply takes its share of the post
// budget ahead of a waiting root: after ReplyShare roots in a row, once it
// has waited ReplyPatience. The patience keeps a short burst of new
// incidents (people must learn of each within seconds) free of the
// details of the first ones; a longer run of roots still lets replies
// through, so they are delayed, never starved.
func (q *chanQueue) replyDue(k *keyQ, now time.Time) bool {
	return q.postsSinceReply >= q.s.cfg.ReplyShare && len(k.replies) > 0 && now.Sub(k.replies[0].since) >= q.s.cfg.ReplyPatience
}

// pick chooses the next operation, or says until when nothing can be done
// (zero: until something is queued). Priorities, from first to last:
// store look-ups (cheap, no Slack call), new roots (people must learn of
// a new incident first), updates and replies. Roots and replies share the
// channel's post budget, where a waiting reply gets every ReplyShare+1-th
// post; updates draw on their own workspace-wide budget, so they flow
// alongside posts rather than after them. Within a priority, keys take
// turns (round robin), so one busy incident cannot starve the others.
func (q *chanQueue) pick(now time.Time) (task, time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if now.Before(q.pausedUntil) {
		return task{}, q.pausedUntil
	}
	q.prune()
	var wake time.Time
	soonest := func(t time.Time) {
		if wake.IsZero() || t.Before(wake) {
			wake = t
		}
	}
	kinds := make([]opKind, len(q.ring))
	for i, k := range q.ring {
		if now.Before(k.notBefore) {
			soonest(k.notBefore)
			continue
		}
		kinds[i] = q.head(k)
		if kinds[i] == opResolve {
			return task{kind: opResolve, k: k}, time.Time{}
		}
	}
	find := func(kind opKind) int {
		n := len(kinds)
		for j := 1; j <= n; j++ {
			if i := (q.cursor[kind] + j) % n; kinds[i] == kind {
				return i
			}
		}
		return -1
	}
	root, upd, rep := find(opRoot), find(opUpdate), find(opReply)
	if root >= 0 || rep >= 0 {
		if at := q.post.readyAt(now); at.After(now) {
			soonest(at)
		} else {
			i, kind := root, opRoot
			if rep >= 0 && (root < 0 || q.replyDue(q.ring[rep], now)) {
				i, kind = rep, opReply
			}
			return q.task(kind, i), time.Time{}
		}
	}
	if upd >= 0 {
		if at := q.s.update.readyAt(now); at.After(now) {
			soonest(at)
		} else {
			return q.task(opUpdate, upd), time.Time{}
		}
	}
	return task{}, wake
}

func (q *chanQueue) task(kind opKind, i int) task {
	q.cursor[kind] = i
	k := q.ring[i]
	t := task{kind: kind, k: k, up: k.upsert}
	if kind == opReply {
		t.rep = k.replies[0]
	}
	return t
}

// head is what k needs next; it drops a rendering no newer than the one
// delivered.
func (q *chanQueue) head(k *keyQ) opKind {
	for !k.empty() {
		switch k.state {
		case rootUnknown:
			if k.upsert != nil && !k.createLost {
				// Claim first: a Key this instance has not met is most
				// often a new incident, whose root nobody has; the create
				// is the look-up and the claim in one round trip. Lost, its
				// root is looked up (resolve) as for any other Key.
				return opRoot
			}
			return opResolve
		case rootAbsent:
			if k.upsert != nil {
				return opRoot
			}
			k.state = rootUnknown // replies alone: look again
			return opResolve
		}
		if k.upsert != nil && (len(k.replies) == 0 || k.upsert.seq < k.replies[0].seq) {
			if k.upsert.msg.Version <= k.version {
				q.removeUpsert(k, k.upsert)
				q.s.m.coalesced.Inc()
				continue
			}
			return opUpdate
		}
		return opReply
	}
	return opNone
}

// prune forgets keys with nothing queued; what they knew is in the store.
func (q *chanQueue) prune() {
	kept := q.ring[:0]
	for _, k := range q.ring {
		if k.empty() {
			delete(q.keys, k.key)
			continue
		}
		kept = append(kept, k)
	}
	clear(q.ring[len(kept):])
	q.ring = kept
}

// run is the channel's worker.
func (q *chanQueue) run(ctx context.Context) {
	for ctx.Err() == nil {
		now := time.Now()
		t, wake := q.pick(now)
		switch t.kind {
		case opNone:
			q.sleep(ctx, wake)
		case opResolve:
			q.resolve(ctx, t.k)
		case opRoot:
			q.deliver(ctx, t.k, q.rootPost(t.k, t.up))
		case opUpdate:
			q.updateRoot(ctx, t)
		case opReply:
			q.deliver(ctx, t.k, q.replyPost(t.k, t.rep))
		}
	}
}

func (q *chanQueue) sleep(ctx context.Context, until time.Time) {
	if until.IsZero() {
		select {
		case <-q.wake:
		case <-ctx.Done():
		}
		return
	}
	d := time.Until(until)
	if d <= 0 {
		return
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-q.wake:
	case <-ctx.Done():
	}
}
