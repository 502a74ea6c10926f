package bus

import (
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/partition"
)

// The permission split of hcpbot's NATS users, in Go: what the embedded
// server grants each role (StartLocal). configs/deploy/nats/nats.conf is
// the reviewed artefact a deployed server runs; these must grant exactly
// what it grants (configs/deploy.TestNATSConfMatchesGoPermissions compares
// them, list by list). Edit both together.
//
// Allow lists are exact: a subject not listed is refused. Deny lists
// repeat what must never be granted, so that a later, broader allow cannot
// grant it by accident (deny wins).

// JetStream API subjects, per stream.
func jsStreamAPI(op, stream string) string { return "$JS.API.STREAM." + op + "." + stream }

// streamConsumers are the subjects that create, look up and read through
// consumers of stream (ordered consumers, fetches).
func streamConsumers(stream string) []string {
	return []string{"$JS.API.CONSUMER.*." + stream, "$JS.API.CONSUMER.*." + stream + ".>", "$JS.API.CONSUMER.MSG.NEXT." + stream + ".*"}
}

// ownedStream: the bot creates stream while absent and looks it up. It
// never updates one: an update can add a source or a mirror, which the
// server then writes onto the stream's subjects whatever the user may
// publish (an agent's answers, its events); settings are changed by an
// operator with admin credentials.
func ownedStream(stream string) []string {
	return []string{jsStreamAPI("CREATE", stream), jsStreamAPI("INFO", stream)}
}

// ownedBucket: the bot creates the bucket, reads (direct get) and writes
// it; watched adds the consumers and flow control of a KV watch.
func ownedBucket(bucket string, watched bool) []string {
	s := "KV_" + bucket
	out := append(ownedStream(s), "$JS.API.DIRECT.GET."+s+".>")
	if watched {
		out = append(out, "$JS.API.CONSUMER.*."+s, "$JS.API.CONSUMER.*."+s+".>", "$JS.FC."+s+".>")
	}
	return append(out, "$KV."+bucket+".>")
}

// auditRefused is what nobody's user may do to the audit trail: change
// its settings (a MaxMsgs of 1 with Discard old would keep one record of
// fifty, deny_delete and deny_purge notwithstanding), delete it, purge it,
// delete a record. Changing its settings takes an operator with admin
// credentials.
func auditRefused() []string {
	return []string{
		jsStreamAPI("UPDATE", AuditStreamName), jsStreamAPI("DELETE", AuditStreamName),
		jsStreamAPI("PURGE", AuditStreamName), jsStreamAPI("MSG.DELETE", AuditStreamName),
	}
}

// FleetSubjects are the subjects bot groups ask each other on and answer
// into (package bot/fleet, wire.Filter): the bot's user publishes and
// subscribes there, an agent's does neither.
const FleetSubjects = event.SubjectRoot + ".fleet.>"

// BotPermissions are the rights of the bot's user (all replicas): it owns
// the events and actions streams and every KV bucket (creates and updates
// them, reads them through consumers and direct gets, writes the buckets
// but ActionResultsBucket, the agents' answers, which it only reads);
// the audit stream it creates while absent, looks up, reads (consumers,
// and MSG.GET for the last record of a subject) and appends to, but never
// changes. It queues action requests, appends audit records and asks the
// agents to restate their clusters; it never consumes the agents'
// requests, publishes events or deletes anything. Its replies arrive on
// its own inbox prefix only. With partitions, its groups ask and answer
// each other on FleetSubjects (answers sealed with its signing key: these
// rights alone make no answer that a group believes).
func BotPermissions() *server.Permissions {
	allow := []string{
		ActionsStreamSubjects,
		event.AuditFilter,
		event.RestateSubject,
		// Asks the agents whether an approver's identity may make a
		// change (core NATS request; the agent answers on the reply).
		event.IdentityCheckFilter,
		// Account limits and usage: the KV client asks before creating a
		// bucket.
		"$JS.API.INFO",
		FleetSubjects,
	}
	allow = append(allow, ownedStream(EventsStreamName)...)
	allow = append(allow, streamConsumers(EventsStreamName)...)
	allow = append(allow, jsStreamAPI("CREATE", AuditStreamName), jsStreamAPI("INFO", AuditStreamName), jsStreamAPI("MSG.GET", AuditStreamName))
	allow = append(allow, streamConsumers(AuditStreamName)...)
	allow = append(allow, ownedBucket(ProposalsBucket, true)...)
	allow = append(allow, ownedBucket(SilencesBucket, true)...)
	for _, b := range []string{LeasesBucket, SlackMessagesBucket, SlackReplayBucket, DigestTicksBucket, DigestStateBucket, CheckpointsBucket} {
		allow = append(allow, ownedBucket(b, false)...)
	}
	allow = append(allow, ownedStream(ActionsStreamName)...)
	allow = append(allow, ownedStream("KV_"+ActionResultsBucket)...)
	allow = append(allow, "$JS.API.DIRECT.GET.KV_"+ActionResultsBucket+".>")

	deny := []string{
		event.EventsStreamSubjects,
		"$KV." + ActionResultsBucket + ".>",
		"$JS.API.CONSUMER.*." + ActionsStreamName + ".>", "$JS.API.CONSUMER.*." + ActionsStreamName,
		"$JS.API.STREAM.UPDATE.>", "$JS.API.STREAM.DELETE.>", "$JS.API.STREAM.PURGE.>", "$JS.API.STREAM.MSG.DELETE.>",
	}
	deny = append(deny, auditRefused()...)
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: allow, Deny: deny},
		Subscribe: &server.SubjectPermission{Allow: []string{event.BotInboxPrefix + ".>", FleetSubjects}},
	}
}

