package actions

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hcpbot/hcpbot/bus"
)

// ErrNotSent: Submit could not confirm that the actions stream stored the
// request (NATS unreachable). It may be stored; submitting it again is
// safe (the stream drops a copy with the same action id).
var ErrNotSent = errors.New("the request is not confirmed as queued yet")

// Client is the bot's side of the protocol: it queues sealed requests and
// reads their results. The bot creates the stream and the bucket
// (bus.ActionsStream, bus.ActionResultsKV) before using it.
//
// One approved request takes Submit (seal and queue) and then Wait or
// Result (read its Reply by action id); Reply.Outcome maps the reply onto
// the sentinel errors. The request was validated when it was proposed
// (bot/approval's Propose), and the proposal's seal keeps it as it was;
// the agent validates it once more when it opens it (Verifier.Open).
type Client struct {
	JS jetstream.JetStream
	// Poll is how often Wait reads the result at most; 0 means 25ms.
	Poll time.Duration

	mu sync.Mutex
	kv jetstream.KeyValue
}

// Submit is the bot's send of an approved request: it seals req with the
// approval a it carries out (signer: the bot's key, which agents trust),
// issued now and refused by the agent from deadline on, and queues it for
// the agent of source under its action id (Send). A copy submitted again
// is sealed afresh, so its signature is fresh while its deadline, fixed by
// the caller (the approval + QueueHorizon), is not extended. An error
// wrapping ErrNotSent means the request may or may not be stored.
func (c *Client) Submit(ctx context.Context, signer *Signer, source string, req Change, a Approval, deadline time.Time) error {
	if _, err := RequestSubject(source); err != nil {
		return fmt.Errorf("proposal %s names no usable management cluster: %w", req.ID, err)
	}
	if signer == nil {
		return fmt.Errorf("%w: no signing key configured, so the agent would refuse %s", ErrUnauthorized, req.ID)
	}
	data, err := signer.SealUntil(req, a, time.Now(), deadline)
	if err != nil {
		return err
	}
	if err := c.Send(ctx, source, req.ID, data); err != nil {
		return fmt.Errorf("%w: %w", ErrNotSent, err)
	}
	return nil
}

// Send queues envelope (a sealed request, Signer.SealUntil) for the agent
// of source, with the action id as message id: the server drops a copy
// re-sent while the first is queued or after it ran (within
// bus.ActionsMaxAge), so re-sending is always safe. When Send fails the
// request may or may not be stored; sending it again is the remedy.
func (c *Client) Send(ctx context.Context, source, id string, envelope []byte) error {
	subject, err := RequestSubject(source)
	if err != nil {
		return err
	}
	if !ValidID(id) {
		return fmt.Errorf("%w: action id %q", ErrInvalid, id)
	}
	if _, err := c.JS.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: envelope},
		jetstream.WithMsgID(id), jetstream.WithExpectStream(bus.ActionsStreamName)); err != nil {
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
