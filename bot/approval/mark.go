package approval

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/redact"
)

// Transitions after a decision: expiry, and what the agent reported
// (executed, failed, rolled back). Each happens once, across replicas.

// Expire marks every pending proposal past its expiry at now as expired
// and audits each; it returns how many it expired. Bot replicas may run it
// concurrently: each proposal is expired once.
func (s *Store) Expire(ctx context.Context, now time.Time) (int, error) {
	lister, err := s.kv.ListKeys(ctx)
	if err != nil {
		return 0, fmt.Errorf("approval: list proposals: %w", err)
	}
	defer func() { _ = lister.Stop() }()
	n := 0
	var errs []error
	for id := range lister.Keys() {
		expired := false
		p, err := s.update(ctx, id, func(p *Proposal) (bool, error) {
			expired = false // only the last call's verdict was written
			if !p.Expired(now) {
				return false, nil
			}
			p.State, p.DecidedAt, p.DecidedBy = StateExpired, now.UTC(), ""
			expired = true
			return true, nil
		})
		switch {
		case errors.Is(err, ErrNotFound):
			continue // aged out meanwhile
		case err != nil:
			errs = append(errs, err)
			continue
		case !expired:
			continue
		}
		n++
		if err := s.record(ctx, p, audit.KindExpired, "", now, nil); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return n, fmt.Errorf("approval: expire: %w", err)
	}
	return n, nil
}

// MarkExecuted records that the approved proposal id was carried out with
// res. It fails with ErrWrongState unless the proposal is approved, so a
// result reported twice is recorded once.
func (s *Store) MarkExecuted(ctx context.Context, id string, res actions.Result) (Proposal, error) {
	now := s.now()
	p, err := s.update(ctx, id, func(p *Proposal) (bool, error) {
		if p.State != StateApproved {
			return false, fmt.Errorf("%w: %s is %s, not %s", ErrWrongState, id, p.State, StateApproved)
		}
		p.State, p.Result, p.ExecutedAt = StateExecuted, &res, now.UTC()
		return true, nil
	})
	if err != nil {
		return p, fmt.Errorf("approval: mark executed: %w", err)
	}
	return p, s.record(ctx, p, audit.KindExecuted, p.DecidedBy, now, func(r *audit.Record) {
		r.Summary = res.Summary
		r.Diff = res.Diff
		r.Result = string(res.Outcome)
	})
}

// MarkFailed records that the approved proposal id could not be carried
// out, with the reason and the result if there is one. ErrWrongState as
// for MarkExecuted.
func (s *Store) MarkFailed(ctx context.Context, id, reason string, res *actions.Result) (Proposal, error) {
	now := s.now()
	p, err := s.update(ctx, id, func(p *Proposal) (bool, error) {
		if p.State != StateApproved {
			return false, fmt.Errorf("%w: %s is %s, not %s", ErrWrongState, id, p.State, StateApproved)
		}
		// Error texts quote proxy URLs; the bucket is read back into chat.
		p.State, p.Reason, p.Result = StateFailed, redact.RedactText(reason), res
		return true, nil
	})
	if err != nil {
		return p, fmt.Errorf("approval: mark failed: %w", err)
	}
	return p, s.record(ctx, p, audit.KindFailed, p.DecidedBy, now, func(r *audit.Record) {
		r.Summary, _ = describe(p.Request)
		r.Reason = reason
		if res != nil {
			r.Result, r.Diff = string(res.Outcome)+": "+res.Summary, res.Diff
		}
	})
}

// MarkRolledBack records that the executed proposal id was undone by
// userID with res (the rollback's result). ErrWrongState unless executed.
func (s *Store) MarkRolledBack(ctx context.Context, id, userID string, res actions.Result) (Proposal, error) {
	now := s.now()
	p, err := s.update(ctx, id, func(p *Proposal) (bool, error) {
		if p.State != StateExecuted {
			return false, fmt.Errorf("%w: %s is %s, not %s", ErrWrongState, id, p.State, StateExecuted)
		}
		// Result keeps the original execution (and its Undo); the
		// rollback's own result goes to the audit trail.
		p.State, p.RolledBackBy, p.RolledBackAt = StateRolledBack, userID, now.UTC()
		return true, nil
	})
	if err != nil {
		return p, fmt.Errorf("approval: mark rolled back: %w", err)
	}
	return p, s.record(ctx, p, audit.KindRolledBack, userID, now, func(r *audit.Record) {
		r.Summary, r.Diff, r.Result = res.Summary, res.Diff, string(res.Outcome)
	})
}
