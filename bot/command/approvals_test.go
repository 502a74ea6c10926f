package command_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bot/approval"
	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/bot/command"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/testenv"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/internal/testenv/syncbuf"
)

const (
	requester = "UREQ0001"
	approver1 = "UAPP0001"
	approver2 = "UAPP0002"
	stranger  = "USTR0001"
)

var actionID = regexp.MustCompile(`act-[a-z2-7]{16}`)

// fakeAgent answers action requests for source with answer, counting them.
type fakeAgent struct {
	calls  atomic.Int32
	mu     sync.Mutex
	last   actions.Change
	answer func(req actions.Change) actions.Reply
}

type approvalsEnv struct {
	approvals *command.Changes
	store     *approval.Store
	log       *audit.Log
	agent     *fakeAgent
	agentJS   jetstream.JetStream
	verifier  *actions.Verifier
}

func newApprovals(t *testing.T, source string) *approvalsEnv {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), natstest.Timeout)
	defer cancel()
	srv := natstest.RunServer(t)
	connect := func(name string) *bus.Conn {
		c, err := bus.Connect(ctx, bus.Config{URLs: []string{srv.ClientURL()}, Name: name}, natstest.Logger(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	botConn, agentConn := connect("bot"), connect("agent")
	log, err := audit.Open(ctx, botConn.JS)
	if err != nil {
		t.Fatal(err)
	}
	signer, verifier := agentKeys(t, agentConn.JS, source)
	store, err := approval.NewStore(ctx, botConn.JS, log, approval.Policy{Approvers: []string{approver1, approver2}, FourEyes: true}, approval.WithSealer(signer))
	if err != nil {
		t.Fatal(err)
	}
	fa := &fakeAgent{answer: func(req actions.Change) actions.Reply {
		return actions.Reply{Result: &actions.Result{ActionID: req.ID, Type: req.Type, Outcome: actions.OutcomeApplied, Summary: "added " + strings.Join(req.NoProxy.Add, ", "), Diff: "+ kubernetes"}}
	}}
	queue := ensureQueue(t, botConn.JS)
	serveFake(t, agentConn.JS, source, func(data []byte) (actions.Reply, bool) {
		fa.calls.Add(1)
		req, _ := openRequest(t, verifier, data)
		fa.mu.Lock()
		fa.last = req
		answer := fa.answer
		fa.mu.Unlock()
		// Slow enough that concurrent approvals overlap the dispatch.
		time.Sleep(100 * time.Millisecond)
		return answer(req), true
	})
	return &approvalsEnv{
		approvals: &command.Changes{Store: store, Audit: log, Queue: queue, Signer: signer, Timeout: 10 * time.Second},
		store:     store, log: log, agent: fa, agentJS: agentConn.JS, verifier: verifier,
	}
}

func key(source string) diagnose.Key {
	return diagnose.Key{Source: source, Cluster: event.ClusterRef{Namespace: "clusters", Name: "c1"}}
}

func fix() *diagnose.Fix {
	return &diagnose.Fix{
		Kind: "noproxy", Target: "HostedCluster/clusters/c1",
		Before: ".cluster.local,10.0.0.0/8", Add: []string{"kubernetes", "172.31.0.0/16"},
	}
}

// propose returns the id the proposal reply names.
func (e *approvalsEnv) propose(t *testing.T, source string, add ...string) (string, chatops.Reply) {
	t.Helper()
	r := e.approvals.ProposeNoProxy(context.Background(), key(source), fix(), add, requester)
	id := actionID.FindString(r.Text)
	if id == "" {
		t.Fatalf("no action id in the proposal reply: %s", r.Text)
	}
	return id, r
}

// A proposal carries the fix and the user's extra entries, names its
// source and says how to approve; of two concurrent approvals exactly one
// dispatches, after the refusals of the requester (four-eyes) and of a
// stranger.
func TestApprovalsProposeApprove(t *testing.T) {
	e := newApprovals(t, "mgmt-1")
	ctx := context.Background()
	id, r := e.propose(t, "mgmt-1", "example.com", "kubernetes", "10.0.0.0/8")
	for _, want := range []string{"<@" + requester + ">", "/hcp approve " + id, "+ noProxy: .cluster.local,10.0.0.0/8,kubernetes,172.31.0.0/16,example.com", "clusters/c1"} {
		if !strings.Contains(r.Text, want) {
			t.Errorf("proposal reply lacks %q:\n%s", want, r.Text)
		}
	}
	if !r.InChannel {
		t.Error("the proposal is not shown to the channel, where approvers see it")
	}
	p, err := e.store.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if p.Source != "mgmt-1" || p.RequestedBy != requester || p.Request.NoProxy.Expected != fix().Before ||
		!slices.Equal(p.Request.NoProxy.Add, []string{"kubernetes", "172.31.0.0/16", "example.com"}) ||
		p.Request.Cluster != (actions.ClusterRef{Namespace: "clusters", Name: "c1"}) {
		t.Fatalf("stored proposal: %+v", p)
	}

	for user, want := range map[string]string{requester: "Four-eyes", stranger: "not allowed"} {
		if r := e.approvals.Approve(ctx, id, user); !strings.Contains(r.Text, want) {
			t.Errorf("approve by %s: %q, want %q", user, r.Text, want)
		}
	}
	if n := e.agent.calls.Load(); n != 0 {
		t.Fatalf("refused approvals dispatched %d times", n)
	}

	replies := make([]chatops.Reply, 2)
	var wg sync.WaitGroup
	for i, user := range []string{approver1, approver2} {
		wg.Go(func() { replies[i] = e.approvals.Approve(ctx, id, user) })
	}
	wg.Wait()
	if n := e.agent.calls.Load(); n != 1 {
		t.Fatalf("two concurrent approvals dispatched %d times, want 1", n)
	}
	var applied, decided int
	for _, r := range replies {
		switch {
		case strings.Contains(r.Text, "and applied"):
			applied++
		case strings.Contains(r.Text, "already decided"):
			decided++
		}
	}
	if applied != 1 || decided != 1 {
		t.Errorf("replies: %q and %q; want one applied and one already decided", replies[0].Text, replies[1].Text)
	}
	e.agent.mu.Lock()
	sent := e.agent.last
	e.agent.mu.Unlock()
	if sent.ID != id || sent.RequestedBy != requester || !slices.Equal(sent.NoProxy.Add, p.Request.NoProxy.Add) {
		t.Errorf("agent got %+v, want the proposal's request", sent)
	}
	if p, _ := e.store.Get(ctx, id); p.State != approval.StateExecuted || p.Result == nil || p.Result.Outcome != actions.OutcomeApplied {
		t.Errorf("proposal after approval: %+v", p)
	}
	if r := e.approvals.Approve(ctx, id, approver1); !strings.Contains(r.Text, "already decided") {
		t.Errorf("late approve: %q", r.Text)
	}
	if r := e.approvals.Approve(ctx, "act-aaaaaaaaaaaaaaaa", approver1); !strings.Contains(r.Text, "no proposal") {
		t.Errorf("unknown id: %q", r.Text)
	}
	if n := e.agent.calls.Load(); n != 1 {
		t.Errorf("dispatched %d times in all, want 1", n)
	}
	recs, err := e.log.Recent(ctx, 50)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[audit.Kind]int{}
	for _, r := range recs {
		kinds[r.Kind]++
	}
	if kinds[audit.KindProposed] != 1 || kinds[audit.KindApproved] != 1 || kinds[audit.KindExecuted] != 1 || kinds[audit.KindRefused] < 3 {
		t.Errorf("audit kinds: %v", kinds)
	}
}

// The agent's error codes come back as sentences: a conflict asks for a
// new proposal; without an agent the request is queued.
func TestApprovalsFailures(t *testing.T) {
	e := newApprovals(t, "mgmt-1")
	ctx := context.Background()
	e.agent.mu.Lock()
	e.agent.answer = func(actions.Change) actions.Reply {
		return actions.Reply{Code: actions.CodeConflict, Error: "conflict: HostedCluster clusters/c1 noProxy is now x"}
	}
	e.agent.mu.Unlock()
	id, _ := e.propose(t, "mgmt-1")
	r := e.approvals.Approve(ctx, id, approver1)
	if !strings.Contains(r.Text, "the HostedCluster changed since the proposal; propose again with `/hcp fix noproxy clusters/c1`") {
		t.Errorf("conflict reply: %q", r.Text)
	}
	if p, _ := e.store.Get(ctx, id); p.State != approval.StateFailed {
		t.Errorf("state after conflict: %s", p.State)
	}

	// No agent: queued, not an error; it stays approved.
	id, _ = e.propose(t, "mgmt-nobody")
	r = e.approvals.Approve(ctx, id, approver1)
	if !strings.Contains(r.Text, "queued: the agent of mgmt-nobody has not picked it up yet") {
		t.Errorf("no agent: %q", r.Text)
	}
	if p, _ := e.store.Get(ctx, id); p.State != approval.StateApproved {
		t.Errorf("state while queued: %s", p.State)
	}

	// An extra entry the executor would refuse is never proposed.
	r = e.approvals.ProposeNoProxy(ctx, key("mgmt-1"), fix(), []string{"*"}, requester)
	if !strings.Contains(r.Text, "Cannot propose") || actionID.MatchString(r.Text) {
		t.Errorf("wildcard proposal: %q", r.Text)
	}
}

// The requester may withdraw a proposal; a stranger may not; once
// rejected it cannot be approved.
func TestApprovalsReject(t *testing.T) {
	e := newApprovals(t, "mgmt-1")
	ctx := context.Background()
	id, _ := e.propose(t, "mgmt-1")
	if r := e.approvals.Reject(ctx, id, "no", stranger); !strings.Contains(r.Text, "not allowed") {
		t.Errorf("stranger reject: %q", r.Text)
	}
	if r := e.approvals.Reject(ctx, id, "wrong cluster, see http://u:hunter2@proxy:3128", requester); !strings.Contains(r.Text, "rejected by") || strings.Contains(r.Text, "hunter2") {
		t.Errorf("reject: %q", r.Text)
	}
	if r := e.approvals.Approve(ctx, id, approver1); !strings.Contains(r.Text, "already decided: it is rejected") {
		t.Errorf("approve after reject: %q", r.Text)
	}
	if n := e.agent.calls.Load(); n != 0 {
		t.Errorf("dispatched %d times", n)
	}
}

// A request nobody picks up is answered "queued", not as an error, and
// stays approved; when the agent comes, it runs once and the outcome is
// posted into the same conversation (chatops.Later), replacing the
// message that said "queued", and recorded.
func TestApprovalQueuedUntilAgentComes(t *testing.T) {
	e := newApprovals(t, "mgmt-1")
	e.approvals.Timeout = time.Second
	var later syncbuf.Buffer
	ctx := chatops.WithLater(context.Background(), func(r chatops.Reply) {
		_, _ = later.Write([]byte(fmt.Sprintf("replace=%v %s\n", r.ReplaceOriginal, r.Text)))
	})
	id, _ := e.propose(t, "mgmt-late")
	// The proposal's Approve button.
	cmds := &command.Handler{Bot: botKnowing(t), Changes: e.approvals}
	r := cmds.HandleAction(ctx, chatops.ActionRequest{Origin: chatops.Origin{UserID: approver1}, ActionID: chatops.ActionApprove, Value: id})
	if !strings.Contains(r.Text, "approved by <@"+approver1+"> and queued: the agent of mgmt-late has not picked it up yet. The result will be posted here.") || !r.ReplaceOriginal {
		t.Fatalf("queued reply: %+v", r)
	}
	if p, _ := e.store.Get(ctx, id); p.State != approval.StateApproved {
		t.Fatalf("state while queued: %s", p.State)
	}
	var runs atomic.Int32
	serveFake(t, e.agentJS, "mgmt-late", func(data []byte) (actions.Reply, bool) {
		v := *e.verifier
		v.Source = "mgmt-late"
		req, _ := openRequest(t, &v, data)
		runs.Add(1)
		return actions.Reply{Result: &actions.Result{ActionID: req.ID, Type: req.Type, Outcome: actions.OutcomeApplied, Summary: "added late"}}, true
	})
	testenv.Eventually(t, natstest.Timeout, "the outcome posted later", func() bool {
		// It replaces the message that said "queued".
		return strings.Contains(later.String(), "replace=true `"+id+"` (requested by <@"+requester+">) approved by <@"+approver1+"> and applied: added late")
	})
	if p, _ := e.store.Get(ctx, id); p.State != approval.StateExecuted || p.Result == nil {
		t.Errorf("state after the result: %s", p.State)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("executed %d times", n)
	}
}

// An approval whose request never got out (the bot died right after
// storing it) is sent by the recovery sweep, which two replicas run at
// once, and executed exactly once; its outcome is recorded. One approved
// too long ago for its deadline is marked failed without being sent.
func TestRecoverySendsApprovedRequests(t *testing.T) {
	e := newApprovals(t, "mgmt-1")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	id, _ := e.propose(t, "mgmt-1")
	// What a bot killed between the approval and the send leaves behind.
	if _, err := e.store.Approve(ctx, id, approver1, time.Now()); err != nil {
		t.Fatal(err)
	}
	old, _ := e.propose(t, "mgmt-1")
	if _, err := e.store.Approve(ctx, old, approver1, time.Now().Add(-actions.QueueHorizon-actions.ResultGrace-time.Minute)); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 2 {
		// Another replica: its own Approvals on the same store and queue.
		a := &command.Changes{Store: e.store, Audit: e.log, Queue: e.approvals.Queue, Signer: e.approvals.Signer}
		wg.Go(func() { _ = a.RunRecovery(ctx, 200*time.Millisecond) })
	}
	testenv.Eventually(t, natstest.Timeout, "the approved action executed and recorded", func() bool {
		p, _ := e.store.Get(ctx, id)
		return p.State == approval.StateExecuted
	})
	testenv.Eventually(t, natstest.Timeout, "the one past its deadline marked failed", func() bool {
		p, _ := e.store.Get(ctx, old)
		return p.State == approval.StateFailed && strings.Contains(p.Reason, "not picked up")
	})
	time.Sleep(time.Second) // a few more sweeps of both replicas
	cancel()
	wg.Wait()
	if n := e.agent.calls.Load(); n != 1 {
		t.Errorf("the agent ran %d requests, want 1", n)
	}
}
