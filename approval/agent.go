package approval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"golang.org/x/time/rate"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/approval/wire"
	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/identity"
	"github.com/hcpbot/hcpbot/internal/jitter"
	"github.com/hcpbot/hcpbot/redact"
)

// Executor is the cluster side of the agent (*actions.Executor).
type Executor interface {
	// Execute validates and makes ch.
	Execute(ctx context.Context, ch actions.Change) (*actions.Result, error)
	// Observe reports, without writing, whether ch is in place.
	Observe(ctx context.Context, ch actions.Change) (*actions.Result, bool, error)
	// RecordEvent records the execution on the object it changed.
	RecordEvent(ctx context.Context, ch actions.Change, res *actions.Result, who actions.Actors) error
}

// AgentConfig configures Serve.
type AgentConfig struct {
	// Source is this agent's management cluster.
	Source string
	// Trust is what the agent accepts as proof (its Source is set to
	// Source): agent.trustedKeys, agent.requireFourEyes, agent.approvers.
	Trust    Trust
	Executor Executor
	// Transient reports whether an execution error may pass if tried
	// again; nil means actions.Transient.
	Transient func(error) bool
	// Identities maps approvers to the Kubernetes identities the agent
	// acts as (package identity); As makes an Executor that writes as one
	// (*actions.Executor's As). Empty: the agent acts as itself.
	Identities identity.Map
	As         func(id identity.Identity, extra map[string][]string) (Executor, error)
	// Access reviews whether id may make ch (*actions.Executor's Access):
	// before a write, the identity of every counted approver but the one
	// the write acts as, which the write's own RBAC judges. An approval
	// counts only if its identity may make the change: one whose check
	// went unanswered at approval is judged here. Nil: not reviewed.
	Access func(ctx context.Context, id identity.Identity, ch actions.Change) (missing []string, err error)
	// Trail is the agent's own audit subject (audit.ForAgent): its
	// refusals and executions. Nil only logs them.
	Trail audit.Appender
	Log   zerolog.Logger
	// AckWait: see wire.ConsumerConfig; 0 means wire.DefaultAckWait.
	AckWait time.Duration
	// Registerer receives the agent's metrics; nil registers none.
	Registerer prometheus.Registerer
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Refusals beyond this rate are logged and counted but not audited one by
// one, so that a flood of forged requests cannot flood the audit trail.
const (
	auditRefusalsPerSecond = 1
	auditRefusalsBurst     = 20
)

// Pauses of Serve: how long one fetch waits for a request (and so how
// long after losing leadership Serve may still be waiting), the backoff
// while the stream, buckets or consumer are not there, and the backoff of
// a request handed back after a transient failure.
const (
	fetchWait       = 2 * time.Second
	serveRetryFirst = 500 * time.Millisecond
	serveRetryMax   = 15 * time.Second
	handBackFirst   = 500 * time.Millisecond
	handBackMax     = 30 * time.Second
	// recordTimeout bounds writing an answer and acknowledging; it is
	// counted after the execution, whose context may be spent by then.
	recordTimeout = 15 * time.Second
)

// Serve runs the approved requests queued for cfg.Source until ctx ends,
// one at a time, through the agent's durable consumer (wire): for each,
// it opens the bot's sealed order, reads the proposal from the approval
// store and asks Permit; what Permit refuses is answered, audited and
// never run. What it accepts is marked running in the results bucket,
// executed, answered there and only then acknowledged.
//
// A transient failure (NATS, the API server's 5xx, timeouts) is not an
// answer: the request is handed back (Nak) with a growing delay and runs
// again, until its deadline; a re-run finds its own change in place and
// reports it applied. Past the deadline the agent writes nothing more and
// answers what Observe finds in the cluster. So after any crash or retry
// the answer says what the cluster holds.
//
// Only the leader serves (the caller starts Serve inside the leader's run
// function, whose context ends with the leadership); the next leader
// resumes the same durable consumer. The stream and buckets are the
// bot's: Serve waits for them.
func Serve(ctx context.Context, js AgentJetStream, cfg AgentConfig) error {
	ccfg, err := wire.ConsumerConfig(cfg.Source, cfg.AckWait)
	switch {
	case err != nil:
		return fmt.Errorf("approval: serve: %w", err)
	case cfg.Executor == nil:
		return errors.New("approval: serve: no executor")
	}
	if len(cfg.Trust.Keys) > 0 {
		if err := CheckKeys(cfg.Trust.Keys); err != nil {
			return fmt.Errorf("approval: serve: %w", err)
		}
	}
	a := &agent{
		cfg: cfg, js: js, ackWait: ccfg.AckWait, now: cfg.Now, transient: cfg.Transient,
		log:        cfg.Log.With().Str("stream", bus.ActionsStreamName).Str("consumer", ccfg.Durable).Logger(),
		auditLimit: rate.NewLimiter(auditRefusalsPerSecond, auditRefusalsBurst),
		m:          newAgentMetrics(cfg.Registerer),
	}
	a.cfg.Trust.Source = cfg.Source
	if a.now == nil {
		a.now = time.Now
	}
	if a.transient == nil {
		a.transient = actions.Transient
	}
	if len(cfg.Trust.Keys) == 0 {
		a.log.Warn().Msg("no trusted signing keys configured: every action request will be refused")
	}
	var cons jetstream.Consumer
	wait, failing := serveRetryFirst, false
	for ctx.Err() == nil {
		if cons == nil {
			if cons, err = a.bind(ctx, ccfg); err != nil {
				if ctx.Err() == nil {
					// Said once at warning level: an agent started before
					// the bot waits here, normally.
					ev := a.log.Debug()
					switch {
					case errors.Is(err, bus.ErrForeignStream):
						ev = a.log.Error()
					case wait == serveRetryFirst:
						ev = a.log.Warn()
					}
					ev.Err(err).Dur("retry_in", wait).Msg("not consuming action requests yet")
					sleep(ctx, wait)
					wait = min(2*wait, serveRetryMax)
				}
				continue
			}
			wait = serveRetryFirst
			a.log.Info().Int("trustedKeys", len(cfg.Trust.Keys)).Bool("fourEyes", cfg.Trust.FourEyes).Msg("consuming action requests")
		}
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(fetchWait))
		if err == nil {
			for msg := range batch.Messages() {
				a.handle(ctx, msg)
			}
			if err = batch.Error(); errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
				err = nil
			}
		}
		if err != nil {
			// NATS unreachable, or the consumer or stream went away: bind
			// again. Logged once at warning level per episode.
			ev := a.log.Debug()
			if !failing {
				ev = a.log.Warn()
			}
			ev.Err(err).Msg("fetching action requests")
			failing, cons = true, nil
			sleep(ctx, wait)
			continue
		}
		failing = false
	}
	a.log.Info().Msg("stopped consuming action requests")
	return nil
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// AgentJetStream is what Serve uses of JetStream: it vets the bot's
// stream and buckets, binds the buckets, and creates its consumer of the
// requests. It creates and changes no stream or bucket: they are the
// bot's.
type AgentJetStream interface {
	jetstream.StreamManager
	jetstream.KeyValueManager
	jetstream.StreamConsumerManager
}

