package bus

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hcpbot/hcpbot/event"
)

// Every stream and KV bucket of hcpbot is named and specified here, so
// that one place says what each holds and what bounds its growth. The bot
// owns them all: it creates them and brings them to its configured
// settings (EnsureStream, EnsureKV). The agent never changes one: against
// an external NATS it waits for the events stream (WaitForStream), on its
// own embedded server it creates it only while absent (CreateStream), so
// whichever process starts first, the bot's settings are the ones kept.
//
// Each spec has a bound (max age or TTL; KV buckets keep one value per key
// unless said otherwise): TestSpecsAreBounded lists them all.

// Stream and bucket names. Packages re-export the ones they use.
const (
	EventsStreamName = event.StreamName
	AuditStreamName  = "HCPBOT_AUDIT"
	// AuditStreamSubjects: records are published on event.AuditSubject.
	AuditStreamSubjects = event.SubjectRoot + ".audit.>"

	ProposalsBucket     = "hcpbot_proposals"
	SilencesBucket      = "HCPBOT_SILENCES"
	SlackMessagesBucket = "hcpbot_slack"
	SlackReplayBucket   = "hcpbot_slack_replay"
	DigestTicksBucket   = "hcpbot-digest-ticks"
	DigestStateBucket   = "hcpbot-digest-state"
)

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
)

// AuditStream is the append-only audit trail: records are never deleted
// or purged, and a full stream refuses new records rather than silently
// dropping old ones. maxAge and duplicates 0 mean the defaults above.
func AuditStream(replicas int, maxAge, duplicates time.Duration) StreamSpec {
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
		Replicas:    replicas,
		Duplicates:  min(duplicates, maxAge),
		Discard:     jetstream.DiscardNew,
		DenyDelete:  true,
		DenyPurge:   true,
	}
}

// ProposalsKV holds proposals and their approval state by action id; ttl
// 0 means ProposalsTTL.
func ProposalsKV(replicas int, ttl time.Duration) KVSpec {
	return KVSpec{Bucket: ProposalsBucket, Description: "hcpbot proposals and their approval state",
		TTL: durOr(ttl, ProposalsTTL), Replicas: replicas}
}

// SilencesKV holds silences by id; ttl must outlive the longest silence
// (package silence derives it).
func SilencesKV(replicas int, ttl time.Duration) KVSpec {
	return KVSpec{Bucket: SilencesBucket, Description: "hcpbot silences (muted clusters and incidents)",
		TTL: ttl, Replicas: replicas}
}

// LeasesKV holds the bot's leader leases; a key nobody renewed for ttl
// goes.
func LeasesKV(replicas int, ttl time.Duration) KVSpec {
	return KVSpec{Bucket: LeaseBucket, TTL: ttl, Replicas: replicas}
}

// SlackMessagesKV maps notification keys to Slack messages; ttl 0 means
// SlackMessagesTTL.
func SlackMessagesKV(bucket string, replicas int, ttl time.Duration) KVSpec {
	if bucket == "" {
		bucket = SlackMessagesBucket
	}
	return KVSpec{Bucket: bucket, TTL: durOr(ttl, SlackMessagesTTL), Replicas: replicas}
}

// SlackReplayKV remembers served Slack requests for ttl, the replay
// window.
func SlackReplayKV(replicas int, ttl time.Duration) KVSpec {
	return KVSpec{Bucket: SlackReplayBucket, TTL: ttl, Replicas: replicas}
}

// DigestTicksKV records which replica took which digest tick.
func DigestTicksKV(replicas int) KVSpec {
	return KVSpec{Bucket: DigestTicksBucket, TTL: DigestTicksTTL, Replicas: replicas}
}

// DigestStateKV keeps each digest's previous finding set.
func DigestStateKV(replicas int) KVSpec {
	return KVSpec{Bucket: DigestStateBucket, TTL: DigestStateTTL, Replicas: replicas}
}

func durOr(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}
