package approval_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/rs/zerolog"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/approval/wire"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/testenv/syncbuf"
)

// Attacks on the preflight of exposures (issue 29): the bot asks the
// agent, before an exposure is proposed, whether its node ports are free
// in the management cluster. Each test names the attacker of
// docs/security.md it plays; the preflight must give none of them a write,
// an answer for another cluster, or more than the proposal shows.

// preflightOf is a genuine preflight of ch by the bot's key, issued now.
func (e *env) preflightOf(ch actions.Change, nonce string) approval.PreflightCheck {
	ch.ID, ch.RequestedBy = "expo-replay0001", requester
	return approval.PreflightCheck{Source: source, Change: ch, IssuedAt: time.Now().UTC(), Nonce: nonce}
}

// A stolen bot NATS seed (no signing key) can publish on the check
// subject and on the actions subject. A preflight it seals with its own
// key, or leaves unsigned, is answered only with why it does not verify,
// and reads nothing; a genuine preflight it captured, published as an
// order, is refused by the agent (another seal context) and runs nothing:
// the pending proposal it names is then approved for real and runs once.
func TestI29AttackBotSeedPreflightCannotWrite(t *testing.T) {
	e := newEnv(t)
	f := e.flow(fourEyes())
	e.serve()
	pre := &preflights{}
	e.servePreflights(pre)
	ctx := testContext(t)
	pending, err := f.Propose(ctx, exposeChange(30001), requester, approval.ForSource(source))
	if err != nil || pre.count() != 1 {
		t.Fatalf("propose: %v, %d preflights", err, pre.count())
	}

	attacker := e.connect("bot")
	own, _ := nkeys.CreateUser()
	ownPub, _ := own.PublicKey()
	c := e.preflightOf(exposeChange(30001), "forged-0001")
	body, _ := json.Marshal(c)
	sig, _ := own.Sign(append([]byte(approval.PreflightContext), body...))
	ownSealed, _ := json.Marshal(approval.Seal{Body: body, Key: ownPub, Sig: sig})
	unsigned, _ := json.Marshal(approval.Seal{Body: body})
	for name, data := range map[string][]byte{"sealed by another key": ownSealed, "unsigned": unsigned} {
		a, err := ask(t, attacker.NC, data)
		if err != nil || !strings.Contains(a.Error, "does not verify") || a.Preflight != nil || a.Code != "" {
			t.Errorf("%s: answered %+v, %v", name, a, err)
		}
	}
	if n := pre.count(); n != 1 {
		t.Errorf("the forged preflights were read: %d preflights", n)
	}

	// A genuine preflight of the pending proposal, as an order.
	genuine := approval.SealPreflight(e.signer, approval.PreflightCheck{Source: source, Change: pending.Change, IssuedAt: time.Now().UTC(), Nonce: "captured-0001"})
	subject, _ := wire.Subject(source)
	if _, err := attacker.JS.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: genuine}, jetstream.WithMsgID(wire.MessageID(pending.ID, genuine))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the agent refusing the preflight as an order", func() bool { return e.refusedByAgent() == 1 })
	if r, ok := e.result(pending.ID); ok {
		t.Errorf("the pending proposal was answered by the preflight: %+v", r)
	}
	if n := e.x.runs(pending.ID); n != 0 || pre.count() != 1 {
		t.Fatalf("a preflight as an order: %d runs, %d preflights", n, pre.count())
	}

	e.approvedRunsOnce(f, pending.ID)
}