type agent struct {
	cfg        AgentConfig
	js         AgentJetStream
	ackWait    time.Duration
	now        func() time.Time
	transient  func(error) bool
	log        zerolog.Logger
	m          *agentMetrics
	results    jetstream.KeyValue
	proposals  jetstream.KeyValue
	auditLimit *rate.Limiter
	// unaudited counts refusals over the audit rate since the last one
	// audited.
	mu        sync.Mutex
	unaudited int
}

// bind binds the buckets (the bot's) and creates or updates the consumer.
// A stream or bucket that copies in what another user wrote (sources, a
// mirror, a republish or subject transform: bus.Vet) is refused: the
// agent trusts what the results bucket holds as its own answers and the
// requests as the bot's, so one created that way (by a stolen bot seed,
// before the bot) is not consumed.
func (a *agent) bind(ctx context.Context, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	for _, name := range []string{bus.ActionsStreamName, "KV_" + bus.ActionResultsBucket, "KV_" + bus.ProposalsBucket} {
		s, err := a.js.Stream(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("stream %s (created by the bot): %w", name, err)
		}
		if err := bus.Vet(s.CachedInfo().Config); err != nil {
			return nil, fmt.Errorf("stream %s: %w", name, err)
		}
	}
	if a.results == nil {
		kv, err := a.js.KeyValue(ctx, bus.ActionResultsBucket)
		if err != nil {
			return nil, fmt.Errorf("results bucket %s (created by the bot): %w", bus.ActionResultsBucket, err)
		}
		a.results = kv
	}
	if a.proposals == nil {
		kv, err := a.js.KeyValue(ctx, bus.ProposalsBucket)
		if err != nil {
			return nil, fmt.Errorf("approval store %s (created by the bot): %w", bus.ProposalsBucket, err)
		}
		a.proposals = kv
	}
	cons, err := a.js.CreateOrUpdateConsumer(ctx, bus.ActionsStreamName, cfg)
	if err != nil {
		return nil, fmt.Errorf("consumer %s on %s (stream created by the bot): %w", cfg.Durable, bus.ActionsStreamName, err)
	}
	return cons, nil
}

