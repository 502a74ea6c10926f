package bus

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hcpbot/hcpbot/event"
)

// Every stream and KV bucket of hcpbot is specified here (and named in
// names.go), so that one place says what each holds and what bounds its
// growth. The bot owns them all: it creates them and brings them to its
// configured settings (EnsureStream, EnsureKV), but the audit stream,
// which it creates only while absent (CreateStream) and never changes:
// its user may not (BotPermissions). The agent's user may change none:
// against an external NATS it waits for the events stream (WaitForStream)
// and warns when it lacks what the agent's file writes (EventsSettings);
// on its own embedded server the process, in its own name, creates it
// while absent and applies what the agent's file writes, keeping the rest
// (Local.CreateStream, Local.ApplyStream with EventsSettings.Over), so a
// setting the agent's file leaves unset stays the bot's whichever process
// starts first.
//
// Each spec has a bound (max age or TTL; KV buckets keep one value per key
// unless said otherwise): TestSpecsAreBounded lists them all.
//
// The replica count is the one setting every spec takes the same way, as
// the option WithReplicas (the deployment's nats.streamReplicas): so do
// NewLease and the packages that open a stream or bucket (audit, silence,
// approval with a WithReplicas of their own; notify's KV store, the digest
// runner and the Slack replay guard with bus.WithReplicas itself).

// Option sets what a deployment decides for the streams, buckets and
// leases of this package.
type Option func(*options)

type options struct {
	replicas int
	// Leases only (NewLease).
	leaseTTL time.Duration
	onChange func(leader bool)
}

// WithReplicas keeps n copies of a stream or bucket: 1 on a single server
// (the default; 0 means 1), 3 or 5 in a NATS cluster.
func WithReplicas(n int) Option { return func(o *options) { o.replicas = n } }

func apply(opts []Option) options {
	var o options
	for _, f := range opts {
		f(&o)
	}
	return o
}

func replicas(opts []Option) int { return apply(opts).replicas }

// Defaults of the bounds.
const (
	// DefaultEventsMaxAge is nats.eventsMaxAge's default. The bot's
	// knowledge does not depend on it: agents restate every cluster well
	// within it (watchers.RestateInterval) and when a bot starts.
	DefaultEventsMaxAge = 72 * time.Hour
	// DefaultEventsDuplicates is nats.duplicateWindow's default.
	DefaultEventsDuplicates = 15 * time.Minute
	// AuditMaxAge keeps audit records for a little over a year, long
	// enough for a yearly compliance review.
	AuditMaxAge = 400 * 24 * time.Hour
	// AuditDuplicates: retries happen within seconds; a longer window
	// costs server memory per record.
	AuditDuplicates = 10 * time.Minute
	// ProposalsTTL is how long a proposal is kept after its last change.
	// Rollback needs the Undo stored with an executed proposal, so this
	// bounds how late an action can be rolled back by id.
	ProposalsTTL = 90 * 24 * time.Hour
	// SlackMessagesTTL is how long the Slack message of an incident,
	// storm or digest is remembered after its last update. An incident
	// updated after that gets a new root message, so it is far above an
	// incident's life; resolved incidents are forgotten by the bot after
	// an hour, their records age out here.
	SlackMessagesTTL = 30 * 24 * time.Hour
	// DigestTicksTTL: tick keys only have to outlive the longest restart
	// or clock skew between replicas.
	DigestTicksTTL = 7 * 24 * time.Hour
	// DigestStateTTL: the previous finding set of a digest (one key per
	// configured digest) must survive its schedule, weekly or even
	// quarterly; a digest renamed or removed leaves a key that ages out.
	DigestStateTTL = 100 * 24 * time.Hour

	// ActionsMaxAge bounds how long a request waits in the stream for its
	// agent. It exceeds the request's own deadline (actions.QueueHorizon,
	// after which the agent refuses it anyway) so that the stream never
	// drops a request that could still run, and it is also the duplicate
	// window: a request re-sent with its action id as message id while
	// the first copy is queued, or after it ran, is dropped by the server.
	ActionsMaxAge = 15 * time.Minute
	// ActionResultsTTL bounds how long an agent's answer is kept: as long
	// as a proposal (ProposalsTTL), because a rollback restores only what
	// the agent itself recorded for the action it undoes, and the agent
	// reads its answer to acknowledge a redelivered request without running
	// it again.
	ActionResultsTTL = ProposalsTTL
	// CheckpointsTTL bounds how long a checkpoint's keys are kept after
	// they were written, and the purge markers of the chunks a newer
	// checkpoint replaced. A checkpoint older than the events stream's
	// max age is of no use (the events after it are gone), so a bot that
	// writes one every hour never loses the newest to it.
	CheckpointsTTL = DefaultEventsMaxAge
)

