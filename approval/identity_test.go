package approval_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/identity"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
)

// impersonation records who the agent acted as.
type impersonation struct {
	mu    sync.Mutex
	as    []identity.Identity
	extra []map[string][]string
}

func (i *impersonation) last() (identity.Identity, map[string][]string) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if len(i.as) == 0 {
		return identity.Identity{}, nil
	}
	return i.as[len(i.as)-1], i.extra[len(i.extra)-1]
}

// acting is an AgentConfig.As that records whom it acts as and runs x.
func (i *impersonation) acting(x approval.Executor) func(identity.Identity, map[string][]string) (approval.Executor, error) {
	return func(id identity.Identity, extra map[string][]string) (approval.Executor, error) {
		i.mu.Lock()
		defer i.mu.Unlock()
		i.as, i.extra = append(i.as, id), append(i.extra, extra)
		return x, nil
	}
}

// identities maps approver to alice (user) and approver2 to bob, through
// a Slack group; requester has none.
func identities(required bool) identity.Map {
	return identity.Map{Required: required, Entries: []identity.Entry{
		{Slack: approver, User: "alice", Groups: []string{"platform-ops"}},
		{Slack: "S0OPS00001", User: "bob"},
	}}
}

// serveWithIdentities runs the agent with m, acting through imp, and
// answering identity checks with access (nil: every permission).
func (e *env) serveWithIdentities(m identity.Map, imp *impersonation, access func(identity.Identity) []string) {
	e.t.Helper()
	e.serve(func(c *approval.AgentConfig) {
		c.Identities = m
		c.As = imp.acting(e.x)
	})
	e.serveChecks(m, func(_ context.Context, id identity.Identity, _ actions.Change) ([]string, error) {
		if access == nil {
			return nil, nil
		}
		return access(id), nil
	})
}

// serveChecks answers identity checks as the agent with m and access
// until the test ends; it returns once the server has the subscription,
// so that a check made then is answered.
func (e *env) serveChecks(m identity.Map, access func(context.Context, identity.Identity, actions.Change) ([]string, error)) {
	e.t.Helper()
	nc := e.connect("agent").NC
	e.run(func(ctx context.Context) {
		_ = approval.ServeChecks(ctx, nc, approval.CheckConfig{Source: source, Keys: []string{e.signer.PublicKey()}, Identities: m, Log: natstest.Logger(e.t), Access: access})
	})
	waitFor(e.t, 30*time.Second, "the agent answering identity checks", func() bool { return nc.NumSubscriptions() == 1 })
	if err := nc.Flush(); err != nil {
		e.t.Fatal(err)
	}
}

// An approval counts only if the agent finds that the approver's
// Kubernetes identity may make the change; the change is then made as the
// identity of the approver who completed the decision, with the action,
// the requester and the approvers in its Impersonate-Extra.
func TestImpersonationCheckedBeforeItCounts(t *testing.T) {
	e := newEnv(t)
	m := identities(true)
	groups := approval.StaticGroups{"S0OPS00001": {approver2}}
	f := e.flow(fourEyes(), func(c *approval.Config) { c.Identities, c.Groups = m, groups })
	var imp impersonation
	e.serveWithIdentities(m, &imp, func(id identity.Identity) []string {
		if id.User == "bob" {
			return []string{"patch hostedclusters.hypershift.openshift.io in namespace clusters (name c1)"}
		}
		return nil
	})
	ctx := testContext(t)
	p, err := f.Propose(ctx, noProxyChange(), requester, approval.ForSource(source))
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.Approve(ctx, p.ID, approver2)
	if !errors.Is(err, approval.ErrNotPermitted) || !strings.Contains(err.Error(), "patch hostedclusters.hypershift.openshift.io") || !strings.Contains(err.Error(), "bob") {
		t.Fatalf("approval by bob's approver = %v, want refused naming the missing patch", err)
	}
	if got, _ := f.Get(ctx, p.ID); got.State != approval.StatePending {
		t.Fatalf("state %s after a refused approval", got.State)
	}
	var got outcome
	if _, err := f.Approve(ctx, p.ID, approver, approval.OnOutcome(got.fn)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "executed", func() bool { return len(got.got()) == 1 })
	as, extra := imp.last()
	if o := got.got()[0]; o.State != approval.StateExecuted || as.User != "alice" ||
		extra[identity.ExtraAction][0] != p.ID || extra[identity.ExtraRequester][0] != requester || extra[identity.ExtraApprovers][0] != approver {
		t.Fatalf("outcome %s, acted as %+v with %v", o.State, as, extra)
	}
}

