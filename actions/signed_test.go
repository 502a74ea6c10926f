package actions_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/actions"
)

// verifierFixture is an approved proposal, the key that seals it, and a
// Verifier that should accept it.
type verifierFixture struct {
	now    time.Time
	signer *actions.Signer
	req    actions.Change
	rec    actions.ApprovalRecord
	att    actions.Approval
	store  *approvals
	v      *actions.Verifier
}

func newVerifierFixture(t *testing.T) *verifierFixture {
	t.Helper()
	signer, err := actions.NewEphemeralSigner()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	req := actions.Change{
		ID: "act-verify0001", Type: actions.TypeNoProxyPatch, RequestedBy: "U0REQUESTER",
		Cluster: actions.ClusterRef{Namespace: "clusters", Name: "hc1"},
		NoProxy: &actions.NoProxyParams{Expected: ".corp.example", Add: []string{"kubernetes", "172.31.0.0/16"}},
	}
	digest, err := actions.RequestDigest(req)
	if err != nil {
		t.Fatal(err)
	}
	rec := actions.ApprovalRecord{
		ID: req.ID, State: "approved", Source: "mgmt-1", RequestedBy: "U0REQUESTER", DecidedBy: "U0APPROVER",
		CreatedAt: now.Add(-10 * time.Minute), DecidedAt: now.Add(-time.Second), ExpiresAt: now.Add(50 * time.Minute),
		FourEyes: true, Request: req,
	}
	att := actions.Approval{
		ProposalID: req.ID, Source: "mgmt-1", RequestedBy: rec.RequestedBy, ApprovedBy: rec.DecidedBy, FourEyes: true,
		CreatedAt: rec.CreatedAt, ApprovedAt: rec.DecidedAt, ExpiresAt: rec.ExpiresAt, RequestSHA256: digest,
	}
	rec.Seal = sealRecord(t, signer, rec)
	store := &approvals{m: map[string]actions.ApprovalRecord{req.ID: rec}}
	return &verifierFixture{
		now: now, signer: signer, req: req, rec: rec, att: att, store: store,
		v: &actions.Verifier{Keys: []string{signer.PublicKey()}, Store: store, Source: "mgmt-1", FourEyes: true, Now: func() time.Time { return now }},
	}
}

