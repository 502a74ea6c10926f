package actions_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
)

// drained waits until the agent's consumer has nothing pending or
// unacknowledged, and returns its state.
func (a *agentSide) drained(t *testing.T) *jetstream.ConsumerInfo {
	t.Helper()
	name, err := actions.ConsumerName(a.source)
	if err != nil {
		t.Fatal(err)
	}
	var info *jetstream.ConsumerInfo
	testenv.Eventually(t, natstest.Timeout, "the agent's consumer drained", func() bool {
		c, err := a.js.Consumer(context.Background(), bus.ActionsStreamName, name)
		if err != nil {
			return false
		}
		info = c.CachedInfo()
		return info.NumPending == 0 && info.NumAckPending == 0 && info.NumRedelivered == 0
	})
	return info
}

// The stream's settings: a work queue bounded in age whose duplicate
// window covers it, outliving the requests' deadline; results expire.
func TestQueueSettings(t *testing.T) {
	spec := bus.ActionsStream(bus.WithReplicas(3))
	if spec.Retention != jetstream.WorkQueuePolicy || spec.Duplicates < spec.MaxAge || spec.MaxAge <= actions.QueueHorizon+actions.ResultGrace || spec.Replicas != 3 {
		t.Errorf("actions stream %+v: want a work queue, duplicates ≥ max age > horizon %s + grace", spec, actions.QueueHorizon)
	}
	if actions.QueueHorizon > actions.DefaultMaxAge {
		t.Errorf("a queued request (%s) would outlive its seal's freshness (%s)", actions.QueueHorizon, actions.DefaultMaxAge)
	}
	if kv := bus.ActionResultsKV(); kv.TTL <= 0 || kv.TTL < spec.MaxAge {
		t.Errorf("results bucket TTL %s: want bounded and ≥ the stream's max age %s", kv.TTL, spec.MaxAge)
	}
	cfg, err := actions.ConsumerConfig("mgmt.corp")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Durable != "agent-mgmt_corp" || cfg.FilterSubject != "hcpbot.actions.mgmt~corp.request" || cfg.AckPolicy != jetstream.AckExplicitPolicy ||
		cfg.MaxAckPending != 1 || cfg.MaxDeliver <= 0 || cfg.AckWait <= 0 {
		t.Errorf("consumer %+v", cfg)
	}
	if k, err := actions.ResultKey("mgmt.corp", "fix-abcd1234"); err != nil || k != "mgmt_corp.fix-abcd1234" {
		t.Errorf("ResultKey = %q, %v", k, err)
	}
}

