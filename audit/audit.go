package audit

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/redact"
)

// Stream names and defaults.
const (
	// StreamName is the JetStream stream holding the audit trail.
	StreamName = bus.AuditStreamName
	// StreamSubjects is its subject filter; records are published on
	// event.AuditSubject(source).
	StreamSubjects = bus.AuditStreamSubjects
	// DefaultMaxAge keeps records for a little over a year, long enough
	// for a yearly compliance review.
	DefaultMaxAge = bus.AuditMaxAge
	// DefaultDuplicates is how long record IDs are remembered for
	// de-duplication. Retries happen within seconds; a longer window costs
	// server memory per record.
	DefaultDuplicates = bus.AuditDuplicates
	// DefaultSource is the subject token used for records that name no
	// source (e.g. a refusal for an unknown action id).
	DefaultSource = "bot"
	// MaxFieldBytes bounds each free-text field so that a record always
	// fits the server's maximum payload; longer text is cut.
	MaxFieldBytes = 16 << 10
)

// Sentinel errors; test them with errors.Is.
var (
	// ErrInvalid: the record cannot be stored as given.
	ErrInvalid = errors.New("invalid audit record")
)

// Kind is what happened.
type Kind string

// The kinds of audit records.
const (
	KindProposed   Kind = "proposed"
	KindApproved   Kind = "approved"
	KindRejected   Kind = "rejected"
	KindRefused    Kind = "refused"
	KindExecuted   Kind = "executed"
	KindFailed     Kind = "failed"
	KindRolledBack Kind = "rolled-back"
	KindExpired    Kind = "expired"
	// KindSilenced: notifications for a cluster or incident were muted
	// (bot/silence); ActionID holds the silence id.
	KindSilenced Kind = "silenced"
	// KindForged: a record in the approval store claims a decision that
	// no seal proves (someone wrote the store without the signing key);
	// the approval loop reports it, ActionID naming the proposal.
	KindForged Kind = "forged"
)

// agentKinds are what an agent records on its own subject: what it ran,
// what it refused. A record of another kind there, or of another
// management cluster, is misplaced (Verify) and not read back.
var agentKinds = map[Kind]bool{KindExecuted: true, KindRefused: true}

// misplaced says why r, stored on subject, is not where its writer may
// put it; "" when it is. Only agent subjects are judged here: a bot
// subject's record is judged by its signature and its source.
func misplaced(subject string, r Record) string {
	src, agent := event.AgentAuditSource(subject)
	switch {
	case !agent:
		return ""
	case r.Source != src:
		return fmt.Sprintf("the agent of %s wrote a record of %q", src, r.Source)
	case !agentKinds[r.Kind]:
		return fmt.Sprintf("the agent of %s wrote a %q record; agents record only what they executed or refused", src, r.Kind)
	}
	return ""
}

var kinds = map[Kind]bool{
	KindProposed: true, KindApproved: true, KindRejected: true, KindRefused: true,
	KindExecuted: true, KindFailed: true, KindRolledBack: true, KindExpired: true,
	KindSilenced: true, KindForged: true,
}

// Record is one audit entry. Free-text fields are redacted on Append.
type Record struct {
	// ID identifies the record and de-duplicates retried appends. Append
	// fills in a random one when empty; a caller that may retry must set
	// it (NewID) so that the retry carries the same ID.
	ID string `json:"id"`
	// Time is when it happened; Append fills in the current time if zero.
	Time time.Time `json:"time"`
	// Actor is the Slack user id of who acted ("" for the bot itself,
	// e.g. an expiry sweep).
	Actor    string `json:"actor,omitempty"`
	Kind     Kind   `json:"kind"`
	ActionID string `json:"actionID,omitempty"`
	// Cluster is the hosted cluster ("namespace/name") acted on.
	Cluster string `json:"cluster,omitempty"`
	// Source is the management cluster (agent) concerned; it selects the
	// subject. Empty means the Log's default source.
	Source  string `json:"source,omitempty"`
	Summary string `json:"summary,omitempty"`
	Diff    string `json:"diff,omitempty"`
	Result  string `json:"result,omitempty"`
	Reason  string `json:"reason,omitempty"`

	// The chain and the signature are set by Append (whatever the caller
	// put there); see the package documentation.
	//
	// Chain is ChainVersion on chained records, 0 on records written
	// before the trail was chained.
	Chain int `json:"chain,omitempty"`
	// PrevSeq and PrevDigest name the previous message on the record's
	// subject: its stream sequence and the hex SHA-256 of its exact
	// bytes. Both are empty on the first record of a subject.
	PrevSeq    uint64 `json:"prevSeq,omitempty"`
	PrevDigest string `json:"prevDigest,omitempty"`
	// Key is the public nkey of the Log's Signer; Sig its ed25519
	// signature over SigningContext and the record encoded without Sig.
	// Sig must stay the last field (signedPart relies on it).
	Key string `json:"key,omitempty"`
	Sig []byte `json:"sig,omitempty"`

	// Seq is the stream sequence, set when reading; never written.
	Seq uint64 `json:"-"`
}

