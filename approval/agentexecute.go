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

// execute runs p's change within its deadline. A transient failure before
// the deadline hands the request back; past it, Observe says what the
// cluster holds.
func (a *agent) execute(ctx context.Context, p Proposal, x Executor, as string) (Result, error) {
	log := a.log.With().Str("action", p.ID).Str("type", string(p.Change.Type)).Str("cluster", p.Change.Cluster.String()).
		Str("requestedBy", p.RequestedBy).Strs("approvers", p.Approvers).Str("as", as).Logger()
	xctx, cancel := context.WithTimeout(ctx, actions.ExecuteTimeout)
	defer cancel()
	// Nobody waits for the answer after the deadline: stop rather than
	// change the cluster behind the user's back.
	xctx, cancelD := context.WithDeadline(xctx, p.Deadline())
	defer cancelD()
	chaosPoint(ChaosBeforeWrite, p.ID)
	res, err := x.Execute(xctx, p.Change)
	if err == nil {
		chaosPoint(ChaosAfterWrite, p.ID)
	}
	switch {
	case err == nil:
	case ctx.Err() != nil:
		// Leadership ended: the next leader runs it again.
		return Result{}, fmt.Errorf("%w: leadership ended: %w", errHandBack, err)
	case a.transient(err) && a.now().Before(p.Deadline()):
		log.Warn().Err(err).Msg("transient failure: handed back")
		return Result{}, fmt.Errorf("%w: %w", errHandBack, err)
	case a.transient(err) || errors.Is(err, context.DeadlineExceeded):
		return a.observe(ctx, p, x, as, err), nil
	case !nothingWritten(err):
		// An error that does not say the write was refused (a cut
		// answer, an unknown failure) may follow a write that landed:
		// what the cluster holds is the answer.
		log.Warn().Err(err).Msg("execution ended in an error that does not say whether it wrote: observing the cluster")
		return a.observe(ctx, p, x, as, err), nil
	default:
		r := failure(p.ID, err)
		r.Proposal, r.At = p.digest, a.now().UTC()
		log.Warn().Str("code", string(r.Code)).Str("error", r.Error).Msg("action failed")
		a.m.requests.WithLabelValues("failed").Inc()
		return r, nil
	}
	log.Info().Str("outcome", string(res.Outcome)).Msg("action executed")
	a.m.requests.WithLabelValues("executed").Inc()
	return a.succeeded(ctx, p, res), nil
}

// nothingWritten reports whether err is one of the executor's definite
// answers, which say the change was not written (it stopped before
// writing, or the API server refused the write). Anything else — the API
// server's refusal of one of several writes included — is checked
// against the cluster.
func nothingWritten(err error) bool {
	for _, d := range []error{actions.ErrConflict, actions.ErrInvalid, actions.ErrRejected, actions.ErrPortCollision,
		actions.ErrNotKubeVirt, actions.ErrKubeconfig} {
		if errors.Is(err, d) {
			return true
		}
	}
	return false
}

// observe answers, after the deadline, what the cluster holds: the change
// in place (applied by an earlier attempt), or not applied, or unknown
// when even reading fails. x is the executor the attempts wrote with and
// as the identity ("": the agent's own): a change found in place is
// reported as theirs only if x, acting as them, finds it theirs to make
// (actions.Executor.Observe dry-runs it as them).
func (a *agent) observe(ctx context.Context, p Proposal, x Executor, as string, cause error) Result {
	octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	if x == nil {
		x = a.cfg.Executor
	}
	res, inPlace, err := x.Observe(octx, p.Change)
	var r Result
	switch {
	case err != nil && as != "" && errors.Is(err, actions.ErrRejected):
		// Refused as them (a dry run of what was found): not theirs.
		r = failure(p.ID, fmt.Errorf("what the cluster holds is not %s's change to report: %w; %w", as, err, cause))
	case err != nil:
		r = failure(p.ID, fmt.Errorf("%w: %w; reading the cluster afterwards failed too: %w", ErrUnknown, cause, err))
	case inPlace:
		if res.As == "" {
			res.As = as
		}
		return a.succeeded(ctx, p, res)
	case a.now().Before(p.Deadline()):
		r = failure(p.ID, fmt.Errorf("not applied: %w", cause))
	default:
		r = failure(p.ID, fmt.Errorf("not applied before its deadline %s: %w", p.Deadline().UTC().Format(time.RFC3339), cause))
	}
	r.Proposal, r.At = p.digest, a.now().UTC()
	a.m.requests.WithLabelValues("failed").Inc()
	return r
}

