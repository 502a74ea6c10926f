package command_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bot/blockkit"
	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/bot/command"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/testenv"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
)

const (
	requester = "UREQ0001"
	approver1 = "UAPP0001"
	approver2 = "UAPP0002"
	stranger  = "USTR0001"
)

var actionID = regexp.MustCompile(`act-[a-z2-7]{16}`)

// approvalsEnv is the approval path without a control plane: a bot
// replica (its flow's loop running) and the agent of source (the real
// approval.Serve) on one nats-server; the agent's executor is fake.
type approvalsEnv struct {
	approvals *command.Changes
	flow      *approval.Flow
	log       *audit.Log
	agent     *fakeExecutor
	signer    *approval.Signer
	botJS     jetstream.JetStream
	agentJS   jetstream.JetStream
}

func newApprovals(t *testing.T, source string, mod ...func(*approval.Config)) *approvalsEnv {
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
	signer, err := approval.NewEphemeralSigner()
	if err != nil {
		t.Fatal(err)
	}
	flow := runFlow(t, botConn.JS, signer, log, fourEyes(), mod...)
	x := newFakeExecutor(applied)
	serveAgent(t, agentConn.JS, source, signer, x)
	return &approvalsEnv{
		approvals: &command.Changes{Flow: flow, Audit: log, Log: natstest.Logger(t)},
		flow:      flow, log: log, agent: x, signer: signer, botJS: botConn.JS, agentJS: agentConn.JS,
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
	return proposeWith(t, e.approvals, source, add...)
}

func proposeWith(t *testing.T, c *command.Changes, source string, add ...string) (string, chatops.Reply) {
	t.Helper()
	r := c.ProposeNoProxy(context.Background(), key(source), nil, fix(), add, requester)
	id := actionID.FindString(r.Text)
	if id == "" {
		t.Fatalf("no action id in the proposal reply: %s", r.Text)
	}
	return id, r
}

// approve approves id as user in conversation l and returns the answer
// and how long it took.
func (e *approvalsEnv) approve(id, user string, l *later) (chatops.Reply, time.Duration) {
	start := time.Now()
	r := e.approvals.Approve(l.ctx(), id, user)
	return r, time.Since(start)
}

// A proposal carries the fix and the user's extra entries, names its
// source and says how to approve. The requester (four-eyes) and a
// stranger are refused and nothing is approved. Of two concurrent
// approvals exactly one wins: it is answered at once (approver, agent),
// the other is told it is decided; the agent runs the change once, and
// the outcome comes later into the winner's conversation only.
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
	p, err := e.flow.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if p.Source != "mgmt-1" || p.RequestedBy != requester || p.Change.NoProxy.Expected != fix().Before ||
		!slices.Equal(p.Change.NoProxy.Add, []string{"kubernetes", "172.31.0.0/16", "example.com"}) ||
		p.Change.Cluster != (actions.ClusterRef{Namespace: "clusters", Name: "c1"}) {
		t.Fatalf("stored proposal: %+v", p)
	}

	for user, want := range map[string]string{requester: "Four-eyes", stranger: "not allowed"} {
		if r, _ := e.approve(id, user, &later{}); !strings.Contains(r.Text, want) {
			t.Errorf("approve by %s: %q, want %q", user, r.Text, want)
		}
	}
	if s := stateOf(t, e.flow, id); s != approval.StatePending || e.agent.calls() != 0 {
		t.Fatalf("after refused approvals: %s, %d executions", s, e.agent.calls())
	}

	replies := make([]chatops.Reply, 2)
	took := make([]time.Duration, 2)
	convs := []*later{{}, {}}
	var wg sync.WaitGroup
	for i, user := range []string{approver1, approver2} {
		wg.Go(func() { replies[i], took[i] = e.approve(id, user, convs[i]) })
	}
	wg.Wait()
	winner := -1
	for i, r := range replies {
		switch {
		case strings.Contains(r.Text, "sent to the agent"):
			winner = i
		case !strings.Contains(r.Text, "already decided"):
			t.Errorf("concurrent approval answered %q", r.Text)
		}
	}
	if winner < 0 || strings.Contains(replies[1-winner].Text, "sent to the agent") {
		t.Fatalf("replies %q and %q; want one sent to the agent and one already decided", replies[0].Text, replies[1].Text)
	}
	by := []string{approver1, approver2}[winner]
	sentAtOnce(t, "the winning approval", replies[winner], took[winner], by, "mgmt-1")
	outcome := convs[winner].wait(t, "and applied")
	if want := "`" + id + "` (requested by <@" + requester + ">) approved by <@" + by + "> and applied: added kubernetes, 172.31.0.0/16, example.com"; !strings.HasPrefix(outcome.Text, want) || !outcome.InChannel {
		t.Errorf("outcome %q, want %q", outcome.Text, want)
	}
	if sent := e.agent.lastChange(); sent.ID != id || sent.RequestedBy != requester || !slices.Equal(sent.NoProxy.Add, p.Change.NoProxy.Add) {
		t.Errorf("agent ran %+v, want the proposal's change", sent)
	}
	if p, _ := e.flow.Get(ctx, id); p.State != approval.StateExecuted || p.Result == nil || p.Result.Outcome != actions.OutcomeApplied {
		t.Errorf("proposal after approval: %+v", p)
	}
	if r, _ := e.approve(id, approver1, &later{}); !strings.Contains(r.Text, "already decided: it is executed") {
		t.Errorf("late approve: %q", r.Text)
	}
	if r, _ := e.approve("act-aaaaaaaaaaaaaaaa", approver1, &later{}); !strings.Contains(r.Text, "no proposal") {
		t.Errorf("unknown id: %q", r.Text)
	}
	time.Sleep(1500 * time.Millisecond) // a sweep of the loop: nothing is sent again
	if n := e.agent.calls(); n != 1 {
		t.Errorf("executed %d times in all, want 1", n)
	}
	if n := len(convs[1-winner].all()); n != 0 {
		t.Errorf("the refused approval's conversation got %d later replies", n)
	}
	// The bot records the execution, and so does the agent on its own
	// subject. Approvals are audited before they are sealed: the loser of
	// the race may have its approval on the trail, followed by the refusal
	// saying it was not recorded.
	kinds := auditKinds(t, e.log)
	if kinds[audit.KindProposed] != 1 || kinds[audit.KindApproved] < 1 || kinds[audit.KindApproved] > 2 || kinds[audit.KindExecuted] != 2 || kinds[audit.KindRefused] < 3 {
		t.Errorf("audit kinds: %v", kinds)
	}
}

