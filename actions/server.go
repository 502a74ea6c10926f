package actions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"golang.org/x/time/rate"

	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/redact"
)

// MaxRequestBytes bounds an encoded Request. The largest valid one (a
// noProxy patch at its limits) is well under it; anything bigger is refused
// before decoding.
const MaxRequestBytes = 64 << 10

// ExecuteTimeout bounds one execution. A noProxy patch is three API calls;
// an exposure reaches the hosted API server too.
const ExecuteTimeout = 90 * time.Second

// ServeConfig configures Serve.
type ServeConfig struct {
	// Source is this agent's management cluster.
	Source string
	// Executor carries out verified requests.
	Executor *Executor
	// Verifier decides which requests were approved; required. Every
	// other request is refused, audited and answered with CodeUnauthorized
	// (or CodeInvalid), and the cluster is not touched.
	Verifier *Verifier
	// Audit records the refusals; nil only logs them.
	Audit Auditor
	Log   zerolog.Logger
	// AckWait is how long the server waits for an acknowledgement before
	// it delivers a request again (to the next leader, when this one
	// died); 0 means 30s. An execution in progress renews it.
	AckWait time.Duration
}

// Auditor records the requests the agent refused.
type Auditor interface {
	Refused(ctx context.Context, r Refusal) error
}

// Refusal is one refused request, as far as it could be read.
type Refusal struct {
	Time time.Time
	// ActionID, Cluster, RequestedBy and ApprovedBy are what the request
	// claimed; empty when it did not decode.
	ActionID    string
	Cluster     string
	RequestedBy string
	ApprovedBy  string
	// Key is the public key the request was signed with, if any.
	Key    string
	Code   Code
	Reason string
}

// Refusals beyond this rate are logged and counted but not audited one by
// one, so that a flood of forged requests cannot flood the audit trail.
const (
	auditRefusalsPerSecond = 1
	auditRefusalsBurst     = 20
)

// Serve executes the action requests queued for cfg.Source until ctx
// ends: it reads them from the actions stream (bus.ActionsStreamName) through
// the agent's durable pull consumer (ConsumerConfig), verifies each
// (cfg.Verifier), runs it with cfg.Executor, records the Reply in the
// results bucket under the action id (ResultKey), and only then
// acknowledges the message. A request delivered again (the agent died
// before acknowledging, or the bot re-sent it) whose result is recorded
// is acknowledged without running again; the Verifier additionally
// refuses a proposal the approval store no longer holds as approved.
//
// Only one agent replica may execute actions, so the caller starts Serve
// inside the leader's run function (whose context ends when leadership is
// lost): a replica that is not the leader does not consume, and the next
// leader resumes the same durable consumer, from the first request not
// acknowledged. A request fetched just as leadership ends is handed back
// (Nak) without running. The consumer delivers one request at a time
// (MaxAckPending 1), so two overlapping leaders never run two at once,
// and Serve returns only once no execution is in flight.
//
// The stream and the bucket are the bot's: Serve waits for them (the
// agent's NATS user may not create them), then creates or updates its own
// consumer.
func Serve(ctx context.Context, js jetstream.JetStream, cfg ServeConfig) error {
	ccfg, err := ConsumerConfig(cfg.Source)
	if err != nil {
		return fmt.Errorf("actions: serve: %w", err)
	}
	if cfg.AckWait > 0 {
		ccfg.AckWait = cfg.AckWait
	}
	switch {
	case cfg.Executor == nil:
		return errors.New("actions: serve: no executor")
	case cfg.Verifier == nil || cfg.Verifier.Store == nil:
		return errors.New("actions: serve: no verifier: unverified requests are never executed")
	case cfg.Verifier.Source != cfg.Source:
		return fmt.Errorf("actions: serve: verifier for %q, serving %q", cfg.Verifier.Source, cfg.Source)
	}
	if len(cfg.Verifier.Keys) > 0 {
		if err := CheckKeys(cfg.Verifier.Keys); err != nil {
			return fmt.Errorf("actions: serve: %w", err)
		}
	}
	log := cfg.Log.With().Str("stream", bus.ActionsStreamName).Str("consumer", ccfg.Durable).Logger()
	if len(cfg.Verifier.Keys) == 0 {
		log.Warn().Msg("no trusted signing keys configured: every action request will be refused")
	}
	s := &server{source: cfg.Source, ackWait: ccfg.AckWait, x: cfg.Executor, v: cfg.Verifier, audit: cfg.Audit, log: log,
		auditLimit: rate.NewLimiter(auditRefusalsPerSecond, auditRefusalsBurst)}
	var cons jetstream.Consumer
	wait := serveRetryFirst
	failing := false
	for ctx.Err() == nil {
		if cons == nil || s.kv == nil {
			if cons, err = s.bind(ctx, js, ccfg); err != nil {
				if ctx.Err() == nil {
					// Said once at warning level: an agent started before
					// the bot waits here, normally.
					ev := log.Debug()
					if wait == serveRetryFirst {
						ev = log.Warn()
					}
					ev.Err(err).Dur("retry_in", wait).Msg("not consuming action requests yet")
					sleep(ctx, wait)
					wait = min(2*wait, serveRetryMax)
				}
				continue
			}
			wait = serveRetryFirst
			log.Info().Int("trustedKeys", len(cfg.Verifier.Keys)).Bool("fourEyes", cfg.Verifier.FourEyes).Msg("consuming action requests")
		}
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(fetchWait))
		if err == nil {
			for msg := range batch.Messages() {
				s.handle(ctx, msg)
			}
			if err = batch.Error(); errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
				err = nil
			}
		}
		if err != nil {
			// NATS unreachable, or the consumer or stream went away (NATS
			// restarted without its store): bind again. Logged once at
			// warning level per episode.
			ev := log.Debug()
			if !failing {
				ev = log.Warn()
			}
			ev.Err(err).Msg("fetching action requests")
			failing, cons = true, nil
			sleep(ctx, wait)
			continue
		}
		failing = false
	}
	log.Info().Msg("stopped consuming action requests")
	return nil
}

