package approval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/approval/wire"
	"github.com/hcpbot/hcpbot/identity"
)

// process decides msg: the results key to answer under (none for what
// cannot name one) and the answer, or errHandBack.
func (a *agent) process(ctx context.Context, msg jetstream.Msg) (string, Result, error) {
	msgID := msg.Headers().Get(jetstream.MsgIDHeader)
	// A request the agent cannot verify as the bot's is audited (and
	// shown in Slack by the bot's refusal notices), never answered in the
	// results bucket: an answer there under a pending proposal's id would
	// let whoever can publish on the subject decide that proposal's
	// outcome. What the bot did send and the agent refuses is answered,
	// naming the terms the order named, which the bot checks.
	unverified := func(req Request, err error) (string, Result, error) {
		a.refuse(ctx, req, Proposal{}, err)
		if key, kerr := wire.RefusalKey(a.cfg.Source, wire.ActionOf(msgID)); kerr == nil {
			r := failure(req.ID, err)
			r.Order, r.At = orderDigest(msg.Data()), a.now().UTC()
			if data, merr := json.Marshal(r); merr == nil {
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
				defer cancel()
				if _, perr := a.results.Put(rctx, key, data); perr != nil {
					a.log.Warn().Err(perr).Msg("refusal not recorded for its sender")
				}
			}
		}
		return "", Result{}, nil
	}
	data := msg.Data()
	if len(data) > MaxRequestBytes {
		return unverified(Request{}, fmt.Errorf("%w: request of %d bytes exceeds %d", ErrUnauthorized, len(data), MaxRequestBytes))
	}
	req, stale, err := a.openRequest(data, msgID)
	if err != nil {
		return unverified(req, err)
	}
	key, err := wire.ResultKey(a.cfg.Source, req.ID)
	if err != nil {
		return unverified(req, fmt.Errorf("%w: %w", ErrUnauthorized, err))
	}
	refuse := func(req Request, p Proposal, err error) (string, Result, error) {
		a.refuse(ctx, req, p, err)
		r := failure(req.ID, err)
		r.Proposal, r.At = req.Proposal, a.now().UTC()
		return key, r, nil
	}
	log := a.log.With().Str("action", req.ID).Logger()

	// Answered already? The first verified answer stands.
	old, _, err := wire.Get(ctx, a.results, key)
	var running *Result
	unseen := errors.Is(err, wire.ErrNoResult)
	switch {
	case unseen:
	case err != nil:
		return "", Result{}, fmt.Errorf("%w: read the results bucket: %w", errHandBack, err)
	default:
		prev, derr := decodeResult(old)
		switch {
		case derr != nil || prev.Proposal == "":
			// Not an answer to a verified request (an agent before this
			// one wrote such refusals): replaced.
		case prev.Proposal != req.Proposal:
			return "", Result{}, a.ackRefusal(ctx, req, fmt.Errorf("%w: action %s was answered for other terms; this is a replay", ErrUnauthorized, req.ID))
		case prev.Running:
			// Begun by an agent that died (or by this one, before a
			// hand-back): run again; the executor finds its own change.
			running = &prev
		default:
			log.Info().Msg("action already answered: acknowledged without running again")
			a.m.requests.WithLabelValues("answered").Inc()
			return "", Result{}, nil
		}
	}

	// A stale order of a request begun earlier goes on to Permit, which
	// finds it too late: what the cluster holds is then reported.
	rec, err := store{kv: a.proposals}.get(ctx, req.ID)
	switch {
	case errors.Is(err, ErrNotFound):
		return refuse(req, Proposal{}, fmt.Errorf("%w: proposal %s is not in the approval store", ErrUnauthorized, req.ID))
	case errors.Is(err, ErrForged), errors.Is(err, ErrLegacy):
		// A record of the shape before seals holds no approval: the bot
		// sends no request for one, so it was rewritten since.
		return refuse(req, Proposal{}, fmt.Errorf("%w: %w", ErrUnauthorized, err))
	case err != nil && stale != nil && running == nil:
		// Handed back until the order is too old to run: then refused,
		// or the agent's queue would wait behind it until the stream
		// drops it.
		return refuse(req, Proposal{}, fmt.Errorf("%w; the approval store could not be read: %w", stale, err))
	case err != nil:
		return "", Result{}, fmt.Errorf("%w: read the approval store: %w", errHandBack, err)
	}
	now := a.now()
	p, err := Permit(rec, a.cfg.Trust, now)
	switch {
	case errors.Is(err, ErrTooLate) && running != nil:
		// Begun before the deadline: say what the cluster holds.
		// The earlier attempt wrote, if at all, as the actor: the same
		// approver's identity by the same map.
		x, as, _ := a.actor(p)
		return key, a.observe(ctx, p, x, as, fmt.Errorf("%w: the earlier attempt was cut off", ErrInternal)), nil
	case errors.Is(err, ErrTooLate):
		return refuse(req, p, err)
	case errors.Is(err, ErrNotApproved) && a.premature(rec):
		// Undecided by its own terms: the bot sends no such request, so
		// it answers nothing — its genuine request, once approved, must
		// not find a refusal recorded already.
		a.refuse(ctx, req, p, fmt.Errorf("%w: %w", ErrUnauthorized, err))
		return "", Result{}, nil
	case err != nil:
		return refuse(req, p, fmt.Errorf("%w: %w", ErrUnauthorized, err))
	case p.digest != req.Proposal:
		return refuse(req, p, fmt.Errorf("%w: the request names other terms than the approval store holds for %s", ErrUnauthorized, req.ID))
	case stale != nil && running == nil:
		return refuse(req, p, stale)
	}
	if p.Change.Type == actions.TypeRollback {
		if err := a.checkUndo(ctx, p); err != nil {
			if errors.Is(err, errHandBack) {
				return "", Result{}, err
			}
			return refuse(req, p, err)
		}
	}
	x, as, err := a.actor(p)
	if err != nil {
		return refuse(req, p, err)
	}
	if running == nil {
		// Reviewed before the first attempt only: a re-run finds what
		// that attempt was let to write.
		switch err := a.approversMay(ctx, p); {
		case errors.Is(err, errHandBack) && stale == nil:
			return "", Result{}, err
		case err != nil:
			return refuse(req, p, err)
		}
	}
	if running == nil {
		mark, _ := json.Marshal(Result{ID: p.ID, Proposal: p.digest, Running: true, At: now.UTC()})
		switch _, err := a.results.Create(ctx, key, mark); {
		case errors.Is(err, jetstream.ErrKeyExists) && unseen:
			// The key holds what the read did not show (a direct get
			// answered by a replica behind the leader): an answer
			// recorded, whose request is redelivered, must not run
			// again. Read again at the redelivery.
			return "", Result{}, fmt.Errorf("%w: the results bucket holds %s, which its read did not show", errHandBack, truncate(key))
		case err != nil && !errors.Is(err, jetstream.ErrKeyExists):
			return "", Result{}, fmt.Errorf("%w: mark running: %w", errHandBack, err)
		}
	}
	res, err := a.execute(ctx, p, x, as)
	return key, res, err
}