// The agent's failures come back as sentences in the approving
// conversation: a conflict asks for a new proposal. Without an agent the
// approval is answered all the same, and the proposal stays approved.
func TestApprovalsFailures(t *testing.T) {
	e := newApprovals(t, "mgmt-1")
	e.agent.setAnswer(func(actions.Change) (*actions.Result, error) {
		return nil, fmt.Errorf("%w: HostedCluster clusters/c1 noProxy is now x", actions.ErrConflict)
	})
	id, _ := e.propose(t, "mgmt-1")
	var conv later
	r, took := e.approve(id, approver1, &conv)
	sentAtOnce(t, "approval", r, took, approver1, "mgmt-1")
	if got := conv.wait(t, "not applied"); !strings.Contains(got.Text, "`"+id+"` was not applied: the HostedCluster changed since the proposal; propose again with `/hcp fix noproxy clusters/c1`") {
		t.Errorf("conflict outcome: %q", got.Text)
	}
	if s := stateOf(t, e.flow, id); s != approval.StateFailed {
		t.Errorf("state after conflict: %s", s)
	}

	// No agent: answered at once; it stays approved and nothing follows.
	id, _ = e.propose(t, "mgmt-nobody")
	var none later
	r, took = e.approve(id, approver1, &none)
	sentAtOnce(t, "approval with no agent", r, took, approver1, "mgmt-nobody")
	time.Sleep(1500 * time.Millisecond)
	if s := stateOf(t, e.flow, id); s != approval.StateApproved || len(none.all()) != 0 {
		t.Errorf("with no agent: %s, later replies %v", s, none.all())
	}

	// An extra entry the executor would refuse is never proposed.
	r = e.approvals.ProposeNoProxy(context.Background(), key("mgmt-1"), nil, fix(), []string{"*"}, requester)
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
	if r, _ := e.approve(id, approver1, &later{}); !strings.Contains(r.Text, "already decided: it is rejected") {
		t.Errorf("approve after reject: %q", r.Text)
	}
	time.Sleep(1500 * time.Millisecond)
	if n := e.agent.calls(); n != 0 {
		t.Errorf("executed %d times", n)
	}
}