// EventsStream is the stream the agents publish to and the bots consume
// from, with the defaults both sides create it with (the config overrides
// replicas and retention); maxAge and duplicates 0 mean the defaults. The
// duplicate window is what makes a restated fact from a restarted agent or
// a new leader a no-op.
func EventsStream(maxAge, duplicates time.Duration, opts ...Option) StreamSpec {
	maxAge = durOr(maxAge, DefaultEventsMaxAge)
	duplicates = durOr(duplicates, DefaultEventsDuplicates)
	return StreamSpec{
		Name:       EventsStreamName,
		Subjects:   []string{event.EventsStreamSubjects},
		MaxAge:     maxAge,
		Replicas:   replicas(opts),
		Duplicates: min(duplicates, maxAge),
	}
}

// EventsSettings are the events stream settings a configuration file
// writes (nats.streamReplicas, eventsMaxAge, duplicateWindow); a zero
// field is one it leaves unset. A process that does not own the stream
// (the agent) must tell a value written from a default: a setting it was
// not given is not its to check or apply, the bot's configuration decides
// it.
type EventsSettings struct {
	Replicas   int
	MaxAge     time.Duration
	Duplicates time.Duration
}

// Spec is the events stream with these settings and the defaults for the
// unset ones: what a process creates while the stream is absent.
func (s EventsSettings) Spec() StreamSpec {
	return EventsStream(s.MaxAge, s.Duplicates, WithReplicas(s.Replicas))
}

// Over is the events stream with these settings and, for the unset ones,
// those of cfg (an existing stream, as the server reports it): what a
// process that may change the stream applies so that what it sets holds
// and nothing else changes. The duplicate window is capped at the max age,
// as JetStream requires.
func (s EventsSettings) Over(cfg jetstream.StreamConfig) StreamSpec {
	spec := s.Spec()
	if s.Replicas == 0 {
		spec.Replicas = max(cfg.Replicas, 1)
	}
	if s.MaxAge == 0 {
		spec.MaxAge = cfg.MaxAge
	}
	if s.Duplicates == 0 {
		spec.Duplicates = cfg.Duplicates
	}
	if spec.MaxAge > 0 {
		spec.Duplicates = min(spec.Duplicates, spec.MaxAge)
	}
	return spec
}

// Drift names the settings s writes that cfg (the events stream as the
// server reports it) does not have, as StreamDrift does ("field: have →
// want"); nil when it has them all. Unset ones are not compared.
func (s EventsSettings) Drift(cfg jetstream.StreamConfig) []string {
	var d drift
	if s.Replicas > 0 {
		d.diff("replicas", max(cfg.Replicas, 1), s.Replicas)
	}
	if s.MaxAge > 0 {
		d.diff("max age", cfg.MaxAge, s.MaxAge)
	}
	if s.Duplicates > 0 {
		d.diff("duplicate window", cfg.Duplicates, s.Duplicates)
	}
	return d
}

// settingsDrift names the settings EventsSettings covers that cfg (an
// existing stream) has other than spec.
func settingsDrift(cfg jetstream.StreamConfig, spec StreamSpec) []string {
	var d drift
	d.diff("replicas", max(cfg.Replicas, 1), max(spec.Replicas, 1))
	d.diff("max age", cfg.MaxAge, spec.MaxAge)
	d.diff("duplicate window", cfg.Duplicates, spec.Duplicates)
	return d
}

// IsZero reports whether s writes none of the settings.
func (s EventsSettings) IsZero() bool { return s == EventsSettings{} }

