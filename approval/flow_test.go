package approval_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
)

func fourEyes() approval.Policy {
	return approval.Policy{Approvers: []string{requester, approver, approver2}, FourEyes: true}
}

// Approve answers at once, whether or not an agent is there; the outcome
// comes when the agent answers, through OnOutcome, and the trail holds
// every step, the agent's own record of the execution included.
func TestApproveAnswersAtOnceThenOutcome(t *testing.T) {
	e := newEnv(t)
	f := e.flow(fourEyes())
	ctx := testContext(t)
	p, err := f.Propose(ctx, noProxyChange(), requester, approval.ForSource(source))
	if err != nil || p.State != approval.StatePending {
		t.Fatalf("Propose = %+v, %v", p, err)
	}
	var got outcome
	start := time.Now()
	p, err = f.Approve(ctx, p.ID, approver, approval.OnOutcome(got.fn))
	if took := time.Since(start); err != nil || took > time.Second || p.State != approval.StateApproved {
		t.Fatalf("Approve with no agent = %s, %v after %s; want approved within 1s", p.State, err, took)
	}
	if p.DecidedBy != approver || !slices.Equal(p.Approvers, []string{approver}) {
		t.Errorf("approval: %+v", p)
	}
	time.Sleep(500 * time.Millisecond)
	if len(got.got()) != 0 || e.x.runs(p.ID) != 0 {
		t.Fatal("an outcome without an agent")
	}

	e.serve()
	waitFor(t, 30*time.Second, "the outcome", func() bool { return len(got.got()) == 1 })
	o := got.got()[0]
	if o.State != approval.StateExecuted || o.Result == nil || o.Result.Outcome != "applied" || o.Result.Undo == nil {
		t.Fatalf("outcome %+v", o)
	}
	if n := e.x.runs(p.ID); n != 1 {
		t.Errorf("executed %d times", n)
	}
	if ev := e.x.events; len(ev) != 1 || !strings.Contains(ev[0], requester) || !strings.Contains(ev[0], approver) {
		t.Errorf("events %q: want one naming requester and approver", ev)
	}
	stored, err := f.Get(ctx, p.ID)
	if err != nil || stored.State != approval.StateExecuted || stored.ExecutedAt.IsZero() {
		t.Errorf("Get = %+v, %v", stored, err)
	}
	waitFor(t, 10*time.Second, "the trail", func() bool {
		rs := e.records(p.ID)
		return countKind(rs, audit.KindProposed) == 1 && countKind(rs, audit.KindApproved) == 1 && countKind(rs, audit.KindExecuted) == 2
	})
}

func TestFourEyesRefusals(t *testing.T) {
	e := newEnv(t)
	f := e.flow(fourEyes())
	ctx := testContext(t)
	p, err := f.Propose(ctx, noProxyChange(), requester, approval.ForSource(source))
	if err != nil {
		t.Fatal(err)
	}
	diag, err := f.Propose(ctx, noProxyChange(), approval.SystemRequesterPrefix+"diagnosis", approval.ForSource(source))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		id, user string
		want     error
	}{
		{p.ID, requester, approval.ErrOwnRequest},
		{p.ID, stranger, approval.ErrNotApprover},
		{diag.ID, approver, approval.ErrOwnRequest},
		{"act-doesnotexist", approver, approval.ErrNotFound},
	} {
		if _, err := f.Approve(ctx, tc.id, tc.user); !errors.Is(err, tc.want) {
			t.Errorf("Approve(%s by %s) = %v, want %v", tc.id, tc.user, err, tc.want)
		}
	}
	rs := e.records(p.ID)
	if n := countKind(rs, audit.KindRefused); n != 2 {
		t.Errorf("refusals audited: %v", kinds(rs))
	}
	if got, _ := f.Get(ctx, p.ID); got.State != approval.StatePending {
		t.Errorf("state %s after refusals", got.State)
	}
}

// A policy of two approvals: one person twice is one; two people approve.
func TestTwoApprovals(t *testing.T) {
	e := newEnv(t)
	pol := fourEyes()
	pol.Approvals = 2
	f := e.flow(pol)
	e.serve()
	ctx := testContext(t)
	p, err := f.Propose(ctx, noProxyChange(), requester, approval.ForSource(source))
	if err != nil {
		t.Fatal(err)
	}
	if p, err = f.Approve(ctx, p.ID, approver); err != nil || p.State != approval.StatePending || len(p.Approvers) != 1 {
		t.Fatalf("first approval = %+v, %v", p, err)
	}
	if _, err := f.Approve(ctx, p.ID, approver); !errors.Is(err, approval.ErrAlreadyApproved) {
		t.Fatalf("same approver again = %v", err)
	}
	time.Sleep(time.Second)
	if e.x.runs(p.ID) != 0 {
		t.Fatal("ran with one approval of two")
	}
	if p, err = f.Approve(ctx, p.ID, approver2); err != nil || p.State != approval.StateApproved {
		t.Fatalf("second approval = %+v, %v", p, err)
	}
	waitFor(t, 30*time.Second, "executed", func() bool {
		got, _ := f.Get(ctx, p.ID)
		return got.State == approval.StateExecuted
	})
}

