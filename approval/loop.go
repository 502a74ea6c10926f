package approval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/approval/wire"
	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/redact"
)

// The loop converges every approved proposal to a recorded outcome: chat
// handlers only decide and return; Run sends, follows, records, posts.

// DefaultSweepInterval is how often Run reads every proposal: approved
// ones that no replica follows are adopted (their approver's replica
// died), pending ones past their expiry expire, forged records are
// reported.
const DefaultSweepInterval = 30 * time.Second

// Polling of a followed proposal's result: after 5 ms, then twice as
// long each time up to 250 ms. An agent answers within tens to hundreds
// of milliseconds; a read is one KV get.
const (
	firstPoll = 5 * time.Millisecond
	maxPoll   = 250 * time.Millisecond
)

// lateAnswer is how long after its approval an answer can still come: a
// request leaves the stream after bus.ActionsMaxAge, so no agent starts
// it later, and one that started finishes within ResultGrace.
const lateAnswer = bus.ActionsMaxAge + ResultGrace

// flight is an approved proposal this replica follows to its outcome.
type flight struct {
	notify []func(Proposal)
	sent   time.Time
	// orders are the digests of the requests this replica sent: a refusal
	// of what the agent could not verify answers them only if it names one.
	orders []string
	poll   time.Duration
	next   time.Time
}

// follow makes this replica follow approved proposal id and wakes Run;
// notify, if set, gets the outcome.
func (f *Flow) follow(id string, notify func(Proposal)) {
	f.mu.Lock()
	fl := f.inflight[id]
	if fl == nil {
		fl = &flight{poll: firstPoll}
		f.inflight[id] = fl
	}
	if notify != nil {
		fl.notify = append(fl.notify, notify)
	}
	f.mu.Unlock()
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// Run converges until ctx ends. Every replica runs it: a request sent
// twice is dropped by the stream (its message id is the action id), the
// agent answers one it already ran from its recorded answer, and an
// outcome is recorded by one compare-and-set, whose winner alone posts
// it. So each approved change runs at most once and none is left behind
// by a replica that died.
func (f *Flow) Run(ctx context.Context) error {
	sweep := time.NewTicker(f.sweep)
	defer sweep.Stop()
	// Nothing approved here is followed yet: a replica that starts adopts
	// at once what its predecessor left.
	f.sweepOnce(ctx, true)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		timer.Reset(f.work(ctx))
		select {
		case <-ctx.Done():
			return nil
		case <-f.wake:
		case <-timer.C:
		case <-sweep.C:
			f.sweepOnce(ctx, false)
		}
	}
}

// work steps every followed proposal that is due and returns how long
// until the next one is.
func (f *Flow) work(ctx context.Context) time.Duration {
	now := f.now()
	f.mu.Lock()
	var due []string
	for id, fl := range f.inflight {
		if !fl.next.After(now) {
			due = append(due, id)
		}
	}
	f.mu.Unlock()
	for _, id := range due {
		if ctx.Err() != nil {
			return time.Hour
		}
		f.mu.Lock()
		fl := f.inflight[id]
		f.mu.Unlock()
		if f.step(ctx, id, fl) {
			f.mu.Lock()
			delete(f.inflight, id)
			f.mu.Unlock()
			continue
		}
		f.mu.Lock()
		fl.next = f.now().Add(fl.poll)
		fl.poll = min(2*fl.poll, maxPoll)
		f.mu.Unlock()
	}
	// fl.next is on the flow's clock, which need not be the machine's.
	wait, now := time.Hour, f.now()
	f.mu.Lock()
	for _, fl := range f.inflight {
		wait = min(wait, max(fl.next.Sub(now), 0))
	}
	f.mu.Unlock()
	return wait
}

