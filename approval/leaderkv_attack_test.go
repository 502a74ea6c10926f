package approval_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/approval/wire"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
)

// Attacks on the agent's reading of the approval store from its stream
// leader (3d11fd6, leaderkv.go).

// (a) Whoever holds the bot's NATS user, or another agent's, cannot stand
// in for the leader: neither may subscribe to the MSG.GET subject (to
// answer first) nor to the agent's inbox, nor publish into that inbox.
// The server refuses each, the subscriptions hear nothing, and the
// approved fix runs once, from the leader's answer.
func TestAttackLeaderAnswerCannotBeForged(t *testing.T) {
	e := newEnv(t)
	inbox, err := event.AgentInboxPrefix(source)
	if err != nil {
		t.Fatal(err)
	}
	msgGet := "$JS.API.STREAM.MSG.GET.KV_" + bus.ProposalsBucket
	var heard []*nats.Subscription
	for _, role := range []string{"bot", otherSource} {
		nc := e.connect(role).NC
		errs := make(chan error, 16)
		nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err })
		for _, subj := range []string{msgGet, "$JS.API.STREAM.MSG.GET.>", inbox + ".>"} {
			sub, err := nc.SubscribeSync(subj)
			if err != nil {
				t.Fatal(err)
			}
			heard = append(heard, sub)
			refused(t, errs, role, `subscription to "`+subj+`"`)
		}
		if err := nc.Publish(inbox+".x.y", []byte(`{"message":{"subject":"x"}}`)); err != nil {
			t.Fatal(err)
		}
		refused(t, errs, role, `publish to "`+inbox+`.x.y"`)
	}
	f := e.flow(fourEyes())
	e.serve()
	p, err := f.Propose(testContext(t), noProxyChange(), requester, approval.ForSource(source))
	if err != nil {
		t.Fatal(err)
	}
	e.approvedRunsOnce(f, p.ID)
	for _, sub := range heard {
		if m, err := sub.NextMsg(10 * time.Millisecond); err == nil {
			t.Errorf("%s heard on %s", m.Subject, sub.Subject)
		}
	}
}

// refused waits for the server's permissions violation of what, on role's
// connection.
func refused(t *testing.T, errs <-chan error, role, what string) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case err := <-errs:
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(strings.ToLower(err.Error()), strings.ToLower(what)) {
				return
			}
		case <-timeout:
			t.Fatalf("%s: %s not refused", role, what)
		}
	}
}

// (c) The leader does not answer the agent's read (here the server
// refuses the agent's MSG.GET and answers nothing, as during an election
// or with its API queue full; nobody answers "no responders" then): the
// request is handed back, never held in progress for good, refused or
// run. Before the fix leaderKV.Get waited on the serving context, which
// has no deadline: the request stayed in progress (the heartbeat renewed
// it) and every request queued behind it with it.
func TestAttackLeaderSilentHandsBack(t *testing.T) {
	e := newEnv(t)
	cut := agentPermissions(t)
	cut.Publish.Deny = append(cut.Publish.Deny, "$JS.API.STREAM.MSG.GET.KV_"+bus.ProposalsBucket)
	e.setAgentPermissions(cut) // before anything reads (see setAgentPermissions)
	f := e.flow(fourEyes())
	reg := prometheus.NewRegistry()
	e.serve(func(c *approval.AgentConfig) { c.Registerer = reg })
	var got outcome
	p := approved(t, f, &got)
	waitFor(t, 60*time.Second, "a hand-back", func() bool {
		return gathered(t, reg, "hcpbot_agent_action_requests_total", "result", "handed-back") >= 1
	})
	if n := e.x.runs(p.ID); n != 0 || len(got.got()) != 0 || e.refusedByAgent() != 0 {
		t.Fatalf("%d runs, outcomes %+v, %d refusals without the store read", n, got.got(), e.refusedByAgent())
	}
	if _, ok := e.result(p.ID); ok {
		t.Fatal("an answer recorded without the store read")
	}
}

