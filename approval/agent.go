package approval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
// stream and buckets, binds the buckets, creates its consumer of the
// requests, and reads the approval store from its stream leader (a
// request on the connection: leaderKV). It creates and changes no stream
// or bucket: they are the bot's.
type AgentJetStream interface {
	jetstream.StreamManager
	jetstream.KeyValueManager
	jetstream.StreamConsumerManager
	Conn() *nats.Conn
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
		a.proposals = leaderKV{KeyValue: kv, nc: a.js.Conn(), bucket: bus.ProposalsBucket}
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
// or a refusal of something unverified, never over another answer. A
// write refused because the key holds more than the read showed (a direct
// get answered by a replica behind the leader) is read again, not taken
// for an answer that stands.
func (a *agent) answer(ctx context.Context, key string, res Result) error {
	data, err := json.Marshal(res)
	if err != nil {
		return fmt.Errorf("encode answer: %w", err)
	}
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		old, rev, err := wire.Get(ctx, a.results, key)
		switch {
		case errors.Is(err, wire.ErrNoResult):
			_, err = a.results.Create(ctx, key, data)
		case err != nil:
			return err
		default:
			prev, derr := decodeResult(old)
			if derr == nil && !prev.Running && prev.Proposal != "" {
				return nil // the first verified answer stands
			}
			_, err = a.results.Update(ctx, key, data, rev)
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return err
		}
		// The key holds more than the read showed: the read is a direct
		// get, which a replica that has not yet stored the last write
		// answers (the running mark written before the execution, which
		// must not stand for the answer). Read again; an answer found
		// then stands.
		sleep(ctx, wait)
		if ctx.Err() != nil {
			return fmt.Errorf("the results bucket holds more of %s than its reads show: %w", truncate(key), ctx.Err())
		}
	}
}

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
