package bot

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hcpbot/hcpbot/event"
)

// Run consumes the events stream from its start, and sends notifications
// while this replica is the leader, until ctx ends.
//
// Its steps, in this file: an ordered consumer from the stream's start or
// the restored checkpoint (eventsConsumer); on the consumer's goroutine,
// the events of another group's sources skipped before decoding and the
// others decoded (decoder); on another goroutine, each applied in the
// stream's order (applyLoop, apply), and the replay caught up once the
// sequence the stream stood at when Run began is reached (markCaughtUp).
// The flush (flush.go, its loop in clock.go) runs on Run's own goroutine.
func (b *Bot) Run(ctx context.Context) error {
	// The state is a function of the stream: replaying it rebuilds what a
	// crashed or new replica needs, and a Slack message per Key (notify's
	// store) makes the replay's notifications updates, not new posts.
	// A checkpoint (resume.go) replaces the part of the replay it covers.
	stream, err := b.js.Stream(ctx, event.StreamName)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped while starting: a stop, not a failure
		}
		return fmt.Errorf("events stream: %w", err)
	}
	info := stream.CachedInfo()
	until := info.State.LastSeq
	from := b.restore(ctx, info)
	b.mu.Lock()
	b.caughtUp = until == 0
	b.mu.Unlock()
	if until > 0 && from >= until {
		b.markCaughtUp() // the checkpoint covers the whole stream
	}
	cons, err := b.js.OrderedConsumer(ctx, event.StreamName, eventsConsumer(from))
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("events consumer: %w", err)
	}
	// Decoding (the consumer's goroutine) and applying (another) overlap:
	// the two are the correlator's main costs (make bench, B1). The
	// channel keeps the stream's order.
	decoded := make(chan decodedEvent, decodeAhead)
	cc, err := cons.Consume(b.decoder(ctx, decoded))
	if err != nil {
		return fmt.Errorf("consume events: %w", err)
	}
	defer cc.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer b.checkpointAtShutdown(ctx)
	wg.Go(func() { b.checkpointLoop(ctx) })
	wg.Go(func() { b.applyLoop(ctx, decoded, until) })
	b.flushLoop(ctx)
	return nil
}

// eventsConsumer reads every event subject from the stream's start, or
// from the sequence after from (the restored checkpoint's) when it is set.
func eventsConsumer(from uint64) jetstream.OrderedConsumerConfig {
	occ := jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{event.EventsStreamSubjects},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	}
	if from > 0 {
		occ.DeliverPolicy, occ.OptStartSeq = jetstream.DeliverByStartSequencePolicy, from+1
	}
	return occ
}

// decoder is the consumer's handler: it decodes each message (or skips
// another group's, partition.go) and hands it on to applyLoop in order.
func (b *Bot) decoder(ctx context.Context, decoded chan<- decodedEvent) jetstream.MessageHandler {
	sel := newSelector(b.cfg.Partitions, b.cfg.Partition, b.log)
	return func(m jetstream.Msg) {
		d := decodedEvent{}
		if sel.skip(m.Subject()) {
			// Another group's source: not decoded, but its sequence is
			// passed on, so applied and the catch-up advance past it.
			d.skip = true
		} else {
			d.e, d.p, d.err = event.DecodeAll(m.Data())
		}
		if !d.skip && d.err == nil && !event.OnSourceSubject(m.Subject(), d.e.Source) {
			// NATS lets an agent publish only its own source's
			// subjects; a body naming another source is a forgery.
			d.err = fmt.Errorf("%w: source %q on subject %s", errWrongSource, d.e.Source, m.Subject())
		}
		if md, err := m.Metadata(); err == nil {
			d.seq = md.Sequence.Stream
		}
		select {
		case decoded <- d:
		case <-ctx.Done():
		}
	}
}

