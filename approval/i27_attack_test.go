package approval_test

// Issue 27's attackers against the approval path, as the threat table of
// docs/security.md names them, on the shipped permission split
// (bus.BotPermissions, bus.AgentPermissions: nats.conf, list by list).
// Each was a break found by the attack review; each test asserts the
// property the table claims, so that it stays fixed.
//
//   - the bot's NATS user, no signing key: it may not change a stream
//     (TestI27BotSeedCannotAnswerForTheAgent,
//     TestI27BotSeedCannotChooseWhatARollbackRestores,
//     TestI27ReplayedOrderAfterItsRollbackDoesNotRun,
//     TestI27BotSeedCannotPublishEvents); a record is bound to its key
//     (TestI27BotSeedRedirectsAnApproval); outcomes are sealed
//     (TestI27BotSeedWritesTheOutcome); approvals are audited before they
//     are sealed (TestI27UnauditedApprovalIsNeverSealed); the trail's
//     de-duplication is per subject and late unchained records are
//     problems (TestI27BotSeedErasesTrailRecordsUnnoticed); rewrites are
//     reported (TestI27SilentRewrites); a legacy rewrite is refused, not
//     retried (TestI27LegacyRewriteBlocksTheAgentQueue).
//   - an agent's NATS user: TestI27AgentSeedErasesAnotherClustersTrail,
//     TestI27AgentSeedMarksAnotherClustersChangeRolledBack.
//   - no attacker, a fault: TestI27UnknownErrorAfterTheWriteReportedFailed.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/approval/wire"
	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
)

// updateRefused asserts that the bot's NATS user (a stolen seed, no
// signing key) may not change stream: with that right it could add a
// source with a subject transform from a bucket it writes (the Slack
// replay guard) and so store, on stream, subjects its user may not publish
// on — the agents' answers, their events — or republish what the stream
// stores to itself. Streams are created, never updated, by hcpbot's users
// (bus.EnsureStream); their settings are the operator's.
func updateRefused(t *testing.T, js jetstream.JetStream, stream string) {
	t.Helper()
	ctx := testContext(t)
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.Sources = append(cfg.Sources, &jetstream.StreamSource{Name: "KV_" + bus.SlackReplayBucket})
	cfg.RePublish = &jetstream.RePublish{Source: ">", Destination: "_INBOX_bot.capture.>"}
	uctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if _, err := js.UpdateStream(uctx, cfg); err == nil {
		t.Errorf("BREAK: the bot's NATS user updated %s (sources, republish)", stream)
	}
}

// botCannotWriteResults asserts that the bot's NATS user can write no
// answer of an agent: not into the results bucket, not by changing its
// stream.
func botCannotWriteResults(t *testing.T, e *env, key string) {
	t.Helper()
	js := e.connect("bot").JS
	kv, err := js.KeyValue(testContext(t), bus.ActionResultsBucket)
	if err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithTimeout(testContext(t), 3*time.Second)
	defer cancel()
	if _, err := kv.Put(pctx, key, []byte(`{"id":"x"}`)); err == nil {
		t.Errorf("BREAK: the bot's NATS user wrote %s in the results bucket", key)
	}
	updateRefused(t, js, "KV_"+bus.ActionResultsBucket)
}