// AuditStream is the append-only audit trail: records are never deleted
// or purged, and a full stream refuses new records rather than silently
// dropping old ones. maxAge and duplicates 0 mean the defaults above.
func AuditStream(maxAge, duplicates time.Duration, opts ...Option) StreamSpec {
	if maxAge <= 0 {
		maxAge = AuditMaxAge
	}
	if duplicates <= 0 {
		duplicates = AuditDuplicates
	}
	return StreamSpec{
		Name:        AuditStreamName,
		Description: "hcpbot audit trail (append-only)",
		Subjects:    []string{AuditStreamSubjects},
		MaxAge:      maxAge,
		Replicas:    replicas(opts),
		Duplicates:  min(duplicates, maxAge),
		Discard:     jetstream.DiscardNew,
		DenyDelete:  true,
		DenyPurge:   true,
	}
}

// ActionsStream is the work-queue stream of action requests (package
// actions speaks the protocol): a message is removed once the agent
// acknowledges it, which it does only after recording the result. The bot
// creates it; the agents, whose NATS users may not create or update
// streams, only use it.
func ActionsStream(opts ...Option) StreamSpec {
	return StreamSpec{
		Name:       ActionsStreamName,
		Subjects:   []string{ActionsStreamSubjects},
		Retention:  jetstream.WorkQueuePolicy,
		MaxAge:     ActionsMaxAge,
		Replicas:   replicas(opts),
		Duplicates: ActionsMaxAge,
	}
}

// ProposalsKV holds proposals and their approval state by action id; ttl
// 0 means ProposalsTTL.
func ProposalsKV(ttl time.Duration, opts ...Option) KVSpec {
	return KVSpec{Bucket: ProposalsBucket, Description: "hcpbot proposals and their approval state",
		TTL: durOr(ttl, ProposalsTTL), Replicas: replicas(opts)}
}

// SilencesKV holds silences by id; ttl must outlive the longest silence
// (package silence derives it).
func SilencesKV(ttl time.Duration, opts ...Option) KVSpec {
	return KVSpec{Bucket: SilencesBucket, Description: "hcpbot silences (muted clusters and incidents)",
		TTL: ttl, Replicas: replicas(opts)}
}

// LeasesKV holds the bot's leader leases; a key nobody renewed for ttl
// goes.
func LeasesKV(ttl time.Duration, opts ...Option) KVSpec {
	return KVSpec{Bucket: LeasesBucket, TTL: ttl, Replicas: replicas(opts)}
}

// SlackMessagesKV maps notification keys to Slack messages; ttl 0 means
// SlackMessagesTTL.
func SlackMessagesKV(bucket string, ttl time.Duration, opts ...Option) KVSpec {
	if bucket == "" {
		bucket = SlackMessagesBucket
	}
	return KVSpec{Bucket: bucket, TTL: durOr(ttl, SlackMessagesTTL), Replicas: replicas(opts)}
}

// SlackReplayKV remembers served Slack requests for ttl, the replay
// window.
func SlackReplayKV(ttl time.Duration, opts ...Option) KVSpec {
	return KVSpec{Bucket: SlackReplayBucket, TTL: ttl, Replicas: replicas(opts)}
}

// DigestTicksKV records which replica took which digest tick.
func DigestTicksKV(opts ...Option) KVSpec {
	return KVSpec{Bucket: DigestTicksBucket, TTL: DigestTicksTTL, Replicas: replicas(opts)}
}

// DigestStateKV keeps each digest's previous finding set.
func DigestStateKV(opts ...Option) KVSpec {
	return KVSpec{Bucket: DigestStateBucket, TTL: DigestStateTTL, Replicas: replicas(opts)}
}

// ActionResultsKV is the bucket of action results; the bot creates it, the
// agents only use it.
func ActionResultsKV(opts ...Option) KVSpec {
	return KVSpec{Bucket: ActionResultsBucket, TTL: ActionResultsTTL, Replicas: replicas(opts)}
}

// CheckpointsKV holds the bot's checkpoints (bot/checkpoint); ttl 0 means
// CheckpointsTTL. A checkpoint is tens of MB at 2,000 hosted clusters, over
// the 1 MiB message limit: it is stored in chunks, each one value.
func CheckpointsKV(ttl time.Duration, opts ...Option) KVSpec {
	return KVSpec{Bucket: CheckpointsBucket, Description: "hcpbot bot checkpoints (state and stream sequence)",
		TTL: durOr(ttl, CheckpointsTTL), Replicas: replicas(opts)}
}

func durOr(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}
