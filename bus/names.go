package bus

import "github.com/hcpbot/hcpbot/event"

// The names of every stream and KV bucket of hcpbot, in one place; their
// specs (what each holds, what bounds it) are in specs.go.
//
// Go identifiers: a stream's name is <Thing>StreamName and its spec
// <Thing>Stream(...); a bucket's name is <Thing>Bucket and its spec
// <Thing>KV(...). Packages that use one re-export its name (audit.StreamName,
// approval.Bucket, silence.Bucket, notify.DefaultBucket,
// chatops.ReplayBucket, digest.TicksBucket and digest.StateBucket).
//
// Persisted spelling: a new stream is named HCPBOT_<THING> (upper case, '_'
// between words) and a new bucket hcpbot-<thing> (lower case, '-' between
// words); TestNameSpelling holds every name to that rule. Five bucket names
// predate it and keep their spelling: a stream or bucket is
// found by its name, so renaming one would leave a running installation's
// data (proposals awaiting approval, silences, Slack message ids, leases)
// in a bucket nobody reads. Copying a bucket to a new name is not lossless
// either while replicas of the old version still write to the old one
// during a rolling upgrade, hence no migration.
const (
	// EventsStreamName holds every event the agents publish (package
	// event names it, beside the subjects).
	EventsStreamName = event.StreamName // "HCPBOT_EVENTS"
	// AuditStreamName is the append-only audit trail; records are
	// published on event.AuditSubject.
	AuditStreamName = "HCPBOT_AUDIT"
	// ActionsStreamName holds the action requests the bot sends, on
	// hcpbot.actions.<source>.request, until the agent of source has
	// executed each and recorded its result.
	ActionsStreamName = "HCPBOT_ACTIONS"
	// ActionsStreamSubjects are the subjects of ActionsStreamName: one per
	// source (actions.RequestSubject).
	ActionsStreamSubjects = event.SubjectRoot + ".actions.*.request"

	// LeasesBucket holds the leases of bot replicas (one key per lease).
	LeasesBucket = "HCPBOT_LEASES"
	// SilencesBucket holds silences by id.
	SilencesBucket = "HCPBOT_SILENCES"
	// ProposalsBucket holds proposals and their approval state by action
	// id.
	ProposalsBucket = "hcpbot_proposals"
	// SlackMessagesBucket maps notification keys to Slack messages.
	SlackMessagesBucket = "hcpbot_slack"
	// SlackReplayBucket remembers the Slack requests already served.
	SlackReplayBucket = "hcpbot_slack_replay"
	// DigestTicksBucket records which replica took which digest tick.
	DigestTicksBucket = "hcpbot-digest-ticks"
	// DigestStateBucket keeps each digest's previous finding set.
	DigestStateBucket = "hcpbot-digest-state"
	// ActionResultsBucket holds each executed (or refused) request's
	// answer, keyed by source and action id.
	ActionResultsBucket = "hcpbot-action-results"
	// CheckpointsBucket holds the bot's checkpoints (package
	// bot/checkpoint): a manifest per bot group and the chunks of its
	// newest checkpoint.
	CheckpointsBucket = "hcpbot-checkpoints"
)

// AuditStreamSubjects is the subject filter of AuditStreamName.
const AuditStreamSubjects = event.SubjectRoot + ".audit.>"