func (f *verifierFixture) seal(t *testing.T, signer *actions.Signer, req actions.Change, att actions.Approval, at time.Time) []byte {
	t.Helper()
	data, err := signer.Seal(req, att, at)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// The agent's verifier accepts exactly a request sealed by a trusted key,
// attesting the approval the store holds, fresh, and approved by two
// people; every other shape is refused with ErrUnauthorized (ErrInvalid
// for what is not an envelope), whatever part an attacker controls.
func TestVerifierRefusesWhatWasNotApproved(t *testing.T) {
	f := newVerifierFixture(t)
	ctx := context.Background()
	good := f.seal(t, f.signer, f.req, f.att, f.now)
	got, err := f.v.Open(ctx, good)
	if err != nil {
		t.Fatalf("approved request refused: %v", err)
	}
	if got.Request.ID != f.req.ID || got.Approval.ApprovedBy != "U0APPROVER" || got.Key != f.signer.PublicKey() {
		t.Errorf("Open = %+v", got)
	}

	other, err := actions.NewEphemeralSigner()
	if err != nil {
		t.Fatal(err)
	}
	var env actions.Envelope
	if err := json.Unmarshal(good, &env); err != nil {
		t.Fatal(err)
	}
	reencode := func(e actions.Envelope) []byte {
		b, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	tampered := env
	tampered.Payload = bytes.Replace(env.Payload, []byte("172.31.0.0/16"), []byte("0.0.0.0/0.0.0"), 1)
	flipped := env
	flipped.Sig = append([]byte(nil), env.Sig...)
	flipped.Sig[0] ^= 1
	swappedKey := env
	swappedKey.Key = other.PublicKey()
	plain, err := json.Marshal(f.req)
	if err != nil {
		t.Fatal(err)
	}

	mod := func(change func(r *actions.Change, a *actions.Approval)) []byte {
		req, att := f.req, f.att
		np := *req.NoProxy
		req.NoProxy = &np
		change(&req, &att)
		if d, err := actions.RequestDigest(req); err == nil && att.RequestSHA256 == f.att.RequestSHA256 {
			att.RequestSHA256 = d // consistent with itself: only the store can tell
		}
		return f.seal(t, f.signer, req, att, f.now)
	}
	withRecord := func(change func(r *actions.ApprovalRecord)) func() {
		return func() {
			rec := f.rec
			change(&rec)
			f.store.m[f.req.ID] = rec
		}
	}

	for _, tc := range []struct {
		name   string
		data   []byte
		setup  func() // changes the store for this case
		want   error
		reason string
	}{
		{name: "unsigned request (the old wire format)", data: plain, want: actions.ErrInvalid},
		{name: "envelope without signature", data: reencode(actions.Envelope{Payload: env.Payload, Key: env.Key}), want: actions.ErrUnauthorized, reason: "unsigned"},
		{name: "signed by an untrusted key", data: f.seal(t, other, f.req, f.att, f.now), want: actions.ErrUnauthorized, reason: "untrusted key"},
		{name: "trusted key named, other key signed", data: reencode(swappedKey), want: actions.ErrUnauthorized, reason: "untrusted key"},
		{name: "signature bit flipped", data: reencode(flipped), want: actions.ErrUnauthorized, reason: "bad signature"},
		{name: "payload tampered after signing", data: reencode(tampered), want: actions.ErrUnauthorized, reason: "bad signature"},
		{name: "request changed, digest kept", data: func() []byte {
			req := f.req
			req.NoProxy = &actions.NoProxyParams{Expected: "", Add: []string{"kubernetes"}}
			return f.seal(t, f.signer, req, f.att, f.now)
		}(), want: actions.ErrUnauthorized, reason: "differs from what was approved"},
		{name: "request changed, digest recomputed", data: mod(func(r *actions.Change, _ *actions.Approval) { r.NoProxy.Add = []string{"example.com"} }),
			want: actions.ErrUnauthorized, reason: "another request"},
		{name: "for another management cluster", data: mod(func(_ *actions.Change, a *actions.Approval) { a.Source = "mgmt-2" }), want: actions.ErrUnauthorized, reason: "mgmt-2"},
		{name: "approval of another proposal", data: mod(func(_ *actions.Change, a *actions.Approval) { a.ProposalID = "act-other0001" }), want: actions.ErrUnauthorized, reason: "attached to request"},
		{name: "requester approved alone", data: mod(func(_ *actions.Change, a *actions.Approval) { a.ApprovedBy = a.RequestedBy }), want: actions.ErrUnauthorized, reason: "alone"},
		{name: "the diagnosis as second person", data: mod(func(_ *actions.Change, a *actions.Approval) { a.RequestedBy = "hcpbot-diagnosis" }), want: actions.ErrUnauthorized, reason: "not a person"},
		{name: "no approver", data: mod(func(_ *actions.Change, a *actions.Approval) { a.ApprovedBy = "" }), want: actions.ErrUnauthorized, reason: "no approver"},
		{name: "approved after expiry", data: mod(func(_ *actions.Change, a *actions.Approval) { a.ExpiresAt = a.ApprovedAt.Add(-time.Second) }), want: actions.ErrUnauthorized, reason: "expired"},
		{name: "sealed long ago (replay)", data: f.seal(t, f.signer, f.req, f.att, f.now.Add(-actions.DefaultMaxAge-time.Second)), want: actions.ErrUnauthorized, reason: "replay"},
		{name: "sealed in the future", data: f.seal(t, f.signer, f.req, f.att, f.now.Add(time.Hour)), want: actions.ErrUnauthorized, reason: "future"},
		{name: "not in the approval store", data: good, setup: func() { delete(f.store.m, f.req.ID) }, want: actions.ErrUnauthorized, reason: "not in the approval store"},
		{name: "pending (not approved)", data: good, setup: withRecord(func(r *actions.ApprovalRecord) { r.State, r.DecidedBy = "pending", "" }), want: actions.ErrUnauthorized, reason: "not approved"},
		{name: "rejected", data: good, setup: withRecord(func(r *actions.ApprovalRecord) { r.State = "rejected" }), want: actions.ErrUnauthorized, reason: "rejected"},
		{name: "expired", data: good, setup: withRecord(func(r *actions.ApprovalRecord) { r.State = "expired" }), want: actions.ErrUnauthorized, reason: "expired"},
		{name: "already executed", data: good, setup: withRecord(func(r *actions.ApprovalRecord) { r.State = "executed" }), want: actions.ErrUnauthorized, reason: "executed"},
		{name: "already failed", data: good, setup: withRecord(func(r *actions.ApprovalRecord) { r.State = "failed" }), want: actions.ErrUnauthorized, reason: "failed"},
		{name: "store approved by someone else", data: good, setup: withRecord(func(r *actions.ApprovalRecord) { r.DecidedBy = "U0SOMEONE" }), want: actions.ErrUnauthorized, reason: "not as signed"},
		{name: "store holds another source", data: good, setup: withRecord(func(r *actions.ApprovalRecord) { r.Source = "mgmt-2" }), want: actions.ErrUnauthorized, reason: "management cluster"},
		{name: "store: one person under four-eyes", data: f.seal(t, f.signer, f.req, actions.Approval{
			ProposalID: f.att.ProposalID, Source: f.att.Source, RequestedBy: "U0APPROVER", ApprovedBy: "U0APPROVER",
			CreatedAt: f.att.CreatedAt, ApprovedAt: f.att.ApprovedAt, ExpiresAt: f.att.ExpiresAt, RequestSHA256: f.att.RequestSHA256,
		}, f.now), want: actions.ErrUnauthorized, reason: "alone"},
		{name: "store record without a seal", data: good, setup: withRecord(func(r *actions.ApprovalRecord) { r.Seal = nil }), want: actions.ErrUnauthorized, reason: "carries no seal"},
		{name: "store record sealed by an untrusted key", data: good, setup: withRecord(func(r *actions.ApprovalRecord) { r.Seal = sealRecord(t, other, *r) }),
			want: actions.ErrUnauthorized, reason: "untrusted key"},
		// Someone who can write the store but lacks the key makes a
		// colleague the requester of what they approve themselves, and the
		// bot signs what the store then says: the seal tells.
		{name: "store record's requester rewritten", data: mod(func(_ *actions.Change, a *actions.Approval) { a.RequestedBy = "U0COLLEAGUE" }),
			setup: withRecord(func(r *actions.ApprovalRecord) { r.RequestedBy = "U0COLLEAGUE" }), want: actions.ErrUnauthorized, reason: "changed after it was made"},
		{name: "store record's request rewritten", data: mod(func(r *actions.Change, _ *actions.Approval) { r.NoProxy.Add = []string{"evil.example"} }),
			setup: withRecord(func(r *actions.ApprovalRecord) {
				r.Request.NoProxy = &actions.NoProxyParams{Expected: r.Request.NoProxy.Expected, Add: []string{"evil.example"}}
			}), want: actions.ErrUnauthorized, reason: "changed after it was made"},
		{name: "trailing data", data: append(append([]byte(nil), good...), []byte(" {}")...), want: actions.ErrInvalid},
		{name: "unknown envelope field", data: []byte(strings.Replace(string(good), `"key"`, `"approved":true,"key"`, 1)), want: actions.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.store.m[f.req.ID] = f.rec
			if tc.setup != nil {
				tc.setup()
			}
			_, err := f.v.Open(ctx, tc.data)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Open: %v, want %v", err, tc.want)
			}
			if tc.reason != "" && !strings.Contains(err.Error(), tc.reason) {
				t.Errorf("Open: %v, want the reason to say %q", err, tc.reason)
			}
		})
	}
}