// errHandBack: not an answer; the request goes back for redelivery.
var errHandBack = errors.New("handed back")

// handle answers one delivered request, or hands it back.
func (a *agent) handle(ctx context.Context, msg jetstream.Msg) {
	if ctx.Err() != nil {
		// Leadership ended between the fetch and now: the next leader
		// runs it.
		_ = msg.Nak()
		return
	}
	// The server redelivers after AckWait; work in progress says so.
	stop := a.heartbeat(msg)
	key, res, err := a.process(ctx, msg)
	stop()
	if errors.Is(err, errHandBack) {
		a.m.requests.WithLabelValues("handed-back").Inc()
		delay := handBackFirst
		if md, merr := msg.Metadata(); merr == nil {
			delay = jitter.Backoff(int(md.NumDelivered), handBackFirst, handBackMax)
		}
		a.log.Info().Err(err).Dur("retry_in", delay).Msg("action request handed back for redelivery")
		_ = msg.NakWithDelay(delay)
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	if key != "" {
		if err := a.answer(rctx, key, res); err != nil {
			a.log.Error().Err(err).Str("key", truncate(key)).Msg("answer not recorded: handed back for redelivery")
			_ = msg.NakWithDelay(time.Second)
			return
		}
	}
	chaosPoint(ChaosAfterAnswer, truncate(msg.Headers().Get(jetstream.MsgIDHeader)))
	if err := msg.DoubleAck(rctx); err != nil {
		// Redelivered later, then answered from the recorded result.
		a.log.Warn().Err(err).Msg("action request not acknowledged")
	}
}

// heartbeat tells the server, every third of AckWait, that the request
// is being worked on; stop ends it.
func (a *agent) heartbeat(msg jetstream.Msg) (stop func()) {
	beat := time.NewTicker(a.ackWait / 3)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-beat.C:
				_ = msg.InProgress()
			}
		}
	})
	return func() {
		beat.Stop()
		close(done)
		wg.Wait()
	}
}

// answer records res under key: over a running mark of its own proposal
// or a refusal of something unverified, never over another answer.
func (a *agent) answer(ctx context.Context, key string, res Result) error {
	data, err := json.Marshal(res)
	if err != nil {
		return fmt.Errorf("encode answer: %w", err)
	}
	old, rev, err := wire.Get(ctx, a.results, key)
	switch {
	case errors.Is(err, wire.ErrNoResult):
		if _, err := a.results.Create(ctx, key, data); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
			return err
		}
		return nil
	case err != nil:
		return err
	}
	prev, derr := decodeResult(old)
	if derr == nil && !prev.Running && prev.Proposal != "" {
		return nil // the first verified answer stands
	}
	_, err = a.results.Update(ctx, key, data, rev)
	return err
}

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
	switch {
	case errors.Is(err, wire.ErrNoResult):
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
		if _, err := a.results.Create(ctx, key, mark); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
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

type agentMetrics struct {
	requests *prometheus.CounterVec
}

func newAgentMetrics(reg prometheus.Registerer) *agentMetrics {
	m := &agentMetrics{requests: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hcpbot_agent_action_requests_total",
		Help: "Action requests the agent handled, by result: executed, failed, refused, answered (already), handed-back (transient).",
	}, []string{"result"})}
	if reg != nil {
		// Serve runs once per leadership term: a later term counts on.
		if err := reg.Register(m.requests); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				panic(err)
			}
			m.requests = are.ExistingCollector.(*prometheus.CounterVec)
		}
	}
	return m
}