// actor is the executor p's change is made with: as the Kubernetes
// identity of the approver whose sealed approval completed the decision
// (the agent's own map, the bot's sealed hints), with the action, the
// requester and every approver in the API server's audit log; as the
// agent itself when no identity is configured. With identities required
// — by the agent's configuration or by the bot's, sealed with the
// approval (Decision.AsApprover): the stricter applies — an approver
// without one gets nothing done.
func (a *agent) actor(p Proposal) (Executor, string, error) {
	m := a.cfg.Identities
	d, _ := completingDecision(p)
	required := m.Required || d.AsApprover
	if m.Empty() && !required {
		return a.cfg.Executor, "", nil
	}
	id, err := actingIdentity(m, a.cfg.Source, p.DecidedBy, d.Via, d.Email)
	switch {
	case errors.Is(err, ErrNoIdentity) && !required:
		return a.cfg.Executor, "", nil
	case errors.Is(err, ErrNoIdentity) && !m.Required:
		return nil, "", fmt.Errorf("%w: the bot maps %s and requires acting as them, and this agent maps no identity for them (its identities section differs from the bot's); it does not make changes with its own rights", err, p.DecidedBy)
	case err != nil:
		return nil, "", fmt.Errorf("%w; identities.required: the agent does not make changes with its own rights", err)
	case a.cfg.As == nil:
		return nil, "", fmt.Errorf("%w: this agent cannot act as %s", ErrNoIdentity, id)
	}
	x, err := a.cfg.As(id, identity.Extra(p.ID, p.RequestedBy, p.Approvers))
	if err != nil {
		return nil, "", fmt.Errorf("act as %s: %w", id, err)
	}
	return x, id.User, nil
}

