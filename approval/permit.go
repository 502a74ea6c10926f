package approval

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// Trust is what a reader of the approval store accepts as proof: the
// keys whose seals count, and the floor of the policy it applies whatever
// a proposal's terms say.
type Trust struct {
	// Keys are the trusted public keys ("U…"): the bot's own (two during a
	// rotation). Nothing sealed by another key counts.
	Keys []string
	// Source, when set, is the only management cluster whose proposals
	// are accepted (the agent's own).
	Source string
	// FourEyes requires a person as requester and approvals by others
	// than the requester, whatever the proposal says.
	FourEyes bool
	// Approvals is the least number of distinct approvals accepted.
	Approvals int
	// Approvers, when set, are the only people whose approvals count: the
	// agent's own list (agent.approvers), checked on the seals.
	Approvers []string
	// MaxSkew tolerates a sealer's clock ahead of the reader's; 0 means
	// one minute.
	MaxSkew time.Duration
}

// Permit is THE rule that decides whether a proposed change may be made
// to a cluster, at now. It trusts nothing a record claims, only seals it
// verifies: the proposal's terms sealed by a trusted key, for this
// management cluster; then, in their sealed order, decisions chained to
// those terms, enough approvals by distinct people — under four-eyes
// neither the requester nor the diagnosis, each on the approver list when
// one is set — before the proposal expired, no rejection or expiry; and
// the approval that completed it less than QueueHorizon ago.
//
// The agent calls it before every execution and the bot before every
// request it sends, its recovery sweep included; nothing else decides it.
// The returned proposal carries what the seals prove (who approved, when
// the decision was complete) even with an error, for the refusal's
// message and audit.
func Permit(rec Record, t Trust, now time.Time) (Proposal, error) {
	p, err := verify(rec, t)
	if err != nil {
		return p, err
	}
	skew := t.MaxSkew
	if skew <= 0 {
		skew = time.Minute
	}
	switch {
	case t.Source != "" && p.Source != t.Source:
		return p, fmt.Errorf("%w: %s is for management cluster %q, this is %q", ErrNotApproved, p.ID, p.Source, t.Source)
	case p.State == StateRejected:
		return p, fmt.Errorf("%w: %s was rejected by %s", ErrNotApproved, p.ID, p.DecidedBy)
	case p.State == StateExpired:
		return p, fmt.Errorf("%w: %s expired before it was approved", ErrNotApproved, p.ID)
	case p.State != StateApproved:
		return p, fmt.Errorf("%w: %s", ErrNotApproved, tallyText(p, t))
	case p.DecidedAt.After(now.Add(skew)):
		return p, fmt.Errorf("%w: %s was approved in the future (%s)", ErrForged, p.ID, p.DecidedAt.UTC().Format(time.RFC3339))
	case !now.Before(p.Deadline()):
		return p, fmt.Errorf("%w: %s was approved at %s, more than %s ago", ErrTooLate, p.ID, p.DecidedAt.UTC().Format(time.RFC3339), QueueHorizon)
	}
	return p, nil
}

// tallyText says why the approvals do not suffice.
func tallyText(p Proposal, t Trust) string {
	need, fourEyes := t.need(p)
	s := fmt.Sprintf("%s has %d of the %d approvals it needs", p.ID, len(p.Approvers), need)
	if fourEyes && !person(p.RequestedBy) {
		s += fmt.Sprintf("; four-eyes: requested by %q, not a person", p.RequestedBy)
	}
	var ignored []string
	for _, d := range p.Decisions {
		if d.Verdict == VerdictApprove && !slices.Contains(p.Approvers, d.By) && !slices.Contains(ignored, d.By) {
			ignored = append(ignored, d.By)
		}
	}
	for _, by := range ignored {
		switch {
		case fourEyes && by == p.RequestedBy:
			s += fmt.Sprintf("; %s requested it, so under four-eyes their approval does not count", by)
		case len(t.Approvers) > 0 && !slices.Contains(t.Approvers, by):
			s += fmt.Sprintf("; %s is not an approver this agent accepts", by)
		}
	}
	return s
}