// step moves followed proposal id on; done reports that it has its
// outcome (or nothing more can be done here).
func (f *Flow) step(ctx context.Context, id string, fl *flight) (done bool) {
	log := f.log.With().Str("action", id).Logger()
	rec, err := f.kv.get(ctx, id)
	switch {
	case errors.Is(err, ErrNotFound):
		return true
	case errors.Is(err, ErrLegacy):
		f.noteRewrite(ctx, id, rec, err)
		return true
	case err != nil:
		log.Debug().Err(err).Msg("cannot read the proposal yet")
		return false
	}
	p, err := f.read(ctx, id, rec)
	if err != nil {
		return true
	}
	now := f.now()
	switch {
	case p.State == StateApproved:
	case p.State == StateFailed && p.Code == CodeNoAnswer && now.Before(p.DecidedAt.Add(lateAnswer)):
		// Marked unanswered; an agent may still answer (it started just
		// before dying): the truth replaces the guess.
	case p.State == StateExecuted || p.State == StateFailed || p.State == StateRolledBack:
		// Another replica recorded it.
		f.deliverLocal(fl, p)
		return true
	default:
		return true
	}
	data, err := f.queue.Result(ctx, p.Source, id)
	var res Result
	switch {
	case err == nil:
		if res, err = decodeResult(data); err != nil {
			log.Warn().Err(err).Msg("undecodable answer")
			return false
		}
		if res.Proposal != p.digest {
			// Only an answer naming these terms answers them.
			log.Warn().Msg("answer for other terms under this action id; ignored")
			return false
		}
		if !res.Running {
			f.finish(ctx, p, res, fl)
			return true
		}
	case !errors.Is(err, wire.ErrNoResult):
		log.Debug().Err(err).Msg("cannot read the answer yet")
		return false
	}
	if p.State != StateApproved {
		// Looked at once; the sweep looks again.
		return true
	}
	switch {
	case res.Running && !now.Before(p.DecidedAt.Add(lateAnswer)):
		f.finish(ctx, p, failure(id, fmt.Errorf("%w: the agent of %s began it at %s and did not report how it ended; check the cluster",
			ErrUnknown, p.Source, res.At.UTC().Format(time.RFC3339))), fl)
		return true
	case res.Running:
		return false
	case len(fl.orders) > 0 && f.refusedOrder(ctx, p, fl, res.Running):
		return true
	case now.Before(p.Deadline()):
		// Sent once by this replica: the work queue keeps it until the
		// agent answers (bus.ActionsMaxAge outlasts the deadline). Only a
		// send that was not confirmed is tried again.
		if fl.sent.IsZero() {
			order, err := f.send(ctx, rec)
			if err != nil {
				log.Warn().Err(err).Msg("request not sent yet")
				return false
			}
			fl.sent, fl.orders = now, append(fl.orders, order)
		}
		return false
	case !now.Before(p.Deadline().Add(ResultGrace)):
		f.finish(ctx, p, failure(id, fmt.Errorf("%w: no agent of %s picked it up before %s, after which it refuses it",
			ErrNoAnswer, p.Source, p.Deadline().UTC().Format(time.RFC3339))), fl)
		return true
	}
	return false
}

// send seals the order to run rec's proposal and queues it, if Permit
// accepts the record: the bot sends nothing it could not prove approved.
// It returns the digest of the bytes sent.
func (f *Flow) send(ctx context.Context, rec Record) (string, error) {
	now := f.now()
	p, err := Permit(rec, f.trust(), now)
	if err != nil {
		return "", err
	}
	s, err := f.signer.seal(requestContext, Request{ID: p.ID, Source: p.Source, Proposal: p.digest, IssuedAt: now.UTC()})
	if err != nil {
		return "", err
	}
	data, err := json.Marshal(s)
	if err != nil {
		return "", fmt.Errorf("approval: encode request %s: %w", p.ID, err)
	}
	if err := f.queue.Send(ctx, p.Source, p.ID, data); err != nil {
		return "", err
	}
	f.m.sent.Inc()
	return orderDigest(data), nil
}

