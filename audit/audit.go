package audit

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

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
)

var kinds = map[Kind]bool{
	KindProposed: true, KindApproved: true, KindRejected: true, KindRefused: true,
	KindExecuted: true, KindFailed: true, KindRolledBack: true, KindExpired: true,
	KindSilenced: true,
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

	// Seq is the stream sequence, set by Recent; never written.
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
}

// Log is the audit trail on JetStream. It is safe for concurrent use.
type Log struct {
	js            jetstream.JetStream
	stream        jetstream.Stream
	defaultSource string
	now           func() time.Time
	// subject maps a record's source onto its subject.
	subject func(source string) (string, error)
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

// Open creates the audit stream while it is absent, and returns the Log
// writing to it. Every process may call it at start-up. It never changes
// an existing stream: the bot's NATS user may not (a stolen seed could
// otherwise shorten the trail); when the stream's settings differ from
// the configured ones, it says so in a warning (zerolog.Ctx(ctx)) and
// goes on: an operator with admin credentials updates the stream.
func Open(ctx context.Context, js jetstream.JetStream, opts ...Option) (*Log, error) {
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
	return &Log{js: js, stream: s, defaultSource: o.defaultSource, now: o.now, subject: event.AuditSubject}, nil
}

// ForAgent returns a Log for the agent of source: it appends on
// event.AgentAuditSubject(source), into the stream the bot created with
// Open, and never creates or changes the stream (the agent's NATS user
// may not). Its Recent fails: the agent does not read the trail.
func ForAgent(js jetstream.JetStream, source string) (*Log, error) {
	if _, err := event.AgentAuditSubject(source); err != nil {
		return nil, fmt.Errorf("audit: agent source: %w", err)
	}
	return &Log{js: js, defaultSource: source, now: time.Now, subject: func(string) (string, error) {
		return event.AgentAuditSubject(source)
	}}, nil
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

// Append redacts r and writes it. Appending the same ID again within the
// duplicate window is a no-op that returns nil, so a retry is safe.
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
	r = Redact(r)
	data, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("audit: encode record %s: %w", r.ID, err)
	}
	// The expected stream guards against another stream capturing the
	// subject, where the record would not enjoy the append-only settings.
	if _, err := l.js.Publish(ctx, subject, data, jetstream.WithMsgID(r.ID), jetstream.WithExpectStream(StreamName)); err != nil {
		return fmt.Errorf("audit: append record %s: %w", r.ID, err)
	}
	return nil
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

// recentFetchWait bounds one fetch of Recent; the messages are stored, so
// they arrive at once and a short wait only matters on a slow link.
const recentFetchWait = 2 * time.Second

// Recent returns the newest n records, newest first. It reads with a
// short-lived ordered consumer starting n messages before the end: the
// stream denies deletion, so sequences between first and last have no
// holes and the start sequence is exact. Records that cannot be decoded
// (not written by Append) are skipped.
func (l *Log) Recent(ctx context.Context, n int) ([]Record, error) {
	if l.stream == nil {
		return nil, errors.New("audit: this log only appends (ForAgent)")
	}
	if n <= 0 {
		return nil, nil
	}
	info, err := l.stream.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("audit: stream info: %w", err)
	}
	st := info.State
	if st.Msgs == 0 {
		return nil, nil
	}
	last := st.LastSeq
	start := st.FirstSeq
	if last >= uint64(n) && last-uint64(n)+1 > start {
		start = last - uint64(n) + 1
	}
	cons, err := l.stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       start,
		InactiveThreshold: 30 * time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("audit: read consumer: %w", err)
	}
	defer func() {
		// The consumer is ephemeral and expires on its own; deleting it
		// now only saves server resources, so the error does not matter.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = l.stream.DeleteConsumer(dctx, cons.CachedInfo().Name)
	}()

	out := make([]Record, 0, min(uint64(n), last-start+1))
	for {
		want := int(min(last-start+1, 256))
		batch, err := cons.Fetch(want, jetstream.FetchMaxWait(recentFetchWait))
		if err != nil {
			return nil, fmt.Errorf("audit: read: %w", err)
		}
		got := 0
		done := false
		for msg := range batch.Messages() {
			got++
			meta, err := msg.Metadata()
			if err != nil {
				continue
			}
			seq := meta.Sequence.Stream
			if seq > last {
				// Appended after we looked; not part of this answer.
				done = true
				continue
			}
			var r Record
			if err := json.Unmarshal(msg.Data(), &r); err == nil {
				r.Seq = seq
				out = append(out, r)
			}
			if seq == last {
				done = true
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return nil, fmt.Errorf("audit: read: %w", err)
		}
		if done {
			break
		}
		if got == 0 {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("audit: read: %w", err)
			}
			return nil, fmt.Errorf("audit: read: stream ended before sequence %d", last)
		}
	}
	// Newest first; the consumer delivered oldest first.
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	if len(out) > n {
		out = out[:n]
	}
	return out, nil
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