// need is the number of approvals p needs under t, and whether four-eyes
// applies: the stricter of the proposal's terms and t.
func (t Trust) need(p Proposal) (int, bool) {
	return max(p.Approvals, t.Approvals, 1), p.FourEyes || t.FourEyes
}

// verify reads what rec's seals prove: the terms, the decisions in their
// chained order, and the state they decide (pending, approved, rejected
// or expired; the agent's outcome is not part of it). Counting follows
// t's floor. It fails with ErrForged when a seal does not verify or is
// bound elsewhere, ErrStale when the record is sealed throughout by one
// untrusted key, ErrUntrustedKey otherwise for an untrusted key.
func verify(rec Record, t Trust) (Proposal, error) {
	var p Proposal
	if err := rec.Proposal.open(proposalContext, t.Keys, &p); err != nil {
		if errors.Is(err, ErrUntrustedKey) && rec.sealedThroughoutBy(rec.Proposal.Key) {
			return p, fmt.Errorf("%w (%s)", ErrStale, shortKey(rec.Proposal.Key))
		}
		return p, fmt.Errorf("proposal terms: %w", err)
	}
	switch {
	case !idPattern.MatchString(p.ID):
		return p, fmt.Errorf("%w: proposal id %q", ErrForged, p.ID)
	case rec.key != "" && rec.key != p.ID:
		return p, fmt.Errorf("%w: the record under %s holds the terms of %s", ErrForged, truncate(rec.key), p.ID)
	}
	p.digest = rec.Proposal.digest(proposalContext)
	p.State = StatePending
	need, fourEyes := t.need(p)
	prev := p.digest
	for i, s := range rec.Decisions {
		var d Decision
		if err := s.open(decisionContext, t.Keys, &d); err != nil {
			return p, fmt.Errorf("decision %d of %s: %w", i+1, p.ID, err)
		}
		switch {
		case d.ProposalID != p.ID || d.Prev != prev:
			return p, fmt.Errorf("%w: decision %d of %s belongs to another proposal or place", ErrForged, i+1, p.ID)
		case p.State != StatePending:
			// The bot seals nothing after a proposal is decided.
			return p, fmt.Errorf("%w: decision %d of %s follows its %s", ErrForged, i+1, p.ID, p.State)
		}
		prev = s.digest(decisionContext)
		p.Decisions = append(p.Decisions, d)
		switch d.Verdict {
		case VerdictApprove:
			if !d.At.Before(p.ExpiresAt) {
				return p, fmt.Errorf("%w: %s approved by %s after it expired", ErrForged, p.ID, d.By)
			}
			if !countable(p, d.By, fourEyes, t.Approvers) {
				continue
			}
			p.Approvers = append(p.Approvers, d.By)
			if len(p.Approvers) >= need && (!fourEyes || person(p.RequestedBy)) {
				p.State, p.DecidedBy, p.DecidedAt = StateApproved, d.By, d.At
			}
		case VerdictReject:
			p.State, p.DecidedBy, p.DecidedAt, p.Reason = StateRejected, d.By, d.At, d.Reason
		case VerdictExpire:
			p.State, p.DecidedAt = StateExpired, d.At
		default:
			return p, fmt.Errorf("%w: decision %d of %s has verdict %q", ErrForged, i+1, p.ID, d.Verdict)
		}
	}
	return p, nil
}

// countable reports whether an approval by by counts towards p: once per
// person, not the requester's under four-eyes, and only approvers on the
// list when there is one.
func countable(p Proposal, by string, fourEyes bool, approvers []string) bool {
	switch {
	case by == "" || !person(by):
		return false
	case slices.Contains(p.Approvers, by):
		return false
	case fourEyes && by == p.RequestedBy:
		return false
	case len(approvers) > 0 && !slices.Contains(approvers, by):
		return false
	}
	return true
}

// sealedThroughoutBy reports whether every seal of rec carries a valid
// signature by key: a record another bot key made, untouched since.
func (rec Record) sealedThroughoutBy(key string) bool {
	if !rec.Proposal.selfSigned(proposalContext) {
		return false
	}
	for _, s := range rec.Decisions {
		if s.Key != key || !s.selfSigned(decisionContext) {
			return false
		}
	}
	return true
}