// refusedOrder records the agent's refusal of a request this replica sent
// and the agent could not verify (its key not trusted there): only a
// refusal naming bytes this replica sent is taken, so nobody else's
// message under the same id decides the outcome.
func (f *Flow) refusedOrder(ctx context.Context, p Proposal, fl *flight, running bool) bool {
	if running {
		return false
	}
	data, err := f.queue.Refusal(ctx, p.Source, p.ID)
	if err != nil {
		return false
	}
	res, err := decodeResult(data)
	if err != nil || !slices.Contains(fl.orders, res.Order) {
		return false
	}
	res.ID = p.ID
	f.finish(ctx, p, res, fl)
	return true
}

// errRecorded: the outcome is recorded already (by another replica).
var errRecorded = errors.New("outcome already recorded")

// finish records res as p's outcome; of several replicas recording one
// proposal exactly one wins, and only it audits and posts.
func (f *Flow) finish(ctx context.Context, p Proposal, res Result, fl *flight) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), markTimeout)
	defer cancel()
	now := f.now()
	o := Outcome{ProposalID: p.ID, State: StateExecuted, Result: res.Change, At: now.UTC()}
	if err := res.Err(); err != nil {
		o.State, o.Code, o.Reason, o.Collision = StateFailed, CodeOf(err), redact.RedactText(res.Error), res.Collision
		if o.Reason == "" {
			o.Reason = redact.RedactText(err.Error())
		}
	}
	rec, err := f.kv.update(ctx, p.ID, func(rec *Record) (bool, error) {
		cur, err := view(*rec, f.trust())
		switch {
		case err != nil:
			return false, err
		// An unanswered mark gives way to the agent's answer.
		case cur.ExecutedAt.IsZero() && cur.State != StateApproved,
			!cur.ExecutedAt.IsZero() && (cur.Code != CodeNoAnswer || o.Code == CodeNoAnswer):
			return false, errRecorded
		}
		o.Prev = rec.Decisions[len(rec.Decisions)-1].digest(decisionContext)
		s, err := f.signer.seal(outcomeContext, o)
		if err != nil {
			return false, err
		}
		rec.Outcome = &s
		return true, nil
	})
	if err != nil {
		if !errors.Is(err, errRecorded) {
			f.log.Error().Err(err).Str("action", p.ID).Msg("outcome not recorded; the sweep tries again")
		}
		return
	}
	q, err := view(rec, f.trust())
	if err != nil {
		f.log.Error().Err(err).Str("action", p.ID).Msg("recorded outcome does not read back")
		return
	}
	f.m.outcomes.WithLabelValues(string(o.State), string(o.Code)).Inc()
	kind := audit.KindExecuted
	if o.State == StateFailed {
		kind = audit.KindFailed
	}
	if aerr := f.record(ctx, q, kind, q.DecidedBy, "", now, func(r *audit.Record) {
		r.Summary, r.Diff = Describe(q.Change)
		if c := o.Result; c != nil {
			r.Summary, r.Diff, r.Result = c.Summary, c.Diff, string(c.Outcome)
		}
		r.Reason = o.Reason
	}); aerr != nil {
		f.log.Error().Err(aerr).Str("action", p.ID).Msg("outcome not audited")
	}
	f.log.Info().Str("action", p.ID).Str("state", string(o.State)).Str("code", string(o.Code)).Msg("outcome recorded")
	if o.State == StateExecuted && q.Change.Type == actions.TypeRollback && q.Change.Rollback != nil {
		f.markRolledBack(ctx, q, now)
	}
	if !f.deliverLocal(fl, q) {
		if f.outcomes != nil {
			f.outcomes(ctx, q)
		}
	}
}

// deliverLocal hands p to whoever in this process waits for it; false
// when nobody does.
func (f *Flow) deliverLocal(fl *flight, p Proposal) bool {
	if fl == nil {
		return false
	}
	f.mu.Lock()
	fns := fl.notify
	fl.notify = nil
	f.mu.Unlock()
	// Not on the loop: a post into a conversation may take seconds.
	for _, fn := range fns {
		go fn(p)
	}
	return len(fns) > 0
}

