package approval_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bot/approval"
)

// Someone who can write the bucket but lacks the signing key (a stolen
// NATS seed of the bot) rewrites a pending proposal: a colleague as its
// requester, so that they may approve it themselves, or another request.
// The sealed Store refuses to approve either (and audits it); an untouched
// proposal approves as usual.
func TestSealedProposalsRefuseTampering(t *testing.T) {
	e := newEnv(t)
	signer, err := actions.NewEphemeralSigner()
	if err != nil {
		t.Fatal(err)
	}
	s := e.store(defaultPolicy(), nil, approval.WithSealer(signer))
	ctx := testContext(t)
	kv, err := e.connect().JS.KeyValue(ctx, approval.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	rewrite := func(id string, change func(p *approval.Proposal)) {
		t.Helper()
		e, err := kv.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		var p approval.Proposal
		if err := json.Unmarshal(e.Value(), &p); err != nil {
			t.Fatal(err)
		}
		change(&p)
		b, _ := json.Marshal(p)
		if _, err := kv.Put(ctx, id, b); err != nil {
			t.Fatal(err)
		}
	}
	for name, change := range map[string]func(p *approval.Proposal){
		"requester":    func(p *approval.Proposal) { p.RequestedBy = approver2 },
		"request":      func(p *approval.Proposal) { p.Request.NoProxy.Add = []string{"evil.example"} },
		"four-eyes":    func(p *approval.Proposal) { p.FourEyes = false },
		"expiry":       func(p *approval.Proposal) { p.ExpiresAt = p.ExpiresAt.AddDate(1, 0, 0) },
		"seal removed": func(p *approval.Proposal) { p.Seal = nil },
	} {
		t.Run(name, func(t *testing.T) {
			p := e.propose(s)
			if p.Seal == nil || p.Seal.Key != signer.PublicKey() {
				t.Fatalf("proposal not sealed: %+v", p.Seal)
			}
			rewrite(p.ID, change)
			got, err := s.Approve(ctx, p.ID, approver2, e.clock.Now())
			if !errors.Is(err, approval.ErrTampered) || got.State != approval.StatePending {
				t.Fatalf("Approve of a rewritten proposal: %v, state %s", err, got.State)
			}
			if countKind(e.records(p.ID), audit.KindRefused) != 1 {
				t.Errorf("refusal not audited: %v", kinds(e.records(p.ID)))
			}
		})
	}
	p := e.propose(s)
	if _, err := s.Approve(ctx, p.ID, approver2, e.clock.Now()); err != nil {
		t.Fatalf("untouched sealed proposal: %v", err)
	}
}

// The four-eyes rule of a proposal holds even if the policy is switched
// off later, and the diagnosis is never the second person.
func TestFourEyesOfTheProposal(t *testing.T) {
	e := newEnv(t)
	ctx := testContext(t)
	strict := e.store(defaultPolicy(), nil)
	p := e.propose(strict)
	lax := defaultPolicy()
	lax.FourEyes = false
	laxStore := e.store(lax, nil)
	if _, err := laxStore.Approve(ctx, p.ID, requester, e.clock.Now()); !errors.Is(err, approval.ErrOwnRequest) {
		t.Errorf("self-approval of a four-eyes proposal under a lax policy: %v", err)
	}
	q, err := laxStore.Propose(ctx, noProxyRequest(), "hcpbot-diagnosis", approval.ForSource("mgmt-1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := strict.Approve(ctx, q.ID, approver, e.clock.Now()); !errors.Is(err, approval.ErrOwnRequest) {
		t.Errorf("one approver on a diagnosis' proposal under four-eyes: %v", err)
	}
	if _, err := laxStore.Approve(ctx, q.ID, approver, e.clock.Now()); err != nil {
		t.Errorf("one approver without four-eyes: %v", err)
	}
}