// applyLoop applies the decoded events in the stream's order until ctx
// ends, and marks the replay caught up at the sequence until, where the
// stream stood when Run began.
func (b *Bot) applyLoop(ctx context.Context, decoded <-chan decodedEvent, until uint64) {
	for {
		select {
		case <-ctx.Done():
			return
		case d := <-decoded:
			if d.skip {
				b.skipped(d.seq)
			} else {
				b.apply(d.e, d.p, d.err, d.seq)
			}
			if d.seq >= until {
				b.markCaughtUp()
			}
		}
	}
}

// errWrongSource: an event whose body names another source than its
// subject, which is what NATS authorised its publisher for.
var errWrongSource = errors.New("event of another source")

// decodeAhead is how many decoded events may wait to be applied.
const decodeAhead = 256

// decodedEvent is one message of the stream as decoder hands it on.
type decodedEvent struct {
	e    event.Event
	p    event.Payload
	err  error
	seq  uint64 // stream sequence, 0 when unknown
	skip bool   // another group's event, not decoded
}

// skipped notes another group's event as applied: a checkpoint taken now
// covers it.
func (b *Bot) skipped(seq uint64) {
	if seq == 0 {
		return
	}
	b.mu.Lock()
	b.applied = seq
	b.mu.Unlock()
}

// markCaughtUp ends the replay: the flush may send from now on, and what
// the replay held back is counted once (reasonReplaying).
func (b *Bot) markCaughtUp() {
	b.mu.Lock()
	if b.caughtUp {
		b.mu.Unlock()
		return
	}
	b.caughtUp = true
	n, held := len(b.incidents), 0
	for _, inc := range b.incidents {
		if inc.n.dirty {
			// What the replay kept from going out: counted once, here,
			// as the flush does not look at incidents while replaying.
			b.holds.hold(&inc.n.held, "incident", inc.Key, reasonReplaying)
			held++
		}
	}
	b.mu.Unlock()
	b.log.Info().Int("incidents", n).Int("held", held).Msg("events replayed: notifying")
	b.wake()
}

// Handle applies one encoded event. Bad events are dead-lettered: counted,
// logged without their content, and skipped, so they never block the stream.
func (b *Bot) Handle(_ context.Context, data []byte) {
	e, p, err := event.DecodeAll(data)
	b.apply(e, p, err, 0)
}

// apply applies a decoded event, or dead-letters it if it did not decode;
// seq is its stream sequence (0 when unknown).
func (b *Bot) apply(e event.Event, p event.Payload, err error, seq uint64) {
	if err != nil {
		b.deadLetter(err, e, seq)
		if seq > 0 {
			b.mu.Lock()
			b.applied = seq
			b.mu.Unlock()
		}
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if seq > 0 {
		b.applied = seq
	}
	b.noteLoss() // an incident this event replaces may be another's to resolve
	before := b.beforeApply(e, p)
	changed := b.model.ApplyDecoded(e, p)
	b.metrics.consumed.WithLabelValues(string(e.Type)).Inc()
	live := b.liveFrom > 0 && seq >= b.liveFrom
	for _, k := range changed {
		b.evaluate(k, e.Time, before, live)
	}
}

// deadLetter counts and logs a bad event without its content (a bad event
// may carry anything): the reason, what is wrong in general terms, and the
// stream sequence to look the message up by (nats stream get).
func (b *Bot) deadLetter(err error, e event.Event, seq uint64) {
	reason := "malformed"
	switch {
	case errors.Is(err, event.ErrTooLarge):
		reason = "too_large"
	case errors.Is(err, event.ErrUnsupportedVersion):
		reason = "unsupported_version"
	case errors.Is(err, event.ErrUnknownType):
		reason = "unknown_type"
	case errors.Is(err, errWrongSource):
		reason = "wrong_source"
	}
	b.metrics.deadLetter.WithLabelValues(reason).Inc()
	l := b.log.Warn().Str("reason", reason).Str("error", event.Describe(err))
	if seq > 0 {
		l = l.Uint64("stream_seq", seq)
	}
	if id, typ := event.Loggable(e); id != "" || typ != "" {
		l = l.Str("id", id).Str("type", string(typ))
	}
	l.Msg("event dead-lettered")
}
