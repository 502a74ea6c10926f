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
//
// # Who may write one: the seal
//
// A silence mutes what the bot posts about a hosted cluster or an
// incident: whoever can write one hides an outage from the people on
// call. The bucket's permission is not enough: a stolen bot NATS seed
// writes it, and that seed cannot publish an event (docs/security.md).
// So, given the bot's action-signing key (WithSigner:
// approval.Signer.ForSilences, which signs only what starts with
// SigningContext), every silence is sealed, bound to its key in the
// bucket, and a record is applied only once its seal verifies against
// the bot's key or a trusted one (approvals.trustedKeys) and its fields
// pass the checks Add makes. Anything else — unsealed (written by an
// hcpbot before silences were sealed, or by someone without the key),
// sealed by another key, the bot's seal over another silence, another
// kind of signature — silences nothing: it is logged as an error and
// listed by Refused, which `/hcp status` shows.
//
// The bot never deletes or replaces a silence (the bucket's TTL ages
// records out well after they expire, without a delete marker): a
// delete, purge or replacement of a sealed silence that still applies is
// someone else's. A replica that read the silence keeps applying it
// until it expires and lists the deletion by Refused. A replica started
// after the deletion never saw it: no seal proves a record absent. What
// holds it is the signed audit record of its creation; at start a
// sealing Store compares the trail with the bucket and lists by Refused
// the silences the trail names, still within their time, that the
// bucket lacks. It does not apply them: an audit record is no silence's
// seal (the bot's NATS user appends to the trail; `/hcp audit verify`
// reports what it did not sign).
//
// Without a signing key (a bot without approvals) silences are stored
// and read unsealed, as before sealing: Sealed reports false and the
// bot warns at start that the bucket's writers choose what is silenced.
package silence

