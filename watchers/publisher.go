package watchers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/hcpbot/hcpbot/event"
)

// Publisher sends events. Publish must not block on the network: the agent's
// sync functions call it while holding a work item. PublishWait waits for
// room instead of dropping: snapshots use it, since a snapshot that dropped
// its own events would ask for another snapshot, forever.
type Publisher interface {
	Publish(ctx context.Context, e event.Event) error
	PublishWait(ctx context.Context, e event.Event) error
}

// ErrBufferFull reports that an event was dropped because NATS has been
// unreachable for longer than the buffer covers; the publisher asks for a
// resync once it delivers again, so the dropped facts are restated.
var ErrBufferFull = errors.New("publish buffer full")

// JetStreamPublisher buffers events in memory (bounded) and publishes them in
// order with their ID as Nats-Msg-Id, retrying until NATS takes them.
type JetStreamPublisher struct {
	js      ConnPublisher
	log     zerolog.Logger
	metrics *Metrics
	// resync is called (from the publishing goroutine) when events were
	// dropped and NATS accepts events again.
	resync func()

	buf    chan event.Event
	window int
	// Run's own state.
	seq     uint64         // events sent
	busy    map[string]int // in-flight events by objectKey
	held    *event.Event   // waits for its object's event in flight
	mu      sync.Mutex
	dropped bool
	problem *publishProblem // guarded by mu
	// ensureStream, when set, is called while NATS says the events stream
	// does not exist (OnStreamMissing).
	ensureStream func(context.Context) error
	lastEnsure   time.Time // Run's own
	// pending counts events taken and neither delivered nor dropped.
	pending atomic.Int64
}

// publishProblem is an episode of publishes NATS refuses for a reason
// that retrying alone does not cure: the events stream is gone, the
// agent's user may not publish the subject, the message is larger than
// the server or stream takes. The publisher keeps the events and retries
// (the cause may be fixed outside the agent), and says so: /readyz fails
// (Problem), hcpbot_agent_publish_errors_total counts the kind, and one
// log line marks the episode's start and one its end.
type publishProblem struct {
	kind   string // publish error kind: no_stream, permission, too_large, rejected
	reason string
	since  time.Time
	logged bool
}

// ProblemAfter is how long refusals must last before they are a problem:
// a stream leader election answers "no responders" for about two seconds.
const ProblemAfter = 10 * time.Second

// ConnPublisher is what a JetStreamPublisher sends with: JetStream
// publishes, and their connection, whose last error tells a refused
// publish from a timed-out one.
type ConnPublisher interface {
	jetstream.Publisher
	Conn() *nats.Conn
}

// NewJetStreamPublisher returns a publisher with room for size events.
func NewJetStreamPublisher(js ConnPublisher, size int, m *Metrics, log zerolog.Logger) *JetStreamPublisher {
	return &JetStreamPublisher{js: js, log: log, metrics: m, buf: make(chan event.Event, size), window: DefaultPublishWindow, busy: map[string]int{}}
}

// DefaultPublishWindow is how many events a publisher has in flight at
// most: enough to keep JetStream busy (make bench, B1: 256 capped the
// agent at 37,000 events/s with the process's CPU half idle, 1,024 gave
// 49,000 and 2,048 52,000), and half the client's own limit of pending
// asynchronous publishes (4,000), which would stall the publisher.
const DefaultPublishWindow = 2048

// OnResync sets the function called after dropped events can be restated.
func (p *JetStreamPublisher) OnResync(fn func()) { p.resync = fn }

// OnStreamMissing sets the function called (from Run, at most every
// ProblemAfter) while NATS says no stream takes the events: an agent with
// its own embedded server re-creates the stream. Against an external NATS
// leave it unset: the bot owns the stream, and the agent's user may not
// create it.
func (p *JetStreamPublisher) OnStreamMissing(fn func(context.Context) error) { p.ensureStream = fn }