// A request sent twice under its action id (the bot's retry, or its
// recovery after a restart) is stored once and executed once; a request
// whose result is recorded already (its agent died after recording,
// before acknowledging) is acknowledged without running.
func TestQueueDedupeAndResultExists(t *testing.T) {
	env.Need(t)
	c := scenario.BehindProxy(env.Namespace(t), "dedupe")
	seedCluster(t, c)
	x, mgmt, _ := executor(t)
	a := newQueue(t, "mgmt-dedupe")
	ctx, cancel := context.WithTimeout(context.Background(), natstest.Timeout)
	defer cancel()

	req := patchRequest("fix-dedupe01", c, scenario.SeedNoProxy)
	for range 2 {
		// Sealed afresh each time, as the bot's recovery does.
		if err := a.client.Send(ctx, a.source, req.ID, a.seal(t, req)); err != nil {
			t.Fatal(err)
		}
	}
	stream, err := a.js.Stream(ctx, bus.ActionsStreamName)
	if err != nil {
		t.Fatal(err)
	}
	if n := stream.CachedInfo().State.Msgs; n != 1 {
		t.Fatalf("stream holds %d requests, want 1 (the copy dropped as a duplicate)", n)
	}
	a.start(t, x, 0)
	r, err := a.client.Wait(ctx, a.source, req.ID)
	if err != nil || r.Err() != nil || r.Result.Outcome != actions.OutcomeApplied {
		t.Fatalf("result %+v, %v", r, err)
	}
	mgmt.expect(t, "execute once", "get hostedclusters", "update hostedclusters dry-run", "update hostedclusters")
	if info := a.drained(t); info.Delivered.Consumer != 1 {
		t.Errorf("delivered %d times, want 1", info.Delivered.Consumer)
	}

	// A result already recorded for the next one.
	done := patchRequest("fix-dedupe02", c, fixedNoProxy)
	done.NoProxy.Add = []string{"example.org"}
	data := a.seal(t, done)
	digest, err := actions.RequestDigest(done)
	if err != nil {
		t.Fatal(err)
	}
	recorded := actions.Reply{Result: &actions.Result{ActionID: done.ID, Outcome: actions.OutcomeApplied, Summary: "recorded before"}, RequestSHA256: digest}
	kv, err := a.js.KeyValue(ctx, bus.ActionResultsBucket)
	if err != nil {
		t.Fatal(err)
	}
	key, err := actions.ResultKey(a.source, done.ID)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(recorded)
	if _, err := kv.Create(ctx, key, b); err != nil {
		t.Fatal(err)
	}
	_, rv := readHC(t, c.Namespace, c.Name)
	if err := a.client.Send(ctx, a.source, done.ID, data); err != nil {
		t.Fatal(err)
	}
	a.drained(t)
	mgmt.expect(t, "already answered")
	if got, err := a.client.Result(ctx, a.source, done.ID); err != nil || got.Result == nil || got.Result.Summary != "recorded before" {
		t.Errorf("result %+v, %v: want the recorded one", got, err)
	}
	if _, rv2 := readHC(t, c.Namespace, c.Name); rv2 != rv {
		t.Errorf("the cluster changed: resourceVersion %s → %s", rv, rv2)
	}
}

// A request delivered to an agent that died before acknowledging it is
// delivered again after AckWait, to the next agent, and executed once.
func TestQueueRedelivery(t *testing.T) {
	env.Need(t)
	c := scenario.BehindProxy(env.Namespace(t), "redeliver")
	seedCluster(t, c)
	x, mgmt, _ := executor(t)
	a := newQueue(t, "mgmt-redeliver")
	ctx, cancel := context.WithTimeout(context.Background(), natstest.Timeout)
	defer cancel()
	const ackWait = 2 * time.Second

	// The agent that dies: it fetched the request and never acknowledged.
	cfg, err := actions.ConsumerConfig(a.source)
	if err != nil {
		t.Fatal(err)
	}
	cfg.AckWait = ackWait
	dying := connect(t, a.url, "dying-agent")
	cons, err := dying.JS.CreateOrUpdateConsumer(ctx, bus.ActionsStreamName, cfg)
	if err != nil {
		t.Fatal(err)
	}
	req := patchRequest("fix-redeliv1", c, scenario.SeedNoProxy)
	if err := a.client.Send(ctx, a.source, req.ID, a.seal(t, req)); err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(natstest.Timeout))
	if err != nil {
		t.Fatal(err)
	}
	if m := <-batch.Messages(); m == nil {
		t.Fatal("the dying agent got nothing")
	}
	dying.Close()
	fetchedAt := time.Now()

	a.start(t, x, ackWait)
	r, err := a.client.Wait(ctx, a.source, req.ID)
	if err != nil || r.Err() != nil || r.Result.Outcome != actions.OutcomeApplied {
		t.Fatalf("result %+v, %v", r, err)
	}
	if took := time.Since(fetchedAt); took < ackWait {
		t.Errorf("executed %s after the first delivery, before AckWait %s", took, ackWait)
	}
	mgmt.expect(t, "executed once", "get hostedclusters", "update hostedclusters dry-run", "update hostedclusters")
	name, _ := actions.ConsumerName(a.source)
	testenv.Eventually(t, natstest.Timeout, "nothing left", func() bool {
		c, err := a.js.Consumer(ctx, bus.ActionsStreamName, name)
		return err == nil && c.CachedInfo().NumPending == 0 && c.CachedInfo().NumAckPending == 0
	})
	if got, _ := readHC(t, c.Namespace, c.Name); got != fixedNoProxy {
		t.Errorf("noProxy = %q, want %q", got, fixedNoProxy)
	}
}
