package approval

import (
	"context"
	"errors"
	"fmt"
	"slices"
)

// Authorize reports whether userID may approve, by the policy (nil when
// allowed; ErrNotApprover or ErrGroupLookup otherwise). Approve checks it
// again; this lets a caller refuse before creating a proposal at all.
func (s *Store) Authorize(ctx context.Context, userID string) error {
	return s.authorize(ctx, userID)
}

// FourEyes reports whether the policy requires two people: a requester
// and a different approver.
func (s *Store) FourEyes() bool { return s.policy.FourEyes }

// authorize checks userID against the policy, fail-closed.
func (s *Store) authorize(ctx context.Context, userID string) error {
	if userID == "" {
		return ErrNotApprover
	}
	if slices.Contains(s.policy.Approvers, userID) {
		return nil
	}
	var errs []error
	for _, g := range s.policy.ApproverGroups {
		members, err := s.groups.GroupMembers(ctx, g)
		if err != nil {
			// Another group may still grant it; only if none does is
			// the failure the answer.
			errs = append(errs, fmt.Errorf("group %s: %w", g, err))
			continue
		}
		if slices.Contains(members, userID) {
			return nil
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrGroupLookup, errors.Join(errs...))
	}
	return ErrNotApprover
}