import (
	"cmp"
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
	"github.com/nats-io/nkeys"
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

// SigningContext starts what a Signer signs: the silence's id (its key
// in Bucket), a newline and the silence's JSON follow.
const SigningContext = "hcpbot-silence-v1\n"

// Signer seals the silences a Store writes. The bot passes its
// action-signing key (approval.Signer.ForSilences), which signs only what
// starts with SigningContext.
type Signer interface {
	// PublicKey is the nkeys public key ("U…") the seal verifies with.
	PublicKey() string
	// Sign returns the ed25519 signature of input, as nkeys makes it.
	Sign(input []byte) ([]byte, error)
}

// sealed is what a sealed silence's key holds: the silence's JSON as
// signed, the key and the signature. The bytes verified are the bytes
// decoded.
type sealed struct {
	Silence json.RawMessage `json:"silence"`
	Key     string          `json:"key"`
	Sig     []byte          `json:"sig"`
}

func signedInput(id string, body []byte) []byte {
	return append([]byte(SigningContext+id+"\n"), body...)
}

// Seal is the value a sealing Store stores under sil.ID for sil. Tests
// use it to write a silence the bot's key vouches for.
func Seal(signer Signer, sil Silence) ([]byte, error) {
	body, err := json.Marshal(sil)
	if err != nil {
		return nil, fmt.Errorf("silence: encode %s: %w", sil.ID, err)
	}
	sig, err := signer.Sign(signedInput(sil.ID, body))
	if err != nil {
		return nil, fmt.Errorf("silence: seal %s: %w", sil.ID, err)
	}
	return json.Marshal(sealed{Silence: body, Key: signer.PublicKey(), Sig: sig})
}

// maxRecord bounds the record a Store reads: a silence is well under 4
// KiB (a reason of 500 characters redacted), a larger value is nobody's.
const maxRecord = 16 << 10

// Refusal is a record of the bucket that silences nothing, or a silence
// deleted or replaced while it applied: what a person looking at `/hcp
// status` must see, since it is somebody writing the bucket without the
// bot's key.
type Refusal struct {
	Key    string    // the record's key in Bucket
	Reason string    // why it silences nothing
	Seen   time.Time // when this replica read it
	// Kept is the genuine silence a deletion or replacement removed from
	// the bucket, which this replica still applies until it expires.
	Kept *Silence
	// Deleted: the refused record was deleted since.
	Deleted bool
	// Missing: a silence the signed audit trail names, that would apply
	// until Until, absent from the bucket when this replica started.
	Missing bool
	Until   time.Time
	// Incomplete: the comparison of the trail with the bucket at start
	// read only part of the trail, or none (Key is TrailKey): a silence
	// deleted before this start may be missing unlisted until Until.
	Incomplete bool
}

// TrailKey is the Key of the Refusal saying that the comparison with the
// audit trail was incomplete: no key of the bucket (a key has no space
// nor parenthesis), so no record put there replaces it.
const TrailKey = "(audit trail)"

// Limits on what Refused keeps: an attacker who writes many records must
// not grow the bot's memory, and a refusal of a record deleted since is
// shown for a day.
const (
	maxRefusals  = 100
	refusalAfter = 24 * time.Hour
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

// encode is what Add stores for sil: sealed when the Store has a signer.
func (s *Store) encode(sil Silence) ([]byte, error) {
	if s.signer != nil {
		return Seal(s.signer, sil)
	}
	data, err := json.Marshal(sil)
	if err != nil {
		return nil, fmt.Errorf("silence: encode %s: %w", sil.ID, err)
	}
	return data, nil
}

// open reads the record stored under key: its seal verified first when
// the Store seals, then the fields Add checks. Nothing of an unverified
// record is believed.
func (s *Store) open(key string, value []byte, now time.Time) (Silence, error) {
	if len(value) > maxRecord {
		return Silence{}, fmt.Errorf("silence: %w: %s: a record of %d bytes", ErrInvalid, key, len(value))
	}
	body := value
	var env sealed
	isSealed := json.Unmarshal(value, &env) == nil && len(env.Silence) > 0
	switch {
	case isSealed && s.signer != nil:
		if err := s.verify(key, env); err != nil {
			return Silence{}, err
		}
		body = env.Silence
	case isSealed:
		// Unsealed mode cannot verify: the body is read as any
		// unsealed record is (a bot that sealed before, without its
		// key now).
		body = env.Silence
	case s.signer != nil:
		return Silence{}, fmt.Errorf("%w: %s: written by an hcpbot of before sealing, or by someone without the signing key", ErrUnsealed, key)
	}
	var sil Silence
	if err := json.Unmarshal(body, &sil); err != nil {
		return Silence{}, fmt.Errorf("silence: %w: %s does not decode: %w", ErrInvalid, key, err)
	}
	if sil.ID != key || !idPattern.MatchString(sil.ID) {
		return Silence{}, fmt.Errorf("silence: %w: %s holds silence %q", ErrInvalid, key, clip(sil.ID, 40))
	}
	// What Add would refuse applies no more when read: a sealed record
	// too (a key rotated out keeps signing whatever its holder wants).
	if err := s.validate(sil); err != nil {
		return Silence{}, fmt.Errorf("%w (record %s)", err, key)
	}
	// The maximum counts from CreatedAt, which the sealer chose: a
	// silence "made" next year would apply from now until a week after
	// then. Add stamps it with the clock of the replica that made it.
	if sil.CreatedAt.After(now.Add(replicaSkew)) {
		return Silence{}, fmt.Errorf("silence: %w: record %s made at %s, later than now (%s): it would last longer than the maximum of %s from now",
			ErrInvalid, key, sil.CreatedAt.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339), s.max)
	}
	return sil, nil
}

// verify checks env's seal for the record under key.
func (s *Store) verify(key string, env sealed) error {
	switch {
	case len(env.Sig) == 0 || env.Key == "":
		return fmt.Errorf("%w: %s: no signature", ErrUnsealed, key)
	case !slices.Contains(s.trusted, env.Key):
		// Checked before the signature: an untrusted key's valid
		// signature proves nothing here either way.
		return fmt.Errorf("%w: %s: %.12s…", ErrUntrustedKey, key, env.Key)
	}
	kp, err := nkeys.FromPublicKey(env.Key)
	if err != nil {
		return fmt.Errorf("%w: %s: key: %w", ErrForged, key, err)
	}
	if err := kp.Verify(signedInput(key, env.Silence), env.Sig); err != nil {
		return fmt.Errorf("%w: %s: bad signature", ErrForged, key)
	}
	return nil
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
	initial := true
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e == nil {
				// End of the initial values: what the trail says was
				// silenced and the bucket lacks, once per Store.
				s.crossCheckOnce(ctx)
				initial = false
				continue
			}
			s.apply(e)
			// Once caught up (Delta 0: the newest entry): a flood of
			// puts costs one round of look-ups, not one a put.
			if !initial && e.Operation() == jetstream.KeyValuePut && e.Delta() == 0 {
				s.checkPresent(ctx)
			}
		}
	}
}

// presentTimeout bounds the look-ups of checkPresent.
const presentTimeout = 5 * time.Second

