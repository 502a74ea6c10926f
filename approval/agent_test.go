package approval_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/approval/wire"
	"github.com/hcpbot/hcpbot/bus"
)

// approved proposes a change by requester and has approver approve it;
// the outcome lands in o.
func approved(t *testing.T, f *approval.Flow, o *outcome) approval.Proposal {
	t.Helper()
	ctx := testContext(t)
	p, err := f.Propose(ctx, noProxyChange(), requester, approval.ForSource(source))
	if err != nil {
		t.Fatal(err)
	}
	var opts []approval.DecideOption
	if o != nil {
		opts = append(opts, approval.OnOutcome(o.fn))
	}
	if p, err = f.Approve(ctx, p.ID, approver, opts...); err != nil || p.State != approval.StateApproved {
		t.Fatalf("Approve = %+v, %v", p, err)
	}
	return p
}

// result reads the agent's answer to id.
func (e *env) result(id string) (approval.Result, bool) {
	e.t.Helper()
	data, err := wire.NewQueue(e.connect("bot").JS).Result(testContext(e.t), source, id)
	if errors.Is(err, wire.ErrNoResult) {
		return approval.Result{}, false
	}
	if err != nil {
		e.t.Fatal(err)
	}
	var r approval.Result
	if err := json.Unmarshal(data, &r); err != nil {
		e.t.Fatal(err)
	}
	return r, true
}

// A request the agent cannot finish for a transient reason is handed back
// and runs again; one answer, one outcome.
func TestServeHandsBackTransientFailures(t *testing.T) {
	e := newEnv(t)
	e.x.errs = []error{transientErr, transientErr}
	f := e.flow(fourEyes())
	reg := prometheus.NewRegistry()
	e.serve(func(c *approval.AgentConfig) { c.Transient, c.Registerer = transient, reg })
	var got outcome
	p := approved(t, f, &got)
	waitFor(t, 60*time.Second, "the outcome", func() bool { return len(got.got()) == 1 })
	if o := got.got()[0]; o.State != approval.StateExecuted {
		t.Fatalf("outcome %+v", o)
	}
	if n := e.x.runs(p.ID); n != 3 {
		t.Errorf("ran %d times, want 3 (two transient failures)", n)
	}
	if n := gathered(t, reg, "hcpbot_agent_action_requests_total", "result", "handed-back"); n != 2 {
		t.Errorf("handed back %v times, want 2", n)
	}
}

// An agent that died after marking a request running left the mark: the
// next one runs it again, and the executor's answer (here: in place) is
// the one recorded.
func TestServeRunsAgainWhatADeadAgentBegan(t *testing.T) {
	e := newEnv(t)
	f := e.flow(fourEyes())
	var got outcome
	p := approved(t, f, &got)
	agent := e.connect("agent")
	kv, err := agent.JS.KeyValue(testContext(t), bus.ActionResultsBucket)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := wire.ResultKey(source, p.ID)
	mark, _ := json.Marshal(approval.Result{ID: p.ID, Proposal: approval.Digest(p), Running: true, At: time.Now()})
	if _, err := kv.Create(testContext(t), key, mark); err != nil {
		t.Fatal(err)
	}
	e.serve()
	waitFor(t, 30*time.Second, "the outcome", func() bool { return len(got.got()) == 1 })
	if o := got.got()[0]; o.State != approval.StateExecuted || e.x.runs(p.ID) != 1 {
		t.Fatalf("outcome %+v after %d runs", o, e.x.runs(p.ID))
	}
}

// Past the deadline the agent writes nothing more and reports what the
// cluster holds: the change of an attempt cut off by transient errors is
// in place (applied), or it is not (not applied).
func TestServePastDeadlineReportsTheCluster(t *testing.T) {
	for _, landed := range []bool{true, false} {
		t.Run(map[bool]string{true: "landed", false: "not landed"}[landed], func(t *testing.T) {
			e := newEnv(t)
			e.x.errs = []error{transientErr}
			var offset atomic.Int64
			f := e.flow(fourEyes())
			e.serve(func(c *approval.AgentConfig) {
				c.Transient = transient
				c.Now = func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
			})
			var got outcome
			p := approved(t, f, &got)
			waitFor(t, 30*time.Second, "the first attempt", func() bool { return e.x.runs(p.ID) == 1 })
			e.x.mu.Lock()
			e.x.inPlace = landed
			e.x.mu.Unlock()
			offset.Store(int64(approval.QueueHorizon + time.Minute))
			waitFor(t, 60*time.Second, "the outcome", func() bool { return len(got.got()) == 1 })
			o := got.got()[0]
			switch {
			case e.x.runs(p.ID) != 1:
				t.Errorf("ran %d times: nothing may run past the deadline", e.x.runs(p.ID))
			case landed && (o.State != approval.StateExecuted || o.Result == nil || o.Result.Undo == nil):
				t.Errorf("outcome %+v, want executed with its undo", o)
			case !landed && (o.State != approval.StateFailed || !strings.Contains(o.Reason, "not applied before its deadline")):
				t.Errorf("outcome %s %q, want failed: not applied", o.State, o.Reason)
			}
		})
	}
}

