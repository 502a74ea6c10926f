package chatops

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hcpbot/hcpbot/bus"
	"github.com/nats-io/nats.go/jetstream"
)

// MaxClockSkew is how far a request's X-Slack-Request-Timestamp may be from
// the bot's clock, as Slack recommends.
const MaxClockSkew = 5 * time.Minute

// ReplayWindow is how long a replay guard must remember a request. A
// request is accepted while its timestamp is within ±MaxClockSkew of now,
// so one first seen at ts-5m can come back until ts+5m: 10 minutes, plus a
// minute for clock differences between replicas.
const ReplayWindow = 2*MaxClockSkew + time.Minute

// ReplayGuard remembers authenticated requests so each is served once.
// Slack's signature does not prevent replays within the timestamp window,
// and a captured "approve" must not be approvable twice.
type ReplayGuard interface {
	// FirstSeen records key and reports whether it had not been recorded
	// within the guard's window. Concurrent calls with the same key, on any
	// replica sharing the guard, see true at most once.
	FirstSeen(ctx context.Context, key string) (bool, error)
}

// replayKey identifies a signed request: a hash of the timestamp and the
// signature, which covers the body. The signature is taken decoded, so a
// replay with the hex in upper case gets the same key.
func replayKey(timestamp string, sig []byte) string {
	h := sha256.New()
	h.Write([]byte(timestamp))
	h.Write([]byte{':'})
	h.Write(sig)
	return hex.EncodeToString(h.Sum(nil))
}

// MemoryReplayGuard is a ReplayGuard for a single replica: keys expire
// after a TTL and the oldest are dropped beyond a maximum count. Only
// authenticated requests reach a guard, so an attacker cannot flood it to
// push out a key; the cap only bounds memory under legitimate bursts.
type MemoryReplayGuard struct {
	now func() time.Time
	mu  sync.Mutex
	set *ttlMap[struct{}]
}

// NewMemoryReplayGuard returns a guard remembering keys for ttl (at least
// ReplayWindow is needed; <= 0 means ReplayWindow) and at most maxKeys
// (<= 0 means 100000).
func NewMemoryReplayGuard(ttl time.Duration, maxKeys int) *MemoryReplayGuard {
	if ttl <= 0 {
		ttl = ReplayWindow
	}
	if maxKeys <= 0 {
		maxKeys = 100000
	}
	return &MemoryReplayGuard{now: time.Now, set: newTTLMap[struct{}](ttl, maxKeys)}
}

// FirstSeen implements ReplayGuard.
func (g *MemoryReplayGuard) FirstSeen(_ context.Context, key string) (bool, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	if _, found := g.set.get(key, now); found {
		return false, nil
	}
	g.set.put(key, struct{}{}, now)
	return true, nil
}

// ttlMap is a map whose entries expire a fixed TTL after insertion and
// whose oldest entries go first beyond a maximum size. Since the TTL is
// fixed, insertion order is expiry order and a FIFO of keys suffices.
// Not safe for concurrent use.
type ttlMap[V any] struct {
	ttl   time.Duration
	max   int
	items map[string]ttlItem[V]
	order []string // insertion order; may hold keys already removed
}

type ttlItem[V any] struct {
	v       V
	expires time.Time
}

func newTTLMap[V any](ttl time.Duration, maxItems int) *ttlMap[V] {
	return &ttlMap[V]{ttl: ttl, max: maxItems, items: map[string]ttlItem[V]{}}
}

func (m *ttlMap[V]) get(key string, now time.Time) (V, bool) {
	m.prune(now)
	it, found := m.items[key]
	return it.v, found
}

// put sets key; a new key expires ttl from now, an existing one keeps its
// expiry.
func (m *ttlMap[V]) put(key string, v V, now time.Time) {
	m.prune(now)
	if it, found := m.items[key]; found {
		it.v = v
		m.items[key] = it
		return
	}
	for len(m.items) >= m.max && len(m.order) > 0 {
		delete(m.items, m.order[0])
		m.order = m.order[1:]
	}
	m.items[key] = ttlItem[V]{v: v, expires: now.Add(m.ttl)}
	m.order = append(m.order, key)
}

func (m *ttlMap[V]) prune(now time.Time) {
	n := 0
	for n < len(m.order) {
		it, found := m.items[m.order[n]]
		if found && now.Before(it.expires) {
			break
		}
		delete(m.items, m.order[n])
		n++
	}
	if n > 0 {
		m.order = m.order[n:]
		// Let the backing array go once it is mostly dead space.
		if cap(m.order) > 64 && len(m.order) < cap(m.order)/4 {
			m.order = append([]string(nil), m.order...)
		}
	}
}

// ReplayBucket is the NATS KV bucket replay guards share.
const ReplayBucket = bus.SlackReplayBucket

// ErrReplayBucketTTL is returned for a bucket whose keys would not outlive
// the replay window, or would never expire.
var ErrReplayBucketTTL = errors.New("chatops: replay bucket TTL must be at least the replay window")

// EnsureReplayBucket creates (or updates) ReplayBucket with a TTL of
// ReplayWindow, with bus.WithReplicas copies (default 1).
func EnsureReplayBucket(ctx context.Context, js bus.BucketManager, opts ...bus.Option) (jetstream.KeyValue, error) {
	return bus.EnsureKV(ctx, js, bus.SlackReplayKV(ReplayWindow, opts...))
}

// KVReplayGuard is a ReplayGuard shared by all bot replicas through a NATS
// KV bucket: Create succeeds only for the first writer of a key, atomically
// on the server, and the bucket's TTL forgets keys after the window.
type KVReplayGuard struct {
	kv jetstream.KeyValue
}

// NewKVReplayGuard checks that kv's TTL covers ReplayWindow (and is not
// unlimited, which would grow the bucket forever) and returns a guard on it.
func NewKVReplayGuard(ctx context.Context, kv jetstream.KeyValue) (*KVReplayGuard, error) {
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("chatops: replay bucket status: %w", err)
	}
	if st.TTL() < ReplayWindow {
		return nil, fmt.Errorf("%w: bucket %q has TTL %v, need >= %v", ErrReplayBucketTTL, st.Bucket(), st.TTL(), ReplayWindow)
	}
	return &KVReplayGuard{kv: kv}, nil
}

// FirstSeen implements ReplayGuard. key must be a valid KV key; the
// package only passes hex digests.
func (g *KVReplayGuard) FirstSeen(ctx context.Context, key string) (bool, error) {
	_, err := g.kv.Create(ctx, key, []byte{1})
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, jetstream.ErrKeyExists):
		return false, nil
	}
	return false, fmt.Errorf("chatops: replay guard: %w", err)
}