// checkPresent looks up, after a put, every silence this replica applies:
// a put carrying a rollup of the whole bucket (Nats-Rollup: all, which
// the bot's NATS user may publish and the KV stream allows) removes every
// other record without a delete marker the watch would deliver. hcpbot
// writes none; a silence gone that way is listed as tampered with, and
// still applied until it expires. Silences are few and puts rare: one
// direct get each.
func (s *Store) checkPresent(ctx context.Context) {
	if !s.Sealed() {
		return
	}
	now := s.now()
	s.mu.RLock()
	var ids []string
	for id, sil := range s.cache {
		if r, listed := s.refused[id]; sil.Active(now) && !(listed && r.Kept != nil) {
			ids = append(ids, id)
		}
	}
	s.mu.RUnlock()
	ctx, cancel := context.WithTimeout(ctx, presentTimeout)
	defer cancel()
	for _, id := range ids {
		_, err := s.kv.Get(ctx, id)
		if !errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // there, or not known: the watch tells the rest
		}
		s.mu.Lock()
		if kept, ok := s.cache[id]; ok && kept.Active(now) && !s.keptLocked(id) {
			s.refuseLocked(id, now, fmt.Sprintf("removed from the bucket without a delete marker while it applies (%s): a rollup of the whole bucket, which hcpbot never writes; still applied here until it expires", describe(kept)), &kept)
		}
		s.mu.Unlock()
	}
}

// keptLocked reports whether key is listed as a genuine silence tampered
// with. Callers hold mu.
func (s *Store) keptLocked(key string) bool {
	r, ok := s.refused[key]
	return ok && r.Kept != nil
}

func (s *Store) apply(e jetstream.KeyValueEntry) {
	now := s.now()
	key := e.Key()
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.pruneLocked(now)
	kept, applies := s.cache[key]
	applies = applies && kept.Active(now) && s.Sealed()
	if e.Operation() != jetstream.KeyValuePut {
		if applies {
			// Nobody's silence ends early by a delete: hcpbot never
			// deletes one, so this is someone writing the bucket.
			s.refuseLocked(key, now, fmt.Sprintf("deleted from the bucket while it applies (%s); hcpbot never deletes a silence: still applied here until it expires", describe(kept)), &kept)
			return
		}
		delete(s.cache, key)
		if r, ok := s.refused[key]; ok && !r.genuine() {
			r.Deleted, r.Seen = true, now
			s.refused[key] = r
			return
		}
		if s.Sealed() && !s.refusedLocked(key) {
			// A delete marker nobody here saw the silence of: deleted
			// before this replica started, or before its watch read
			// the put. hcpbot deletes none; the trail says what it was
			// (crossCheck, at start).
			s.noteLocked(Refusal{Key: key, Seen: now, Deleted: true,
				Reason: "deleted from the bucket by someone without the bot's key (hcpbot never deletes a silence); if it was a silence, `/hcp audit` names what it silenced"})
		}
		return
	}
	sil, err := s.open(key, e.Value(), now)
	switch {
	case err != nil && applies:
		s.refuseLocked(key, now, fmt.Sprintf("replaced while it applies (%s) by a record that is refused: %v; the silence is still applied here until it expires", describe(kept), err), &kept)
		return
	case err != nil:
		delete(s.cache, key)
		s.refuseLocked(key, now, err.Error(), nil)
		return
	case applies && !same(sil, kept):
		// Sealed by a trusted key, yet another silence under the same
		// id: only a trusted key's holder can make it, not hcpbot
		// (silences are never edited). The first one read stays.
		s.refuseLocked(key, now, fmt.Sprintf("replaced while it applies (%s) by another sealed silence (%s): hcpbot never edits a silence; the first is still applied here", describe(kept), describe(sil)), &kept)
		return
	}
	if r, ok := s.refused[key]; ok && r.Kept == nil {
		delete(s.refused, key)
	}
	s.cache[key] = sil
}

// refuseLocked records a refusal of the record under key and logs it as
// an error. Callers hold mu.
func (s *Store) refuseLocked(key string, now time.Time, reason string, kept *Silence) {
	s.noteLocked(Refusal{Key: key, Reason: reason, Seen: now, Kept: kept})
}

