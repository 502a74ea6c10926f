package approval

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hcpbot/hcpbot/actions"
)

// Dispatcher sends an approved proposal's request to the agent of its
// source and returns the agent's result, or an error wrapping
// actions.ErrQueued when the request is queued without a result yet. The
// bot implements it with actions.Client; this package never touches a
// cluster.
type Dispatcher interface {
	Dispatch(ctx context.Context, p Proposal) (actions.Result, error)
}

// DispatcherFunc adapts a function to Dispatcher.
type DispatcherFunc func(ctx context.Context, p Proposal) (actions.Result, error)

// Dispatch implements Dispatcher.
func (f DispatcherFunc) Dispatch(ctx context.Context, p Proposal) (actions.Result, error) {
	return f(ctx, p)
}

// markTimeout bounds recording the outcome once the action has run. It is
// counted from the end of the dispatch, not from ctx: the caller's context
// may be spent by then, yet the outcome must be recorded.
const markTimeout = 15 * time.Second

// ApproveAndRun approves proposal id as userID (at the store's clock) and,
// only if this call won the approval, dispatches it and records it as
// executed or failed. Concurrent calls for one proposal dispatch it at
// most once; the losers return ErrAlreadyDecided (or another refusal)
// without dispatching.
//
// An approval that could not be audited is not run: the proposal is
// marked failed instead, so no cluster change happens off the record.
//
// A dispatch that returns actions.ErrQueued leaves the proposal approved:
// the request is queued for the agent, and whoever reads its result later
// records it (Record).
func ApproveAndRun(ctx context.Context, s *Store, d Dispatcher, id, userID string, opts ...DecideOption) (Proposal, error) {
	p, err := s.Approve(ctx, id, userID, s.now(), opts...)
	if err != nil {
		if errors.Is(err, ErrAudit) && p.State == StateApproved {
			mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), markTimeout)
			defer cancel()
			fp, ferr := s.MarkFailed(mctx, id, "not run: the approval could not be audited", nil)
			if ferr != nil {
				return p, errors.Join(err, ferr)
			}
			return fp, err
		}
		return p, err
	}

	res, derr := d.Dispatch(ctx, p)
	if errors.Is(derr, actions.ErrQueued) {
		// Sent (or to be re-sent by the recovery sweep) and not answered
		// yet: it stays approved until its result is recorded.
		return p, fmt.Errorf("approval: run %s: %w", id, derr)
	}
	return Record(ctx, s, p, res, derr)
}

// Record stores the outcome of approved proposal p's execution: executed
// with res, or failed with derr (and res if it carries anything). It is
// counted from now, not from ctx, whose deadline may be spent. Of several
// callers recording one proposal (the approving replica, the recovery
// sweep of any replica) one succeeds; the others get ErrWrongState.
//
// A dispatch error does not prove that nothing changed (the agent may have
// applied the request and the reply been lost); the proposal is marked
// failed with the error, and re-running the same request is safe because
// actions are idempotent.
func Record(ctx context.Context, s *Store, p Proposal, res actions.Result, derr error) (Proposal, error) {
	id := p.ID
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), markTimeout)
	defer cancel()
	if derr != nil {
		var resp *actions.Result
		if res.ActionID != "" || res.Outcome != "" {
			resp = &res
		}
		fp, ferr := s.MarkFailed(mctx, id, derr.Error(), resp)
		err := fmt.Errorf("approval: run %s: %w", id, derr)
		if ferr != nil {
			return p, errors.Join(err, ferr)
		}
		return fp, err
	}
	ep, err := s.MarkExecuted(mctx, id, res)
	if err != nil {
		if errors.Is(err, ErrAudit) {
			return ep, err
		}
		return p, err
	}
	return ep, nil
}
