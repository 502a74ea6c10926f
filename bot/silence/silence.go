// Package silence keeps the bot's silences: a hosted cluster or one
// incident muted until a given time, like Alertmanager's silences.
//
// Silences live in a NATS key-value bucket (Bucket) shared by every bot
// replica, keyed by silence id. Each Store keeps an in-memory copy that Run
// keeps in sync through a watch on the bucket, so that Match, called for
// every notification, costs a map lookup and no network round trip. A
// silence added on this replica is in the copy as soon as Add returns;
// one added on another replica arrives through the watch, normally within
// milliseconds.
//
// Silences are never edited: a new one is added (an earlier one still
// applies until it expires). Expired silences never match; they are
// dropped from the copy lazily and from the bucket by its TTL, which is
// comfortably above the longest silence.
//
// Every silence is audited (audit.KindSilenced), with its reason redacted.
package silence

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"

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

// Sentinel errors; test them with errors.Is.
var (
	// ErrInvalid: the silence cannot be stored as given (no or two
	// targets, bad expiry, too long, no creator, ...).
	ErrInvalid = errors.New("invalid silence")
	// ErrAudit: the silence was stored (and applies) but its audit record
	// could not be written.
	ErrAudit = errors.New("silence audit record not written")
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

	mu    sync.RWMutex
	cache map[string]Silence
}

type options struct {
	replicas int
	now      func() time.Time
	max      time.Duration
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

// bucketTTL keeps records well past the longest silence, so a silence
// never ages out of the bucket while it applies, even when the maximum is
// raised later.
func bucketTTL(max time.Duration) time.Duration { return 2*max + 24*time.Hour }

// NewStore creates the bucket or brings it to the options. Every silence
// added is audited to a. Call Run to follow other replicas' silences.
func NewStore(ctx context.Context, js jetstream.JetStream, a audit.Appender, opts ...Option) (*Store, error) {
	o := options{replicas: 1, now: time.Now, max: DefaultMaxDuration}
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
	return &Store{kv: kv, audit: a, now: o.now, max: o.max, cache: map[string]Silence{}}, nil
}

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
	data, err := json.Marshal(sil)
	if err != nil {
		return Silence{}, fmt.Errorf("silence: encode %s: %w", sil.ID, err)
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

func (s *Store) validate(sil Silence) error {
	var problems []string
	switch {
	case sil.Cluster == "" && sil.Incident == "":
		problems = append(problems, "names neither a cluster nor an incident")
	case sil.Cluster != "" && sil.Incident != "":
		problems = append(problems, "names both a cluster and an incident")
	case sil.Cluster != "" && !validCluster(sil.Cluster):
		problems = append(problems, fmt.Sprintf("cluster %q is not <mgmt>/<namespace>/<name>", clip(sil.Cluster, 80)))
	case sil.Incident != "" && !incidentPattern.MatchString(sil.Incident):
		problems = append(problems, fmt.Sprintf("incident %q is not an incident key", clip(sil.Incident, 80)))
	}
	if !validText(sil.CreatedBy, maxUserLen) || sil.CreatedBy == "" {
		problems = append(problems, "needs the id of the user who creates it")
	}
	if utf8.RuneCountInString(sil.Reason) > MaxReasonRunes {
		problems = append(problems, fmt.Sprintf("reason longer than %d characters", MaxReasonRunes))
	}
	switch d := sil.ExpiresAt.Sub(sil.CreatedAt); {
	case sil.ExpiresAt.IsZero() || d <= 0:
		problems = append(problems, "expires before it starts")
	case d > s.max+clockSkew:
		problems = append(problems, fmt.Sprintf("lasts %s, longer than the maximum of %s", d.Round(time.Minute), s.max))
	}
	if len(problems) > 0 {
		return fmt.Errorf("silence: %w: %s", ErrInvalid, strings.Join(problems, "; "))
	}
	return nil
}

// validCluster accepts "<source>/<namespace>/<name>" with printable,
// space-free parts.
func validCluster(c string) bool {
	if len(c) > maxClusterLen || !validText(c, maxClusterLen) || strings.ContainsFunc(c, unicode.IsSpace) {
		return false
	}
	parts := strings.Split(c, "/")
	return len(parts) == 3 && !slices.Contains(parts, "")
}

func validText(s string, n int) bool {
	return len(s) <= n && utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool {
		return unicode.IsControl(r) || unicode.Is(unicode.Cf, r)
	})
}

func clip(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
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

// rewatchDelay is the pause before a watch that ended on its own is
// started again.
const rewatchDelay = time.Second

// Run keeps the local copy in sync with the bucket until ctx ends, then
// returns nil. It first loads every stored silence, then follows changes
// (other replicas' silences). It fails only if the first watch cannot be
// started; a watch that ends later is restarted.
func (s *Store) Run(ctx context.Context) error {
	first := true
	for {
		w, err := s.kv.WatchAll(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil // stopped before the watch began
			}
			if first {
				return fmt.Errorf("silence: watch bucket %s: %w", Bucket, err)
			}
		} else {
			s.follow(ctx, w)
			_ = w.Stop()
		}
		first = false
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(rewatchDelay):
		}
	}
}

// follow applies the watcher's entries to the copy until the watcher ends
// or ctx does. The initial values are followed by a nil entry.
func (s *Store) follow(ctx context.Context, w jetstream.KeyWatcher) {
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e == nil {
				continue // end of the initial values
			}
			s.apply(e)
		}
	}
}

func (s *Store) apply(e jetstream.KeyValueEntry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.pruneLocked(s.now())
	if e.Operation() != jetstream.KeyValuePut {
		delete(s.cache, e.Key())
		return
	}
	var sil Silence
	if err := json.Unmarshal(e.Value(), &sil); err != nil || sil.ID != e.Key() || !idPattern.MatchString(sil.ID) {
		return // not written by Add
	}
	s.cache[sil.ID] = sil
}
