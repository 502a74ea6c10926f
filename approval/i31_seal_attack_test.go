package approval

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bot/checkpoint"
	"github.com/hcpbot/hcpbot/bot/fleet/wire"
	"github.com/hcpbot/hcpbot/bot/silence"
	"github.com/hcpbot/hcpbot/seal"
)

// Issue 31 moved the seals' checks onto package seal, selfSigned
// included. A record is stale (a bot with another key made it, untouched
// since: the benign reading, reported only when it verified before) only
// when every seal verifies under its own use by that one key. A holder of
// a key not trusted here (a retired one, an attacker's own) who touches
// any seal, or borrows a seal made for another use, gets a refusal that
// is no ErrStale; a seal claiming the bot's key over another's signature
// is a forgery, not an untrusted key.
func TestI31AttackStaleOnlyWhenSealedThroughout(t *testing.T) {
	bot, other, third := newSealer(t), newSealer(t), newSealer(t)
	trust := Trust{Keys: []string{bot.s.PublicKey()}, Source: "mgmt-1"}
	now := t0.Add(2 * time.Minute)
	_, terms := other.proposal("act-i31seal1", true, 1)
	theirs := other.decide(terms, approve(approver, t0.Add(time.Minute)))
	edit := func(f func(*Record)) Record {
		r := theirs
		r.Proposal.Sig = bytes.Clone(r.Proposal.Sig)
		r.Decisions = []Seal{theirs.Decisions[0]}
		r.Decisions[0].Sig = bytes.Clone(r.Decisions[0].Sig)
		f(&r)
		return r
	}
	for _, tc := range []struct {
		name string
		rec  Record
		want error
	}{
		{"sealed throughout by another key", theirs, ErrStale},
		{"a decision's signature bit flipped", edit(func(r *Record) { r.Decisions[0].Sig[0] ^= 1 }), ErrUntrustedKey},
		{"a decision by a third key", edit(func(r *Record) {
			r.Decisions = third.decide(terms, approve(approver, t0.Add(time.Minute))).Decisions
		}), ErrUntrustedKey},
		{"a decision's key left out", edit(func(r *Record) { r.Decisions[0].Key = "" }), ErrUntrustedKey},
		{"a decision's signature left out", edit(func(r *Record) { r.Decisions[0].Sig = nil }), ErrUntrustedKey},
		{"the terms' signature left out", edit(func(r *Record) { r.Proposal.Sig = nil }), ErrForged},
		{"the terms' key left out", edit(func(r *Record) { r.Proposal.Key = "" }), ErrForged},
		{"the decision's seal as the terms", edit(func(r *Record) {
			r.Proposal = theirs.Decisions[0]
			r.Decisions = nil
		}), ErrUntrustedKey},
		{"the terms' seal as a decision", edit(func(r *Record) { r.Decisions[0] = theirs.Proposal }), ErrUntrustedKey},
		{"the bot's key claimed over another key's terms", edit(func(r *Record) { r.Proposal.Key = bot.s.PublicKey() }), ErrForged},
		{"the bot's key claimed over another key's decision", rewriteDecisions(bot.decide(bot.terms(decodeTerms(t, theirs)), approve(approver, t0.Add(time.Minute))), func(d *Seal) {
			d.Sig = theirs.Decisions[0].Sig
		}), ErrForged},
	} {
		_, err := Permit(tc.rec, trust, now)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
		for _, not := range []error{ErrStale, ErrForged, ErrUntrustedKey} {
			if not != tc.want && errors.Is(err, not) {
				t.Errorf("%s: %v is also %v", tc.name, err, not)
			}
		}
	}
}

func decodeTerms(t *testing.T, rec Record) Proposal {
	t.Helper()
	var p Proposal
	if err := decodeStrict(rec.Proposal.Body, &p); err != nil {
		t.Fatal(err)
	}
	return p
}

// rewriteDecisions is rec with f applied to a copy of each decision.
func rewriteDecisions(rec Record, f func(*Seal)) Record {
	out := rec
	out.Decisions = append([]Seal(nil), rec.Decisions...)
	for i := range out.Decisions {
		f(&out.Decisions[i])
	}
	return out
}

// Every use of the bot's key has a context string of its own, of the one
// form package seal accepts (its Sign refuses any other): a signature
// made for one use then never passes for another, since the first line
// of what is signed names the use. Two uses sharing a string would be
// one use to the key.
func TestI31AttackEveryUseHasItsOwnContext(t *testing.T) {
	s := newSealer(t).s
	uses := map[string]string{
		"proposal": proposalContext, "decision": decisionContext, "request": requestContext,
		"outcome": outcomeContext, "rolled back": rolledBackContext,
		"identity check": identityContext, "preflight": preflightContext,
		"audit record": audit.SigningContext, "checkpoint": checkpoint.SigningContext,
		"silence": silence.SigningContext, "fleet answer": wire.SigningContext,
	}
	seen := map[string]string{}
	for use, context := range uses {
		if prev, ok := seen[context]; ok {
			t.Errorf("%s and %s share the context %q", use, prev, context)
		}
		seen[context] = use
		if _, err := seal.Sign(s.forContext(context, "test"), context, []byte("{}")); err != nil {
			t.Errorf("%s: %v", use, err)
		}
	}
}