// Appender writes audit records. *Log implements it; other packages depend
// on this rather than on the stream.
type Appender interface {
	Append(ctx context.Context, r Record) error
}

// Reader reads back the newest records.
type Reader interface {
	Recent(ctx context.Context, n int) ([]Record, error)
	// Since reads every record from start on, of the subjects given (all
	// when none), oldest first.
	Since(ctx context.Context, start time.Time, subjects ...string) ([]Record, error)
}

// Log is the audit trail on JetStream. It is safe for concurrent use.
type Log struct {
	js            ConnPublisher
	stream        jetstream.Stream
	defaultSource string
	now           func() time.Time
	// subject maps a record's source onto its subject.
	subject func(source string) (string, error)
	signer  Signer // nil: records are not signed
	// maxSince bounds Since; 0 means MaxSince (tests lower it).
	maxSince int

	headsMu sync.Mutex
	heads   map[string]*head // by subject
}

var (
	_ Appender = (*Log)(nil)
	_ Reader   = (*Log)(nil)
)

type options struct {
	replicas      int
	maxAge        time.Duration
	duplicates    time.Duration
	defaultSource string
	now           func() time.Time
	signer        Signer
}

// Option configures Open.
type Option func(*options)

// WithReplicas sets the stream's replica count (1 standalone, 3 in a
// cluster). Default 1.
func WithReplicas(n int) Option { return func(o *options) { o.replicas = n } }

// WithMaxAge sets how long records are kept. Default DefaultMaxAge.
func WithMaxAge(d time.Duration) Option { return func(o *options) { o.maxAge = d } }

// WithDuplicateWindow sets how long record IDs are remembered. Default
// DefaultDuplicates.
func WithDuplicateWindow(d time.Duration) Option { return func(o *options) { o.duplicates = d } }

// WithDefaultSource sets the source used for records without one. Default
// DefaultSource.
func WithDefaultSource(s string) Option { return func(o *options) { o.defaultSource = s } }

// WithClock sets the clock used for records without a time (tests).
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// WithSigner signs every record the Log appends with s (the bot's
// action-signing key): whoever holds only the bot's NATS credentials can
// then still append, but not a record that Verify accepts.
func WithSigner(s Signer) Option { return func(o *options) { o.signer = s } }

// ConnPublisher is what a Log appends with: JetStream publishes, and
// their connection, on which it reads the last record of a subject
// directly (msgGet).
type ConnPublisher interface {
	jetstream.Publisher
	Conn() *nats.Conn
}

// StreamPublisher is what Open takes: it creates the audit stream, then
// appends to it.
type StreamPublisher interface {
	jetstream.StreamManager
	ConnPublisher
}

// Open creates the audit stream while it is absent, and returns the Log
// writing to it. Every process may call it at start-up. It never changes
// an existing stream: the bot's NATS user may not (a stolen seed could
// otherwise shorten the trail); when the stream's settings differ from
// the configured ones, it says so in a warning (zerolog.Ctx(ctx)) and
// goes on: an operator with admin credentials updates the stream.
func Open(ctx context.Context, js StreamPublisher, opts ...Option) (*Log, error) {
	o := options{
		replicas:      1,
		maxAge:        DefaultMaxAge,
		duplicates:    DefaultDuplicates,
		defaultSource: DefaultSource,
		now:           time.Now,
	}
	for _, opt := range opts {
		opt(&o)
	}
	if o.replicas < 1 || o.maxAge <= 0 || o.duplicates <= 0 {
		return nil, fmt.Errorf("audit: replicas, max age and duplicate window must be positive")
	}
	if _, err := event.AuditSubject(o.defaultSource); err != nil {
		return nil, fmt.Errorf("audit: default source: %w", err)
	}
	spec := bus.AuditStream(o.maxAge, o.duplicates, bus.WithReplicas(o.replicas))
	s, err := bus.CreateStream(ctx, js, spec)
	if err != nil {
		return nil, fmt.Errorf("audit: create stream %s: %w", StreamName, err)
	}
	if drift := bus.StreamDrift(s.CachedInfo().Config, spec); len(drift) > 0 {
		zerolog.Ctx(ctx).Warn().Str("stream", StreamName).Strs("differs", drift).
			Msg("the audit stream's settings differ from the configured ones; the bot may not change them: an operator with admin NATS credentials must update the stream")
	}
	return &Log{js: js, stream: s, defaultSource: o.defaultSource, now: o.now, subject: event.AuditSubject,
		signer: o.signer, heads: map[string]*head{}}, nil
}

