package chatops

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/slack-go/slack"
	"github.com/slack-go/slack/socketmode"
)

// maxSocketInFlight bounds the envelopes handled at once; beyond it the
// event loop waits, and socketmode's own buffers apply back-pressure.
const maxSocketInFlight = 64

// acker is the part of *socketmode.Client the event loop answers through.
type acker interface {
	AckCtx(ctx context.Context, envelopeID string, payload any) error
}

// RunSocketMode serves h over Socket Mode until ctx ends: client must be
// built with an app-level token (slack.OptionAppLevelToken). Every envelope
// is acknowledged: a slash command with its reply (or "working on it" and
// the reply later through its response_url, as over HTTP), anything else
// with an empty payload. Slack redelivers envelopes acknowledged late; the
// replay guard (WithReplayGuard, shared by replicas) drops the repeats.
//
// It returns nil when ctx ends, or the error that made the client give up.
// Running handlers then get DefaultAckTimeout to finish before their
// contexts are cancelled. Options as for NewServer; log overrides
// WithLogger.
func RunSocketMode(ctx context.Context, client *socketmode.Client, h Handler, log zerolog.Logger, opts ...Option) error {
	if client == nil || h == nil {
		return errors.New("chatops: RunSocketMode needs a client and a handler")
	}
	sm, err := newSocketServer(h, log, opts...)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	runErr := make(chan error, 1)
	clientDone := make(chan struct{})
	go func() {
		defer close(clientDone)
		runErr <- client.RunContext(ctx)
	}()
	err = sm.serve(ctx, client.Events, client, runErr)
	cancel()
	select {
	case <-clientDone:
	case <-time.After(5 * time.Second):
		log.Warn().Msg("socket mode client slow to stop")
	}
	// Give running handlers a moment to answer before cancelling them.
	sctx, scancel := context.WithTimeout(context.Background(), DefaultAckTimeout)
	defer scancel()
	_ = sm.d.shutdown(sctx)
	return err
}

type socketServer struct {
	o   options
	m   *metrics
	d   *dispatcher
	log zerolog.Logger
	sem chan struct{}
	wg  sync.WaitGroup // envelopes being handled
}

func newSocketServer(h Handler, log zerolog.Logger, opts ...Option) (*socketServer, error) {
	o, err := buildOptions(append(opts, WithLogger(log)))
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(o.reg)
	if err != nil {
		return nil, err
	}
	return &socketServer{o: o, m: m, d: newDispatcher(h, o, m), log: log, sem: make(chan struct{}, maxSocketInFlight)}, nil
}

// serve reads events until ctx ends or the client stops.
func (s *socketServer) serve(ctx context.Context, events <-chan socketmode.Event, ack acker, runErr <-chan error) error {
	defer s.wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-runErr:
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("chatops: socket mode: %w", err)
		case evt := <-events:
			if evt.Request == nil || evt.Request.EnvelopeID == "" {
				s.logEvent(evt)
				continue
			}
			select {
			case s.sem <- struct{}{}:
			case <-ctx.Done():
				return nil
			}
			s.wg.Go(func() {
				defer func() { <-s.sem }()
				s.handle(ctx, evt, ack)
			})
		}
	}
}

// logEvent logs the client's own events (connection state, errors).
func (s *socketServer) logEvent(evt socketmode.Event) {
	switch evt.Type {
	case socketmode.EventTypeConnectionError, socketmode.EventTypeInvalidAuth,
		socketmode.EventTypeIncomingError, socketmode.EventTypeErrorWriteFailed, socketmode.EventTypeErrorBadMessage:
		// Data is an error or a struct with the cause; neither holds the token.
		s.log.Warn().Str("event", string(evt.Type)).Str("data", fmt.Sprintf("%v", evt.Data)).Msg("socket mode")
	default:
		s.log.Debug().Str("event", string(evt.Type)).Msg("socket mode")
	}
}

// handle answers one envelope.
func (s *socketServer) handle(ctx context.Context, evt socketmode.Event, ack acker) {
	id := evt.Request.EnvelopeID
	reply, origin, err := s.translate(ctx, evt)
	if err != nil {
		var re *requestError
		reason := reasonMalformed
		if errors.As(err, &re) {
			reason = re.Reason
		}
		s.m.rejected.WithLabelValues(reason).Inc()
		s.log.Warn().Err(err).Str("reason", reason).Str("event", string(evt.Type)).Msg("socket mode envelope rejected")
		// Acknowledged all the same, or Slack keeps redelivering it.
	}
	var payload any
	if !reply.IsZero() {
		payload = reply.wire()
	}
	err = ack.AckCtx(ctx, id, payload)
	if err != nil && payload != nil && ctx.Err() == nil {
		// Slack drops acknowledgements of 20 KB or more (slack-go refuses
		// to send them): acknowledge empty, post the reply instead.
		s.log.Warn().Err(err).Msg("socket mode reply too large for an ack; posting it to the response_url")
		err = ack.AckCtx(ctx, id, nil)
		if err == nil && s.d.start() == nil {
			go func() {
				defer s.d.wg.Done()
				s.d.deliver(origin, reply)
			}()
		}
	}
	if err != nil {
		s.log.Warn().Err(err).Str("event", string(evt.Type)).Msg("socket mode ack failed")
	}
}

// translate validates an envelope and runs it: a slash command yields the
// reply to acknowledge with, an action runs in the background.
func (s *socketServer) translate(ctx context.Context, evt socketmode.Event) (Reply, Origin, error) {
	switch evt.Type {
	case socketmode.EventTypeSlashCommand, socketmode.EventTypeInteractive:
	default:
		return Reply{}, Origin{}, nil // events_api and the like: not subscribed, just acknowledged
	}
	// Slack redelivers an envelope it thinks was not acknowledged in time;
	// running a command twice is worse than dropping a redelivery.
	gctx, cancel := context.WithTimeout(ctx, guardTimeout)
	first, err := s.o.guard.FirstSeen(gctx, envelopeKey(evt.Request.EnvelopeID))
	cancel()
	switch {
	case err != nil:
		return Reply{}, Origin{}, &requestError{Reason: reasonGuardError, Detail: err.Error()}
	case !first:
		return Reply{}, Origin{}, &requestError{Reason: reasonReplay, Detail: "envelope already handled"}
	}
	switch data := evt.Data.(type) {
	case slack.SlashCommand:
		o, err := originFromCommand(TransportSocketMode, data, s.o.responder.Allowed)
		if err != nil {
			return Reply{}, Origin{}, err
		}
		s.m.accepted.WithLabelValues("socket_commands").Inc()
		return answerCommand(s.d, o, data.Text), o, nil
	case slack.InteractionCallback:
		req, err := actionFromCallback(TransportSocketMode, &data, s.o.responder.Allowed)
		if err != nil {
			return Reply{}, Origin{}, err
		}
		s.m.accepted.WithLabelValues("socket_actions").Inc()
		s.d.action(req)
		return Reply{}, req.Origin, nil
	}
	return Reply{}, Origin{}, malformed(fmt.Sprintf("unexpected %T for %s", evt.Data, evt.Type))
}

// envelopeKey keeps envelope ids apart from HTTP replay keys and makes them
// valid KV keys whatever Slack puts in them.
func envelopeKey(id string) string {
	sum := sha256.Sum256([]byte("socketmode:" + id))
	return hex.EncodeToString(sum[:])
}
