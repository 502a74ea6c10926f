// Package wire is how an approved request travels from the bot to the
// agent of its management cluster and how the answer comes back, as
// bytes: package approval decides what the bytes say and whether to
// trust them.
//
//	bot ── Send ──▶ stream HCPBOT_ACTIONS, subject hcpbot.actions.<source>.request,
//	               message id = MessageID(action id, bytes) (a copy re-sent within
//	               bus.ActionsMaxAge is dropped)
//	agent ◀── its durable pull consumer agent-<source> (ConsumerConfig): one request at a time,
//	          acknowledged once its answer is recorded
//	agent ── bucket hcpbot-action-results, key <source>.<id> (ResultKey): only that agent may write it
//	bot ◀── Get
//
// The stream is a work queue: a request leaves it when the agent
// acknowledges it, which the agent does only after recording the answer,
// so a request survives the death of the agent that had it.
package wire

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/event"
)

// Sentinel errors.
var (
	// ErrInvalid: a source or action id that cannot name a subject or key.
	ErrInvalid = errors.New("invalid source or action id")
	// ErrNoResult: the results bucket holds nothing for that action.
	ErrNoResult = errors.New("no result for this action yet")
	// ErrNotSent: the stream did not confirm that it stored the request
	// (NATS unreachable). It may be stored; sending it again is safe.
	ErrNotSent = errors.New("the request is not confirmed as queued")
)

// idPattern is the action id of package actions; a valid subject token
// and KV key.
var idPattern = regexp.MustCompile(`^[a-z]{1,8}-[0-9a-z]{4,32}$`)

// Subject is where the bot sends requests for the agent of source,
// hcpbot.actions.<source>.request ('.' in source escaped as in every
// subject, event.SourceToken): the actions stream's subjects with source
// in place of the wildcard, so an agent's permission on its own subject
// covers nobody else's.
func Subject(source string) (string, error) {
	tok, err := event.SourceToken(source)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return strings.Replace(bus.ActionsStreamSubjects, "*", tok, 1), nil
}