// The proposal's Approve button while no agent of its cluster runs: it
// is answered at once, replacing the proposal, and the proposal stays
// approved; when the agent comes, the change runs once and the outcome
// replaces that answer in the same conversation (chatops.Later).
func TestApprovalQueuedUntilAgentComes(t *testing.T) {
	e := newApprovals(t, "mgmt-1")
	var conv later
	id, _ := e.propose(t, "mgmt-late")
	cmds := &command.Handler{Bot: botKnowing(t), Changes: e.approvals}
	start := time.Now()
	r := cmds.HandleAction(conv.ctx(), chatops.ActionRequest{Origin: chatops.Origin{UserID: approver1}, ActionID: blockkit.ActionApprove, Value: id})
	sentAtOnce(t, "the Approve button", r, time.Since(start), approver1, "mgmt-late")
	if !strings.Contains(r.Text, "The outcome will be posted here.") || !r.ReplaceOriginal {
		t.Errorf("answer %+v: want it to replace the proposal and promise the outcome here", r)
	}
	time.Sleep(1500 * time.Millisecond)
	if s := stateOf(t, e.flow, id); s != approval.StateApproved || len(conv.all()) != 0 {
		t.Fatalf("while no agent runs: %s, later replies %v", s, conv.all())
	}
	late := newFakeExecutor(func(ch actions.Change) (*actions.Result, error) {
		return &actions.Result{ActionID: ch.ID, Type: ch.Type, Outcome: actions.OutcomeApplied, Summary: "added late"}, nil
	})
	serveAgent(t, e.agentJS, "mgmt-late", e.signer, late)
	got := conv.wait(t, "and applied")
	if want := "`" + id + "` (requested by <@" + requester + ">) approved by <@" + approver1 + "> and applied: added late"; !strings.HasPrefix(got.Text, want) || !got.ReplaceOriginal {
		t.Errorf("outcome %+v, want %q replacing the answer", got, want)
	}
	if p, _ := e.flow.Get(context.Background(), id); p.State != approval.StateExecuted || p.Result == nil {
		t.Errorf("state after the outcome: %s", p.State)
	}
	if n := late.runsOf(id); n != 1 {
		t.Errorf("executed %d times", n)
	}
}

// An approval whose request never got out (its replica died right after
// the approval) is sent by the loop of the other replicas, two of them
// sweeping at once, executed exactly once and its outcome recorded and
// posted once. One approved too long ago for its deadline is marked
// failed, posted as not picked up, and never sent.
func TestRecoverySendsApprovedRequests(t *testing.T) {
	var posted later
	outcomes := func(c *approval.Config) {
		c.Outcomes = func(_ context.Context, p approval.Proposal) { posted.add(command.Outcome(p)) }
	}
	e := newApprovals(t, "mgmt-1", outcomes)
	runFlow(t, e.botJS, e.signer, e.log, fourEyes(), outcomes) // a second replica
	ctx := context.Background()
	dying := openFlow(t, e.botJS, e.signer, e.log, fourEyes())
	id, _ := e.propose(t, "mgmt-1")
	if _, err := dying.Approve(ctx, id, approver1); err != nil {
		t.Fatal(err)
	}
	// Approved by a replica whose clock said it was long ago.
	past := openFlow(t, e.botJS, e.signer, e.log, fourEyes(), func(c *approval.Config) {
		c.Now = func() time.Time { return time.Now().Add(-approval.QueueHorizon - approval.ResultGrace - time.Minute) }
	})
	old, _ := proposeWith(t, &command.Changes{Flow: past}, "mgmt-1")
	if _, err := past.Approve(ctx, old, approver1); err != nil {
		t.Fatal(err)
	}

	done := posted.wait(t, "`"+id+"` (requested by <@"+requester+">) approved by <@"+approver1+"> and applied")
	late := posted.wait(t, "`"+old+"` is approved but no agent of mgmt-1 picked it up before")
	t.Logf("posted:\n%s\n%s", done.Text, late.Text)
	if s := stateOf(t, e.flow, id); s != approval.StateExecuted {
		t.Errorf("%s is %s", id, s)
	}
	if p, _ := e.flow.Get(ctx, old); p.State != approval.StateFailed || p.Code != approval.CodeNoAnswer {
		t.Errorf("%s is %s (%s)", old, p.State, p.Code)
	}
	time.Sleep(2 * time.Second) // more sweeps of both replicas
	if n := e.agent.runsOf(id); n != 1 {
		t.Errorf("the agent ran %s %d times, want 1", id, n)
	}
	if _, sent := agentAnswer(t, e.botJS, "mgmt-1", old); sent || e.agent.runsOf(old) != 0 {
		t.Errorf("%s past its deadline reached the agent", old)
	}
	n := 0
	for _, r := range posted.all() {
		if strings.HasPrefix(r.Text, "`"+id+"`") {
			n++
		}
	}
	if n != 1 {
		t.Errorf("the outcome of %s was posted %d times, want once", id, n)
	}
	testenv.Eventually(t, natsWait, "both outcomes audited", func() bool {
		kinds := auditKinds(t, e.log)
		return kinds[audit.KindFailed] == 1 && kinds[audit.KindExecuted] == 2
	})
}