// approversMay asks the API server, for every approver counted on p but
// the one the change is made as, whether their identity may make it: an
// approval whose check went unanswered counted with a note that RBAC
// decides, and only the completing approver's is judged by the write
// itself. An approver without an identity the agent acts as
// (identities not required for them) is not reviewed; one the map cannot
// resolve though required is refused, as actor does.
func (a *agent) approversMay(ctx context.Context, p Proposal) error {
	m := a.cfg.Identities
	if a.cfg.Access == nil {
		return nil
	}
	for _, d := range p.Decisions {
		if d.Verdict != VerdictApprove || d.By == p.DecidedBy || !slices.Contains(p.Approvers, d.By) {
			continue
		}
		id, err := actingIdentity(m, a.cfg.Source, d.By, d.Via, d.Email)
		switch {
		case errors.Is(err, ErrNoIdentity) && !m.Required && !d.AsApprover:
			continue
		case err != nil:
			return fmt.Errorf("the approval of %s: %w; it does not count", d.By, err)
		}
		actx, cancel := context.WithTimeout(ctx, checkTimeout)
		missing, err := a.cfg.Access(actx, id, p.Change)
		cancel()
		switch {
		case len(missing) > 0:
			// A definite no, whatever could not be asked besides.
			return fmt.Errorf("%w: the approval of %s does not count: their Kubernetes identity %s lacks %s", ErrNotPermitted, d.By, id, strings.Join(missing, "; "))
		case err != nil && p.Change.Type == actions.TypeRollback && p.Change.Rollback.Undo.Type == actions.TypeExposeNodePort:
			// An exposure's rollback closes a port: a review that cannot
			// be made (the hosted cluster unreachable) does not hold it
			// up; the completing approver's writes are still made as them.
			a.log.Warn().Err(err).Str("action", p.ID).Str("approver", d.By).Msg("access of a co-approver of a rollback not reviewed")
		case err != nil:
			return fmt.Errorf("%w: review the access of %s (%s): %w", errHandBack, d.By, id, err)
		}
	}
	return nil
}

// premature reports whether rec is still undecided by its own terms (the
// agent's stricter floor aside).
func (a *agent) premature(rec Record) bool {
	p, err := verify(rec, Trust{Keys: a.cfg.Trust.Keys})
	return err == nil && p.State == StatePending
}

// openRequest verifies the bot's order: a trusted key, its signature,
// for this agent, under its own action id. An order too old is not run
// (stale says why), but it still lets the agent report on an execution
// it began before.
func (a *agent) openRequest(data []byte, msgID string) (req Request, stale, err error) {
	var s Seal
	if err := decodeStrict(data, &s); err != nil {
		return Request{}, nil, fmt.Errorf("%w: not a sealed request: %w", ErrUnauthorized, err)
	}
	if len(a.cfg.Trust.Keys) == 0 {
		return req, nil, fmt.Errorf("%w: this agent trusts no signing key (agent.trustedKeys / --trusted-keys)", ErrUnauthorized)
	}
	if err := s.open(requestContext, a.cfg.Trust.Keys, &req); err != nil {
		return req, nil, fmt.Errorf("%w: %w", ErrUnauthorized, err)
	}
	now := a.now()
	skew := a.cfg.Trust.MaxSkew
	if skew <= 0 {
		skew = time.Minute
	}
	switch {
	case req.Source != a.cfg.Source:
		return req, nil, fmt.Errorf("%w: request for management cluster %q, this is %q", ErrUnauthorized, req.Source, a.cfg.Source)
	case msgID != wire.MessageID(req.ID, data):
		// The bot sends every request under the id its bytes make; a
		// copy under another message id slipped past the stream's
		// de-duplication.
		return req, nil, fmt.Errorf("%w: request %s sent under message id %q: a replay", ErrUnauthorized, req.ID, truncate(msgID))
	case req.IssuedAt.After(now.Add(skew)):
		return req, nil, fmt.Errorf("%w: request sealed in the future (%s)", ErrUnauthorized, req.IssuedAt.UTC().Format(time.RFC3339))
	case now.Sub(req.IssuedAt) > MaxRequestAge:
		return req, fmt.Errorf("%w: request sealed %s ago, more than %s: a replay", ErrUnauthorized, now.Sub(req.IssuedAt).Round(time.Second), MaxRequestAge), nil
	}
	return req, nil, nil
}

// checkUndo holds a rollback to what this agent itself answered for the
// original action: whoever can write the approval store cannot choose
// what a rollback restores.
func (a *agent) checkUndo(ctx context.Context, p Proposal) error {
	undo := p.Change.Rollback.Undo
	key, err := wire.ResultKey(a.cfg.Source, undo.ActionID)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnauthorized, err)
	}
	data, _, err := wire.Get(ctx, a.results, key)
	switch {
	case errors.Is(err, wire.ErrNoResult):
		return fmt.Errorf("%w: this agent has no record of %s to roll back", ErrUnauthorized, undo.ActionID)
	case err != nil:
		return fmt.Errorf("%w: read the results bucket: %w", errHandBack, err)
	}
	orig, err := decodeResult(data)
	if err != nil || orig.ID != undo.ActionID || orig.Change == nil || orig.Change.Undo == nil || !reflect.DeepEqual(*orig.Change.Undo, undo) {
		return fmt.Errorf("%w: the rollback of %s restores other data than this agent recorded for it", ErrUnauthorized, undo.ActionID)
	}
	return nil
}
