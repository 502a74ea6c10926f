package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/hcpbot/hcpbot/bus"
	"github.com/nats-io/nats.go/jetstream"
)

// Record is what the Store keeps for one root message or one reply.
//
// A record with an empty TS is a claim: Owner is about to post it and
// nobody else may until the claim is older than the lease. A record with a
// TS has been posted.
type Record struct {
	Channel string    `json:"channel"`
	TS      string    `json:"ts,omitempty"`
	Version uint64    `json:"version,omitempty"` // roots: newest version delivered
	Digest  string    `json:"digest,omitempty"`  // roots: Message.Digest of that version
	Owner   string    `json:"owner,omitempty"`   // instance holding the claim
	Claimed time.Time `json:"claimed,omitzero"`  // when the claim was taken or renewed
	// Since is when the first claim of this record was made. A renewal
	// or a take-over keeps it: a post made since then may have landed
	// without its ts recorded, however often the claim changed hands.
	// Zero in records written before it existed: Claimed.
	Since time.Time `json:"since,omitzero"`
}

// claimSince is when the claim at r was first made.
func (r Record) claimSince() time.Time {
	if !r.Since.IsZero() {
		return r.Since
	}
	return r.Claimed
}

// Store errors. Implementations return them (possibly wrapped) so the
// notifier can tell a lost race from a failure.
var (
	ErrNotFound = errors.New("notify: record not found")
	ErrExists   = errors.New("notify: record exists")
	ErrConflict = errors.New("notify: record revision changed")
)

// Store persists records with optimistic concurrency: every record has a
// revision, Create succeeds for exactly one writer, Update and Delete only
// if the revision is unchanged. That is all the notifier needs to keep one
// root per Key across restarts and replicas.
type Store interface {
	// Get returns the record at id and its revision, or ErrNotFound.
	Get(ctx context.Context, id string) (Record, uint64, error)
	// Create stores r at id unless a record exists there (ErrExists).
	Create(ctx context.Context, id string, r Record) (uint64, error)
	// Update replaces the record at id if its revision is still rev
	// (ErrConflict otherwise).
	Update(ctx context.Context, id string, r Record, rev uint64) (uint64, error)
	// Delete removes the record at id if its revision is still rev.
	Delete(ctx context.Context, id string, rev uint64) error
}

// MemoryStore is a Store in memory: for a single process that may forget
// on restart (the demo), and for tests.
type MemoryStore struct {
	mu   sync.Mutex
	rev  uint64
	recs map[string]memRecord
}

type memRecord struct {
	rec Record
	rev uint64
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore() *MemoryStore { return &MemoryStore{recs: map[string]memRecord{}} }

// Get implements Store.
func (s *MemoryStore) Get(_ context.Context, id string) (Record, uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, found := s.recs[id]
	if !found {
		return Record{}, 0, ErrNotFound
	}
	return m.rec, m.rev, nil
}

// Create implements Store.
func (s *MemoryStore) Create(_ context.Context, id string, r Record) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, found := s.recs[id]; found {
		return 0, ErrExists
	}
	return s.put(id, r), nil
}

// Update implements Store.
func (s *MemoryStore) Update(_ context.Context, id string, r Record, rev uint64) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m, found := s.recs[id]; !found || m.rev != rev {
		return 0, ErrConflict
	}
	return s.put(id, r), nil
}

// Delete implements Store.
func (s *MemoryStore) Delete(_ context.Context, id string, rev uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m, found := s.recs[id]; !found || m.rev != rev {
		return ErrConflict
	}
	delete(s.recs, id)
	return nil
}

func (s *MemoryStore) put(id string, r Record) uint64 {
	s.rev++
	s.recs[id] = memRecord{r, s.rev}
	return s.rev
}

// DefaultBucket is the KV bucket of KVConfig when none is named.
const DefaultBucket = bus.SlackMessagesBucket

// KVConfig configures the NATS KV bucket of a KVStore.
type KVConfig struct {
	Bucket string // default DefaultBucket
	// TTL bounds how long records are kept after their last update; 0
	// means bus.SlackMessagesTTL (30 days). An incident updated after its
	// record expired gets a new root message, so keep it well above the
	// lifetime of an incident.
	TTL time.Duration
}