// Someone who captured a genuine preflight (a stolen bot NATS seed, with a
// stream capturing the checks) or holds the signing key and can publish on
// the subject: a preflight answered once is refused when replayed; one
// for another management cluster, a stale one, or an order or a
// malformed body sent as a preflight, is refused and reads nothing. The
// agent's own NATS user cannot ask at all.
func TestI29AttackReplayedAndForeignPreflights(t *testing.T) {
	e := newEnv(t)
	pre := &preflights{held: map[int32]string{30002: "other/holds-30002"}}
	e.servePreflights(pre)
	bot := e.connect("bot").NC

	genuine := approval.SealPreflight(e.signer, e.preflightOf(exposeChange(30002), "nonce-first0001"))
	a, err := ask(t, bot, genuine)
	if err != nil || a.Check != "nonce-first0001" || a.Preflight == nil || a.Preflight.Collision == nil || pre.count() != 1 {
		t.Fatalf("the genuine preflight: %+v, %v, %d read", a, err, pre.count())
	}
	a, err = ask(t, bot, genuine)
	if err != nil || a.Check != "nonce-first0001" || a.Error != "a preflight already answered (replayed)" || a.Preflight != nil {
		t.Errorf("replayed: %+v, %v", a, err)
	}

	foreign := e.preflightOf(exposeChange(30002), "nonce-foreign01")
	foreign.Source = otherSource
	stale := e.preflightOf(exposeChange(30002), "nonce-stale0001")
	stale.IssuedAt = time.Now().Add(-2 * time.Minute)
	future := e.preflightOf(exposeChange(30002), "nonce-future001")
	future.IssuedAt = time.Now().Add(2 * time.Minute)
	for name, c := range map[string]approval.PreflightCheck{"for another agent": foreign, "stale": stale, "from the future": future} {
		a, err := ask(t, bot, approval.SealPreflight(e.signer, c))
		if err != nil || a.Error != "a preflight for another agent, or stale" || a.Preflight != nil {
			t.Errorf("%s: %+v, %v", name, a, err)
		}
	}
	order := approval.SealRequest(e.signer, approval.Request{ID: "expo-replay0001", Source: source, IssuedAt: time.Now()})
	for name, data := range map[string][]byte{"an order": order, "not a seal": []byte(`{"source":"mgmt-1"}`)} {
		a, err := ask(t, bot, data)
		if err != nil || a.Error == "" || a.Preflight != nil {
			t.Errorf("%s as a preflight: %+v, %v", name, a, err)
		}
	}
	if n := pre.count(); n != 1 {
		t.Errorf("refused preflights were read: %d reads", n)
	}

	// The agent's NATS user may not publish on the check subjects, its own
	// included: it cannot ask another agent, nor itself.
	agent := e.connect("agent").NC
	for _, src := range []string{source, otherSource} {
		subject, _ := event.IdentityCheckSubject(src)
		_, err := agent.Request(subject, approval.SealPreflight(e.signer, e.preflightOf(exposeChange(30002), "nonce-agent"+src)), 2*time.Second)
		if err == nil {
			t.Errorf("the agent's user asked the agent of %s", src)
		}
		t.Logf("the agent's user asking the agent of %s: %v", src, err)
	}
	if n := pre.count(); n != 1 {
		t.Errorf("the agent's user's preflights were read: %d reads", n)
	}
}

// Replies that are no answer to the preflight are ignored: JetStream
// acknowledgements of a stream capturing the checks (created with the
// bot's NATS user), and forged answers from another subscriber of the
// subject without this preflight's nonce, with another one's, or with a
// field the answer has not. Both ways: a forged "free" does not pass a
// taken port, a forged collision does not refuse a free one.
func TestI29AttackPreflightRepliesWithoutTheNonce(t *testing.T) {
	e := newEnv(t)
	var logged syncbuf.Buffer
	f := e.flow(fourEyes(), func(c *approval.Config) { c.Log = zerolog.New(&logged) })
	pre := &preflights{held: map[int32]string{30002: "other/holds-30002"}, delay: 300 * time.Millisecond}
	e.servePreflights(pre)

	attacker := e.connect("bot")
	if _, err := attacker.JS.CreateStream(testContext(t), jetstream.StreamConfig{
		Name: "KV_" + bus.DigestTicksBucket, Subjects: []string{event.SubjectRoot + ".identity.>"}, Storage: jetstream.FileStorage,
	}); err != nil {
		t.Fatalf("the bot's user creating a capturing stream: %v", err)
	}
	rogue := e.connect("admin").NC
	var forged []any
	subject, _ := event.IdentityCheckSubject(source)
	sub, err := rogue.Subscribe(subject, func(m *nats.Msg) {
		for _, a := range forged {
			b, _ := json.Marshal(a)
			_ = m.Respond(b)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := rogue.Flush(); err != nil {
		t.Fatal(err)
	}
	free := &actions.Preflight{Free: []int32{30002}}
	taken := &actions.Preflight{Collision: &actions.PortCollision{
		Ports: []actions.PortProblem{{NodePort: 30003, Reason: actions.PortAllocated, Holder: "forged/holder"}}, Range: actions.DefaultNodePortRange,
	}}
	ctx := testContext(t)

	forged = []any{
		approval.PreflightAnswer{Preflight: free},
		approval.PreflightAnswer{Check: "another-nonce", Preflight: free},
		map[string]any{"check": "", "preflight": free, "allowed": true},
	}
	_, err = f.Propose(ctx, exposeChange(30002), requester, approval.ForSource(source))
	if !errors.Is(err, actions.ErrPortCollision) || !strings.Contains(err.Error(), "Service other/holds-30002") {
		t.Fatalf("a taken port with forged free answers: %v", err)
	}

	forged = []any{
		approval.PreflightAnswer{Preflight: taken},
		approval.PreflightAnswer{Check: "another-nonce", Preflight: taken},
		approval.PreflightAnswer{Check: "another-nonce", Code: approval.CodeInvalid, Error: "forged"},
	}
	p, err := f.Propose(ctx, exposeChange(30003), requester, approval.ForSource(source))
	if err != nil || !strings.Contains(p.PreflightNote, "30003 is free") {
		t.Fatalf("a free port with forged collisions: %q, %v", p.PreflightNote, err)
	}
	if n := pre.count(); n != 2 {
		t.Errorf("%d preflights read, want 2", n)
	}
	// Each time, the three forged replies and the stream's acknowledgement
	// came first (the agent reads for 300 ms), and were skipped.
	if n := strings.Count(logged.String(), `"ignored":4,`); n != 2 {
		t.Errorf("%d preflights skipped 4 replies, want 2:\n%s", n, logged.String())
	}
}
