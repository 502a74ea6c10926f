package actions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"golang.org/x/time/rate"

	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/redact"
)

// QueueGroup is the NATS queue group of the agents serving action requests:
// with several agent replicas subscribed, each request reaches one.
const QueueGroup = "hcpbot-agent-actions"

// MaxRequestBytes bounds an encoded Request. The largest valid one (a
// noProxy patch at its limits) is well under it; anything bigger is refused
// before decoding.
const MaxRequestBytes = 64 << 10

// ExecuteTimeout bounds one execution. A noProxy patch is three API calls;
// an exposure reaches the hosted API server too.
const ExecuteTimeout = 90 * time.Second

// recentResults is how many results Serve remembers by action id. Proposals
// are executed once each, so only a retried or replayed request (seconds to
// minutes later) needs the memory; a few hundred ids cover that.
const recentResults = 256

// Code classifies a failed action in a Reply, so that the bot can tell the
// user what to do without parsing error texts.
type Code string

// Reply codes; each maps onto one sentinel error (Code.Err).
const (
	CodeConflict      Code = "conflict"
	CodeNotKubeVirt   Code = "not-kubevirt"
	CodePortCollision Code = "port-collision"
	CodeInvalid       Code = "invalid"
	CodeRejected      Code = "rejected"
	CodeInternal      Code = "internal"
)

// ErrInternal: the agent could not carry out the action for a reason that
// is not the request's fault (API server unreachable, kubeconfig unusable,
// timeout). Whether anything changed is unknown; re-sending is safe.
var ErrInternal = errors.New("action failed in the agent")

// Reply is the agent's answer to an action request: a Result, or an error
// with its Code.
type Reply struct {
	Result *Result `json:"result,omitempty"`
	Error  string  `json:"error,omitempty"`
	Code   Code    `json:"code,omitempty"`
}

// CodeOf classifies err. A port collision is checked before the generic
// kinds because PortCollisionError also wraps the API error.
func CodeOf(err error) Code {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrPortCollision):
		return CodePortCollision
	case errors.Is(err, ErrConflict):
		return CodeConflict
	case errors.Is(err, ErrNotKubeVirt):
		return CodeNotKubeVirt
	case errors.Is(err, ErrInvalid):
		return CodeInvalid
	case errors.Is(err, ErrRejected):
		return CodeRejected
	case errors.Is(err, ErrUnauthorized):
		return CodeUnauthorized
	}
	return CodeInternal
}

// Err returns the sentinel error of c; unknown codes (a newer agent) are
// ErrInternal.
func (c Code) Err() error {
	switch c {
	case CodeConflict:
		return ErrConflict
	case CodeNotKubeVirt:
		return ErrNotKubeVirt
	case CodePortCollision:
		return ErrPortCollision
	case CodeInvalid:
		return ErrInvalid
	case CodeRejected:
		return ErrRejected
	case CodeUnauthorized:
		return ErrUnauthorized
	}
	return ErrInternal
}

// Err returns nil for a successful reply, else an error wrapping the
// code's sentinel (errors.Is works across the wire) with the agent's text.
func (r Reply) Err() error {
	if r.Code == "" && r.Error == "" {
		if r.Result == nil {
			return fmt.Errorf("%w: empty reply", ErrInternal)
		}
		return nil
	}
	return fmt.Errorf("%w: %s", r.Code.Err(), r.Error)
}

func errorReply(err error) Reply {
	// Error texts may quote proxy URLs from the cluster; the reply is
	// shown in chat and stored with the proposal.
	return Reply{Error: redact.RedactText(err.Error()), Code: CodeOf(err)}
}

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

