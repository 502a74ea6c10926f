package approval_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/approval"
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
		c.As = func(id identity.Identity, extra map[string][]string) (approval.Executor, error) {
			imp.mu.Lock()
			defer imp.mu.Unlock()
			imp.as, imp.extra = append(imp.as, id), append(imp.extra, extra)
			return e.x, nil
		}
	})
	nc := e.connect("agent").NC
	e.run(func(ctx context.Context) {
		_ = approval.ServeChecks(ctx, nc, approval.CheckConfig{Source: source, Keys: []string{e.signer.PublicKey()}, Identities: m, Log: natstest.Logger(e.t),
			Access: func(_ context.Context, id identity.Identity, _ actions.Change) ([]string, error) {
				if access == nil {
					return nil, nil
				}
				return access(id), nil
			}})
	})
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