// markRolledBack records on the original action that rollback rb undid
// it, by rb's approver.
func (f *Flow) markRolledBack(ctx context.Context, rb Proposal, now time.Time) {
	id := rb.Change.Rollback.Undo.ActionID
	rec, err := f.kv.update(ctx, id, func(rec *Record) (bool, error) {
		orig, err := view(*rec, f.trust())
		switch {
		case err != nil:
			return false, err
		case orig.State != StateExecuted || orig.Source != rb.Source || orig.Change.Cluster != rb.Change.Cluster:
			// Only the executed change of the same cluster the rollback
			// undid is marked.
			return false, errRecorded
		}
		s, err := f.signer.seal(rolledBackContext, RolledBack{ProposalID: id, Prev: rec.Outcome.digest(outcomeContext), Rollback: rb.ID, By: rb.DecidedBy, At: now.UTC()})
		if err != nil {
			return false, err
		}
		rec.RolledBack = &s
		return true, nil
	})
	if err != nil {
		if !errors.Is(err, errRecorded) {
			f.log.Warn().Err(err).Str("action", id).Msg("rollback not marked on the original")
		}
		return
	}
	orig, err := view(rec, f.trust())
	if err != nil {
		return
	}
	if aerr := f.record(ctx, orig, audit.KindRolledBack, rb.DecidedBy, "", now, func(r *audit.Record) {
		r.Summary = fmt.Sprintf("rolled back by %s", rb.ID)
		if c := rb.Result; c != nil {
			r.Summary, r.Diff, r.Result = c.Summary, c.Diff, string(c.Outcome)
		}
	}); aerr != nil {
		f.log.Error().Err(aerr).Str("action", id).Msg("rollback not audited")
	}
}

// sweepOnce reads every proposal: it adopts approved ones nobody here
// follows (after a sweep interval, so that the replica whose user
// approved normally records and posts; at once when this replica starts),
// expires what is past its expiry, and reports records whose seals do not
// verify.
func (f *Flow) sweepOnce(ctx context.Context, starting bool) {
	now := f.now()
	err := f.kv.scan(ctx, func(id string, rec Record, err error) {
		if errors.Is(err, ErrLegacy) {
			f.noteRewrite(ctx, id, rec, err)
			return
		}
		if err != nil {
			f.reportForgery(ctx, id, rec, err)
			return
		}
		p, err := f.read(ctx, id, rec)
		switch {
		case err != nil:
		case p.State == StatePending && p.Expired(now):
			f.expire(ctx, id, now)
		case p.State == StateApproved && (starting || now.Sub(p.DecidedAt) >= f.sweep),
			p.State == StateFailed && p.Code == CodeNoAnswer && now.Before(p.DecidedAt.Add(lateAnswer)):
			f.follow(id, nil)
		}
	})
	if err != nil && ctx.Err() == nil {
		f.log.Warn().Err(err).Msg("approval sweep incomplete")
	}
}

// expire seals the bot's expiry of pending proposal id.
func (f *Flow) expire(ctx context.Context, id string, now time.Time) {
	rec, err := f.kv.update(ctx, id, func(rec *Record) (bool, error) {
		cur, err := view(*rec, f.trust())
		if err != nil || !cur.Expired(now) {
			return false, errRecorded
		}
		return true, f.decide(rec, cur, Decision{Verdict: VerdictExpire, At: now.UTC()}, nil)
	})
	if err != nil {
		if !errors.Is(err, errRecorded) && ctx.Err() == nil {
			f.log.Warn().Err(err).Str("action", id).Msg("proposal not expired")
		}
		return
	}
	if p, err := view(rec, f.trust()); err == nil {
		if err := f.record(ctx, p, audit.KindExpired, "", "", now, nil); err != nil {
			f.log.Error().Err(err).Str("action", id).Msg("expiry not audited")
		}
	}
}