// ForAgent returns a Log for the agent of source: it appends on
// event.AgentAuditSubject(source), into the stream the bot created with
// Open, and never creates or changes the stream (the agent's NATS user
// may not). Its records are chained like the bot's and not signed: NATS
// permissions let only that agent write its subject. Its Recent, Since
// and Verify fail: the agent does not read the trail.
func ForAgent(js ConnPublisher, source string) (*Log, error) {
	if _, err := event.AgentAuditSubject(source); err != nil {
		return nil, fmt.Errorf("audit: agent source: %w", err)
	}
	return &Log{js: js, defaultSource: source, now: time.Now, subject: func(s string) (string, error) {
		if s != source {
			return "", fmt.Errorf("the agent of %s records nothing of %q", source, s)
		}
		return event.AgentAuditSubject(source)
	}, heads: map[string]*head{}}, nil
}

// idPattern keeps record IDs short and free of characters that would need
// escaping anywhere they are shown.
var idPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// NewID returns a random record ID ("aud-" and 26 base32 characters).
func NewID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return "aud-" + idEncoding.EncodeToString(b)
}

// Append redacts r and writes it, chained onto the last record of its
// subject (and signed, WithSigner). Appending the same ID again on the
// same subject within the duplicate window is a no-op that returns nil,
// so a retry is safe. A Log of ForAgent appends only what an agent
// records (executed, refused) of its own source.
func (l *Log) Append(ctx context.Context, r Record) error {
	if r.ID == "" {
		r.ID = NewID()
	}
	if !idPattern.MatchString(r.ID) {
		return fmt.Errorf("%w: id %q must match %s", ErrInvalid, r.ID, idPattern)
	}
	if !kinds[r.Kind] {
		return fmt.Errorf("%w: unknown kind %q", ErrInvalid, r.Kind)
	}
	if r.Source == "" {
		r.Source = l.defaultSource
	}
	subject, err := l.subject(r.Source)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if r.Time.IsZero() {
		r.Time = l.now()
	}
	r.Time = r.Time.UTC()
	if why := misplaced(subject, r); why != "" {
		return fmt.Errorf("%w: %s", ErrInvalid, why)
	}
	return l.appendChained(ctx, subject, Redact(r))
}

// Redact returns r with credentials removed from every free-text field and
// each field cut to MaxFieldBytes. Append calls it; it is exported for
// callers that show records elsewhere before appending them.
func Redact(r Record) Record {
	for _, f := range []*string{&r.Actor, &r.ActionID, &r.Cluster, &r.Summary, &r.Diff, &r.Result, &r.Reason} {
		// Cut after redacting: a cut could leave a URL without the '@'
		// that lets RedactText recognise the userinfo.
		*f = truncate(redact.RedactText(*f), MaxFieldBytes)
	}
	return r
}

const cutMark = " …[truncated]"

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len(cutMark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + cutMark
}

// String renders a record on one line, for logs and chat.
func (r Record) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", r.Time.UTC().Format(time.RFC3339), r.Kind)
	if r.ActionID != "" {
		fmt.Fprintf(&b, " %s", r.ActionID)
	}
	if r.Cluster != "" {
		fmt.Fprintf(&b, " on %s", r.Cluster)
	}
	if r.Actor != "" {
		fmt.Fprintf(&b, " by %s", r.Actor)
	}
	if r.Summary != "" {
		fmt.Fprintf(&b, ": %s", r.Summary)
	}
	if r.Reason != "" {
		fmt.Fprintf(&b, " (%s)", r.Reason)
	}
	return b.String()
}
