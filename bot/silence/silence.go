package silence

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/redact"
)

// Bucket is the key-value bucket holding silences, keyed by silence id.
const Bucket = bus.SilencesBucket

// DefaultMaxDuration bounds how long one silence lasts unless WithMaxDuration
// says otherwise.
const DefaultMaxDuration = 7 * 24 * time.Hour

// Limits on the free-text fields.
const (
	// MaxReasonRunes bounds a silence's reason (after redaction).
	MaxReasonRunes = 500
	maxClusterLen  = 300
	maxUserLen     = 64
)

// clockSkew is how far ExpiresAt may exceed CreatedAt+max: the caller
// computes ExpiresAt from its own reading of the clock, a moment before
// Add reads it.
const clockSkew = time.Minute

// replicaSkew is how far ahead of this replica's clock another replica's
// may be when it stamps a silence's CreatedAt (NTP keeps them within
// seconds).
const replicaSkew = 5 * time.Minute

// Sentinel errors; test them with errors.Is.
var (
	// ErrInvalid: the silence cannot be stored as given (no or two
	// targets, bad expiry, too long, no creator, ...).
	ErrInvalid = errors.New("invalid silence")
	// ErrAudit: the silence was stored (and applies) but its audit record
	// could not be written.
	ErrAudit = errors.New("silence audit record not written")
	// ErrUnsealed: a record without a seal, read by a Store that seals
	// (written by an hcpbot of before sealing, or without the key).
	ErrUnsealed = errors.New("silence not sealed")
	// ErrForged: a seal that does not verify (not made by the key it
	// names, or made for another silence or another key in the bucket).
	ErrForged = errors.New("silence seal does not verify")
	// ErrUntrustedKey: sealed by a key not trusted here (another
	// installation's, or one rotated out of approvals.trustedKeys).
	ErrUntrustedKey = errors.New("silence sealed by a key that is not trusted")
)

