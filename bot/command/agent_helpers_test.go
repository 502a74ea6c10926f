package command_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/approval/wire"
	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/internal/testenv"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
)

// Both sides of the approval path in these tests are the real ones: the
// bot's approval.Flow with its loop running, and the agent's
// approval.Serve on the same nats-server. Only the cluster side of the
// agent is faked where a test has no control plane (fakeExecutor).

// fourEyes is the policy of every test here: two approvers, and nobody
// approves their own request.
func fourEyes() approval.Policy {
	return approval.Policy{Approvers: []string{approver1, approver2}, FourEyes: true}
}

// openFlow opens a bot replica's flow on js, sealed by signer and audited
// to trail, without its loop: a replica that dies right after deciding.
func openFlow(t *testing.T, js jetstream.JetStream, signer *approval.Signer, trail audit.Appender, pol approval.Policy, mod ...func(*approval.Config)) *approval.Flow {
	t.Helper()
	cfg := approval.Config{Signer: signer, Trail: trail, Policy: pol, Log: natstest.Logger(t), SweepInterval: time.Second}
	for _, m := range mod {
		m(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), natstest.Timeout)
	defer cancel()
	f, err := approval.NewFlow(ctx, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// runFlow is a live bot replica: openFlow with its loop (Flow.Run)
// running until the test ends.
func runFlow(t *testing.T, js jetstream.JetStream, signer *approval.Signer, trail audit.Appender, pol approval.Policy, mod ...func(*approval.Config)) *approval.Flow {
	t.Helper()
	f := openFlow(t, js, signer, trail, pol, mod...)
	runUntil(t, func(ctx context.Context) { _ = f.Run(ctx) })
	return f
}

// serveAgent runs the agent of source as the agent binary does:
// approval.Serve trusting signer's key under four-eyes, its refusals and
// executions on its own audit subject, executing with x; until stop or
// the test's end.
func serveAgent(t *testing.T, js jetstream.JetStream, source string, signer *approval.Signer, x approval.Executor, mod ...func(*approval.AgentConfig)) (stop func()) {
	t.Helper()
	trail, err := audit.ForAgent(js, source)
	if err != nil {
		t.Fatal(err)
	}
	cfg := approval.AgentConfig{
		Source: source, Trust: approval.Trust{Keys: []string{signer.PublicKey()}, FourEyes: true},
		Executor: x, Trail: trail, Log: natstest.Logger(t),
	}
	for _, m := range mod {
		m(&cfg)
	}
	return runUntil(t, func(ctx context.Context) {
		if err := approval.Serve(ctx, js, cfg); err != nil {
			t.Errorf("approval.Serve: %v", err)
		}
	})
}

// runUntil runs f until stop or the test's end.
func runUntil(t *testing.T, f func(ctx context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f(ctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

// fakeExecutor is the cluster side of an agent without a control plane:
// it counts what the agent (after Permit) asked it to run and answers
// with answer.
type fakeExecutor struct {
	mu     sync.Mutex
	runs   map[string]int
	last   actions.Change
	answer func(actions.Change) (*actions.Result, error)
}

// applied answers every change as the executor reports a noProxy patch.
func applied(ch actions.Change) (*actions.Result, error) {
	return &actions.Result{ActionID: ch.ID, Type: ch.Type, Outcome: actions.OutcomeApplied, Summary: "added " + strings.Join(ch.NoProxy.Add, ", "), Diff: "+ kubernetes"}, nil
}

func newFakeExecutor(answer func(actions.Change) (*actions.Result, error)) *fakeExecutor {
	return &fakeExecutor{runs: map[string]int{}, answer: answer}
}

func (x *fakeExecutor) Execute(_ context.Context, ch actions.Change) (*actions.Result, error) {
	x.mu.Lock()
	x.runs[ch.ID]++
	x.last = ch
	answer := x.answer
	x.mu.Unlock()
	return answer(ch)
}

// Observe is asked only past a deadline; nothing here is in place then.
func (x *fakeExecutor) Observe(context.Context, actions.Change) (*actions.Result, bool, error) {
	return nil, false, nil
}

func (x *fakeExecutor) RecordEvent(context.Context, actions.Change, *actions.Result, actions.Actors) error {
	return nil
}

func (x *fakeExecutor) setAnswer(answer func(actions.Change) (*actions.Result, error)) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.answer = answer
}

// calls counts every execution; runsOf those of one action.
func (x *fakeExecutor) calls() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	n := 0
	for _, r := range x.runs {
		n += r
	}
	return n
}

func (x *fakeExecutor) runsOf(id string) int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.runs[id]
}

func (x *fakeExecutor) lastChange() actions.Change {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.last
}

// later collects what a handler posts into its conversation after it
// answered (chatops.Later): the outcome of an approval.
type later struct {
	mu      sync.Mutex
	replies []chatops.Reply
}

// ctx is a request context whose conversation is l.
func (l *later) ctx() context.Context { return chatops.WithLater(context.Background(), l.add) }

func (l *later) add(r chatops.Reply) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.replies = append(l.replies, r)
}

func (l *later) all() []chatops.Reply {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.replies)
}

// wait returns the first later reply whose text holds want.
func (l *later) wait(t *testing.T, want string) chatops.Reply {
	t.Helper()
	var got chatops.Reply
	testenv.Eventually(t, natsWait, "a later reply with "+want, func() bool {
		for _, r := range l.all() {
			if strings.Contains(r.Text, want) {
				got = r
				return true
			}
		}
		return false
	})
	return got
}

// atOnce is how soon an approval is answered, agent or not.
const atOnce = time.Second

// sentAtOnce checks Approve's immediate answer: given within atOnce, it
// names the approver and the agent the change went to, and says the
// outcome follows.
func sentAtOnce(t *testing.T, what string, r chatops.Reply, took time.Duration, approver, source string) {
	t.Helper()
	if took > atOnce {
		t.Errorf("%s answered after %s, want within %s", what, took, atOnce)
	}
	for _, want := range []string{"approved by <@", "<@" + approver + "> and sent to the agent of " + source + ". It runs at most once", "The outcome will be posted"} {
		if !strings.Contains(r.Text, want) {
			t.Errorf("%s answered %q, want %q", what, r.Text, want)
		}
	}
	if !r.InChannel {
		t.Errorf("%s: the approval is not shown to the channel", what)
	}
}

// agentAnswer reads the agent's answer to action (or message) id of
// source from the results bucket; ok is false while there is none.
func agentAnswer(t *testing.T, js jetstream.JetStream, source, id string) (approval.Result, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), natsWait)
	defer cancel()
	data, err := wire.NewQueue(js).Result(ctx, source, id)
	if errors.Is(err, wire.ErrNoResult) {
		return approval.Result{}, false
	}
	if err != nil {
		t.Fatal(err)
	}
	var r approval.Result
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	return r, true
}

// stateOf is proposal id's state as the flow reads its seals.
func stateOf(t *testing.T, f *approval.Flow, id string) approval.State {
	t.Helper()
	p, err := f.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("proposal %s: %v", id, err)
	}
	return p.State
}

// natsWait bounds one round trip through NATS and the agent on a busy
// machine.
const natsWait = 30 * time.Second