// Pauses of Serve: how long one fetch waits for a request (and so how
// long after losing leadership Serve may still be waiting), and the
// backoff while the stream, bucket or consumer are not there.
const (
	fetchWait       = 2 * time.Second
	serveRetryFirst = 500 * time.Millisecond
	serveRetryMax   = 15 * time.Second
)

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// bind binds the results bucket and creates (or updates) the consumer.
func (s *server) bind(ctx context.Context, js jetstream.JetStream, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	if s.kv == nil {
		kv, err := js.KeyValue(ctx, bus.ActionResultsBucket)
		if err != nil {
			return nil, fmt.Errorf("results bucket %s (created by the bot): %w", bus.ActionResultsBucket, err)
		}
		s.kv = kv
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, bus.ActionsStreamName, cfg)
	if err != nil {
		return nil, fmt.Errorf("consumer %s on %s (stream created by the bot): %w", cfg.Durable, bus.ActionsStreamName, err)
	}
	return cons, nil
}

type server struct {
	source     string
	ackWait    time.Duration
	x          *Executor
	v          *Verifier
	audit      Auditor
	log        zerolog.Logger
	kv         jetstream.KeyValue
	auditLimit *rate.Limiter
	// unaudited counts refusals over the audit rate since the last one
	// audited.
	unaudited int
}

// recordTimeout bounds writing a result and acknowledging; it is counted
// after the execution, whose context may be spent by then.
const recordTimeout = 15 * time.Second

// handle answers one delivered request: the reply is recorded under its
// action id, then the message acknowledged. If the reply cannot be
// recorded the message is handed back for redelivery (bounded by the
// consumer's MaxDeliver); running it again is safe, the actions being
// idempotent.
func (s *server) handle(ctx context.Context, msg jetstream.Msg) {
	if ctx.Err() != nil {
		// Leadership ended between the fetch and now: the next leader
		// runs it.
		_ = msg.Nak()
		return
	}
	reply, keys, handBack := s.process(ctx, msg)
	if ctx.Err() != nil && reply.Result == nil && reply.Code == CodeInternal {
		// Leadership ended during the execution, which was cancelled:
		// not an answer. The next leader runs it again (safe: actions are
		// idempotent).
		handBack = true
	}
	if handBack {
		// Nothing to answer yet (the results bucket unreadable, or the
		// execution cancelled with the leadership).
		_ = msg.NakWithDelay(time.Second)
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	data, err := json.Marshal(reply)
	if err != nil {
		data, _ = json.Marshal(errorReply(fmt.Errorf("encode reply: %w", err)))
	}
	for _, key := range keys {
		// Create, not Put: the first answer under a key stands.
		if _, err := s.kv.Create(rctx, key, data); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
			s.log.Error().Err(err).Str("key", truncateForLog(key)).Msg("action result not recorded: handed back for redelivery")
			_ = msg.NakWithDelay(time.Second)
			return
		}
	}
	if err := msg.DoubleAck(rctx); err != nil {
		// Redelivered later, then answered from the recorded result.
		s.log.Warn().Err(err).Msg("action request not acknowledged")
	}
}

