package bus

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hcpbot/hcpbot/event"
)

// Action requests and their results (package actions speaks the protocol;
// the names and settings live here, beside the events stream). The bot is
// their one owner: it creates both with these settings, and the agents,
// whose NATS users may not create or update streams, only use them.
const (
	// ActionsStream holds the action requests the bot sends, on
	// hcpbot.actions.<source>.request, until the agent of source has
	// executed each and recorded its result.
	ActionsStream = "HCPBOT_ACTIONS"
	// ActionsStreamSubjects are the subjects of ActionsStream: one per
	// source (actions.RequestSubject).
	ActionsStreamSubjects = event.SubjectRoot + ".actions.*.request"
	// ActionResultsBucket holds each executed (or refused) request's
	// answer, keyed by source and action id.
	ActionResultsBucket = "hcpbot-action-results"

	// ActionsMaxAge bounds how long a request waits in the stream for its
	// agent. It exceeds the request's own deadline (actions.QueueHorizon,
	// after which the agent refuses it anyway) so that the stream never
	// drops a request that could still run, and it is also the duplicate
	// window: a request re-sent with its action id as message id while
	// the first copy is queued, or after it ran, is dropped by the server.
	ActionsMaxAge = 15 * time.Minute
	// ActionResultsTTL bounds how long a result is kept. The bot copies a
	// result into the approval store as soon as it reads it; the agent
	// reads it to acknowledge a redelivered request without running it
	// again, which happens within ActionsMaxAge.
	ActionResultsTTL = 24 * time.Hour
)

// ActionsStreamSpec is the work-queue stream of action requests: a
// message is removed once the agent acknowledges it, which it does only
// after recording the result.
func ActionsStreamSpec(replicas int) StreamSpec {
	return StreamSpec{
		Name:       ActionsStream,
		Subjects:   []string{ActionsStreamSubjects},
		Retention:  jetstream.WorkQueuePolicy,
		MaxAge:     ActionsMaxAge,
		Replicas:   replicas,
		Duplicates: ActionsMaxAge,
	}
}

// ActionResultsSpec is the results bucket.
func ActionResultsSpec(replicas int) KVSpec {
	return KVSpec{Bucket: ActionResultsBucket, TTL: ActionResultsTTL, Replicas: replicas}
}