// Serve answers action requests for cfg.Source on nc until ctx ends: each
// request is verified (cfg.Verifier), run with cfg.Executor and answered
// with a Reply.
//
// Only one agent replica may execute actions, so the caller starts Serve
// inside the leader's run function (whose context ends when leadership is
// lost); the queue group additionally keeps a request from reaching two
// subscribers should two leaders ever overlap.
//
// Requests are handled one at a time, in Serve's goroutine. That keeps two
// deliveries of one action id from racing, and Serve returns only once no
// execution is in flight, so consecutive leadership terms never overlap.
//
// The action id identifies an execution: a request whose id was executed
// recently gets the stored Result without running again (a retried
// request), and the same id with different content is refused.
// Beyond that memory, the actions are idempotent themselves (a noProxy
// patch that is already applied reports "unchanged"; an exposure finds its
// Services by the action id label), and the Verifier refuses a proposal
// the approval store no longer holds as approved (executed, failed).
func Serve(ctx context.Context, nc *nats.Conn, cfg ServeConfig) error {
	subject, err := event.ActionRequestSubject(cfg.Source)
	if err != nil {
		return fmt.Errorf("actions: serve: %w", err)
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
	// Buffered so that a burst does not count as a slow consumer; a full
	// buffer drops requests, which their senders see as a timeout.
	ch := make(chan *nats.Msg, 64)
	sub, err := nc.ChanQueueSubscribe(subject, QueueGroup, ch)
	if err != nil {
		return fmt.Errorf("actions: subscribe %s: %w", subject, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	log := cfg.Log.With().Str("subject", subject).Logger()
	// The flush only confirms the subscription early; while NATS is
	// unreachable the client re-subscribes on reconnect, so serving goes on.
	if err := nc.FlushTimeout(5 * time.Second); err != nil {
		log.Warn().Err(err).Msg("action subscription not confirmed yet")
	}
	if len(cfg.Verifier.Keys) == 0 {
		log.Warn().Msg("no trusted signing keys configured: every action request will be refused")
	}
	log.Info().Int("trustedKeys", len(cfg.Verifier.Keys)).Bool("fourEyes", cfg.Verifier.FourEyes).Msg("serving action requests")

	s := &server{x: cfg.Executor, v: cfg.Verifier, audit: cfg.Audit, log: log, recent: newResultCache(recentResults),
		auditLimit: rate.NewLimiter(auditRefusalsPerSecond, auditRefusalsBurst)}
	for {
		select {
		case <-ctx.Done():
			log.Info().Msg("stopped serving action requests")
			return nil
		case msg := <-ch:
			s.handle(ctx, msg)
		}
	}
}

type server struct {
	x          *Executor
	v          *Verifier
	audit      Auditor
	log        zerolog.Logger
	recent     *resultCache
	auditLimit *rate.Limiter
	// unaudited counts refusals over the audit rate since the last one
	// audited.
	unaudited int
}

func (s *server) handle(ctx context.Context, msg *nats.Msg) {
	if msg.Reply == "" {
		// Nobody would learn the outcome of an approved change: refuse to
		// make it blind.
		s.refuse(ctx, Verified{}, fmt.Errorf("%w: request without a reply subject", ErrInvalid))
		return
	}
	reply := s.execute(ctx, msg.Data)
	data, err := json.Marshal(reply)
	if err != nil {
		data, _ = json.Marshal(errorReply(fmt.Errorf("encode reply: %w", err)))
	}
	if err := msg.Respond(data); err != nil {
		s.log.Error().Err(err).Msg("action reply not sent")
	}
}

func (s *server) execute(ctx context.Context, data []byte) Reply {
	if len(data) > MaxRequestBytes {
		err := fmt.Errorf("%w: request of %d bytes exceeds %d", ErrInvalid, len(data), MaxRequestBytes)
		s.refuse(ctx, Verified{}, err)
		return errorReply(err)
	}
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
	digest, err := RequestDigest(req)
	if err != nil {
		return errorReply(err)
	}
	if res, ok, same := s.recent.get(req.ID, digest); ok {
		if !same {
			log.Warn().Msg("action id reused for a different request")
			return errorReply(fmt.Errorf("%w: action id %s was already executed with a different request", ErrInvalid, req.ID))
		}
		log.Info().Str("outcome", string(res.Outcome)).Msg("action already executed: stored result returned")
		return Reply{Result: res}
	}

	xctx, cancel := context.WithTimeout(ctx, ExecuteTimeout)
	defer cancel()
	if !vr.Deadline.IsZero() {
		// Nobody waits for the answer after that: stop rather than
		// change the cluster behind the user's back.
		var cancelD context.CancelFunc
		xctx, cancelD = context.WithDeadline(xctx, vr.Deadline)
		defer cancelD()
	}
	res, err := s.x.Execute(xctx, req)
	if err != nil {
		r := errorReply(err)
		log.Warn().Str("code", string(r.Code)).Str("error", r.Error).Msg("action failed")
		return r
	}
	// Only successes are remembered: a failure wrote nothing (or, when
	// internal, may be retried safely), so running it again is harmless.
	s.recent.put(req.ID, digest, res)
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

// resultCache holds the latest results by action id, oldest evicted first.
// It is used from Serve's goroutine only.
type resultCache struct {
	max   int
	order []string
	byID  map[string]cachedResult
}

type cachedResult struct {
	digest string
	result *Result
}

func newResultCache(max int) *resultCache {
	return &resultCache{max: max, byID: make(map[string]cachedResult, max)}
}

func (c *resultCache) get(id string, digest string) (res *Result, ok, same bool) {
	e, ok := c.byID[id]
	if !ok {
		return nil, false, false
	}
	return e.result, true, e.digest == digest
}

func (c *resultCache) put(id string, digest string, res *Result) {
	if _, ok := c.byID[id]; !ok {
		c.order = append(c.order, id)
		if len(c.order) > c.max {
			delete(c.byID, c.order[0])
			c.order = c.order[1:]
		}
	}
	c.byID[id] = cachedResult{digest: digest, result: res}
}