func (s *Store) noteLocked(r Refusal) {
	key, reason := r.Key, r.Reason
	if o, listed := s.refused[key]; listed && (o.rank() == r.rank() || (o.rank() < r.rank() && o.live(r.Seen))) {
		// Listed already, and as serious: the same key put, or a
		// silence deleted, again and again must not flood the log one
		// line a write. Listed as more serious (a genuine silence
		// deleted): junk put under its key later must not turn it into
		// one refused record among many.
		if o.rank() == r.rank() {
			s.refused[key] = r
		}
		s.again++
		if isPowerOfTen(s.again) {
			s.log.Error().Str("bucket", Bucket).Int("refused_again", s.again).Str("last_key", clip(key, 80)).Str("reason", reason).
				Msg("silence records listed already refused again: someone keeps writing the silences bucket without the bot's signing key")
		}
		return
	}
	if _, ok := s.refused[key]; !ok && len(s.refused) >= maxRefusals {
		// What is certain never gives way to what may be noise: a
		// genuine silence tampered with evicts anything else, a silence
		// the trail names (whose audit record may be forged too) evicts
		// a refused record. The rest is counted, and logged sparingly:
		// a flood of records must not flood the log either.
		victim := ""
		for k, o := range s.refused {
			if o.rank() > r.rank() && (victim == "" || o.rank() > s.refused[victim].rank()) {
				victim = k
			}
		}
		s.more++
		if victim == "" {
			if s.more == 1 || isPowerOfTen(s.more) {
				s.log.Error().Str("bucket", Bucket).Int("not_listed", s.more).Str("last_key", clip(key, 80)).Str("reason", reason).
					Msg("silence records refused past what the bot lists: someone is writing the silences bucket without the bot's signing key")
			}
			return
		}
		delete(s.refused, victim)
	}
	s.log.Error().Str("bucket", Bucket).Str("key", clip(key, 80)).Str("reason", reason).
		Msg("silence refused: someone without the bot's signing key wrote the silences bucket (or an hcpbot of before sealing did)")
	s.refused[key] = r
}

func isPowerOfTen(n int) bool {
	for n >= 10 && n%10 == 0 {
		n /= 10
	}
	return n == 1
}

func (s *Store) refusedLocked(key string) bool { _, ok := s.refused[key]; return ok }

// genuine reports whether r is about a silence the bot made.
func (r Refusal) genuine() bool { return r.Kept != nil || r.Missing || r.Incomplete }

// live reports whether r, about a genuine silence, still matters at now.
func (r Refusal) live(now time.Time) bool {
	return (r.Kept != nil && r.Kept.Active(now)) || ((r.Missing || r.Incomplete) && now.Before(r.Until))
}

// rank orders refusals by how sure and how serious: a genuine silence
// tampered with (0), one the trail names missing or a comparison with
// the trail incomplete (1), a refused record (2). Refused lists them in
// that order; the first are kept longest.
func (r Refusal) rank() int {
	switch {
	case r.Kept != nil:
		return 0
	case r.Missing, r.Incomplete:
		return 1
	}
	return 2
}

// same reports whether a and b are one silence (times compared as
// instants, whatever their representation).
func same(a, b Silence) bool {
	return a.ID == b.ID && a.Cluster == b.Cluster && a.Incident == b.Incident && a.Reason == b.Reason &&
		a.CreatedBy == b.CreatedBy && a.CreatedAt.Equal(b.CreatedAt) && a.ExpiresAt.Equal(b.ExpiresAt)
}

func describe(sil Silence) string {
	return fmt.Sprintf("%s silencing %s until %s, by %s", sil.ID, sil.Target(), sil.ExpiresAt.UTC().Format(time.RFC3339), sil.CreatedBy)
}

