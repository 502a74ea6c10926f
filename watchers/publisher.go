package watchers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/hcpbot/hcpbot/event"
)

// Publisher sends events. Publish must not block on the network: the agent's
// sync functions call it while holding a work item.
type Publisher interface {
	Publish(ctx context.Context, e event.Event) error
}

// ErrBufferFull reports that an event was dropped because NATS has been
// unreachable for longer than the buffer covers; the publisher asks for a
// resync once it delivers again, so the dropped facts are restated.
var ErrBufferFull = errors.New("publish buffer full")

// JetStreamPublisher buffers events in memory (bounded) and publishes them in
// order with their ID as Nats-Msg-Id, retrying until NATS takes them.
type JetStreamPublisher struct {
	js      jetstream.JetStream
	log     zerolog.Logger
	metrics *Metrics
	// resync is called (from the publishing goroutine) when events were
	// dropped and NATS accepts events again.
	resync func()

	buf     chan event.Event
	mu      sync.Mutex
	dropped bool
}

// NewJetStreamPublisher returns a publisher with room for size events.
func NewJetStreamPublisher(js jetstream.JetStream, size int, m *Metrics, log zerolog.Logger) *JetStreamPublisher {
	return &JetStreamPublisher{js: js, log: log, metrics: m, buf: make(chan event.Event, size)}
}

// OnResync sets the function called after dropped events can be restated.
func (p *JetStreamPublisher) OnResync(fn func()) { p.resync = fn }

// Publish enqueues e. It fails only when the buffer is full.
func (p *JetStreamPublisher) Publish(_ context.Context, e event.Event) error {
	select {
	case p.buf <- e:
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
		p.metrics.bufferDepth.Set(float64(len(p.buf)))
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Run publishes buffered events until ctx ends.
func (p *JetStreamPublisher) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case e := <-p.buf:
			p.metrics.bufferDepth.Set(float64(len(p.buf)))
			p.publish(ctx, e)
		}
	}
}

// publish retries one event until NATS takes it or ctx ends: order matters
// (a Ready must not overtake the NotReady before it), so nothing is skipped.
func (p *JetStreamPublisher) publish(ctx context.Context, e event.Event) {
	subject, err := event.Subject(e)
	if err != nil {
		p.metrics.publishErrors.WithLabelValues("invalid").Inc()
		p.log.Error().Err(err).Str("type", string(e.Type)).Msg("event has no valid subject; dropped")
		return
	}
	data, err := event.Encode(e)
	if err != nil {
		p.metrics.publishErrors.WithLabelValues("invalid").Inc()
		p.log.Error().Err(err).Str("type", string(e.Type)).Msg("event does not encode; dropped")
		return
	}
	msg := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
	backoff := 50 * time.Millisecond
	for attempt := 0; ; attempt++ {
		// A publish whose stream leader died gets no ack ever; a short
		// attempt retries it sooner, and the message ID makes the retry
		// harmless if the first one did land.
		pctx, cancel := context.WithTimeout(ctx, publishAttemptTimeout)
		ack, err := p.js.PublishMsg(pctx, msg, jetstream.WithMsgID(e.ID))
		cancel()
		if err == nil {
			if ack.Duplicate {
				p.metrics.duplicates.Inc()
			} else {
				p.metrics.published.WithLabelValues(string(e.Type)).Inc()
			}
			p.metrics.lastPublish.SetToCurrentTime()
			p.afterDelivery()
			return
		}
		if ctx.Err() != nil {
			return
		}
		p.metrics.publishErrors.WithLabelValues("nats").Inc()
		if attempt == 0 || attempt%20 == 0 {
			p.log.Warn().Err(err).Str("subject", subject).Int("attempt", attempt+1).Msg("publish failed; retrying until NATS takes it")
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
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
