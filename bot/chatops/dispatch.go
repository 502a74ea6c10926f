package chatops

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Defaults of the options.
const (
	DefaultMaxBodyBytes   = 64 << 10
	DefaultAckTimeout     = 2500 * time.Millisecond // Slack allows 3 s
	DefaultHandlerTimeout = 2 * time.Minute
)

// Option configures NewServer and RunSocketMode.
type Option func(*options)

type options struct {
	guard          ReplayGuard
	now            func() time.Time
	maxBody        int64
	log            zerolog.Logger
	reg            prometheus.Registerer
	ackTimeout     time.Duration
	handlerTimeout time.Duration
	responder      *Responder
}

// WithReplayGuard sets the guard against replayed requests (HTTP) and
// redelivered envelopes (Socket Mode). The default is a MemoryReplayGuard,
// which protects one replica only: several replicas need a KVReplayGuard.
func WithReplayGuard(g ReplayGuard) Option { return func(o *options) { o.guard = g } }

// WithClock sets the clock request timestamps are checked against. Slack's
// verifier also checks them against the system clock, so a clock that
// disagrees with it can only make the check stricter.
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// WithMaxBodyBytes bounds request bodies (default DefaultMaxBodyBytes).
func WithMaxBodyBytes(n int64) Option { return func(o *options) { o.maxBody = n } }

// WithLogger sets the logger (default: none).
func WithLogger(l zerolog.Logger) Option { return func(o *options) { o.log = l } }

// WithRegisterer registers the package's metrics with r (default: not
// registered). Registering twice with the same r shares the collectors.
func WithRegisterer(r prometheus.Registerer) Option { return func(o *options) { o.reg = r } }

// WithAckTimeout sets how long a command may take before the user gets
// "working on it" and the reply goes to the response_url (default
// DefaultAckTimeout).
func WithAckTimeout(d time.Duration) Option { return func(o *options) { o.ackTimeout = d } }

// WithHandlerTimeout bounds a handler call through its context (default
// DefaultHandlerTimeout).
func WithHandlerTimeout(d time.Duration) Option { return func(o *options) { o.handlerTimeout = d } }

// WithResponder sets the Responder used for late replies (default: one
// for DefaultResponseURLPrefix). Its prefix also decides which
// response_urls requests may carry.
func WithResponder(r *Responder) Option { return func(o *options) { o.responder = r } }

func buildOptions(opts []Option) (options, error) {
	o := options{
		now:            time.Now,
		maxBody:        DefaultMaxBodyBytes,
		log:            zerolog.Nop(),
		ackTimeout:     DefaultAckTimeout,
		handlerTimeout: DefaultHandlerTimeout,
	}
	for _, opt := range opts {
		opt(&o)
	}
	if o.maxBody <= 0 || o.ackTimeout <= 0 || o.handlerTimeout <= 0 || o.now == nil {
		return options{}, errors.New("chatops: body limit, timeouts and clock must be set and positive")
	}
	if o.guard == nil {
		g := NewMemoryReplayGuard(0, 0)
		g.now = o.now
		o.guard = g
	}
	if o.responder == nil {
		r, err := NewResponder(DefaultResponseURLPrefix, nil)
		if err != nil {
			return options{}, err
		}
		o.responder = r
	}
	return o, nil
}

// metrics of the package. Label values are bounded: reasons and outcomes
// are constants, names are command names and Action* constants.
type metrics struct {
	rejected *prometheus.CounterVec
	accepted *prometheus.CounterVec
	handled  *prometheus.CounterVec
	posts    *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hcpbot_slack_requests_rejected_total",
			Help: "Slack requests refused without being handled, by reason.",
		}, []string{"reason"}),
		accepted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hcpbot_slack_requests_accepted_total",
			Help: "Slack requests authenticated, validated and handed on, by endpoint.",
		}, []string{"endpoint"}),
		handled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hcpbot_chatops_requests_total",
			Help: "Commands and actions by transport, name and outcome (answered, deferred, usage_error, panic).",
		}, []string{"transport", "kind", "name", "outcome"}),
		posts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hcpbot_chatops_response_url_posts_total",
			Help: "Late replies posted to response_urls, by result.",
		}, []string{"result"}),
	}
	if reg != nil {
		for _, c := range []**prometheus.CounterVec{&m.rejected, &m.accepted, &m.handled, &m.posts} {
			if err := reg.Register(*c); err != nil {
				var are prometheus.AlreadyRegisteredError
				if !errors.As(err, &are) {
					return nil, fmt.Errorf("chatops: registering metrics: %w", err)
				}
				existing, ok := are.ExistingCollector.(*prometheus.CounterVec)
				if !ok {
					return nil, fmt.Errorf("chatops: registering metrics: %w", err)
				}
				*c = existing
			}
		}
	}
	for _, r := range rejectReasons {
		m.rejected.WithLabelValues(r)
	}
	return m, nil
}

// Outcomes of hcpbot_chatops_requests_total.
const (
	outcomeAnswered   = "answered"
	outcomeDeferred   = "deferred"
	outcomeUsageError = "usage_error"
	outcomePanic      = "panic"
)