func resultKey(t *testing.T, id string) string {
	t.Helper()
	k, err := wire.ResultKey(source, id)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// proposals is the approval store as the bot's NATS user sees it.
func (e *env) proposals(t *testing.T) jetstream.KeyValue {
	t.Helper()
	kv, err := e.connect("bot").JS.KeyValue(testContext(t), bus.ProposalsBucket)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// rewrite changes the stored record of id as the bot's NATS user can,
// without the signing key.
func rewrite(t *testing.T, kv jetstream.KeyValue, id string, change func(*approval.Record)) {
	t.Helper()
	ctx := testContext(t)
	entry, err := kv.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var rec approval.Record
	if err := json.Unmarshal(entry.Value(), &rec); err != nil {
		t.Fatal(err)
	}
	change(&rec)
	data, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Update(ctx, id, data, entry.Revision()); err != nil {
		t.Fatal(err)
	}
}

// rollBack proposes the rollback of id as requester, has approver2
// approve it and returns its outcome.
func rollBack(t *testing.T, f *approval.Flow, id string) approval.Proposal {
	t.Helper()
	ctx := testContext(t)
	rb, _, err := f.ProposeRollback(ctx, id, requester)
	if err != nil {
		t.Fatal(err)
	}
	var done outcome
	if _, err := f.Approve(ctx, rb.ID, approver2, approval.OnOutcome(done.fn)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the rollback's outcome", func() bool { return len(done.got()) == 1 })
	return done.got()[0]
}

// waitQueued waits until the actions stream holds n requests.
func waitQueued(t *testing.T, e *env, n uint64) {
	t.Helper()
	ctx := testContext(t)
	st, err := e.connect("bot").JS.Stream(ctx, bus.ActionsStreamName)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the requests queued", func() bool {
		info, err := st.Info(ctx)
		return err == nil && info.State.Msgs == n
	})
}

// Attacker 1, the bot's NATS user without the signing key, would write
// the agent's answer to a pending proposal before it is approved: when
// it is approved, the agent would find it "already answered" and run
// nothing while the approver is told it was applied. It cannot write
// there; the approved change runs once and its outcome is the agent's.
func TestI27BotSeedCannotAnswerForTheAgent(t *testing.T) {
	e := newEnv(t)
	f := e.flow(fourEyes())
	e.serve()
	ctx := testContext(t)
	p, err := f.Propose(ctx, noProxyChange(), requester, approval.ForSource(source))
	if err != nil {
		t.Fatal(err)
	}
	botCannotWriteResults(t, e, resultKey(t, p.ID))
	var got outcome
	if _, err := f.Approve(ctx, p.ID, approver, approval.OnOutcome(got.fn)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the outcome", func() bool { return len(got.got()) == 1 })
	o := got.got()[0]
	if runs := e.x.runs(p.ID); runs != 1 || o.State != approval.StateExecuted {
		t.Errorf("ran %d times, told %s; want 1, executed", runs, o.State)
	}
}

// Attacker 1 again: the agent's record of an executed change is what a
// rollback restores (ProposeRollback, the agent's checkUndo). The bot's
// NATS user cannot rewrite it, so the rollback two people approve
// restores what the agent recorded.
func TestI27BotSeedCannotChooseWhatARollbackRestores(t *testing.T) {
	e := newEnv(t)
	f := e.flow(fourEyes())
	e.serve()
	var got outcome
	orig := approved(t, f, &got)
	waitFor(t, 30*time.Second, "executed", func() bool { return len(got.got()) == 1 })
	genuine, ok := e.result(orig.ID)
	if !ok || genuine.Change == nil || genuine.Change.Undo == nil {
		t.Fatalf("no genuine answer: %+v", genuine)
	}
	botCannotWriteResults(t, e, resultKey(t, orig.ID))
	rollBack(t, f, orig.ID)
	e.x.mu.Lock()
	defer e.x.mu.Unlock()
	n := 0
	for _, ch := range e.x.executed {
		if ch.Type == actions.TypeRollback {
			n++
			if ch.Rollback.Undo.NoProxy.Previous != genuine.Change.Undo.NoProxy.Previous {
				t.Errorf("the rollback restored noProxy %q, the agent recorded %q", ch.Rollback.Undo.NoProxy.Previous, genuine.Change.Undo.NoProxy.Previous)
			}
		}
	}
	if n != 1 {
		t.Errorf("%d rollbacks ran, want 1", n)
	}
}

// admin is a NATS user without limits, for what a test must see that no
// hcpbot user may: here, an order as it was stored, which an attacker
// could have captured on the wire.
func (e *env) admin(t *testing.T) jetstream.JetStream {
	t.Helper()
	return e.addUser(t, "admin", "")
}

// Attacker 1: replaying an old order. The stream's de-duplication and the
// agent's "already answered" check stand between a captured request and a
// second run; with the right to update the actions stream the bot's NATS
// user could shorten the duplicate window, and with the right to write
// answers mark the order "running" again. It has neither: a captured
// order replayed after the change was rolled back (two more people
// approved that) does not run again, under its own message id or another.
func TestI27ReplayedOrderAfterItsRollbackDoesNotRun(t *testing.T) {
	e := newEnv(t)
	f := e.flow(fourEyes())
	ctx := testContext(t)
	attacker := e.connect("bot")
	updateRefused(t, attacker.JS, bus.ActionsStreamName)
	var got outcome
	orig := approved(t, f, &got)
	waitQueued(t, e, 1)
	st, err := e.admin(t).Stream(ctx, bus.ActionsStreamName)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	order, err := st.GetMsg(ctx, info.State.FirstSeq)
	if err != nil {
		t.Fatal(err)
	}
	e.serve()
	waitFor(t, 30*time.Second, "executed", func() bool { return len(got.got()) == 1 })
	rollBack(t, f, orig.ID)
	botCannotWriteResults(t, e, resultKey(t, orig.ID))

	subject, _ := wire.Subject(source)
	for _, id := range []string{order.Header.Get(jetstream.MsgIDHeader), "act-replay0001.0"} {
		replay := &nats.Msg{Subject: subject, Data: order.Data, Header: nats.Header{}}
		replay.Header.Set(jetstream.MsgIDHeader, id)
		ack, err := attacker.JS.PublishMsg(ctx, replay)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("replayed under %s: %+v", id, ack)
	}
	deadline := time.Now().Add(5 * time.Second)
	for e.x.runs(orig.ID) < 2 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := e.x.runs(orig.ID); n != 1 {
		t.Errorf("BREAK: %s, approved once and rolled back, ran %d times: a replayed order re-applied it", orig.ID, n)
	}
}

// signedFlow is a bot replica whose trail is signed with its key, as
// cmd/hcpbot wires it, so that audit.Verify checks the bot's records.
func (e *env) signedFlow(t *testing.T) (*approval.Flow, *audit.Log) {
	t.Helper()
	l, err := audit.Open(testContext(t), e.connect("bot").JS, audit.WithSigner(e.signer.ForAudit()))
	if err != nil {
		t.Fatal(err)
	}
	return e.flow(fourEyes(), func(c *approval.Config) { c.Trail = l }), l
}

func verifyTrail(t *testing.T, e *env, l *audit.Log) audit.Report {
	t.Helper()
	rep, err := l.Verify(testContext(t), audit.VerifyOptions{TrustedKeys: []string{e.signer.PublicKey()}})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range rep.Problems {
		t.Logf("verify: %s", p)
	}
	return rep
}

// Attacker 1: the trail. Records were de-duplicated by message id across
// the whole audit stream, and the ids of the records of a proposal are
// known in advance ("<id>.approved.<user>", "<id>.executed", the agent's
// "<id>.executed.agent"). The bot's NATS user published, on a fresh bot
// subject, records of the shape written before the trail was chained,
// under those ids: the genuine records were answered "duplicate" and
// never stored, and `/hcp audit verify` counted the placeholders as
// legacy records. Now a record is de-duplicated on its own subject only,
// and an unchained record after the bot's chain began is a problem.
func TestI27BotSeedErasesTrailRecordsUnnoticed(t *testing.T) {
	e := newEnv(t)
	f, trail := e.signedFlow(t)
	e.serve()
	ctx := testContext(t)
	p, err := f.Propose(ctx, noProxyChange(), requester, approval.ForSource(source))
	if err != nil {
		t.Fatal(err)
	}
	attacker := e.connect("bot").JS
	for i, id := range []string{p.ID + ".approved." + approver, p.ID + ".executed", p.ID + ".executed.agent"} {
		m := &nats.Msg{Subject: "hcpbot.audit.housekeeping", Header: nats.Header{},
			Data: fmt.Appendf(nil, `{"id":"hk-%d","time":%q,"kind":"silenced","summary":"housekeeping"}`, i, time.Now().UTC().Format(time.RFC3339Nano))}
		m.Header.Set(jetstream.MsgIDHeader, id)
		if _, err := attacker.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}

	var got outcome
	if _, err := f.Approve(ctx, p.ID, approver, approval.OnOutcome(got.fn)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the outcome", func() bool { return len(got.got()) == 1 })
	if e.x.runs(p.ID) != 1 {
		t.Fatalf("ran %d times", e.x.runs(p.ID))
	}
	ks := kinds(e.records(p.ID))
	rep := verifyTrail(t, e, trail)
	t.Logf("trail of %s: %v; verify: ok=%v, %d legacy records", p.ID, ks, rep.OK(), rep.Legacy)
	if n := countKind(e.records(p.ID), audit.KindApproved) + countKind(e.records(p.ID), audit.KindExecuted); n < 3 && rep.OK() {
		t.Errorf("BREAK: a change ran and its trail holds %v (no approval, no execution by bot or agent), yet verify finds nothing wrong", ks)
	}
}

// Attacker 2, an agent's NATS user (mgmt-1), does the same to proposals
// of every other management cluster, with a record of its own on its own
// subject (agent subjects are not signed): under the id of the bot's
// record of an approval for mgmt-2, a record naming another approver.
// The bot's record is stored all the same (de-duplication is per
// subject), the agent's is not read back (an agent records only what it
// executed or refused, of its own cluster), and verify reports it.
func TestI27AgentSeedErasesAnotherClustersTrail(t *testing.T) {
	e := newEnv(t)
	f, trail := e.signedFlow(t)
	ctx := testContext(t)
	p, err := f.Propose(ctx, noProxyChange(), requester, approval.ForSource("mgmt-2"))
	if err != nil {
		t.Fatal(err)
	}
	mine, err := audit.ForAgent(e.connect("agent").JS, source)
	if err != nil {
		t.Fatal(err)
	}
	forged := audit.Record{
		ID: p.ID + ".approved." + approver, Time: time.Now().UTC(), Kind: audit.KindApproved, Actor: approver2, ActionID: p.ID,
		Cluster: cluster.String(), Source: "mgmt-2", Summary: "add kubernetes (approval 1 of 1)", Chain: audit.ChainVersion,
	}
	if err := mine.Append(ctx, forged); err == nil {
		t.Error("the agent's Log appended a record of another management cluster")
	}
	// What its NATS user can publish without the Log: the record, chained
	// as the subject's first, under the id the bot will use.
	subject, _ := event.AgentAuditSubject(source)
	data, _ := json.Marshal(forged)
	m := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
	m.Header.Set(jetstream.MsgIDHeader, forged.ID)
	if _, err := e.connect("agent").JS.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Approve(ctx, p.ID, approver); err != nil {
		t.Fatal(err)
	}
	rep := verifyTrail(t, e, trail)
	var approvals []string
	for _, r := range e.records(p.ID) {
		if r.Kind == audit.KindApproved {
			approvals = append(approvals, r.Actor)
		}
	}
	t.Logf("trail of %s (mgmt-2): %v, approvals by %v; verify ok=%v", p.ID, kinds(e.records(p.ID)), approvals, rep.OK())
	if len(approvals) != 1 || approvals[0] != approver {
		t.Errorf("the trail reads approvals by %v, want [%s]", approvals, approver)
	}
	misplaced := 0
	for _, pr := range rep.Problems {
		if pr.Kind == audit.ProblemMisplaced && pr.Subject == subject {
			misplaced++
		}
	}
	if misplaced != 1 {
		t.Errorf("verify reports %d misplaced records on %s, want 1: %v", misplaced, subject, rep.Problems)
	}
}

// failingApprovals is a trail that cannot write approvals (the audit
// stream full or unreachable, or a publisher racing the bot's chain).
type failingApprovals struct{ audit.Appender }

func (f failingApprovals) Append(ctx context.Context, r audit.Record) error {
	if r.Kind == audit.KindApproved {
		return errors.New("audit stream unavailable")
	}
	return f.Appender.Append(ctx, r)
}

// An approval that cannot be audited is not made: it was sealed first
// and then withdrawn (a sealed rejection), which Permit took for a
// forgery and which whoever can write the store could drop, reviving the
// approval. Audited before it is sealed, it leaves no seal to revive.
func TestI27UnauditedApprovalIsNeverSealed(t *testing.T) {
	e := newEnv(t)
	f := e.flow(fourEyes(), func(c *approval.Config) { c.Trail = failingApprovals{e.trail} })
	e.serve()
	ctx := testContext(t)
	p, err := f.Propose(ctx, noProxyChange(), requester, approval.ForSource(source))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Approve(ctx, p.ID, approver); !errors.Is(err, approval.ErrAudit) {
		t.Fatalf("Approve = %v, want ErrAudit", err)
	}
	w, err := f.Get(ctx, p.ID)
	if err != nil || w.State != approval.StatePending || len(w.Approvers) != 0 {
		t.Fatalf("after the unaudited approval: %s, approvers %v, %v; want pending, none", w.State, w.Approvers, err)
	}
	en, err := e.proposals(t).Get(ctx, p.ID)
	if err != nil {
		t.Fatal(err)
	}
	var rec approval.Record
	if err := json.Unmarshal(en.Value(), &rec); err != nil {
		t.Fatal(err)
	}
	if len(rec.Decisions) != 0 {
		t.Errorf("the store holds %d decisions of an approval that was not made", len(rec.Decisions))
	}
	time.Sleep(2 * time.Second) // two sweeps
	if n := e.x.runs(p.ID); n != 0 {
		t.Errorf("the unaudited approval ran %d times", n)
	}
	// With the trail back, the same approver approves, and it runs once.
	g := e.flow(fourEyes())
	var got outcome
	if _, err := g.Approve(ctx, p.ID, approver, approval.OnOutcome(got.fn)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the outcome", func() bool { return len(got.got()) == 1 })
	if n := e.x.runs(p.ID); n != 1 {
		t.Errorf("ran %d times, want 1", n)
	}
}

// Attacker 1: the outcome is bookkeeping beside the seals, and the bot
// believes it as written. Written while the request is queued, it is
// what the approver is told: here "not applied, the value changed" while
// the agent applies the change (and no Roll back is offered); the bot
// never records the agent's answer.
func TestI27BotSeedWritesTheOutcome(t *testing.T) {
	e := newEnv(t)
	f := e.flow(fourEyes())
	ctx := testContext(t)
	var got outcome
	p := approved(t, f, &got)
	waitQueued(t, e, 1)
	rewrite(t, e.proposals(t), p.ID, func(rec *approval.Record) {
		body, _ := json.Marshal(approval.Outcome{ProposalID: p.ID, State: approval.StateFailed, Code: approval.CodeConflict, Reason: "noProxy changed since the proposal", At: time.Now().UTC()})
		rec.Outcome = &approval.Seal{Body: body, Key: rec.Proposal.Key, Sig: rec.Proposal.Sig}
	})
	e.serve()
	waitFor(t, 30*time.Second, "the outcome and the run", func() bool { return len(got.got()) == 1 && e.x.runs(p.ID) == 1 })
	time.Sleep(2 * time.Second) // the sweep had its chance to correct it
	o := got.got()[0]
	stored, err := f.Get(ctx, p.ID)
	t.Logf("agent ran it %d time(s); the approver was told %s %s %q; the store says %s (%v)", e.x.runs(p.ID), o.State, o.Code, o.Reason, stored.State, err)
	if o.State != approval.StateExecuted || stored.State != approval.StateExecuted {
		t.Errorf("BREAK: the change is applied, but the approver is told %s (%s) and the store says %s: the bot's NATS user wrote the outcome",
			o.State, o.Code, stored.State)
	}
}

// Attacker 1: rewrites the threat table says are reported "once per
// rewrite as a forgery". A record sealed throughout by the attacker's own
// key is "stale" and one of the pre-seal shape is "legacy": both are
// skipped silently by every sweep (loop.go sweepOnce), so rewriting a
// pending proposal this way kills it without a forged record in the trail
// or a count in hcpbot_approval_forgeries_total.
func TestI27SilentRewrites(t *testing.T) {
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	f := e.flow(fourEyes(), func(c *approval.Config) { c.Registerer = reg })
	ctx := testContext(t)
	kv := e.proposals(t)
	own, err := approval.NewEphemeralSigner()
	if err != nil {
		t.Fatal(err)
	}
	other := e.flowWith(t, own)
	rewrites := map[string]func(id string) []byte{
		"sealed throughout by the attacker's key": func(id string) []byte {
			ch := noProxyChange()
			ch.ID = "act-" + id[4:8] + "zzzz"
			q, err := other.Propose(ctx, ch, requester, approval.ForSource(source))
			if err != nil {
				t.Fatal(err)
			}
			en, err := kv.Get(ctx, q.ID)
			if err != nil {
				t.Fatal(err)
			}
			return en.Value()
		},
		"the shape of an older hcpbot": func(string) []byte { return []byte(`{"request":{"id":"x"},"seal":"eA=="}`) },
	}
	var ids []string
	for name, rw := range rewrites {
		p, err := f.Propose(ctx, noProxyChange(), requester, approval.ForSource(source))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, p.ID, rw(p.ID)); err != nil {
			t.Fatal(err)
		}
		_, aerr := f.Approve(ctx, p.ID, approver)
		t.Logf("%s (%s): approving it now says %v", p.ID, name, aerr)
		ids = append(ids, p.ID)
	}
	time.Sleep(3 * time.Second) // three sweeps
	for _, id := range ids {
		if countKind(e.records(id), audit.KindForged) == 0 {
			t.Errorf("BREAK: %s was rewritten in the store without the bot's key and no forgery is in the trail (%v)", id, kinds(e.records(id)))
		}
	}
	if n := gathered(t, reg, "hcpbot_approval_forgeries_total", "", ""); n < float64(len(ids)) {
		t.Errorf("BREAK: hcpbot_approval_forgeries_total = %v after %d rewrites", n, len(ids))
	}
}

// flowWith is a Flow sealing with s (the attacker's own key) that does not
// run its loop: only its Propose is used, to make records as a bot would.
func (e *env) flowWith(t *testing.T, s *approval.Signer) *approval.Flow {
	t.Helper()
	f, err := approval.NewFlow(testContext(t), e.connect("bot").JS, approval.Config{Signer: s, Trail: e.trail, Policy: fourEyes(), Log: natstest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// Attacker 1: a record is read by its key, but its seals never say which
// key they belong to (verify checks the sealed id's shape only, never that
// it is the key). The bot's NATS user copies proposal A — which no
// approver wants — over the key of proposal B. An approver approves B (the
// button, `/hcp approve B`): the bot seals an approval of A's terms, and
// answers "B approved". The attacker copies that record back to A's key:
// A is approved by someone who never approved it, and the agent runs it.
func TestI27BotSeedRedirectsAnApproval(t *testing.T) {
	e := newEnv(t)
	f := e.flow(fourEyes())
	e.serve()
	ctx := testContext(t)
	kv := e.proposals(t)
	unwanted := noProxyChange()
	unwanted.NoProxy.Add = []string{"evil.example.com"}
	a, err := f.Propose(ctx, unwanted, requester, approval.ForSource(source))
	if err != nil {
		t.Fatal(err)
	}
	b, err := f.Propose(ctx, noProxyChange(), requester, approval.ForSource(source))
	if err != nil {
		t.Fatal(err)
	}
	ea, err := kv.Get(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, b.ID, ea.Value()); err != nil {
		t.Fatal(err)
	}

	p, err := f.Approve(ctx, b.ID, approver, approval.ExpectCluster(cluster))
	t.Logf("the approver approved %s; the bot answered %s %s, %v", b.ID, p.ID, p.State, err)
	eb, err := kv.Get(ctx, b.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, a.ID, eb.Value()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for e.x.runs(a.ID) == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := e.x.runs(a.ID); n != 0 {
		t.Errorf("BREAK: %s (add %v) ran %d time(s) with the approval %s gave to %s", a.ID, unwanted.NoProxy.Add, n, approver, b.ID)
	}
}

// addAgent connects as the agent of src (otherSource) with the shipped
// permissions, and returns its connection's JetStream.
func (e *env) addAgent(t *testing.T, src string) jetstream.JetStream {
	t.Helper()
	inbox, err := bus.AgentRole(src).InboxPrefix()
	if err != nil {
		t.Fatal(err)
	}
	return e.addUser(t, src, inbox)
}

// addUser connects as user name, one newEnv made ("admin", otherSource),
// with inbox as its reply prefix ("" for the default).
func (e *env) addUser(t *testing.T, name string, inbox string) jetstream.JetStream {
	t.Helper()
	u, ok := e.users[name]
	if !ok {
		t.Fatalf("no NATS user %q: newEnv makes every user a test needs", name)
	}
	c, err := bus.Connect(testContext(t), bus.Config{
		URLs: []string{"nats://" + e.srv.Addr().String()}, Name: t.Name() + "-" + name, NkeySeedFile: u.SeedFile, InboxPrefix: inbox,
	}, natstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.JS
}

// Attacker 2, the agent user of mgmt-1, writes its own answers, as it
// may. The undo data in its answer was taken whole (ProposeRollback did
// not check Undo.ActionID against the action rolled back), and an
// executed rollback marked "its" original rolled back by that id,
// whatever cluster it was on: a rollback of a mgmt-1 action marked a
// change of mgmt-2 rolled back while mgmt-2 still held it. Now the
// answer must undo the action it answers, of its cluster, and a rollback
// marks only a change of its own cluster.
func TestI27AgentSeedMarksAnotherClustersChangeRolledBack(t *testing.T) {
	e := newEnv(t)
	f := e.flow(fourEyes())
	e.serve()
	ctx := testContext(t)
	other := &fakeExecutor{}
	js2 := e.addAgent(t, otherSource)
	e.run(func(ctx context.Context) {
		_ = approval.Serve(ctx, js2, approval.AgentConfig{
			Source: "mgmt-2", Trust: approval.Trust{Keys: []string{e.signer.PublicKey()}, FourEyes: true},
			Executor: other, Log: natstest.Logger(t), AckWait: 3 * time.Second, Registerer: prometheus.NewRegistry(),
		})
	})

	// B: a change on mgmt-2, approved and executed there.
	pb, err := f.Propose(ctx, noProxyChange(), requester, approval.ForSource("mgmt-2"))
	if err != nil {
		t.Fatal(err)
	}
	var gotB outcome
	if _, err := f.Approve(ctx, pb.ID, approver, approval.OnOutcome(gotB.fn)); err != nil {
		t.Fatal(err)
	}
	// A: a change on mgmt-1, approved and executed there.
	var gotA outcome
	pa := approved(t, f, &gotA)
	waitFor(t, 30*time.Second, "both executed", func() bool { return len(gotA.got()) == 1 && len(gotB.got()) == 1 })

	// The agent user of mgmt-1 rewrites its answer to A, and writes one
	// for B under its own keys, naming B as what A's rollback undoes.
	agent := e.connect("agent").JS
	results, err := agent.KeyValue(ctx, bus.ActionResultsBucket)
	if err != nil {
		t.Fatal(err)
	}
	ra, _ := e.result(pa.ID)
	undo := *ra.Change.Undo
	undo.ActionID = pb.ID
	ch := *ra.Change
	ch.Undo = &undo
	ra.Change = &ch
	for _, id := range []string{pa.ID, pb.ID} {
		data, _ := json.Marshal(ra)
		if _, err := results.Put(ctx, resultKey(t, id), data); err != nil {
			t.Fatalf("the agent user may not write %s (held): %v", id, err)
		}
	}

	// Its rollback is refused: the answer undoes another action.
	if _, _, err := f.ProposeRollback(ctx, pa.ID, requester); !errors.Is(err, approval.ErrNothingToUndo) {
		t.Errorf("rollback of %s, whose answer undoes %s: %v; want ErrNothingToUndo", pa.ID, pb.ID, err)
	}
	b, err := f.Get(ctx, pb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if b.State != approval.StateExecuted {
		t.Errorf("%s of mgmt-2 reads %s, want executed", pb.ID, b.State)
	}
	// mgmt-2's own change is rolled back, by mgmt-2's agent, for real.
	rb := rollBack(t, f, pb.ID)
	if rb.State != approval.StateExecuted || other.runs(rb.ID) != 1 {
		t.Errorf("the rollback of %s: %s, ran %d times", pb.ID, rb.State, other.runs(rb.ID))
	}
}

// lostAnswer writes the change, then loses the API server's answer in a
// way actions.Transient does not know (a proxy that cut the body: a
// decode error), so the executor returns an error that is neither
// transient nor one of its definite sentinels.
type lostAnswer struct{ *fakeExecutor }

func (x lostAnswer) Execute(ctx context.Context, ch actions.Change) (*actions.Result, error) {
	if _, err := x.fakeExecutor.Execute(ctx, ch); err != nil {
		return nil, err
	}
	return nil, errors.New(`update hostedclusters "c1": couldn't get version/kind; json parse error: unexpected end of JSON input`)
}

// No attacker, a transport fault. An execution error that is neither
// transient nor one of the executor's definite answers was answered
// "failed" at once: the user read "failed" (and got no Roll back) while
// the cluster held the change. Now the agent observes the cluster first.
func TestI27UnknownErrorAfterTheWriteReportedFailed(t *testing.T) {
	e := newEnv(t)
	f := e.flow(fourEyes())
	e.serve(func(c *approval.AgentConfig) { c.Executor = lostAnswer{e.x} })
	var got outcome
	p := approved(t, f, &got)
	waitFor(t, 30*time.Second, "the outcome", func() bool { return len(got.got()) == 1 })
	o := got.got()[0]
	_, inPlace, _ := e.x.Observe(testContext(t), p.Change)
	t.Logf("told %s (%s) %q; the cluster holds the change: %v", o.State, o.Code, o.Reason, inPlace)
	if o.State == approval.StateFailed && inPlace {
		t.Errorf("BREAK (partial): the change is in the cluster, the approver is told it failed (%s), with no Roll back", o.Code)
	}
}

// Attacker 1 and the events stream: "the bot cannot publish events" is a
// deny on hcpbot.events.>; with a right to update HCPBOT_EVENTS it could
// source them from a bucket it writes, under any management cluster's
// subject. It has none.
func TestI27BotSeedCannotPublishEvents(t *testing.T) {
	e := newEnv(t)
	ctx := testContext(t)
	js := e.connect("bot").JS
	if _, err := bus.EnsureStream(ctx, js, bus.EventsStream(0, 0)); err != nil {
		t.Fatal(err)
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err := js.Publish(pctx, "hcpbot.events.mgmt-2.clusters.c9.forged", []byte("{}"))
	cancel()
	if err == nil {
		t.Error("BREAK: the bot's user published an event")
	}
	updateRefused(t, js, bus.EventsStreamName)
}

// Attacker 1, denial of service: an approved proposal rewritten to the
// pre-seal shape is "legacy", which the agent took for a failure to read
// the store and handed back, again and again: one request at a time
// (MaxAckPending 1), every approved change of the cluster queued behind
// it waited until the stream dropped the request. Now it is refused (the
// bot sends no request for such a record), and the bot that had read the
// record valid reports the rewrite.
func TestI27LegacyRewriteBlocksTheAgentQueue(t *testing.T) {
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	f := e.flow(fourEyes(), func(c *approval.Config) { c.Registerer = reg })
	ctx := testContext(t)
	x := approved(t, f, nil)
	waitQueued(t, e, 1)
	if _, err := e.proposals(t).Put(ctx, x.ID, []byte(`{"request":{"id":"x"},"seal":"eA=="}`)); err != nil {
		t.Fatal(err)
	}
	var behind outcome
	y := approved(t, f, &behind)
	agentReg := prometheus.NewRegistry()
	e.serve(func(c *approval.AgentConfig) { c.Registerer = agentReg })
	time.Sleep(8 * time.Second)
	handedBack := gathered(t, agentReg, "hcpbot_agent_action_requests_total", "result", "handed-back")
	_, answered := e.result(x.ID)
	t.Logf("%s handed back %v times, answered %v; %s behind it ran %d times; forgeries reported %v",
		x.ID, handedBack, answered, y.ID, e.x.runs(y.ID), gathered(t, reg, "hcpbot_approval_forgeries_total", "", ""))
	if handedBack >= 2 && !answered && e.x.runs(y.ID) == 0 {
		t.Errorf("BREAK (DoS): a store rewrite without the key holds %s's queue: %s handed back %v times, %s waits behind it",
			source, x.ID, handedBack, y.ID)
	}
}

// Attacker 1 before the bot (or an operator's slip): a results bucket
// that sources another stream would hold answers no agent wrote. The
// agent does not consume requests while its stream or buckets copy in
// what others write (bus.Vet), and says so.
func TestAgentRefusesAForeignResultsBucket(t *testing.T) {
	e := newEnv(t)
	f := e.flow(fourEyes())
	ctx := testContext(t)
	admin := e.admin(t)
	if _, err := admin.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "side"}); err != nil {
		t.Fatal(err)
	}
	st, err := admin.Stream(ctx, "KV_"+bus.ActionResultsBucket)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.Sources = []*jetstream.StreamSource{{Name: "KV_side"}}
	if _, err := admin.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	var got outcome
	p := approved(t, f, &got)
	e.serve()
	time.Sleep(3 * time.Second)
	if n := e.x.runs(p.ID); n != 0 {
		t.Errorf("the agent ran %s with a foreign results bucket", p.ID)
	}
	actions, err := admin.Stream(ctx, bus.ActionsStreamName)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := actions.Consumer(ctx, "agent-"+source); err == nil {
		t.Error("the agent bound its consumer beside a foreign results bucket")
	}
}