// process returns the reply to msg and the results keys to record it
// under: the action id's (ResultKey), and the message id's when that
// differs. The first answer under a key stands, so a redelivered request
// answered from its recorded result changes nothing, and a copy sent
// under a fresh message id (a replay) learns its answer there.
func (s *server) process(ctx context.Context, msg jetstream.Msg) (r Reply, keys []string, handBack bool) {
	data := msg.Data()
	// What is not a verified request is answered under its message id
	// only. Only the bot may publish requests, and it uses the action id;
	// a forger able to publish could already block that id through the
	// server's de-duplication, so this lets nobody do more.
	if k, err := ResultKey(s.source, msg.Headers().Get(jetstream.MsgIDHeader)); err == nil {
		keys = append(keys, k)
	}
	if len(data) > MaxRequestBytes {
		err := fmt.Errorf("%w: request of %d bytes exceeds %d", ErrInvalid, len(data), MaxRequestBytes)
		s.refuse(ctx, Verified{}, err)
		return errorReply(err), keys, false
	}
	peeked, err := s.v.Peek(data)
	if err != nil {
		s.refuse(ctx, peeked, err)
		return errorReply(err), keys, false
	}
	digest, err := RequestDigest(peeked.Request)
	if err != nil {
		return errorReply(err), keys, false
	}
	key, err := ResultKey(s.source, peeked.Request.ID)
	if err != nil {
		s.refuse(ctx, peeked, err)
		return errorReply(err), keys, false
	}
	log := s.log.With().Str("action", peeked.Request.ID).Logger()
	stored, err := readResult(ctx, s.kv, key)
	switch {
	case err == nil && stored.RequestSHA256 == digest && msg.Headers().Get(jetstream.MsgIDHeader) == peeked.Request.ID:
		// Delivered again (the agent that had it died before its
		// acknowledgement) or sent again by the bot: answered.
		log.Info().Msg("action already answered: acknowledged without running again")
		return stored, nil, false
	case err == nil:
		// The bot sends each request under its action id; a copy under
		// another message id, or other content under a used id, is a
		// replay or a forgery.
		err := fmt.Errorf("%w: action %s was already answered; this is a replay", ErrUnauthorized, peeked.Request.ID)
		s.refuse(ctx, peeked, err)
		return errorReply(err), keys, false
	case !errors.Is(err, ErrNoResult):
		// Unknown whether it ran: record nothing, hand it back.
		log.Warn().Err(err).Msg("cannot read the results bucket: handed back for redelivery")
		return Reply{}, nil, true
	}
	r = s.execute(ctx, msg, data)
	r.RequestSHA256 = digest
	return r, append([]string{key}, slices.DeleteFunc(keys, func(k string) bool { return k == key })...), false
}

func (s *server) execute(ctx context.Context, msg jetstream.Msg, data []byte) Reply {
	vr, err := s.v.Open(ctx, data)
	if err != nil {
		if !errors.Is(err, ErrInternal) {
			s.refuse(ctx, vr, err)
		}
		return errorReply(err)
	}
	req := vr.Request
	log := s.log.With().Str("action", req.ID).Str("type", string(req.Type)).Str("cluster", req.Cluster.String()).
		Str("requestedBy", req.RequestedBy).Str("approvedBy", vr.Approval.ApprovedBy).Logger()

	xctx, cancel := context.WithTimeout(ctx, ExecuteTimeout)
	defer cancel()
	if !vr.Deadline.IsZero() {
		// Nobody waits for the answer after that: stop rather than
		// change the cluster behind the user's back.
		var cancelD context.CancelFunc
		xctx, cancelD = context.WithDeadline(xctx, vr.Deadline)
		defer cancelD()
	}
	// The server redelivers after AckWait; an execution still running
	// says so.
	beat := time.NewTicker(s.ackWait / 3)
	defer beat.Stop()
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case <-done:
				return
			case <-beat.C:
				_ = msg.InProgress()
			}
		}
	}()
	// Open validated the request; it is not validated again.
	res, err := s.x.run(xctx, vr.checked)
	if err != nil {
		r := errorReply(err)
		log.Warn().Str("code", string(r.Code)).Str("error", r.Error).Msg("action failed")
		return r
	}
	log.Info().Str("outcome", string(res.Outcome)).Msg("action executed")
	return Reply{Result: res}
}

// refuse logs and audits a request the agent will not run.
func (s *server) refuse(ctx context.Context, vr Verified, cause error) {
	r := Refusal{
		Time: time.Now(), ActionID: vr.Request.ID, RequestedBy: vr.Approval.RequestedBy, ApprovedBy: vr.Approval.ApprovedBy,
		Key: vr.Key, Code: CodeOf(cause), Reason: redact.RedactText(cause.Error()),
	}
	if vr.Request.Cluster.Name != "" {
		r.Cluster = vr.Request.Cluster.String()
	}
	// The claimed ids are attacker-controlled: logged as data, bounded.
	s.log.Warn().Str("action", truncateForLog(r.ActionID)).Str("cluster", truncateForLog(r.Cluster)).
		Str("code", string(r.Code)).Str("reason", r.Reason).Msg("action request refused")
	if s.audit == nil {
		return
	}
	if !s.auditLimit.Allow() {
		s.unaudited++
		return
	}
	if s.unaudited > 0 {
		r.Reason = fmt.Sprintf("%s (and %d more refusals not audited one by one)", r.Reason, s.unaudited)
		s.unaudited = 0
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := s.audit.Refused(actx, r); err != nil {
		s.log.Error().Err(err).Msg("refused action request not audited")
	}
}

func truncateForLog(s string) string {
	const max = 128
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}