// (e) The agent reads its results bucket by direct get, which any
// replica answers: its own server's, when that replica has not yet stored
// the running mark the agent has just written, shows the key absent. The
// answer then met the mark on Create (key exists) and was taken for an
// answer already recorded: the change ran, the request was acknowledged,
// and the bucket kept "running" (the bot reported the outcome unknown,
// without its undo, ActionsMaxAge later). The answer must replace the
// mark.
func TestAttackAnswerAfterAStaleReadOfTheRunningMark(t *testing.T) {
	e := newEnv(t)
	f := e.flow(fourEyes())
	reg := prometheus.NewRegistry()
	e.serveBehind(reg)
	var got outcome
	p := approved(t, f, &got)
	waitFor(t, 30*time.Second, "the request executed and acknowledged", func() bool {
		return gathered(t, reg, "hcpbot_agent_action_requests_total", "result", "executed") == 1
	})
	waitFor(t, 30*time.Second, "the answer in the results bucket", func() bool {
		r, ok := e.result(p.ID)
		return ok && !r.Running
	})
	waitFor(t, 30*time.Second, "the outcome", func() bool { return len(got.got()) == 1 })
	if o := got.got()[0]; o.State != approval.StateExecuted || o.Result == nil || o.Result.Undo == nil || e.x.runs(p.ID) != 1 {
		t.Fatalf("outcome %+v after %d runs", o, e.x.runs(p.ID))
	}
}

// (e) The agent answered a request (here: failed, nothing written), the
// acknowledgement was lost, and the request is delivered again; the read
// of the results bucket at the redelivery comes from a replica that has
// not stored the answer yet. The agent then marked it running (Create:
// the key exists, taken as its own mark), ran the change that its
// recorded answer, which stands, says failed: the cluster held a change
// the user read as not made. It must hand the request back instead, and
// find the answer at the next delivery.
func TestAttackStaleReadOfARecordedAnswerRunsNothing(t *testing.T) {
	e := newEnv(t)
	f := e.flow(fourEyes())
	p := approved(t, f, nil)
	bot := e.connect("bot").JS
	waitFor(t, 30*time.Second, "the request queued", func() bool {
		s, err := bot.Stream(testContext(t), bus.ActionsStreamName)
		return err == nil && s.CachedInfo().State.Msgs >= 1
	})
	reg := prometheus.NewRegistry()
	e.serveBehind(reg, func(kv *behindKV) {
		key, err := wire.ResultKey(source, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		r, _ := json.Marshal(approval.Result{ID: p.ID, Proposal: approval.Digest(p), Code: approval.CodeConflict, Error: "conflict", At: time.Now().UTC()})
		if _, err := kv.Create(testContext(t), key, r); err != nil {
			t.Fatal(err)
		}
	})
	waitFor(t, 60*time.Second, "the request found answered, or run", func() bool {
		return gathered(t, reg, "hcpbot_agent_action_requests_total", "result", "answered") >= 1 || e.x.runs(p.ID) > 0
	})
	if n := e.x.runs(p.ID); n != 0 {
		t.Fatalf("ran %d times under a recorded answer", n)
	}
}

// serveBehind runs the agent with its results bucket read from a replica
// one write behind (behindKV); before, if given, writes through it before
// the agent starts.
func (e *env) serveBehind(reg prometheus.Registerer, before ...func(*behindKV)) *behindKV {
	e.t.Helper()
	js := e.connect("agent").JS
	results, err := js.KeyValue(testContext(e.t), bus.ActionResultsBucket)
	if err != nil {
		e.t.Fatal(err)
	}
	kv := &behindKV{KeyValue: results, before: map[string]jetstream.KeyValueEntry{}}
	for _, b := range before {
		b(kv)
	}
	cfg := approval.AgentConfig{
		Source: source, Trust: approval.Trust{Keys: []string{e.signer.PublicKey()}, FourEyes: true},
		Executor: e.x, Log: natstest.Logger(e.t), AckWait: 3 * time.Second, Registerer: reg,
	}
	e.run(func(ctx context.Context) {
		if err := approval.Serve(ctx, behindJS{JetStream: js, results: kv}, cfg); err != nil {
			e.t.Errorf("Serve: %v", err)
		}
	})
	return kv
}

// behindJS is the agent's JetStream with its results bucket read from a
// replica one write behind (behindKV).
type behindJS struct {
	jetstream.JetStream
	results *behindKV
}

func (j behindJS) KeyValue(ctx context.Context, bucket string) (jetstream.KeyValue, error) {
	if bucket == bus.ActionResultsBucket {
		return j.results, nil
	}
	return j.JetStream.KeyValue(ctx, bucket)
}

// behindKV: the first read of a key after a write through it shows the
// key as it was before that write (nil: absent), as a direct get answered
// by a follower that has not stored the write yet does; the next reads
// see it.
type behindKV struct {
	jetstream.KeyValue
	mu     sync.Mutex
	before map[string]jetstream.KeyValueEntry
}

func (kv *behindKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	kv.mu.Lock()
	prev, behind := kv.before[key]
	delete(kv.before, key)
	kv.mu.Unlock()
	switch {
	case !behind:
		return kv.KeyValue.Get(ctx, key)
	case prev == nil:
		return nil, jetstream.ErrKeyNotFound
	}
	return prev, nil
}

// wrote makes the next read of key show prev.
func (kv *behindKV) wrote(key string, prev jetstream.KeyValueEntry) {
	kv.mu.Lock()
	kv.before[key] = prev
	kv.mu.Unlock()
}

func (kv *behindKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	rev, err := kv.KeyValue.Create(ctx, key, value, opts...)
	if err == nil {
		kv.wrote(key, nil)
	}
	return rev, err
}

func (kv *behindKV) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	prev, _ := kv.KeyValue.Get(ctx, key)
	rev, err := kv.KeyValue.Update(ctx, key, value, last)
	if err == nil {
		kv.wrote(key, prev)
	}
	return rev, err
}