// identities.required: an approver without an identity cannot complete a
// decision (the bot refuses), and an agent that requires identities acts
// as nobody when the bot sealed an approval anyway (its map differs).
func TestImpersonationRequired(t *testing.T) {
	e := newEnv(t)
	pol := fourEyes()
	pol.Approvers = append(pol.Approvers, stranger)
	f := e.flow(pol, func(c *approval.Config) { c.Identities = identities(true) })
	lax := e.flow(pol) // a bot without the map
	var imp impersonation
	e.serveWithIdentities(identities(true), &imp, nil)
	ctx := testContext(t)
	p, err := f.Propose(ctx, noProxyChange(), requester, approval.ForSource(source))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Approve(ctx, p.ID, stranger); !errors.Is(err, approval.ErrNoIdentity) {
		t.Fatalf("approval by someone without an identity = %v", err)
	}
	var got outcome
	if _, err := lax.Approve(ctx, p.ID, stranger, approval.OnOutcome(got.fn)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the agent's refusal", func() bool { return len(got.got()) == 1 })
	if o := got.got()[0]; o.State != approval.StateFailed || o.Code != approval.CodeNoIdentity || e.x.runs(p.ID) != 0 {
		t.Fatalf("outcome %s %s %q, %d runs", o.State, o.Code, o.Reason, e.x.runs(p.ID))
	}
}

// The agent does not answer the identity check (none runs): the approval
// still counts, answered at once with a note; the change, once an agent
// runs, is made as the approver's identity and RBAC decides then.
func TestImpersonationCheckUnansweredStillCounts(t *testing.T) {
	e := newEnv(t)
	m := identities(true)
	f := e.flow(fourEyes(), func(c *approval.Config) { c.Identities = m })
	ctx := testContext(t)
	p, err := f.Propose(ctx, noProxyChange(), requester, approval.ForSource(source))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	p, err = f.Approve(ctx, p.ID, approver)
	if err != nil || p.State != approval.StateApproved || !strings.Contains(p.IdentityNote, "did not answer") || time.Since(start) > time.Second {
		t.Fatalf("Approve with no agent = %s %q, %v after %s", p.State, p.IdentityNote, err, time.Since(start))
	}
}

// The bot requires identities (and seals that with the approval); the
// agent's own configuration does not, and maps nobody for the approver:
// it applies the stricter of the two and refuses rather than make the
// change with its own rights. Without the agent answering checks the
// approval counts (with a note) and the agent refuses at execution; with
// it, the check already refuses (the check carries the bot's requirement).
func TestImpersonationRequiredBySealOnly(t *testing.T) {
	e := newEnv(t)
	f := e.flow(fourEyes(), func(c *approval.Config) { c.Identities = identities(true) })
	// bob's group only: nothing for approver.
	lax := identity.Map{Entries: identities(false).Entries[1:]}
	var imp impersonation
	e.serve(func(c *approval.AgentConfig) {
		c.Identities = lax
		c.As = imp.acting(e.x)
	})
	ctx := testContext(t)
	p, err := f.Propose(ctx, noProxyChange(), requester, approval.ForSource(source))
	if err != nil {
		t.Fatal(err)
	}
	var got outcome
	if p, err = f.Approve(ctx, p.ID, approver, approval.OnOutcome(got.fn)); err != nil || !strings.Contains(p.IdentityNote, "did not answer") {
		t.Fatalf("Approve = %q, %v", p.IdentityNote, err)
	}
	if d := p.Decisions[len(p.Decisions)-1]; !d.AsApprover {
		t.Fatalf("the completing decision does not seal the bot's identities.required: %+v", d)
	}
	waitFor(t, 30*time.Second, "the agent's refusal", func() bool { return len(got.got()) == 1 })
	o := got.got()[0]
	as, _ := imp.last()
	if o.State != approval.StateFailed || o.Code != approval.CodeNoIdentity || !strings.Contains(o.Reason, "own rights") || e.x.runs(p.ID) != 0 || as.User != "" {
		t.Fatalf("outcome %s %s %q, %d runs, acted as %+v", o.State, o.Code, o.Reason, e.x.runs(p.ID), as)
	}

	// The same agent answering checks: refused at approval.
	e.serveChecks(lax, func(context.Context, identity.Identity, actions.Change) ([]string, error) { return nil, nil })
	if p, err = f.Propose(ctx, noProxyChange(), requester, approval.ForSource(source)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Approve(ctx, p.ID, approver); !errors.Is(err, approval.ErrNoIdentity) || !strings.Contains(err.Error(), "the agent's identities") {
		t.Fatalf("approval checked by an agent that maps nobody for the approver = %v, want refused (the bot requires identities)", err)
	}
}

// Replies to an identity check that are no answer to it — no nonce,
// another check's nonce, a field the answer does not have — do not count,
// even when they come first: the bot waits for the agent's answer, and
// without one says it had no answer it could trust.
func TestImpersonationCheckUntrustedRepliesIgnored(t *testing.T) {
	e := newEnv(t)
	m := identities(true)
	f := e.flow(fourEyes(), func(c *approval.Config) { c.Identities = m })
	subject, err := event.IdentityCheckSubject(source)
	if err != nil {
		t.Fatal(err)
	}
	// Three rogue responders with the agent's user (each may answer once).
	replied := make(chan struct{}, 100)
	rogue := func(answer func(nonce string) string) {
		nc := e.connect("agent").NC
		sub, err := nc.Subscribe(subject, func(msg *nats.Msg) {
			var s struct {
				Body []byte `json:"body"`
			}
			var c struct {
				Nonce string `json:"nonce"`
			}
			if json.Unmarshal(msg.Data, &s) != nil || json.Unmarshal(s.Body, &c) != nil || c.Nonce == "" {
				t.Errorf("the check carries no nonce: %s", msg.Data)
			}
			_ = msg.Respond([]byte(answer(c.Nonce)))
			_ = nc.Flush()
			replied <- struct{}{}
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	rogue(func(string) string { return `{}` })
	rogue(func(string) string { return `{"check":"` + strings.Repeat("a", 26) + `"}` })
	rogue(func(nonce string) string { return `{"check":"` + nonce + `","allowed":true}` })

	ctx := testContext(t)
	p, err := f.Propose(ctx, noProxyChange(), requester, approval.ForSource(source))
	if err != nil {
		t.Fatal(err)
	}
	p, err = f.Approve(ctx, p.ID, approver)
	if err != nil || p.State != approval.StateApproved || !strings.Contains(p.IdentityNote, "no answer the bot could trust") || !strings.Contains(p.IdentityNote, "3 other replies ignored") {
		t.Fatalf("Approve with rogue replies only = %s %q, %v", p.State, p.IdentityNote, err)
	}

	// The agent answers after the rogues: its refusal decides.
	for len(replied) > 0 {
		<-replied
	}
	e.serveChecks(m, func(ctx context.Context, _ identity.Identity, _ actions.Change) ([]string, error) {
		for range 3 {
			select {
			case <-replied:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return []string{"patch hostedclusters.hypershift.openshift.io in namespace clusters (name c1)"}, nil
	})
	if p, err = f.Propose(ctx, noProxyChange(), requester, approval.ForSource(source)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Approve(ctx, p.ID, approver); !errors.Is(err, approval.ErrNotPermitted) {
		t.Fatalf("approval with the agent's refusal after three rogue replies = %v, want ErrNotPermitted", err)
	}
}
