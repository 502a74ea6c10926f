package command_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/bot/approval"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
)

// agentKeys is the key pair of a test's bot and the agent-side check of
// source trusting it, reading the approval store through js as a real
// agent does.
func agentKeys(t *testing.T, js jetstream.JetStream, source string) (*actions.Signer, *actions.Verifier) {
	t.Helper()
	s, err := actions.NewEphemeralSigner()
	if err != nil {
		t.Fatal(err)
	}
	return s, &actions.Verifier{Keys: []string{s.PublicKey()}, Store: approval.NewLookup(js), Source: source, FourEyes: true}
}

// openRequest is what a fake agent does with a request: verify it.
func openRequest(t *testing.T, v *actions.Verifier, data []byte) (actions.Change, bool) {
	t.Helper()
	vr, err := v.Open(context.Background(), data)
	if err != nil {
		t.Errorf("agent: %v", err)
		return actions.Change{}, false
	}
	return vr.Request, true
}

// ensureQueue creates the actions stream and the results bucket, as the
// bot does at start.
func ensureQueue(t *testing.T, js jetstream.JetStream) *actions.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), natstest.Timeout)
	defer cancel()
	if _, err := bus.EnsureStream(ctx, js, bus.ActionsStream()); err != nil {
		t.Fatal(err)
	}
	if _, err := bus.EnsureKV(ctx, js, bus.ActionResultsKV()); err != nil {
		t.Fatal(err)
	}
	return &actions.Client{JS: js, Poll: 50 * time.Millisecond}
}

// serveFake plays the agent of source on the real queue, as actions.Serve
// does on the wire: each request read through the agent's consumer is
// answered by answer, the reply recorded under the message id (the
// action id), then acknowledged. answer returning false records nothing
// (an agent that ignores the request). It runs until the test ends.
func serveFake(t *testing.T, js jetstream.JetStream, source string, answer func(data []byte) (actions.Reply, bool)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cfg, err := actions.ConsumerConfig(source)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxAckPending = 16 // concurrent approvals overlap
	cons, err := js.CreateOrUpdateConsumer(ctx, bus.ActionsStreamName, cfg)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, bus.ActionResultsBucket)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			batch, err := cons.Fetch(1, jetstream.FetchMaxWait(200*time.Millisecond))
			if err != nil {
				continue
			}
			for msg := range batch.Messages() {
				reply, ok := answer(msg.Data())
				if key, err := actions.ResultKey(source, msg.Headers().Get(jetstream.MsgIDHeader)); ok && err == nil {
					data, _ := json.Marshal(reply)
					_, _ = kv.Create(ctx, key, data)
				}
				_ = msg.Ack()
			}
		}
	}()
}
