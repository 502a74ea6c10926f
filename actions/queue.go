package actions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// QueueHorizon is how long after its approval a request may still start:
// the bot seals that deadline into every copy it sends, and the agent
// refuses the request afterwards. It equals the freshness bound of a
// sealed request (DefaultMaxAge), so a queued request never outlives the
// signature's freshness, and it stays under bus.ActionsMaxAge, so the
// stream never drops a request that could still run.
const QueueHorizon = DefaultMaxAge

// ResultGrace is how long past a request's deadline its sender still
// waits for a result: an execution the agent started just before the
// deadline is cancelled at it, and writes its result right after.
const ResultGrace = time.Minute

// Sentinel errors of the queue.
var (
	// ErrQueued: the request is stored in the actions stream but no
	// result has come yet (the agent has not picked it up, or is still
	// running it). It is not a failure: the result comes later.
	ErrQueued = errors.New("action request queued, no result yet")
	// ErrNoResult: the results bucket holds nothing for that action.
	ErrNoResult = errors.New("no result for this action yet")
)

// sourceKey is source as one token of a KV key or consumer name: '.'
// becomes '_', which a DNS-1123 source cannot hold, so keys of two
// sources never clash and a NATS permission on "<key>.>" covers one
// source's results only.
func sourceKey(source string) (string, error) {
	if _, err := RequestSubject(source); err != nil {
		return "", err
	}
	return strings.ReplaceAll(source, ".", "_"), nil
}

// ConsumerName is the durable pull consumer through which the agent of
// source reads its requests: "agent-<source>".
func ConsumerName(source string) (string, error) {
	k, err := sourceKey(source)
	if err != nil {
		return "", err
	}
	return "agent-" + k, nil
}

// ResultKey is where the result of action id of source is kept:
// "<source>.<id>".
func ResultKey(source, id string) (string, error) {
	k, err := sourceKey(source)
	if err != nil {
		return "", err
	}
	if !ValidID(id) {
		return "", fmt.Errorf("%w: action id %q", ErrInvalid, id)
	}
	return k + "." + id, nil
}

// ConsumerConfig is the agent's consumer of its own requests. AckWait is
// short so that a request delivered to an agent that died meanwhile goes
// to the next leader soon; an execution in progress says so every
// AckWait/3 (InProgress). One request at a time: a second leader
// overlapping the first gets nothing until the first acknowledges.
func ConsumerConfig(source string) (jetstream.ConsumerConfig, error) {
	name, err := ConsumerName(source)
	if err != nil {
		return jetstream.ConsumerConfig{}, err
	}
	subject, err := RequestSubject(source)
	if err != nil {
		return jetstream.ConsumerConfig{}, err
	}
	return jetstream.ConsumerConfig{
		Durable:       name,
		Description:   "action requests for the agent of " + source,
		FilterSubject: subject,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		MaxDeliver:    maxDeliver,
		MaxAckPending: 1,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}, nil
}

const (
	ackWait = 30 * time.Second
	// maxDeliver bounds redeliveries of a request whose handling keeps
	// failing (results bucket unwritable): it is not run forever.
	maxDeliver = 5
)

func readResult(ctx context.Context, kv jetstream.KeyValue, key string) (Reply, error) {
	e, err := kv.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrKeyDeleted):
		return Reply{}, fmt.Errorf("%w: %s", ErrNoResult, key)
	case err != nil:
		return Reply{}, fmt.Errorf("actions: read result %s: %w", key, err)
	}
	var r Reply
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return Reply{}, fmt.Errorf("%w: undecodable result %s: %w", ErrInternal, key, err)
	}
	return r, nil
}