// Twenty approvals race on two replicas: exactly one completes the
// decision, and the change runs once.
func TestConcurrentApprove(t *testing.T) {
	e := newEnv(t)
	replicas := []*approval.Flow{e.flow(fourEyes()), e.flow(fourEyes())}
	e.serve()
	ctx := testContext(t)
	p, err := replicas[0].Propose(ctx, noProxyChange(), requester, approval.ForSource(source))
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			<-start
			_, errs[i] = replicas[i%2].Approve(ctx, p.ID, []string{approver, approver2}[i%2])
		})
	}
	close(start)
	wg.Wait()
	wins := 0
	for i, err := range errs {
		switch {
		case err == nil:
			wins++
		case !errors.Is(err, approval.ErrAlreadyDecided):
			t.Errorf("approval %d: %v", i, err)
		}
	}
	if wins != 1 {
		t.Fatalf("%d approvals won, want 1", wins)
	}
	waitFor(t, 30*time.Second, "executed", func() bool {
		got, _ := replicas[1].Get(ctx, p.ID)
		return got.State == approval.StateExecuted
	})
	time.Sleep(2 * time.Second) // two sweeps of both replicas
	if r := e.x.runs(p.ID); r != 1 {
		t.Errorf("executed %d times", r)
	}
	// Approvals are audited before they are sealed: an approver who lost
	// the race has an approval on the record, and a refusal after it that
	// says it was not recorded (one record per approver: the id repeats).
	rs := e.records(p.ID)
	if a := countKind(rs, audit.KindApproved); a < 1 || a > 2 || countKind(rs, audit.KindRefused) != n-1 {
		t.Errorf("audit %v", kinds(rs))
	}
	for _, r := range rs {
		if r.Kind == audit.KindRefused && !strings.Contains(r.Reason, "already decided") {
			t.Errorf("refusal %q", r.Reason)
		}
	}
}

func TestRejectThenApprove(t *testing.T) {
	e := newEnv(t)
	f := e.flow(fourEyes())
	ctx := testContext(t)
	p, err := f.Propose(ctx, noProxyChange(), requester, approval.ForSource(source))
	if err != nil {
		t.Fatal(err)
	}
	const reason = "wrong proxy http://admin:hunter2@proxy.corp:3128"
	if _, err := f.Reject(ctx, p.ID, stranger, "no"); !errors.Is(err, approval.ErrNotApprover) {
		t.Fatalf("Reject by stranger = %v", err)
	}
	got, err := f.Reject(ctx, p.ID, approver, reason)
	if err != nil || got.State != approval.StateRejected || got.DecidedBy != approver || strings.Contains(got.Reason, "hunter2") {
		t.Fatalf("Reject = %+v, %v", got, err)
	}
	if _, err := f.Approve(ctx, p.ID, approver2); !errors.Is(err, approval.ErrAlreadyDecided) {
		t.Fatalf("Approve after reject = %v", err)
	}
	// The requester may withdraw their own proposal.
	q, err := f.Propose(ctx, noProxyChange(), requester, approval.ForSource(source))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := f.Reject(ctx, q.ID, requester, "withdrawn"); err != nil || got.State != approval.StateRejected {
		t.Fatalf("withdraw = %+v, %v", got, err)
	}
}

// Both replicas sweep: a proposal past its expiry expires once, sealed,
// and can no longer be approved.
func TestExpirySweep(t *testing.T) {
	e := newEnv(t)
	pol := fourEyes()
	pol.TTL = 2 * time.Second
	replicas := []*approval.Flow{e.flow(pol), e.flow(pol)}
	ctx := testContext(t)
	p, err := replicas[0].Propose(ctx, noProxyChange(), requester, approval.ForSource(source))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "expired", func() bool {
		got, _ := replicas[1].Get(ctx, p.ID)
		return got.State == approval.StateExpired
	})
	if _, err := replicas[1].Approve(ctx, p.ID, approver); !errors.Is(err, approval.ErrExpired) {
		t.Errorf("Approve after expiry = %v", err)
	}
	time.Sleep(2 * time.Second)
	if n := countKind(e.records(p.ID), audit.KindExpired); n != 1 {
		t.Errorf("%d expiry records, want 1", n)
	}
}

