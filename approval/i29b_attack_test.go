package approval_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/identity"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
)

// Second round of attacks on the preflight of exposures (issue 29), each
// naming its attacker of docs/security.md.

// stuckPreflights plays an agent whose preflight reads do not come back
// (a slow API server listing every Service of both clusters) until
// release is closed or the agent's own deadline passes; it counts how
// many read at once.
type stuckPreflights struct {
	release chan struct{}
	mu      sync.Mutex
	now     int
	most    int
	started int
}

func (s *stuckPreflights) preflight(ctx context.Context, ch actions.Change) (*actions.Preflight, error) {
	s.mu.Lock()
	s.now++
	s.started++
	s.most = max(s.most, s.now)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.now--
		s.mu.Unlock()
	}()
	select {
	case <-s.release:
		return &actions.Preflight{Free: ch.Expose.ChosenNodePorts()}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (s *stuckPreflights) counts() (started, most int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.started, s.most
}

// A channel member who is no approver (or anyone holding the bot's key
// and NATS user) floods the agent with preflights: each /hcp expose makes
// the bot ask one, and each reads both clusters for up to the agent's
// preflight deadline. The identity checks of approvals arrive on the same
// subscription; they must not wait behind those reads, or an approval the
// check would refuse (the approver's identity lacks the permission)
// counts, with a note, until the write. The agent reads a few preflights
// at a time and answers the rest at once as busy (the bot then proposes
// with its note).
func TestI29BAttackPreflightFloodDelaysIdentityChecks(t *testing.T) {
	e := newEnv(t)
	m := identities(true)
	groups := approval.StaticGroups{"S0OPS00001": {approver2}}
	f := e.flow(fourEyes(), func(c *approval.Config) { c.Identities, c.Groups = m, groups })
	stuck := &stuckPreflights{release: make(chan struct{})}
	released := sync.OnceFunc(func() { close(stuck.release) })
	t.Cleanup(released)
	nc := e.connect("agent").NC
	e.run(func(ctx context.Context) {
		_ = approval.ServeChecks(ctx, nc, approval.CheckConfig{
			Source: source, Keys: []string{e.signer.PublicKey()}, Identities: m, Log: natstest.Logger(t),
			Access: func(_ context.Context, id identity.Identity, _ actions.Change) ([]string, error) {
				if id.User == "bob" {
					return []string{"patch hostedclusters.hypershift.openshift.io in namespace clusters (name c1)"}, nil
				}
				return nil, nil
			},
			Preflight: stuck.preflight,
		})
	})
	waitFor(t, 30*time.Second, "the agent answering checks", func() bool { return nc.NumSubscriptions() == 1 })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	ctx := testContext(t)
	p, err := f.Propose(ctx, noProxyChange(), requester, approval.ForSource(source))
	if err != nil {
		t.Fatal(err)
	}

	// The flood: the preflights the bot sends for six /hcp expose, queued
	// at the agent before the approval's identity check.
	const flood = 6
	bot := e.connect("bot").NC
	// A reply subject each, as the bot's: the agent may answer each once.
	inbox := bot.NewInbox()
	answers, err := bot.SubscribeSync(inbox + ".*")
	if err != nil {
		t.Fatal(err)
	}
	subject, _ := event.IdentityCheckSubject(source)
	for i := range flood {
		c := e.preflightOf(exposeChange(int32(30100+i)), fmt.Sprintf("flood-%04d", i))
		if err := bot.PublishRequest(subject, fmt.Sprintf("%s.%d", inbox, i), approval.SealPreflight(e.signer, c)); err != nil {
			t.Fatal(err)
		}
	}
	if err := bot.Flush(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the agent reading a preflight", func() bool { started, _ := stuck.counts(); return started > 0 })

	// bob (approver2) may not patch: the check, answered during the flood,
	// refuses his approval.
	start := time.Now()
	_, err = f.Approve(ctx, p.ID, approver2)
	if !errors.Is(err, approval.ErrNotPermitted) {
		t.Fatalf("approval by bob during a preflight flood = %v after %s, want refused by the identity check", err, time.Since(start))
	}
	if got, _ := f.Get(ctx, p.ID); got.State != approval.StatePending {
		t.Fatalf("state %s after a refused approval", got.State)
	}

	// The preflights past the agent's few were answered at once, busy;
	// those read are answered once the reads come back.
	busy := 0
	for busy < flood-approval.MaxPreflights {
		msg, err := answers.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("%d busy answers, want %d: %v", busy, flood-approval.MaxPreflights, err)
		}
		var a approval.PreflightAnswer
		if err := json.Unmarshal(msg.Data, &a); err != nil || a.Preflight != nil || a.Error == "" {
			t.Fatalf("an answer during the flood: %s, %v", msg.Data, err)
		}
		busy++
	}
	released()
	for range approval.MaxPreflights {
		msg, err := answers.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var a approval.PreflightAnswer
		if err := json.Unmarshal(msg.Data, &a); err != nil || a.Preflight == nil || len(a.Preflight.Free) != 1 {
			t.Fatalf("a preflight read: %s, %v", msg.Data, err)
		}
	}
	if started, most := stuck.counts(); started != approval.MaxPreflights || most > approval.MaxPreflights {
		t.Fatalf("%d preflights read, %d at once; want %d", started, most, approval.MaxPreflights)
	}
}

// Whoever holds the bot's NATS user (a stolen seed, no signing key) sends
// the agent a check or a captured preflight whose reply subject is not
// the bot's inbox: NATS lets a responder publish once on the reply
// subject of a request it received whatever its permissions deny, so the
// agent's answer would land, in the agent's name, on a subject neither
// user may publish on: another management cluster's agent audit subject
// (which the audit stream records), another cluster's answer in the
// results bucket. The agent answers only on the bot's inbox prefix.
func TestI29BAttackReplySubjectMakesTheAgentPublish(t *testing.T) {
	e := newEnv(t)
	pre := &preflights{}
	e.servePreflights(pre)
	admin := e.connect("admin").NC
	auditSubject, err := event.AgentAuditSubject(otherSource)
	if err != nil {
		t.Fatal(err)
	}
	captured := approval.SealPreflight(e.signer, e.preflightOf(exposeChange(30201), "captured-0201"))
	targets := map[string][]byte{
		auditSubject: []byte(`{}`),
		"$KV." + bus.ActionResultsBucket + "." + otherSource + ".expo-replay0001": captured,
	}
	landed := map[string]*nats.Subscription{}
	for target := range targets {
		if landed[target], err = admin.SubscribeSync(target); err != nil {
			t.Fatal(err)
		}
	}
	if err := admin.Flush(); err != nil {
		t.Fatal(err)
	}

	attacker := e.connect("bot").NC
	subject, _ := event.IdentityCheckSubject(source)
	for target, data := range targets {
		// One request per reply subject: NATS grants one response each.
		if err := attacker.PublishMsg(&nats.Msg{Subject: subject, Reply: target, Data: data}); err != nil {
			t.Fatal(err)
		}
	}
	// Answered in order: once this later check has its answer, the agent
	// has handled the two above, and the server has routed whatever it
	// published for them (the flush brings it to the subscriber).
	if a, err := ask(t, attacker, []byte(`{}`)); err != nil || a.Error == "" {
		t.Fatalf("a check on the bot's inbox: %+v, %v", a, err)
	}
	if err := admin.Flush(); err != nil {
		t.Fatal(err)
	}
	for target, sub := range landed {
		if msg, err := sub.NextMsg(100 * time.Millisecond); err == nil {
			t.Errorf("the agent published on %s for the bot's user: %s", target, msg.Data)
		}
	}
	if n := pre.count(); n != 0 {
		t.Errorf("the captured preflight was read: %d reads", n)
	}
}
