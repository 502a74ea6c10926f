package actions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/event"
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
	if _, err := event.ActionRequestSubject(source); err != nil {
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
	subject, err := event.ActionRequestSubject(source)
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

// Client is the bot's side of the protocol: it queues sealed requests and
// reads their results. The bot creates the stream and the bucket
// (bus.ActionsStreamSpec, bus.ActionResultsSpec) before using it.
type Client struct {
	JS jetstream.JetStream
	// Poll is how often Wait reads the result at most; 0 means 25ms.
	Poll time.Duration

	mu sync.Mutex
	kv jetstream.KeyValue
}

// Send queues envelope (a sealed request, Signer.SealUntil) for the agent
// of source, with the action id as message id: the server drops a copy
// re-sent while the first is queued or after it ran (within
// bus.ActionsMaxAge), so re-sending is always safe. When Send fails the
// request may or may not be stored; sending it again is the remedy.
func (c *Client) Send(ctx context.Context, source, id string, envelope []byte) error {
	subject, err := event.ActionRequestSubject(source)
	if err != nil {
		return err
	}
	if !ValidID(id) {
		return fmt.Errorf("%w: action id %q", ErrInvalid, id)
	}
	if _, err := c.JS.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: envelope},
		jetstream.WithMsgID(id), jetstream.WithExpectStream(bus.ActionsStream)); err != nil {
		return fmt.Errorf("actions: queue %s for %s: %w", id, source, err)
	}
	return nil
}

// Result returns the agent's answer to action id of source, or
// ErrNoResult.
func (c *Client) Result(ctx context.Context, source, id string) (Reply, error) {
	key, err := ResultKey(source, id)
	if err != nil {
		return Reply{}, err
	}
	kv, err := c.bucket(ctx)
	if err != nil {
		return Reply{}, err
	}
	return readResult(ctx, kv, key)
}

// Wait polls Result until there is one or ctx ends; then it returns an
// error wrapping ErrQueued. It looks again after 5 ms, then twice as long
// each time up to Poll: an agent answers within tens to hundreds of
// milliseconds, and polling every 250 ms answered a quarter second late
// on average (make bench, B2-approve: now 7 ms after the agent's result).
// A read is one KV get, and approvals are few; a KV watch would cost a
// consumer per approval.
func (c *Client) Wait(ctx context.Context, source, id string) (Reply, error) {
	every := c.Poll
	if every <= 0 {
		every = 25 * time.Millisecond
	}
	next := min(5*time.Millisecond, every)
	t := time.NewTimer(next)
	defer t.Stop()
	for {
		r, err := c.Result(ctx, source, id)
		switch {
		case err == nil:
			return r, nil
		case ctx.Err() != nil:
			return Reply{}, fmt.Errorf("%w: %s", ErrQueued, id)
		case !errors.Is(err, ErrNoResult):
			// NATS briefly unreachable: keep waiting, the result stays.
		}
		select {
		case <-ctx.Done():
			return Reply{}, fmt.Errorf("%w: %s", ErrQueued, id)
		case <-t.C:
		}
		next = min(2*next, every)
		t.Reset(next)
	}
}

func (c *Client) bucket(ctx context.Context) (jetstream.KeyValue, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.kv != nil {
		return c.kv, nil
	}
	kv, err := c.JS.KeyValue(ctx, bus.ActionResultsBucket)
	if err != nil {
		return nil, fmt.Errorf("actions: bind results bucket %s: %w", bus.ActionResultsBucket, err)
	}
	c.kv = kv
	return kv, nil
}

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