// succeeded is the answer to an executed change, recorded on the cluster
// (an Event on the object) and on the agent's audit subject.
func (a *agent) succeeded(ctx context.Context, p Proposal, res *actions.Result) Result {
	r := Result{ID: p.ID, Proposal: p.digest, Change: res, RequestedBy: p.RequestedBy, Approvers: p.Approvers, At: a.now().UTC()}
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	if err := a.cfg.Executor.RecordEvent(ectx, p.Change, res, actions.Actors{RequestedBy: p.RequestedBy, Approvers: p.Approvers, As: res.As}); err != nil {
		a.log.Warn().Err(err).Str("action", p.ID).Msg("execution not recorded as a Kubernetes Event")
	}
	if a.cfg.Trail != nil {
		rec := audit.Record{
			ID: p.ID + ".executed.agent", Time: r.At, Actor: p.DecidedBy, Kind: audit.KindExecuted, ActionID: p.ID,
			Cluster: p.Change.Cluster.String(), Source: p.Source,
			Summary: res.Summary, Diff: res.Diff, Result: string(res.Outcome),
			Reason: fmt.Sprintf("requested by %s, approved by %v", p.RequestedBy, p.Approvers),
		}
		if res.As != "" {
			rec.Reason += ", written as Kubernetes user " + res.As
		}
		if err := a.cfg.Trail.Append(ectx, rec); err != nil {
			a.log.Warn().Err(err).Str("action", p.ID).Msg("execution not audited by the agent")
		}
	}
	return r
}

// ackRefusal audits a refusal that is answered by nothing new (the
// request is acknowledged as it is): nil, so process acknowledges.
func (a *agent) ackRefusal(ctx context.Context, req Request, err error) error {
	a.refuse(ctx, req, Proposal{}, err)
	return nil
}

// refuse logs and audits a request the agent will not run.
func (a *agent) refuse(ctx context.Context, req Request, p Proposal, cause error) {
	a.m.requests.WithLabelValues("refused").Inc()
	code := CodeOf(cause)
	reason := redact.RedactText(cause.Error())
	// The claimed ids are attacker-controlled: logged as data, bounded.
	a.log.Warn().Str("action", truncate(req.ID)).Str("code", string(code)).Str("reason", reason).Msg("action request refused")
	if a.cfg.Trail == nil {
		return
	}
	a.mu.Lock()
	if !a.auditLimit.Allow() {
		a.unaudited++
		a.mu.Unlock()
		return
	}
	if a.unaudited > 0 {
		reason = fmt.Sprintf("%s (and %d more refusals not audited one by one)", reason, a.unaudited)
		a.unaudited = 0
	}
	a.mu.Unlock()
	id := req.ID
	if !idPattern.MatchString(id) {
		// Only an id the bot could have issued is kept as one.
		id = ""
	}
	r := audit.Record{
		ID: audit.NewID(), Time: a.now(), Actor: p.DecidedBy, Kind: audit.KindRefused, ActionID: id,
		Summary: RefusedByAgent + " (" + string(code) + ")", Reason: reason,
	}
	if p.ID != "" {
		r.Cluster = p.Change.Cluster.String()
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := a.cfg.Trail.Append(actx, r); err != nil {
		a.log.Error().Err(err).Msg("refused action request not audited")
	}
}

// RefusedByAgent starts the summary of every refusal the agent audits.
const RefusedByAgent = "action request refused by the agent"