// Refused lists the genuine silences deleted or replaced (first), then
// the records of the bucket this replica read and applies not —
// unsealed, forged, sealed by an untrusted key, invalid —, each oldest
// first; more counts the refusals past what it keeps (each was logged).
// A refusal stays while its record is in the bucket, a day after it is
// deleted, and a deleted silence's until it expires.
func (s *Store) Refused(now time.Time) (list []Refusal, more int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, r := range s.refused {
		if (r.Kept != nil && !r.Kept.Active(now)) || (r.Deleted && now.Sub(r.Seen) > refusalAfter) || ((r.Missing || r.Incomplete) && !now.Before(r.Until)) {
			delete(s.refused, key)
			continue
		}
		list = append(list, r)
	}
	slices.SortFunc(list, func(a, b Refusal) int {
		if c := cmp.Compare(a.rank(), b.rank()); c != 0 {
			return c
		}
		if c := a.Seen.Compare(b.Seen); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	return list, s.more
}

// auditSigned reports whether r carries a trusted key's signature:
// audit.Record.Sig is over audit.SigningContext and the record encoded
// without Sig, which a record read back encodes to again (its fields are
// strings, integers, a time and bytes). A record that Append did not
// encode need not, and is not believed.
func (s *Store) auditSigned(r audit.Record) bool {
	if len(r.Sig) == 0 || !slices.Contains(s.trusted, r.Key) {
		return false
	}
	kp, err := nkeys.FromPublicKey(r.Key)
	if err != nil {
		return false
	}
	sig := r.Sig
	r.Sig = nil
	body, err := json.Marshal(r)
	if err != nil {
		return false
	}
	return kp.Verify(append([]byte(audit.SigningContext), body...), sig) == nil
}

// crossCheckTimeout bounds the comparison of the trail with the bucket at
// start: it must not hold the watch long.
const crossCheckTimeout = 30 * time.Second

func (s *Store) crossCheckOnce(ctx context.Context) {
	s.mu.Lock()
	done := s.checked
	s.checked = true
	s.mu.Unlock()
	if done || !s.Sealed() {
		return
	}
	trail, ok := s.audit.(audit.Reader)
	if !ok {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, crossCheckTimeout)
	defer cancel()
	if err := s.crossCheck(cctx, trail); err != nil {
		if ctx.Err() != nil {
			return // stopping: nothing to list
		}
		// Said where a person looks, not only in the log: a flood of
		// the trail (its writers include the bot's NATS user) is how a
		// deletion made before this start would be hidden.
		s.log.Error().Err(err).Msg("silences: could not compare the whole audit trail with the bucket: a silence deleted before this start may go unnoticed")
		now := s.now()
		s.mu.Lock()
		s.noteLocked(Refusal{Key: TrailKey, Seen: now, Incomplete: true, Until: now.Add(s.max + clockSkew),
			Reason: fmt.Sprintf("the audit trail was not compared whole with the silences bucket at this replica's start (%v): a silence deleted before then may be missing from this list; a flood of the trail hides one that way, `/hcp audit` shows it", err)})
		s.mu.Unlock()
	}
}

// crossCheck lists, as refused, every silence that the trail says was
// made, that still applies and that the bucket lacks: deleted by someone
// without the bot's key before this replica started (a deletion leaves
// nothing a seal can prove). It is not applied — the audit record is no
// silence's seal, and a forged one (`/hcp audit verify` reports it)
// must not mute anything — but a person sees it in `/hcp status`.
func (s *Store) crossCheck(ctx context.Context, trail audit.Reader) error {
	now := s.now()
	// The bot's subjects only: an agent records no silence, and its
	// records must not push the bot's past what Since returns.
	recs, err := trail.Since(ctx, now.Add(-s.max-clockSkew), event.AuditFilter)
	if err != nil && !errors.Is(err, audit.ErrTooMany) {
		return fmt.Errorf("silence: read the audit trail: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range recs {
		// A sealing bot's records are chained and signed. The signature
		// is checked here too: the bot's NATS user appends to the trail,
		// and claims it made up, listed as missing silences, would crowd
		// out a real one past what Refused keeps.
		if r.Kind != audit.KindSilenced || !idPattern.MatchString(r.ActionID) || r.Chain == 0 || !s.auditSigned(r) {
			continue
		}
		_, until, ok := strings.Cut(r.Summary, ", until ")
		expires, perr := time.Parse(time.RFC3339, until)
		// No silence outlives the maximum after it was made: a record
		// saying otherwise is no record of Add's (and would stay listed).
		if !ok || perr != nil || !now.Before(expires) || expires.After(r.Time.Add(s.max+clockSkew)) {
			continue
		}
		if _, there := s.cache[r.ActionID]; there {
			continue
		}
		what := "deleted"
		if o, listed := s.refused[r.ActionID]; listed {
			if o.genuine() {
				continue
			}
			if !o.Deleted {
				// The genuine record was replaced by one refused.
				what = "replaced by a record that is refused (" + clip(o.Reason, 200) + ")"
			}
		}
		s.noteLocked(Refusal{Key: r.ActionID, Seen: now, Missing: true, Until: expires,
			Reason: fmt.Sprintf("missing from the bucket, yet the audit trail records %q (by %s, %s; `/hcp audit verify` checks that record's seal): %s by someone without the bot's key before this replica started; not applied here, re-create it with `/hcp silence` if it still matters",
				clip(r.Summary, 200), clip(r.Actor, maxUserLen), r.Time.UTC().Format(time.RFC3339), what)})
	}
	return err
}
