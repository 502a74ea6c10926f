package approval

import "context"

// Authorize reports whether userID may approve, by the policy (nil when
// allowed; ErrNotApprover or ErrGroupLookup otherwise). Approve checks it
// again; this lets a caller refuse before creating a proposal at all.
func (s *Store) Authorize(ctx context.Context, userID string) error {
	return s.authorize(ctx, userID)
}

// FourEyes reports whether the policy requires two people: a requester
// and a different approver.
func (s *Store) FourEyes() bool { return s.policy.FourEyes }