// `/hcp approve` through the signed Slack front while no agent of the
// proposal's management cluster runs: the HTTP answer comes within a
// second, naming the approver and the agent, and nothing runs; once an
// agent starts, the outcome arrives in the same conversation (the
// command's response_url).
func TestApproveAnswersWithinASecondAgentDown(t *testing.T) {
	e := newApprovals(t, "mgmt-1")
	id, _ := e.propose(t, "mgmt-down")
	front := newSlackFront(t, &command.Handler{Bot: botKnowing(t), Changes: e.approvals})
	a, conv := front.send("approve "+id, approver1)
	a.approvedAtOnce(t, approver1, "mgmt-down")
	if !strings.Contains(a.Text, "The outcome will be posted here.") {
		t.Errorf("answer %q does not promise the outcome here", a.Text)
	}
	time.Sleep(1500 * time.Millisecond)
	for _, c := range front.rec.CallsTo(slackrec.MethodResponseURL) {
		if c.Channel == conv.rch {
			t.Errorf("posted while no agent runs: %q", c.Form.Get("text"))
		}
	}
	if s := stateOf(t, e.flow, id); s != approval.StateApproved {
		t.Fatalf("while no agent runs: %s", s)
	}

	x := newFakeExecutor(applied)
	started := time.Now()
	serveAgent(t, e.agentJS, "mgmt-down", e.signer, x)
	call := conv.posted(outcomeOf(id))
	if want := "`" + id + "` (requested by <@" + requester + ">) approved by <@" + approver1 + "> and applied: added kubernetes, 172.31.0.0/16"; !strings.HasPrefix(call.Form.Get("text"), want) {
		t.Errorf("outcome %q, want %q", call.Form.Get("text"), want)
	}
	if n := x.runsOf(id); n != 1 || stateOf(t, e.flow, id) != approval.StateExecuted {
		t.Errorf("executed %d times; %s", n, stateOf(t, e.flow, id))
	}
	t.Logf("answered in %s; the outcome came %s after the agent started", a.took, call.Time.Sub(started))
}

// Under a policy of two approvals (approvals.required: 2), the first
// approval by the proposal's button replaces the proposal with a message
// that still carries its Approve and Reject buttons, for the second
// approver; the incident button's first press says how many are still
// needed. Nothing runs before the second approval; then the outcome
// names both approvers.
func TestTwoApprovalsKeepTheButtons(t *testing.T) {
	e := newApprovals(t, "mgmt-1", func(c *approval.Config) { c.Policy.Approvals = 2 })
	c := &command.Handler{Bot: botKnowing(t, kubevirt("mgmt-1", "clusters", "c1")), Changes: e.approvals}
	id, _ := e.propose(t, "mgmt-1")
	r := press(c, approver1, blockkit.ActionApprove, id)
	if !strings.Contains(r.Text, "approved by <@"+approver1+"> (1 of 2 approvals): 1 more approver(s) needed") || !r.ReplaceOriginal ||
		!slices.Equal(buttons(r), []string{blockkit.ActionApprove + "=" + id, blockkit.ActionReject + "=" + id}) {
		t.Errorf("first approval: %q, replace %v, buttons %v", r.Text, r.ReplaceOriginal, buttons(r))
	}
	if r := press(c, approver1, blockkit.ActionApprove, id); !strings.Contains(r.Text, "You already approved") || r.ReplaceOriginal {
		t.Errorf("the same approver again: %+v", r)
	}
	time.Sleep(1500 * time.Millisecond)
	if s := stateOf(t, e.flow, id); s != approval.StatePending || e.agent.calls() != 0 {
		t.Fatalf("after one approval of two: %s, %d executions", s, e.agent.calls())
	}
	out := pressApprove(t, c, approver2, id, "mgmt-1").wait(t, "and applied")
	if !strings.Contains(out.Text, "approved by <@"+approver1+"> and <@"+approver2+"> and applied") {
		t.Errorf("outcome %q", out.Text)
	}

	r = e.approvals.ApproveFix(context.Background(), key("mgmt-1"), nil, fix(), approver1)
	if !strings.Contains(r.Text, "(1 of 3 approvals)") || !strings.Contains(r.Text, "2 more approvers are needed") {
		t.Errorf("first press on the incident: %q", r.Text)
	}
}