// The approval store cannot be read by the agent for a few seconds (its
// permission withdrawn on the running server): the request is handed back
// and runs once the store answers.
//
// A reload of a running server's options races inside nats-server
// (2.15.2: setOpts against a direct get or a stream's creation reading the
// options): each reload here happens while nothing reads directly — the
// first before the bot's loop runs, the second with the bot's loop
// paused and the agent denied its direct reads.
func TestServeWaitsOutAnUnavailableStore(t *testing.T) {
	e := newEnv(t)
	cut := agentPermissions(t)
	for _, b := range []string{bus.ProposalsBucket, bus.ActionResultsBucket} {
		cut.Publish.Deny = append(cut.Publish.Deny, "$JS.API.DIRECT.GET.KV_"+b+".>", "$JS.API.DIRECT.GET.KV_"+b, "$JS.API.STREAM.MSG.GET.KV_"+b)
	}
	e.setAgentPermissions(cut)
	f := e.newFlow(fourEyes())
	loop := func() (stop func()) { return e.run(func(ctx context.Context) { _ = f.Run(ctx) }) }
	stop := loop()
	reg := prometheus.NewRegistry()
	e.serve(func(c *approval.AgentConfig) { c.Registerer = reg })
	var got outcome
	p := approved(t, f, &got)
	waitFor(t, 60*time.Second, "a hand-back", func() bool {
		return gathered(t, reg, "hcpbot_agent_action_requests_total", "result", "handed-back") >= 1
	})
	if e.x.runs(p.ID) != 0 || len(got.got()) != 0 {
		t.Fatal("ran without reading the store")
	}
	stop()
	e.setAgentPermissions(agentPermissions(t))
	loop()
	waitFor(t, 60*time.Second, "the outcome", func() bool { return len(got.got()) == 1 })
	if o := got.got()[0]; o.State != approval.StateExecuted || e.x.runs(p.ID) != 1 {
		t.Fatalf("outcome %+v after %d runs", o, e.x.runs(p.ID))
	}
}

// setAgentPermissions reloads the server with the agent user's
// permissions; only while nothing reads directly (see
// TestServeWaitsOutAnUnavailableStore).
func (e *env) setAgentPermissions(p *server.Permissions) {
	e.t.Helper()
	opts := e.opts.Clone()
	for _, u := range opts.Nkeys {
		if u.Nkey == e.users["agent"].Public {
			u.Permissions = p
		}
	}
	if err := e.srv.ReloadOptions(opts); err != nil {
		e.t.Fatal(err)
	}
}

// Requests published by someone who can publish on the actions subject
// (the bot's NATS user, stolen) or who holds the signing key but cannot
// write the approval store: each is refused with a coded answer, audited
// on the agent's own subject, and nothing runs.
func TestServeRefusesForgedRequests(t *testing.T) {
	e := newEnv(t)
	f := e.flow(fourEyes())
	e.serve()
	ctx := testContext(t)
	pending, err := f.Propose(ctx, noProxyChange(), requester, approval.ForSource(source))
	if err != nil {
		t.Fatal(err)
	}
	order := approval.Request{ID: pending.ID, Source: source, Proposal: approval.Digest(pending), IssuedAt: time.Now()}
	own, _ := nkeys.CreateUser()
	ownPub, _ := own.PublicKey()
	signWith := func(kp nkeys.KeyPair, pub string, r approval.Request) []byte {
		body, _ := json.Marshal(r)
		sig, _ := kp.Sign(append([]byte(approval.RequestContext), body...))
		b, _ := json.Marshal(approval.Seal{Body: body, Key: pub, Sig: sig})
		return b
	}
	tampered := func() []byte {
		var s approval.Seal
		_ = json.Unmarshal(approval.SealRequest(e.signer, order), &s)
		s.Body = []byte(strings.Replace(string(s.Body), pending.ID, "act-other0001", 1))
		b, _ := json.Marshal(s)
		return b
	}()
	stale := order
	stale.IssuedAt = time.Now().Add(-approval.MaxRequestAge - time.Minute)
	elsewhere := order
	elsewhere.Source = "mgmt-2"

	attacker := e.connect("bot").JS
	subject, _ := wire.Subject(source)
	sealed := func(r approval.Request) []byte { return approval.SealRequest(e.signer, r) }
	cases := []struct {
		name, msgID string
		data        []byte
	}{
		{"unsigned", pending.ID + ".0", []byte(`{"body":"e30=","key":"","sig":null}`)},
		{"not an envelope", pending.ID + ".1", []byte(`{"id":"act-forged002"}`)},
		{"signed by another key", "", signWith(own, ownPub, order)},
		{"tampered after signing", "", tampered},
		{"for another management cluster", "", sealed(elsewhere)},
		{"stale", "", sealed(stale)},
		{"under another message id", pending.ID + ".2", sealed(order)},
		// Signed with the real key, but the proposal is pending: the bot
		// sends no such request; whoever holds the key may, and must not
		// decide the proposal's outcome by it.
		{"not approved", "", sealed(order)},
	}
	for _, tc := range cases {
		msgID := tc.msgID
		if msgID == "" {
			msgID = wire.MessageID(pending.ID, tc.data)
		}
		if _, err := attacker.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: tc.data}, jetstream.WithMsgID(msgID)); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
	}
	waitFor(t, 30*time.Second, "every forgery refused", func() bool { return e.refusedByAgent() == len(cases) })
	if r, ok := e.result(pending.ID); ok {
		t.Errorf("the pending proposal was answered by a forgery: %+v", r)
	}
	e.x.mu.Lock()
	if len(e.x.executed) != 0 {
		t.Fatalf("executed %v", e.x.executed)
	}
	e.x.mu.Unlock()

	// Approved for real, it runs: nothing the forgeries left decides it.
	e.approvedRunsOnce(f, pending.ID)
}