func (kv *behindKV) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	prev, _ := kv.KeyValue.Get(ctx, key)
	rev, err := kv.KeyValue.Put(ctx, key, value)
	if err == nil {
		kv.wrote(key, prev)
	}
	return rev, err
}

// (b) The agent's user gained nothing with leaderKV: MSG.GET is granted
// on the approval store's stream alone (as before 3d11fd6), not on the
// results bucket, whose reads stay per key (another agent's answers
// unreadable), and the store stays unwritable.
func TestAttackLeaderReadGrantsTheAgentNothingMore(t *testing.T) {
	e := newEnv(t)
	e.flow(fourEyes()) // the bot's streams and buckets
	nc := e.connect("agent").NC
	errs := make(chan error, 16)
	nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err })
	other := "$KV." + bus.ActionResultsBucket + "." + otherSource + ".a1"
	for _, c := range []struct{ subj, body string }{
		{"$JS.API.STREAM.MSG.GET.KV_" + bus.ActionResultsBucket, `{"last_by_subj":"` + other + `"}`},
		{"$JS.API.DIRECT.GET.KV_" + bus.ActionResultsBucket + "." + other, ""},
		{"$JS.API.STREAM.MSG.GET." + bus.ActionsStreamName, `{"seq":1}`},
		{"$KV." + bus.ProposalsBucket + ".a1", `{}`},
		{"$JS.API.STREAM.MSG.DELETE.KV_" + bus.ProposalsBucket, `{"seq":1}`},
	} {
		if err := nc.PublishRequest(c.subj, nc.NewInbox(), []byte(c.body)); err != nil {
			t.Fatal(err)
		}
		refused(t, errs, "agent", `publish to "`+c.subj+`"`)
	}
	if p := agentPermissions(t); !slices.Contains(p.Publish.Allow, "$JS.API.STREAM.MSG.GET.KV_"+bus.ProposalsBucket) {
		t.Error("the agent may not read the store from its leader")
	}
}
