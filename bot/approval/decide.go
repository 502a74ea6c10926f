package approval

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/redact"
)

// Decisions: Approve and Reject read the proposal once (open), check what
// never changes outside the CAS loop (cluster, seal, four-eyes, approver),
// then write the verdict in one compare-and-set.

type decideOptions struct {
	cluster *actions.ClusterRef
}

// DecideOption configures Approve and Reject.
type DecideOption func(*decideOptions)

// ExpectCluster refuses the decision with ErrWrongCluster unless the
// proposal acts on c. Callers pass the cluster of the thread or button the
// decision came from.
func ExpectCluster(c actions.ClusterRef) DecideOption {
	return func(o *decideOptions) { o.cluster = &c }
}

// open reads proposal id for a decision (Approve, Reject) and checks what
// every decision checks first: the cluster the caller expects. A proposal
// it returns with an error is the one read, for the refusal's audit.
func (s *Store) open(ctx context.Context, id string, opts []DecideOption) (Proposal, error) {
	var o decideOptions
	for _, opt := range opts {
		opt(&o)
	}
	p, err := s.get(ctx, id)
	if err != nil {
		return Proposal{}, err
	}
	if o.cluster != nil && *o.cluster != p.Request.Cluster {
		return p, fmt.Errorf("%w: %s is for %s, not %s", ErrWrongCluster, id, p.Request.Cluster, o.cluster)
	}
	return p, nil
}

// undecided refuses a decision on a proposal that is no longer pending;
// it runs inside the CAS loop, on the proposal as stored.
func undecided(p *Proposal) error {
	switch {
	case p.State == StateExpired:
		return ErrExpired
	case p.State.Decided():
		return fmt.Errorf("%w: %s by %s", ErrAlreadyDecided, p.State, p.DecidedBy)
	}
	return nil
}

// Approve approves proposal id as userID at now. Of concurrent calls for
// one proposal exactly one returns it approved; the rest fail with
// ErrAlreadyDecided. Refusals wrap ErrNotFound, ErrWrongCluster,
// ErrNotApprover, ErrOwnRequest, ErrExpired, ErrAlreadyDecided or
// ErrGroupLookup and are audited as "refused". A pending proposal past its
// expiry is marked expired here (and audited) as well as refused.
func (s *Store) Approve(ctx context.Context, id, userID string, now time.Time, opts ...DecideOption) (Proposal, error) {
	p, err := s.approve(ctx, id, userID, now, opts)
	if err != nil && !errors.Is(err, ErrAudit) {
		return p, s.refused(ctx, "approve", id, userID, now, p, err)
	}
	return p, err
}

func (s *Store) approve(ctx context.Context, id, userID string, now time.Time, opts []DecideOption) (Proposal, error) {
	p, err := s.open(ctx, id, opts)
	if err != nil {
		return p, err
	}
	// Checks on what never changes come first, outside the CAS loop: the
	// group lookup may be a slow API call.
	if s.sealer != nil {
		claims, err := p.Claims()
		if err != nil {
			return p, err
		}
		if err := actions.VerifyProposal([]string{s.sealer.PublicKey()}, claims, p.Seal); err != nil {
			return p, fmt.Errorf("%w: %w", ErrTampered, err)
		}
	}
	// Four-eyes before the approver check: it needs no group lookup, and
	// either way the requester cannot approve. The rule of the policy now
	// or of the proposal when it was made, whichever is stricter; a
	// requester that is not a person (the diagnosis) is no second pair of
	// eyes.
	if s.policy.FourEyes || p.FourEyes {
		switch {
		case userID == p.RequestedBy:
			return p, ErrOwnRequest
		case strings.HasPrefix(p.RequestedBy, actions.SystemRequesterPrefix):
			return p, fmt.Errorf("%w: requested by %s, not a person; propose it again", ErrOwnRequest, p.RequestedBy)
		}
	}
	if err := s.authorize(ctx, userID); err != nil {
		return p, err
	}
	// update may call the closure more than once; only the last call's
	// verdict was written.
	expired := false
	p, err = s.update(ctx, id, func(p *Proposal) (bool, error) {
		expired = false
		if err := undecided(p); err != nil {
			return false, err
		}
		if p.Expired(now) {
			p.State, p.DecidedAt, p.DecidedBy = StateExpired, now.UTC(), ""
			expired = true
			return true, ErrExpired
		}
		p.State, p.DecidedBy, p.DecidedAt = StateApproved, userID, now.UTC()
		return true, nil
	})
	if expired {
		if aerr := s.record(ctx, p, audit.KindExpired, "", now, nil); aerr != nil {
			return p, errors.Join(err, aerr)
		}
	}
	if err != nil {
		return p, err
	}
	return p, s.record(ctx, p, audit.KindApproved, userID, now, func(r *audit.Record) {
		r.Summary, r.Diff = describe(p.Request)
	})
}

// Reject rejects proposal id as userID with reason (stored and audited
// with credentials redacted). Approvers may reject,
// and so may the requester (withdrawing a proposal needs no second pair of
// eyes). Refusals and races are as for Approve.
func (s *Store) Reject(ctx context.Context, id, userID, reason string, now time.Time, opts ...DecideOption) (Proposal, error) {
	p, err := s.reject(ctx, id, userID, reason, now, opts)
	if err != nil && !errors.Is(err, ErrAudit) {
		return p, s.refused(ctx, "reject", id, userID, now, p, err)
	}
	return p, err
}

func (s *Store) reject(ctx context.Context, id, userID, reason string, now time.Time, opts []DecideOption) (Proposal, error) {
	p, err := s.open(ctx, id, opts)
	if err != nil {
		return p, err
	}
	if userID != p.RequestedBy {
		if err := s.authorize(ctx, userID); err != nil {
			return p, err
		}
	}
	p, err = s.update(ctx, id, func(p *Proposal) (bool, error) {
		if err := undecided(p); err != nil {
			return false, err
		}
		// Rejecting an expired but still pending proposal is allowed: the
		// outcome (not run) is the same and the reason is worth keeping.
		p.State, p.DecidedBy, p.DecidedAt, p.Reason = StateRejected, userID, now.UTC(), redact.RedactText(reason)
		return true, nil
	})
	if err != nil {
		return p, err
	}
	return p, s.record(ctx, p, audit.KindRejected, userID, now, func(r *audit.Record) {
		r.Summary, _ = describe(p.Request)
		r.Reason = reason
	})
}