// The agent does not trust the bot's key (a rotation done wrong): the
// bot's request is refused as unverifiable, and the bot learns it at once
// from the refusal naming the bytes it sent.
func TestUntrustedKeyRefusalReachesTheBot(t *testing.T) {
	e := newEnv(t)
	f := e.flow(fourEyes())
	other, err := approval.NewEphemeralSigner()
	if err != nil {
		t.Fatal(err)
	}
	e.serve(func(c *approval.AgentConfig) { c.Trust.Keys = []string{other.PublicKey()} })
	var got outcome
	p := approved(t, f, &got)
	waitFor(t, 30*time.Second, "the refusal's outcome", func() bool { return len(got.got()) == 1 })
	if o := got.got()[0]; o.State != approval.StateFailed || o.Code != approval.CodeUnauthorized || !strings.Contains(o.Reason, "not trusted") || e.x.runs(p.ID) != 0 {
		t.Fatalf("outcome %s %s %q", o.State, o.Code, o.Reason)
	}
}

// A rollback restores only what the agent itself recorded for the
// original: one proposed with other undo data (as whoever can write the
// store would make it) is refused; the real one runs and marks the
// original rolled back.
func TestRollbackRestoresOnlyTheAgentsRecord(t *testing.T) {
	e := newEnv(t)
	f := e.flow(fourEyes())
	e.serve()
	ctx := testContext(t)
	var got outcome
	orig := approved(t, f, &got)
	waitFor(t, 30*time.Second, "executed", func() bool { return len(got.got()) == 1 })

	evil := *got.got()[0].Result.Undo
	evil.NoProxy = &actions.NoProxyUndo{Previous: "", Written: evil.NoProxy.Written}
	ch := actions.Change{ID: "rbk-evil0001", Type: actions.TypeRollback, Cluster: cluster, Rollback: &actions.RollbackParams{Undo: evil}}
	p, err := f.Propose(ctx, ch, requester, approval.ForSource(source))
	if err != nil {
		t.Fatal(err)
	}
	var bad outcome
	if _, err := f.Approve(ctx, p.ID, approver, approval.OnOutcome(bad.fn)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "refused", func() bool { return len(bad.got()) == 1 })
	if o := bad.got()[0]; o.State != approval.StateFailed || o.Code != approval.CodeUnauthorized || !strings.Contains(o.Reason, "other data") {
		t.Fatalf("tampered rollback: %s %s %q", o.State, o.Code, o.Reason)
	}

	rb, _, err := f.ProposeRollback(ctx, orig.ID, requester)
	if err != nil {
		t.Fatal(err)
	}
	var good outcome
	if _, err := f.Approve(ctx, rb.ID, approver2, approval.OnOutcome(good.fn)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "rolled back", func() bool {
		o, _ := f.Get(ctx, orig.ID)
		return len(good.got()) == 1 && o.State == approval.StateRolledBack && o.RolledBackBy == approver2
	})
	if _, _, err := f.ProposeRollback(ctx, orig.ID, requester); !errors.Is(err, approval.ErrRolledBack) {
		t.Errorf("second rollback = %v", err)
	}
}

// gathered is the value of the series of name with label=value in reg.
func gathered(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if (label == "" || l.GetName() == label) && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
			if label == "" && len(m.GetLabel()) == 0 {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// Serve runs once per leadership term on one registry: a second term
// counts on the first's metrics.
func TestServeAgainOnOneRegistry(t *testing.T) {
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	for range 2 {
		stop := e.serve(func(c *approval.AgentConfig) { c.Registerer = reg })
		stop()
	}
}