// Without four-eyes (bot and agent both off) one approver suffices; an
// agent that requires four-eyes refuses it anyway, and an agent listing
// its approvers refuses anyone else.
func TestVerifierPolicy(t *testing.T) {
	f := newVerifierFixture(t)
	ctx := context.Background()
	att := f.att
	att.RequestedBy, att.FourEyes = "hcpbot-diagnosis", false
	rec := f.rec
	rec.RequestedBy, rec.FourEyes = "hcpbot-diagnosis", false
	rec.Seal = sealRecord(t, f.signer, rec)
	f.store.m[f.req.ID] = rec
	data := f.seal(t, f.signer, f.req, att, f.now)

	f.v.FourEyes = false
	if _, err := f.v.Open(ctx, data); err != nil {
		t.Errorf("one approver without four-eyes: %v", err)
	}
	f.v.FourEyes = true
	if _, err := f.v.Open(ctx, data); !errors.Is(err, actions.ErrUnauthorized) {
		t.Errorf("agent requiring four-eyes: %v, want unauthorized", err)
	}
	f.v.FourEyes, f.v.Approvers = false, []string{"U0OTHER"}
	if _, err := f.v.Open(ctx, data); !errors.Is(err, actions.ErrUnauthorized) || !strings.Contains(err.Error(), "not an approver") {
		t.Errorf("approver not listed by the agent: %v", err)
	}
	f.v.Approvers = []string{"U0APPROVER"}
	if _, err := f.v.Open(ctx, data); err != nil {
		t.Errorf("listed approver: %v", err)
	}
	f.v.Keys = nil
	if _, err := f.v.Open(ctx, data); !errors.Is(err, actions.ErrUnauthorized) || !strings.Contains(err.Error(), "trusts no signing key") {
		t.Errorf("no trusted key: %v", err)
	}
}