// Problem is nil unless publishes have been refused for at least
// ProblemAfter for a reason retrying alone does not cure; then it says
// why and how many events wait. For /readyz.
func (p *JetStreamPublisher) Problem() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	pp := p.problem
	if pp == nil || time.Since(pp.since) < ProblemAfter {
		return nil
	}
	return fmt.Errorf("NATS refuses the agent's events for %s (%s): %s; %d events held",
		time.Since(pp.since).Round(time.Second), pp.kind, pp.reason, p.pending.Load())
}

// Publish enqueues e. It fails only when the buffer is full.
func (p *JetStreamPublisher) Publish(_ context.Context, e event.Event) error {
	select {
	case p.buf <- e:
		p.pending.Add(1)
		p.metrics.bufferDepth.Set(float64(len(p.buf)))
		return nil
	default:
		p.mu.Lock()
		p.dropped = true
		p.mu.Unlock()
		p.metrics.publishErrors.WithLabelValues("buffer_full").Inc()
		return fmt.Errorf("%w (%d events)", ErrBufferFull, cap(p.buf))
	}
}

// PublishWait enqueues e, waiting for room while the buffer is full.
func (p *JetStreamPublisher) PublishWait(ctx context.Context, e event.Event) error {
	select {
	case p.buf <- e:
		p.pending.Add(1)
		p.metrics.bufferDepth.Set(float64(len(p.buf)))
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Run publishes buffered events until ctx ends, up to DefaultPublishWindow
// of them in flight at once: waiting for each acknowledgement before sending the next
// would cap the agent at one event per round trip.
func (p *JetStreamPublisher) Run(ctx context.Context) {
	var q []inflight // oldest first
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var timed uint64 // the entry the timer runs for
	for {
		buf := p.buf
		if len(q) >= p.window {
			buf = nil // full window: settle the oldest first
		}
		if p.held != nil {
			// The next event is about an object already in flight: its
			// facts keep their order, so the earlier one settles first.
			if p.busy[objectKey(*p.held)] == 0 {
				e := *p.held
				p.held = nil
				q = p.send(ctx, q, e)
				continue
			}
			buf = nil
		}
		if len(q) == 0 {
			select {
			case <-ctx.Done():
				return
			case e := <-buf:
				q = p.send(ctx, q, e)
			}
			continue
		}
		head := &q[0]
		if timed != head.seq {
			timer.Reset(time.Until(head.deadline))
			timed = head.seq
		}
		select {
		case <-ctx.Done():
			return
		case e := <-buf:
			q = p.send(ctx, q, e)
		case ack := <-head.fut.Ok():
			p.finish(ctx, *head, ack, nil)
			q = p.pop(q)
		case err := <-head.fut.Err():
			p.finish(ctx, *head, nil, err)
			q = p.pop(q)
		case <-timer.C:
			timed = 0
			ack, err := settled(head.fut)
			p.finish(ctx, *head, ack, err)
			q = p.pop(q)
		}
	}
}

// pop drops the settled head of the window.
func (p *JetStreamPublisher) pop(q []inflight) []inflight {
	k := q[0].key
	if p.busy[k]--; p.busy[k] <= 0 {
		delete(p.busy, k)
	}
	q[0] = inflight{}
	return q[1:]
}

// objectKey names the object an event is about: at most one event per
// object is in flight, so a failed publish retried behind later ones can
// reorder different objects only, never the facts of one.
func objectKey(e event.Event) string {
	src, ns, name := e.Source, "", ""
	if e.Cluster != nil {
		ns, name = e.Cluster.Namespace, e.Cluster.Name
	}
	o := e.Object
	return src + "/" + ns + "/" + name + "/" + string(e.Type) + "/" + o.Kind + "/" + o.Namespace + "/" + o.Name
}

// inflight is an event sent and not yet acknowledged.
type inflight struct {
	e        event.Event
	key      string // objectKey(e)
	msg      *nats.Msg
	fut      jetstream.PubAckFuture
	deadline time.Time
	seq      uint64 // identity for the timer, from 1
}

var errAckTimeout = errors.New("no acknowledgement within the attempt timeout")

// send publishes e asynchronously and appends it to the window; an event
// that cannot be sent at once goes the synchronous retrying way, which
// keeps the order of what follows.
func (p *JetStreamPublisher) send(ctx context.Context, q []inflight, e event.Event) []inflight {
	p.metrics.bufferDepth.Set(float64(len(p.buf)))
	k := objectKey(e)
	if p.busy[k] > 0 {
		p.held = &e
		return q
	}
	msg, ok := p.message(e)
	if !ok {
		return q
	}
	fut, err := p.js.PublishMsgAsync(msg, jetstream.WithMsgID(e.ID))
	p.seq++
	if err != nil {
		// Settle what is in flight first, so the retry is the newest.
		for len(q) > 0 {
			p.settle(ctx, q[0])
			q = p.pop(q)
		}
		p.retry(ctx, e, msg, err)
		return q
	}
	p.busy[k]++
	return append(q, inflight{e: e, key: k, msg: msg, fut: fut, deadline: time.Now().Add(publishAttemptTimeout), seq: p.seq})
}

// settle waits for one in-flight event, retrying it if it failed.
func (p *JetStreamPublisher) settle(ctx context.Context, f inflight) {
	t := time.NewTimer(time.Until(f.deadline))
	defer t.Stop()
	select {
	case <-ctx.Done():
	case ack := <-f.fut.Ok():
		p.finish(ctx, f, ack, nil)
	case err := <-f.fut.Err():
		p.finish(ctx, f, nil, err)
	case <-t.C:
		ack, err := settled(f.fut)
		p.finish(ctx, f, ack, err)
	}
}

// settled is the outcome of a future whose deadline passed: its ack or
// error if it has one by now (a select that also saw the timer picks at
// random, and the real error says more than a timeout), else
// errAckTimeout.
func settled(fut jetstream.PubAckFuture) (*jetstream.PubAck, error) {
	select {
	case ack := <-fut.Ok():
		return ack, nil
	case err := <-fut.Err():
		return nil, err
	default:
		return nil, errAckTimeout
	}
}

// finish records the outcome of an in-flight event: delivered, or retried
// until it is.
func (p *JetStreamPublisher) finish(ctx context.Context, f inflight, ack *jetstream.PubAck, err error) {
	if err != nil {
		p.retry(ctx, f.e, f.msg, err)
		return
	}
	p.delivered(f.e, ack.Duplicate)
}

// message encodes e, or drops it (counted and logged) if it cannot be.
func (p *JetStreamPublisher) message(e event.Event) (*nats.Msg, bool) {
	subject, err := event.Subject(e)
	if err != nil {
		p.pending.Add(-1)
		p.metrics.publishErrors.WithLabelValues("invalid").Inc()
		p.log.Error().Err(err).Str("type", string(e.Type)).Msg("event has no valid subject; dropped")
		return nil, false
	}
	data, err := event.Encode(e)
	if err != nil {
		p.pending.Add(-1)
		p.metrics.publishErrors.WithLabelValues("invalid").Inc()
		p.log.Error().Err(err).Str("type", string(e.Type)).Msg("event does not encode; dropped")
		return nil, false
	}
	return &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}, true
}

func (p *JetStreamPublisher) delivered(e event.Event, duplicate bool) {
	p.pending.Add(-1)
	p.mu.Lock()
	pp := p.problem
	p.problem = nil
	p.mu.Unlock()
	if pp != nil && pp.logged {
		p.log.Info().Str("kind", pp.kind).Dur("after", time.Since(pp.since)).Msg("NATS takes the agent's events again")
	}
	if duplicate {
		p.metrics.duplicates.Inc()
	} else {
		p.metrics.published.WithLabelValues(string(e.Type)).Inc()
	}
	p.metrics.lastPublish.SetToCurrentTime()
	p.afterDelivery()
}

// retry publishes one event synchronously until NATS takes it or ctx
// ends. Events behind it in the window may land first: the bot orders the
// facts about an object by their own times (diagnose.stamp), and the
// message ID makes a copy that did land harmless.
func (p *JetStreamPublisher) retry(ctx context.Context, e event.Event, msg *nats.Msg, first error) {
	if ctx.Err() != nil {
		return
	}
	if p.failed(ctx, msg, first) == kindTransient {
		p.log.Warn().Err(first).Str("subject", msg.Subject).Msg("publish failed; retrying until NATS takes it")
	}
	backoff := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		// A publish whose stream leader died gets no ack ever; a short
		// attempt retries it sooner.
		pctx, cancel := context.WithTimeout(ctx, publishAttemptTimeout)
		ack, err := p.js.PublishMsg(pctx, msg, jetstream.WithMsgID(e.ID))
		cancel()
		if err == nil {
			p.delivered(e, ack.Duplicate)
			return
		}
		if ctx.Err() != nil {
			return
		}
		if p.failed(ctx, msg, err) == kindTransient && attempt%20 == 0 {
			p.log.Warn().Err(err).Str("subject", msg.Subject).Int("attempt", attempt+1).Msg("publish failed; retrying until NATS takes it")
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// kindTransient is the publish error kind of what passes by itself
// (timeouts, reconnects, elections).
const kindTransient = "nats"

// failed counts one failed attempt by kind and keeps the problem episode
// up to date: started at the first refusal of a kind that needs a fix,
// logged once when it has lasted ProblemAfter. A transient error neither
// starts nor ends an episode.
func (p *JetStreamPublisher) failed(ctx context.Context, msg *nats.Msg, err error) string {
	kind := p.errorKind(msg, err)
	p.metrics.publishErrors.WithLabelValues(kind).Inc()
	if kind == kindTransient {
		return kind
	}
	p.mu.Lock()
	pp := p.problem
	if pp == nil {
		pp = &publishProblem{since: time.Now()}
		p.problem = pp
	}
	pp.kind, pp.reason = kind, err.Error()
	confirmed := time.Since(pp.since) >= ProblemAfter
	logNow := confirmed && !pp.logged
	if logNow {
		pp.logged = true
	}
	p.mu.Unlock()
	if logNow {
		p.log.Error().Err(err).Str("kind", kind).Str("subject", msg.Subject).Int64("held", p.pending.Load()).
			Msg("NATS refuses the agent's events; holding them and retrying, /readyz fails until NATS takes them")
	}
	if confirmed && kind == "no_stream" && p.ensureStream != nil && time.Since(p.lastEnsure) >= ProblemAfter {
		p.lastEnsure = time.Now()
		if err := p.ensureStream(ctx); err != nil {
			p.log.Warn().Err(err).Msg("could not re-create the events stream")
		} else {
			p.log.Info().Msg("re-created the events stream")
		}
	}
	return kind
}

// errorKind sorts a failed publish for hcpbot_agent_publish_errors_total.
func (p *JetStreamPublisher) errorKind(msg *nats.Msg, err error) string {
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, jetstream.ErrStreamNotFound):
		// No stream listens on the subject (nats.ErrNoResponders).
		return "no_stream"
	case errors.Is(err, nats.ErrPermissionViolation):
		return "permission"
	case errors.Is(err, nats.ErrMaxPayload):
		return "too_large"
	case errors.As(err, &apiErr):
		if apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum {
			return "too_large"
		}
		if apiErr.Code >= 500 {
			return kindTransient
		}
		return "rejected" // the stream answered and said no
	}
	// The server refuses a publish it does not permit asynchronously (the
	// request itself just gets no reply): a permissions violation for
	// this very subject explains the timeout.
	if nc := p.js.Conn(); nc != nil {
		if last := nc.LastError(); errors.Is(last, nats.ErrPermissionViolation) && strings.Contains(last.Error(), `"`+msg.Subject+`"`) {
			return "permission"
		}
	}
	return kindTransient
}

// publishAttemptTimeout bounds one publish; JetStream acks in
// milliseconds, and a leader election in an R3 stream takes about two
// seconds.
const publishAttemptTimeout = 2 * time.Second

func (p *JetStreamPublisher) afterDelivery() {
	p.mu.Lock()
	dropped := p.dropped
	// Wait until the backlog is out: restating while old events still
	// queue would only be dropped again.
	if dropped && len(p.buf) < cap(p.buf)/2 {
		p.dropped = false
	} else {
		dropped = false
	}
	p.mu.Unlock()
	if dropped && p.resync != nil {
		p.log.Info().Msg("events were dropped while NATS was unreachable; resyncing")
		p.resync()
	}
}