// KVStore is a Store in a NATS JetStream key-value bucket, shared by all
// bot replicas and surviving restarts.
type KVStore struct {
	kv jetstream.KeyValue
	js jetstream.StreamManager // the bucket's stream, for rootIDs
}

// rootLister is a Store that lists the ids of its root records in one
// pass: a superset of those Get finds (claims, and deleted ones, count).
type rootLister interface {
	rootIDs(ctx context.Context) (map[string]bool, error)
}

// rootIDs implements rootLister from the bucket stream's subjects: one
// request (paged by the server past 100,000 subjects), no consumer. A
// deleted record's marker keeps its subject listed.
func (s *KVStore) rootIDs(ctx context.Context) (map[string]bool, error) {
	prefix := "$KV." + s.kv.Bucket() + "."
	st, err := s.js.Stream(ctx, "KV_"+s.kv.Bucket())
	if err != nil {
		return nil, fmt.Errorf("notify: kv stream of %s: %w", s.kv.Bucket(), err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(prefix+"root.>"))
	if err != nil {
		return nil, fmt.Errorf("notify: list roots of %s: %w", s.kv.Bucket(), err)
	}
	out := make(map[string]bool, len(info.State.Subjects))
	for subj := range info.State.Subjects {
		out[strings.TrimPrefix(subj, prefix)] = true
	}
	return out, nil
}

// rootIDs implements rootLister.
func (s *MemoryStore) rootIDs(context.Context) (map[string]bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]bool{}
	for id := range s.recs {
		if strings.HasPrefix(id, "root.") {
			out[id] = true
		}
	}
	return out, nil
}

// NewKVStore creates or updates the bucket (bus.EnsureKV), with
// bus.WithReplicas copies (default 1), and returns a store on it.
func NewKVStore(ctx context.Context, js bus.BucketManager, cfg KVConfig, opts ...bus.Option) (*KVStore, error) {
	kv, err := bus.EnsureKV(ctx, js, bus.SlackMessagesKV(cfg.Bucket, cfg.TTL, opts...))
	if err != nil {
		return nil, fmt.Errorf("notify: %w", err)
	}
	return &KVStore{kv: kv, js: js}, nil
}

// Get implements Store.
func (s *KVStore) Get(ctx context.Context, id string) (Record, uint64, error) {
	e, err := s.kv.Get(ctx, id)
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
			return Record{}, 0, ErrNotFound
		}
		return Record{}, 0, fmt.Errorf("notify: kv get %s: %w", id, err)
	}
	var r Record
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return Record{}, 0, fmt.Errorf("notify: kv record %s: %w", id, err)
	}
	return r, e.Revision(), nil
}

// Create implements Store.
func (s *KVStore) Create(ctx context.Context, id string, r Record) (uint64, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return 0, fmt.Errorf("notify: encode record: %w", err)
	}
	rev, err := s.kv.Create(ctx, id, b)
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return 0, fmt.Errorf("%w: %w", ErrExists, err)
		}
		return 0, fmt.Errorf("notify: kv create %s: %w", id, err)
	}
	return rev, nil
}

// Update implements Store.
func (s *KVStore) Update(ctx context.Context, id string, r Record, rev uint64) (uint64, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return 0, fmt.Errorf("notify: encode record: %w", err)
	}
	n, err := s.kv.Update(ctx, id, b, rev)
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return 0, fmt.Errorf("%w: %w", ErrConflict, err)
		}
		return 0, fmt.Errorf("notify: kv update %s: %w", id, err)
	}
	return n, nil
}

// Delete implements Store.
func (s *KVStore) Delete(ctx context.Context, id string, rev uint64) error {
	if err := s.kv.Delete(ctx, id, jetstream.LastRevision(rev)); err != nil {
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("%w: %w", ErrConflict, err)
		}
		return fmt.Errorf("notify: kv delete %s: %w", id, err)
	}
	return nil
}