// During a key rotation the agent trusts two keys: requests sealed by
// either pass, a third is refused.
func TestVerifierKeyRotation(t *testing.T) {
	f := newVerifierFixture(t)
	next, err := actions.NewEphemeralSigner()
	if err != nil {
		t.Fatal(err)
	}
	third, err := actions.NewEphemeralSigner()
	if err != nil {
		t.Fatal(err)
	}
	f.v.Keys = []string{f.signer.PublicKey(), next.PublicKey()}
	for name, s := range map[string]*actions.Signer{"current": f.signer, "next": next} {
		if _, err := f.v.Open(context.Background(), f.seal(t, s, f.req, f.att, f.now)); err != nil {
			t.Errorf("%s key refused: %v", name, err)
		}
	}
	if _, err := f.v.Open(context.Background(), f.seal(t, third, f.req, f.att, f.now)); !errors.Is(err, actions.ErrUnauthorized) {
		t.Errorf("third key: %v, want unauthorized", err)
	}
}

func TestSignerKeys(t *testing.T) {
	if _, err := actions.NewSigner([]byte("SUnotaseed")); err == nil || strings.Contains(err.Error(), "SUnotaseed") {
		t.Errorf("NewSigner(garbage) = %v: want an error that does not quote the input", err)
	}
	s, err := actions.NewEphemeralSigner()
	if err != nil {
		t.Fatal(err)
	}
	if err := actions.CheckKeys([]string{s.PublicKey()}); err != nil {
		t.Errorf("CheckKeys(own key): %v", err)
	}
	if err := actions.CheckKeys([]string{"UNOTAKEY"}); err == nil {
		t.Error("CheckKeys accepted a malformed key")
	}
}