// dispatcher calls the Handler with the acknowledgement deadline and
// delivers late replies. It is shared by the HTTP and Socket Mode paths.
type dispatcher struct {
	h   Handler
	o   options
	m   *metrics
	log zerolog.Logger

	base context.Context // parent of handler contexts; cancelled by close
	stop context.CancelFunc

	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

func newDispatcher(h Handler, o options, m *metrics) *dispatcher {
	base, stop := context.WithCancel(context.Background())
	return &dispatcher{h: h, o: o, m: m, log: o.log, base: base, stop: stop}
}

// errClosed is returned once shutdown has begun.
var errClosed = errors.New("chatops: shutting down")

// start registers a background task unless shutdown has begun.
func (d *dispatcher) start() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return errClosed
	}
	d.wg.Add(1)
	return nil
}

// shutdown refuses new work, waits for running handlers and deliveries
// until ctx ends, then cancels them and waits for them to return.
func (d *dispatcher) shutdown(ctx context.Context) error {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	done := make(chan struct{})
	go func() { d.wg.Wait(); close(done) }()
	select {
	case <-done:
		d.stop()
		return nil
	case <-ctx.Done():
		d.stop()
		<-done
		return ctx.Err()
	}
}

var busyReply = Reply{Text: "The bot is restarting; please try again in a minute."}

// call runs fn, turning a panic into an apology so one bad handler path
// does not take the process down.
func (d *dispatcher) call(kind, name string, fn func(context.Context) Reply) (r Reply, panicked bool) {
	ctx, cancel := context.WithTimeout(d.base, d.o.handlerTimeout)
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			d.log.Error().Str("kind", kind).Str("name", name).Str("panic", fmt.Sprint(p)).Msg("chatops handler panicked")
			r, panicked = Reply{Text: "Internal error while handling this; it has been logged."}, true
		}
	}()
	return fn(ctx), false
}

// command runs req and returns what to acknowledge it with: the reply if it
// came within the ack timeout, otherwise "working on it", the reply then
// going to the response_url when it comes.
func (d *dispatcher) command(req Request) Reply {
	name := req.Command.Name()
	count := func(outcome string) {
		d.m.handled.WithLabelValues(string(req.Transport), "command", name, outcome).Inc()
	}
	if h, isHelp := req.Command.(ShowHelp); isHelp {
		count(outcomeAnswered)
		return helpReply(h)
	}
	if err := d.start(); err != nil {
		return busyReply
	}
	ready := make(chan Reply) // unbuffered: a send succeeds only if the ack is still waiting
	gaveUp := make(chan struct{})
	replied := make(chan struct{})
	go func() {
		defer d.wg.Done()
		defer close(replied)
		r, panicked := d.call("command", name, func(ctx context.Context) Reply {
			return d.h.HandleCommand(d.withLater(ctx, req.Origin, replied), req)
		})
		if panicked {
			count(outcomePanic)
		}
		select {
		case ready <- r:
		case <-gaveUp:
			d.deliver(req.Origin, r)
		}
	}()
	timer := time.NewTimer(d.o.ackTimeout)
	defer timer.Stop()
	select {
	case r := <-ready:
		count(outcomeAnswered)
		return r
	case <-timer.C:
		close(gaveUp)
		count(outcomeDeferred)
		return workingReply
	}
}

// action runs req in the background and posts its reply to the
// response_url: Slack ignores the body of a block_actions acknowledgement.
func (d *dispatcher) action(req ActionRequest) {
	if err := d.start(); err != nil {
		d.log.Warn().Str("action", req.ActionID).Str("user", req.UserID).Msg("action dropped: shutting down")
		return
	}
	replied := make(chan struct{})
	go func() {
		defer d.wg.Done()
		defer close(replied)
		r, panicked := d.call("action", req.ActionID, func(ctx context.Context) Reply {
			return d.h.HandleAction(d.withLater(ctx, req.Origin, replied), req)
		})
		outcome := outcomeAnswered
		if panicked {
			outcome = outcomePanic
		}
		d.m.handled.WithLabelValues(string(req.Transport), "action", req.ActionID, outcome).Inc()
		d.deliver(req.Origin, r)
	}()
}

// withLater gives the handler a LaterFunc posting to o's response_url,
// once the handler's own reply is out (replied closed): a later post that
// overtook it would be replaced by it. The posts are not waited for at
// shutdown: they come from work the handler left running, which is
// bounded by itself.
func (d *dispatcher) withLater(ctx context.Context, o Origin, replied <-chan struct{}) context.Context {
	if o.ResponseURL == "" {
		return ctx
	}
	return WithLater(ctx, func(r Reply) {
		// Never blocks its caller, which may be the handler itself.
		go func() {
			select {
			case <-replied:
			case <-d.base.Done():
				return
			}
			d.deliver(o, r)
		}()
	})
}

// deliver posts a late reply. The response_url is never logged: it is a
// credential for posting into the conversation.
func (d *dispatcher) deliver(o Origin, r Reply) {
	if r.IsZero() {
		return
	}
	result := "ok"
	var err error
	if o.ResponseURL == "" {
		result = "no_response_url"
	} else {
		ctx, cancel := context.WithTimeout(d.base, postTimeout)
		err = d.o.responder.Post(ctx, o.ResponseURL, r)
		cancel()
		switch {
		case err == nil:
		case errors.Is(err, ErrResponseURLUsedUp):
			result = "used_up"
		case errors.Is(err, ErrResponseURLNotAllowed):
			result = "refused"
		default:
			result = "error"
		}
	}
	d.m.posts.WithLabelValues(result).Inc()
	if result != "ok" {
		d.log.Warn().Err(err).Str("result", result).Str("user", o.UserID).Str("channel", o.ChannelID).
			Msg("late chatops reply not delivered")
	}
}
