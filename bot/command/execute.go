package command

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/bot/approval"
	"github.com/hcpbot/hcpbot/bot/chatops"
)

// dispatch queues p's request for the agent of p.Source and waits up to
// Timeout for its result, mapping it back onto actions' sentinel errors;
// without a result by then the error wraps actions.ErrQueued.
func (a *Changes) dispatch(ctx context.Context, p approval.Proposal) (actions.Result, error) {
	if err := a.send(ctx, p); err != nil {
		if errors.Is(err, actions.ErrNotSent) {
			return actions.Result{}, fmt.Errorf("%w: %w", actions.ErrQueued, err)
		}
		return actions.Result{}, err
	}
	wait := a.Timeout
	if wait <= 0 {
		wait = DefaultResultWait
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	r, err := a.Queue.Wait(wctx, p.Source, p.ID)
	if err != nil {
		return actions.Result{}, err
	}
	return r.Outcome()
}

// send submits p's request with the approval it carries out, valid until
// p's deadline (DecidedAt + actions.QueueHorizon, the same in every copy).
func (a *Changes) send(ctx context.Context, p approval.Proposal) error {
	if a.Queue == nil {
		return fmt.Errorf("%w: no action queue configured", actions.ErrInternal)
	}
	att, err := p.Attestation()
	if err != nil {
		return err
	}
	return a.Queue.Submit(ctx, a.Signer, p.Source, p.Request, att, deadline(p))
}

// follow waits for the result of queued proposal p until its deadline
// (plus actions.ResultGrace), records it and posts the outcome with
// later (when set). A proposal still without a result then is marked
// failed: the agent refuses it after its deadline, so it will not run.
func (a *Changes) follow(ctx context.Context, p approval.Proposal, user string, later chatops.LaterFunc) {
	wctx, cancel := context.WithDeadline(ctx, deadline(p).Add(actions.ResultGrace))
	defer cancel()
	r, err := a.Queue.Wait(wctx, p.Source, p.ID)
	if err != nil && ctx.Err() != nil {
		// Stopping (the process shuts down): whoever runs the recovery
		// sweep next records it.
		return
	}
	var res actions.Result
	switch {
	case err != nil:
		err = fmt.Errorf("%w: %s: not picked up before %s", ErrNoAgent, p.Source, deadline(p).UTC().Format(time.RFC3339))
	default:
		res, err = r.Outcome()
	}
	rp, rerr := approval.Record(ctx, a.Store, p, res, err)
	if errors.Is(rerr, approval.ErrWrongState) {
		// Recorded by someone else (the recovery sweep of a replica).
		rp, rerr = a.Store.Get(ctx, p.ID)
		if rerr == nil && rp.State == approval.StateExecuted {
			err = nil
		}
	}
	a.Log.Info().Str("action", p.ID).Str("state", string(rp.State)).AnErr("outcome", err).Msg("queued action answered")
	if later != nil {
		if rerr != nil && err == nil {
			err = rerr
		}
		later(a.outcome(ctx, rp, user, err))
	}
}

// startFollow runs follow for p unless this process already waits for
// its result.
func (a *Changes) startFollow(ctx context.Context, p approval.Proposal, user string, later chatops.LaterFunc) {
	a.mu.Lock()
	if a.following[p.ID] {
		a.mu.Unlock()
		return
	}
	if a.following == nil {
		a.following = map[string]bool{}
	}
	a.following[p.ID] = true
	a.mu.Unlock()
	go func() {
		defer func() {
			a.mu.Lock()
			delete(a.following, p.ID)
			a.mu.Unlock()
		}()
		a.follow(ctx, p, user, later)
	}()
}

// deadline is when the agent stops accepting p's request.
func deadline(p approval.Proposal) time.Time { return p.DecidedAt.Add(actions.QueueHorizon) }

// DefaultRecoveryInterval is how often RunRecovery looks for approved
// proposals without a recorded outcome.
const DefaultRecoveryInterval = 30 * time.Second

// RunRecovery finds approved proposals without a recorded outcome, at
// once and then every interval until ctx ends: those whose result is in
// the results bucket are recorded; those still within their deadline
// are sent again (a bot stopped right after the approval never sent
// them); those past it are marked failed. Every replica may run it: a
// request sent again is dropped by the stream's de-duplication (its
// message id is the action id), the agent answers a request it already
// ran from its recorded result, and the recording is a compare-and-set
// that one caller wins. So each action runs at most once, and none is
// left behind by a replica that died.
func (a *Changes) RunRecovery(ctx context.Context, interval time.Duration) error {
	if interval <= 0 {
		return fmt.Errorf("bot: recovery interval %v must be positive", interval)
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		a.recover(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (a *Changes) recover(ctx context.Context) {
	ps, err := a.Store.Approved(ctx)
	if err != nil && ctx.Err() == nil {
		a.Log.Warn().Err(err).Msg("recovery: cannot list approved proposals")
	}
	now := time.Now()
	for _, p := range ps {
		log := a.Log.With().Str("action", p.ID).Str("source", p.Source).Logger()
		r, err := a.Queue.Result(ctx, p.Source, p.ID)
		switch {
		case err == nil:
			res, outcome := r.Outcome()
			_, rerr := approval.Record(ctx, a.Store, p, res, outcome)
			log.Info().AnErr("outcome", outcome).AnErr("record", rerr).Msg("recovery: result recorded")
		case !errors.Is(err, actions.ErrNoResult):
			log.Warn().Err(err).Msg("recovery: cannot read the result")
		case now.After(deadline(p).Add(actions.ResultGrace)):
			_, rerr := approval.Record(ctx, a.Store, p, actions.Result{},
				fmt.Errorf("%w: %s: not picked up before %s", ErrNoAgent, p.Source, deadline(p).UTC().Format(time.RFC3339)))
			log.Warn().AnErr("record", rerr).Msg("recovery: not picked up before its deadline; marked failed")
		case now.Before(deadline(p)):
			if err := a.send(ctx, p); err != nil {
				log.Warn().Err(err).Msg("recovery: request not sent")
				continue
			}
			log.Debug().Msg("recovery: request sent again (dropped as a duplicate if queued or run)")
			// Its result is recorded as soon as it comes.
			a.startFollow(ctx, p, p.DecidedBy, nil)
		}
	}
}