// AgentPermissions are AgentPermissionsIn with one bot group.
func AgentPermissions(source string) (*server.Permissions, error) {
	return AgentPermissionsIn(source, partition.Set{})
}

// AgentPermissionsIn are the rights of the user of the agent of source (all
// its replicas) with the bot groups of set: it publishes its own events
// (six tokens, event.Subject; with several groups also on its group's
// tag, below) and audit records, looks up
// the events and audit streams, reads the last audit record of its
// subject (MSG.GET, for the records' chain), reads the approval store,
// consumes its own action requests through its durable consumer
// (agent-<source>, created with its own subject as the only filter, which
// the server checks against the permitted subject), and reads and creates
// its own keys in ActionResultsBucket. It changes no stream and writes no
// other bucket; its replies arrive on its own inbox prefix only, and it
// hears the bots' restatement requests.
//
// A '.' in source is '~' in subjects (event.SourceToken) and '_' in the
// consumer name and result keys (package actions' sourceKey, which this
// package cannot import: actions imports bus).
//
// Events: nats-server applies the account's subject mappings before it
// checks a publish permission (server/parser.go: selectMappedSubject,
// then processInboundMsg's pubAllowedFullCheck), so with several groups
// what is checked is the tagged subject the mapping made. The allow list
// names that tag, the group of source and no other: an agent that
// publishes a subject it tagged itself (eight tokens, which the mapping
// of six does not touch) cannot steer its events into another group's
// tag (TestI30AttackAgentSteersItsEventsToAnotherGroup). Exactly six
// tokens otherwise ("<source>.*.*.*"): no subject of another shape.
func AgentPermissionsIn(source string, set partition.Set) (*server.Permissions, error) {
	tok, err := event.SourceToken(source)
	if err != nil {
		return nil, fmt.Errorf("bus: agent permissions: %w", err)
	}
	inbox, err := event.AgentInboxPrefix(source)
	if err != nil {
		return nil, fmt.Errorf("bus: agent permissions: %w", err)
	}
	key := strings.ReplaceAll(source, ".", "_")
	consumer := "agent-" + key
	results := "KV_" + ActionResultsBucket
	events := event.EventsSubjectPrefix + "." + tok + ".*.*.*"
	allow := []string{
		// Its own events and audit records (JetStream publishes).
		events,
		event.SubjectRoot + ".audit." + tok + ".agent",
		// Look-ups, never changes; the last record of its audit subject.
		jsStreamAPI("INFO", EventsStreamName), jsStreamAPI("INFO", AuditStreamName), jsStreamAPI("MSG.GET", AuditStreamName),
		// The approval store, read-only: KeyValue + Get.
		jsStreamAPI("INFO", "KV_"+ProposalsBucket), "$JS.API.DIRECT.GET.KV_" + ProposalsBucket + ".>", jsStreamAPI("MSG.GET", "KV_"+ProposalsBucket),
		// Its own action requests: the stream looked up (to refuse one
		// created with sources), its durable consumer, fetched and
		// acknowledged.
		jsStreamAPI("INFO", ActionsStreamName),
		"$JS.API.CONSUMER.CREATE." + ActionsStreamName + "." + consumer + "." + event.SubjectRoot + ".actions." + tok + ".request",
		"$JS.API.CONSUMER.MSG.NEXT." + ActionsStreamName + "." + consumer, "$JS.ACK." + ActionsStreamName + "." + consumer + ".>",
		// Its answers: its own keys only, read and created.
		jsStreamAPI("INFO", results),
		"$JS.API.DIRECT.GET." + results + ".$KV." + ActionResultsBucket + "." + key + ".>", "$KV." + ActionResultsBucket + "." + key + ".>",
	}
	if tag, ok := set.Tag(source); ok {
		allow = append(allow, event.TagSubject(events, tag))
	}
	deny := []string{
		event.SubjectRoot + ".actions.>",
		event.RestateSubject,
		event.SubjectRoot + ".identity.>",
		FleetSubjects,
	}
	for _, b := range []string{ProposalsBucket, SilencesBucket, LeasesBucket, SlackMessagesBucket, SlackReplayBucket, DigestTicksBucket, DigestStateBucket, CheckpointsBucket} {
		deny = append(deny, "$KV."+b+".>")
	}
	deny = append(deny,
		"$JS.API.CONSUMER.DELETE.>",
		"$JS.API.STREAM.CREATE.>", "$JS.API.STREAM.UPDATE.>", "$JS.API.STREAM.DELETE.>", "$JS.API.STREAM.PURGE.>", "$JS.API.STREAM.MSG.DELETE.>")
	check, err := event.IdentityCheckSubject(source)
	if err != nil {
		return nil, fmt.Errorf("bus: agent permissions: %w", err)
	}
	return &server.Permissions{
		Publish: &server.SubjectPermission{Allow: allow, Deny: deny},
		// The bot groups' requests and answers (FleetSubjects) are
		// theirs alone: an agent that heard them could answer them.
		Subscribe: &server.SubjectPermission{Allow: []string{inbox + ".>", event.RestateSubject, check}, Deny: []string{FleetSubjects}},
		// It answers the bots' identity checks on their reply subjects,
		// one answer each, within the check's wait: no right to publish
		// into a bot's inbox otherwise.
		Response: &server.ResponsePermission{MaxMsgs: 1, Expires: AgentResponseExpiry},
	}, nil
}

// AgentResponseExpiry bounds how long after a request an agent may answer
// it (nats.conf allow_responses expires).
const AgentResponseExpiry = 10 * time.Second