// The replica whose user approved stops before the agent answers: the
// other replica's sweep adopts the proposal, records the outcome once
// and posts it where the decision was asked for.
func TestOutcomeOfADeadReplica(t *testing.T) {
	e := newEnv(t)
	var posted outcome
	survivor := e.flow(fourEyes(), func(c *approval.Config) {
		c.Outcomes = func(_ context.Context, p approval.Proposal) { posted.fn(p) }
	})
	ctx := testContext(t)
	cfg := approval.Config{Signer: e.signer, Trail: e.trail, Policy: fourEyes(), Log: natstest.Logger(t)}
	dying, err := approval.NewFlow(ctx, e.connect("bot").JS, cfg)
	if err != nil {
		t.Fatal(err)
	}
	p, err := survivor.Propose(ctx, noProxyChange(), requester, approval.ForSource(source), approval.InChannel("C0CHANNEL1"))
	if err != nil {
		t.Fatal(err)
	}
	// dying approves but never runs its loop: it died right after.
	var lost outcome
	if _, err := dying.Approve(ctx, p.ID, approver, approval.OnOutcome(lost.fn)); err != nil {
		t.Fatal(err)
	}
	e.serve()
	waitFor(t, 30*time.Second, "the survivor posts the outcome", func() bool { return len(posted.got()) == 1 })
	if o := posted.got()[0]; o.State != approval.StateExecuted || o.Channel != "C0CHANNEL1" {
		t.Errorf("posted %+v", o)
	}
	if e.x.runs(p.ID) != 1 || len(lost.got()) != 0 {
		t.Errorf("runs %d, lost outcome %v", e.x.runs(p.ID), lost.got())
	}
}

// A proposal keeps the four-eyes rule it was made under when the policy
// is switched off later; one made by the diagnosis without four-eyes needs
// a person's proposal once four-eyes is on.
func TestFourEyesOfTheProposal(t *testing.T) {
	e := newEnv(t)
	strict := e.flow(fourEyes())
	laxPolicy := fourEyes()
	laxPolicy.FourEyes = false
	lax := e.flow(laxPolicy)
	ctx := testContext(t)
	p, err := strict.Propose(ctx, noProxyChange(), requester, approval.ForSource(source))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lax.Approve(ctx, p.ID, requester); !errors.Is(err, approval.ErrOwnRequest) {
		t.Errorf("own approval of a four-eyes proposal under a lax policy = %v", err)
	}
	d, err := lax.Propose(ctx, noProxyChange(), approval.SystemRequesterPrefix+"diagnosis", approval.ForSource(source))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := strict.Approve(ctx, d.ID, approver); !errors.Is(err, approval.ErrOwnRequest) {
		t.Errorf("approval of the diagnosis' proposal once four-eyes is on = %v", err)
	}
}

// Rotating the key: a proposal sealed with the old key is approved by the
// bot with the new one (approvals.trustedKeys naming the old), and runs on
// agents that trust both; an agent that trusts only the new key refuses
// it, and a third key is trusted by nobody.
func TestKeyRotation(t *testing.T) {
	e := newEnv(t)
	old := e.signer
	next, err := approval.NewEphemeralSigner()
	if err != nil {
		t.Fatal(err)
	}
	ctx := testContext(t)
	// The bot before step 3 (replaced: its loop no longer runs).
	before, err := approval.NewFlow(ctx, e.connect("bot").JS, approval.Config{Signer: old, Trail: e.trail, Policy: fourEyes(), Log: natstest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	e.signer = next
	after := e.flow(fourEyes(), func(c *approval.Config) { c.TrustedKeys = []string{old.PublicKey()} })
	p, err := before.Propose(ctx, noProxyChange(), requester, approval.ForSource(source))
	if err != nil {
		t.Fatal(err)
	}
	var got outcome
	if _, err := after.Approve(ctx, p.ID, approver, approval.OnOutcome(got.fn)); err != nil {
		t.Fatalf("approval with the new key of a proposal sealed with the old one: %v", err)
	}
	stopNewOnly := e.serve(func(c *approval.AgentConfig) { c.Trust.Keys = []string{next.PublicKey()} })
	waitFor(t, 30*time.Second, "the agent trusting the new key only to answer", func() bool { return len(got.got()) == 1 })
	if o := got.got()[0]; o.State != approval.StateFailed || o.Code != approval.CodeUnauthorized || e.x.runs(p.ID) != 0 {
		t.Fatalf("agent without the old key: %s %s, %d runs", o.State, o.Code, e.x.runs(p.ID))
	}
	stopNewOnly()

	q, err := before.Propose(ctx, noProxyChange(), requester, approval.ForSource(source))
	if err != nil {
		t.Fatal(err)
	}
	var done outcome
	if _, err := after.Approve(ctx, q.ID, approver, approval.OnOutcome(done.fn)); err != nil {
		t.Fatal(err)
	}
	e.serve(func(c *approval.AgentConfig) { c.Trust.Keys = []string{old.PublicKey(), next.PublicKey()} })
	waitFor(t, 30*time.Second, "the agent trusting both keys to run it", func() bool { return len(done.got()) == 1 })
	if o := done.got()[0]; o.State != approval.StateExecuted {
		t.Fatalf("agent trusting both: %s %s", o.State, o.Reason)
	}

	third, err := approval.NewEphemeralSigner()
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := approval.NewFlow(ctx, e.connect("bot").JS, approval.Config{Signer: third, Trail: e.trail, Policy: fourEyes(), Log: natstest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stranger.Approve(ctx, q.ID, approver2); !errors.Is(err, approval.ErrUntrustedKey) {
		t.Errorf("a bot with a third key reads the record as %v, want an untrusted key", err)
	}
}