// Silence mutes the notifications of one hosted cluster or one incident
// until ExpiresAt.
type Silence struct {
	ID string `json:"id"` // "sil-" + short random
	// Cluster is diagnose.Key.String() of a hosted cluster, e.g.
	// "mgmt-a/clusters/example"; or empty.
	Cluster string `json:"cluster,omitempty"`
	// Incident is an incident key "inc-…" (or a storm key "storm-…");
	// or empty. Exactly one of Cluster and Incident is set.
	Incident string `json:"incident,omitempty"`
	// Reason is redacted (package redact) before it is stored.
	Reason    string    `json:"reason,omitempty"`
	CreatedBy string    `json:"createdBy"` // Slack user id
	CreatedAt time.Time `json:"createdAt"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// Active reports whether the silence applies at now.
func (s Silence) Active(now time.Time) bool { return now.Before(s.ExpiresAt) }

// Target is the silenced cluster or incident.
func (s Silence) Target() string {
	if s.Cluster != "" {
		return s.Cluster
	}
	return s.Incident
}

// Store keeps silences in the shared bucket and a local copy of them. It is
// safe for concurrent use; several Stores (bot replicas) may share the
// bucket.
type Store struct {
	kv    jetstream.KeyValue
	audit audit.Appender
	now   func() time.Time
	max   time.Duration

	// signer seals what Add writes; trusted are the keys a record read
	// may be sealed with. Both nil: silences are stored unsealed.
	signer  Signer
	trusted []string
	log     zerolog.Logger

	mu    sync.RWMutex
	cache map[string]Silence
	// refused lists what silences nothing; more counts the refusals
	// past maxRefusals, logged but not kept.
	refused map[string]Refusal
	more    int
	// again counts the refusals of a record listed already (put or
	// deleted again), logged sparingly like more.
	again int
	// checked: the trail was compared with the bucket (crossCheck).
	checked bool
}

type options struct {
	replicas int
	now      func() time.Time
	max      time.Duration
	signer   Signer
	trusted  []string
	log      zerolog.Logger
}

// Option configures NewStore.
type Option func(*options)

// WithReplicas sets the bucket's replica count. Default 1.
func WithReplicas(n int) Option { return func(o *options) { o.replicas = n } }

// WithClock sets the clock used for CreatedAt and for validating ExpiresAt
// (tests).
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// WithMaxDuration bounds how long one silence may last. Default
// DefaultMaxDuration.
func WithMaxDuration(d time.Duration) Option { return func(o *options) { o.max = d } }

// WithSigner seals every silence Add writes with signer and makes the
// Store apply only silences sealed by signer's key or one of trusted
// (approvals.trustedKeys: the keys of before a rotation). Without it
// silences are unsealed records.
func WithSigner(signer Signer, trusted ...string) Option {
	return func(o *options) { o.signer, o.trusted = signer, trusted }
}

// WithLogger is where refused records are logged (as errors). Default:
// nowhere.
func WithLogger(l zerolog.Logger) Option { return func(o *options) { o.log = l } }

// bucketTTL keeps records well past the longest silence, so a silence
// never ages out of the bucket while it applies, even when the maximum is
// raised later.
func bucketTTL(max time.Duration) time.Duration { return 2*max + 24*time.Hour }

// NewStore creates the bucket or brings it to the options. Every silence
// added is audited to a. Call Run to follow other replicas' silences.
func NewStore(ctx context.Context, js bus.BucketManager, a audit.Appender, opts ...Option) (*Store, error) {
	o := options{replicas: 1, now: time.Now, max: DefaultMaxDuration, log: zerolog.Nop()}
	for _, opt := range opts {
		opt(&o)
	}
	if a == nil {
		return nil, errors.New("silence: an audit log is required")
	}
	if o.replicas < 1 || o.max <= 0 || o.now == nil {
		return nil, errors.New("silence: replicas and maximum duration must be positive and the clock set")
	}
	kv, err := bus.EnsureKV(ctx, js, bus.SilencesKV(bucketTTL(o.max), bus.WithReplicas(o.replicas)))
	if err != nil {
		return nil, fmt.Errorf("silence: ensure bucket %s: %w", Bucket, err)
	}
	st := &Store{kv: kv, audit: a, now: o.now, max: o.max, log: o.log, cache: map[string]Silence{}, refused: map[string]Refusal{}}
	if o.signer != nil {
		st.signer = o.signer
		st.trusted = append([]string{o.signer.PublicKey()}, o.trusted...)
	}
	return st, nil
}

// Sealed reports whether the Store seals silences and applies only
// sealed ones.
func (s *Store) Sealed() bool { return s.signer != nil }

// MaxDuration is the longest silence Add accepts.
func (s *Store) MaxDuration() time.Duration { return s.max }

var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// NewID returns a random silence id: "sil-" and 10 base32 characters.
func NewID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return "sil-" + idEncoding.EncodeToString(b)
}

var (
	idPattern = regexp.MustCompile(`^sil-[a-z2-7]{10}$`)
	// Incident keys ("inc-…"), and storm keys ("storm-…"): a storm
	// message stands for its incidents and is silenced the same way.
	incidentPattern = regexp.MustCompile(`^(inc|storm)-[0-9a-z]{4,32}$`)
)

// Add validates sil, gives it an id and its creation time, stores it,
// puts it in the local copy and audits it. The caller sets Cluster or
// Incident, Reason, CreatedBy and ExpiresAt; ID and CreatedAt are
// overwritten. Errors: ErrInvalid (nothing stored); ErrAudit (stored and
// returned, but not audited); anything else is a bucket failure.
func (s *Store) Add(ctx context.Context, sil Silence) (Silence, error) {
	now := s.now().UTC()
	sil.ID = NewID()
	sil.CreatedAt = now
	sil.ExpiresAt = sil.ExpiresAt.UTC()
	sil.Reason = redact.RedactText(strings.TrimSpace(sil.Reason))
	if err := s.validate(sil); err != nil {
		return Silence{}, err
	}
	data, err := s.encode(sil)
	if err != nil {
		return Silence{}, err
	}
	if _, err := s.kv.Create(ctx, sil.ID, data); err != nil {
		return Silence{}, fmt.Errorf("silence: store %s: %w", sil.ID, err)
	}
	s.mu.Lock()
	s.cache[sil.ID] = sil
	s.pruneLocked(now)
	s.mu.Unlock()

	if err := s.audit.Append(ctx, auditRecord(sil)); err != nil {
		return sil, fmt.Errorf("silence: %w: %s: %w", ErrAudit, sil.ID, err)
	}
	return sil, nil
}

func auditRecord(sil Silence) audit.Record {
	r := audit.Record{
		// Derived from the silence: a retried append is de-duplicated.
		ID: sil.ID + "." + string(audit.KindSilenced), Time: sil.CreatedAt, Actor: sil.CreatedBy,
		Kind: audit.KindSilenced, ActionID: sil.ID, Reason: sil.Reason,
	}
	what := "incident " + sil.Incident
	if sil.Cluster != "" {
		what = "cluster " + sil.Cluster
		source, rest, _ := strings.Cut(sil.Cluster, "/")
		r.Cluster = rest
		if _, err := event.AuditSubject(source); err == nil {
			r.Source = source
		}
	}
	r.Summary = fmt.Sprintf("silenced %s for %s, until %s", what,
		sil.ExpiresAt.Sub(sil.CreatedAt).Round(time.Minute), sil.ExpiresAt.Format(time.RFC3339))
	return r
}

// Match returns the silence that mutes cluster (diagnose.Key.String()) or
// incident at now, if any: of several, the one lasting longest. Either
// argument may be empty. It reads the local copy only.
func (s *Store) Match(cluster, incident string, now time.Time) (Silence, bool) {
	if cluster == "" && incident == "" {
		return Silence{}, false
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	var best Silence
	found := false
	for _, sil := range s.cache {
		if !sil.Active(now) {
			continue
		}
		if (cluster != "" && sil.Cluster == cluster) || (incident != "" && sil.Incident == incident) {
			if !found || sil.ExpiresAt.After(best.ExpiresAt) || (sil.ExpiresAt.Equal(best.ExpiresAt) && sil.ID < best.ID) {
				best, found = sil, true
			}
		}
	}
	return best, found
}

// Active returns the silences that apply at now, soonest to expire first.
func (s *Store) Active(now time.Time) []Silence {
	s.mu.RLock()
	out := make([]Silence, 0, len(s.cache))
	for _, sil := range s.cache {
		if sil.Active(now) {
			out = append(out, sil)
		}
	}
	s.mu.RUnlock()
	slices.SortFunc(out, func(a, b Silence) int {
		if c := a.ExpiresAt.Compare(b.ExpiresAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out
}

// pruneLocked drops expired silences from the copy. Callers hold mu.
func (s *Store) pruneLocked(now time.Time) {
	for id, sil := range s.cache {
		if !sil.Active(now) {
			delete(s.cache, id)
		}
	}
}