// sourceKey is source as one token of a KV key or consumer name: '.'
// becomes '_', which a DNS-1123 source cannot hold, so keys of two
// sources never clash and a NATS permission on "<key>.>" covers one
// source's results only.
func sourceKey(source string) (string, error) {
	if _, err := Subject(source); err != nil {
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

// ResultKey is where the answer to action id of source is kept:
// "<source>.<id>".
func ResultKey(source, id string) (string, error) {
	k, err := sourceKey(source)
	if err != nil {
		return "", err
	}
	if !idPattern.MatchString(id) {
		return "", fmt.Errorf("%w: action id %q", ErrInvalid, id)
	}
	return k + "." + id, nil
}

// RefusalKey is where the agent of source records that it refused, as
// not verifiable, a message sent under action id: "<source>.<id>.refused".
// Apart from ResultKey, so that whoever can publish on the subject cannot
// answer a proposal; the bot takes a refusal there as the answer to its
// own request only when it names the bytes it sent.
func RefusalKey(source, id string) (string, error) {
	k, err := ResultKey(source, id)
	if err != nil {
		return "", err
	}
	return k + ".refused", nil
}

// DefaultAckWait is how long the server waits for the agent to
// acknowledge a request before it delivers it again (to the next leader
// when this one died); an execution in progress says so every third of
// it.
const DefaultAckWait = 30 * time.Second

// ConsumerConfig is the agent's consumer of its own requests; ackWait 0
// means DefaultAckWait. One request at a time: a second leader
// overlapping the first gets nothing until the first acknowledges. No
// bound on deliveries: a request handed back after a transient failure
// is retried until its own deadline, which the agent enforces.
func ConsumerConfig(source string, ackWait time.Duration) (jetstream.ConsumerConfig, error) {
	name, err := ConsumerName(source)
	if err != nil {
		return jetstream.ConsumerConfig{}, err
	}
	subject, err := Subject(source)
	if err != nil {
		return jetstream.ConsumerConfig{}, err
	}
	if ackWait <= 0 {
		ackWait = DefaultAckWait
	}
	return jetstream.ConsumerConfig{
		Durable:       name,
		Description:   "action requests for the agent of " + source,
		FilterSubject: subject,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		MaxDeliver:    -1,
		MaxAckPending: 1,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}, nil
}

// Queue is the bot's side: it sends requests and reads answers. The bot
// creates the stream and the bucket (bus.ActionsStream,
// bus.ActionResultsKV) before using it.
type Queue struct {
	js Transport
	mu sync.Mutex
	kv jetstream.KeyValue
}

// Transport is what a Queue uses of JetStream: it publishes requests and
// binds the results bucket to read the answers.
type Transport interface {
	jetstream.Publisher
	jetstream.KeyValueManager
}

// NewQueue returns a Queue on js.
func NewQueue(js Transport) *Queue { return &Queue{js: js} }

// MessageID is the message id of a request for action id whose bytes are
// data: the action id and a digest of the bytes. A retried publish of the
// same bytes is dropped by the stream; the agent refuses a request under
// any other id (a replay); and whoever can publish on the subject cannot
// take the id of a request the bot has not sent yet, whose bytes they
// cannot know.
func MessageID(id string, data []byte) string {
	sum := sha256.Sum256(data)
	return id + "." + hex.EncodeToString(sum[:8])
}

// ActionOf is the action id a message id names (MessageID), or "".
func ActionOf(msgID string) string {
	id, _, _ := strings.Cut(msgID, ".")
	if !idPattern.MatchString(id) {
		return ""
	}
	return id
}

// Send queues data for the agent of source under MessageID(id, data). An
// error wrapping ErrNotSent means it may or may not be stored; sending
// the same bytes again is the remedy and is always safe.
func (q *Queue) Send(ctx context.Context, source, id string, data []byte) error {
	subject, err := Subject(source)
	if err != nil {
		return err
	}
	if !idPattern.MatchString(id) {
		return fmt.Errorf("%w: action id %q", ErrInvalid, id)
	}
	if _, err := q.js.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: data},
		jetstream.WithMsgID(MessageID(id, data)), jetstream.WithExpectStream(bus.ActionsStreamName)); err != nil {
		return fmt.Errorf("%w: queue %s for %s: %w", ErrNotSent, id, source, err)
	}
	return nil
}

// Result returns the agent's answer to action id of source as stored, or
// an error wrapping ErrNoResult.
func (q *Queue) Result(ctx context.Context, source, id string) ([]byte, error) {
	return q.get(ctx, ResultKey, source, id)
}

// Refusal returns what the agent of source recorded under RefusalKey for
// id, or an error wrapping ErrNoResult.
func (q *Queue) Refusal(ctx context.Context, source, id string) ([]byte, error) {
	return q.get(ctx, RefusalKey, source, id)
}

// get reads the answer stored under keyOf(source, id).
func (q *Queue) get(ctx context.Context, keyOf func(source, id string) (string, error), source, id string) ([]byte, error) {
	key, err := keyOf(source, id)
	if err != nil {
		return nil, err
	}
	kv, err := q.bucket(ctx)
	if err != nil {
		return nil, err
	}
	data, _, err := Get(ctx, kv, key)
	return data, err
}

func (q *Queue) bucket(ctx context.Context) (jetstream.KeyValue, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.kv != nil {
		return q.kv, nil
	}
	kv, err := q.js.KeyValue(ctx, bus.ActionResultsBucket)
	if err != nil {
		return nil, fmt.Errorf("wire: bind results bucket %s: %w", bus.ActionResultsBucket, err)
	}
	q.kv = kv
	return kv, nil
}

// Get reads key of the results bucket: its value and revision, or an
// error wrapping ErrNoResult.
func Get(ctx context.Context, kv jetstream.KeyValue, key string) ([]byte, uint64, error) {
	e, err := kv.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrKeyDeleted):
		return nil, 0, fmt.Errorf("%w: %s", ErrNoResult, key)
	case err != nil:
		return nil, 0, fmt.Errorf("wire: read result %s: %w", key, err)
	}
	return e.Value(), e.Revision(), nil
}
