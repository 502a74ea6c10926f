package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/hcpbot/hcpbot/bot/fleet/wire"
	"github.com/hcpbot/hcpbot/partition"
)

// DefaultConcurrency is how many requests a server answers at once.
const DefaultConcurrency = 4

// ServerConfig configures a Server.
type ServerConfig struct {
	// Group is this replica's group: Index of Count (Count > 1).
	Group partition.ID
	Bot   Local
	Conn  *nats.Conn
	// Signer seals the answers: approval.Signer.ForFleet.
	Signer wire.Signer
	// Concurrency bounds the requests answered at once; default
	// DefaultConcurrency. Others are dropped while all are busy.
	Concurrency int
	Log         zerolog.Logger
}

// Server answers the fleet's requests to its group from the local bot.
type Server struct {
	cfg     ServerConfig
	replica string
	sem     chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex
	sub     *nats.Subscription

	answered, dropped, refused, failed atomic.Int64
	inFlight, maxInFlight              atomic.Int64
}

// Stats counts what a server did with the requests it heard.
type Stats struct {
	Answered int64 // answers sent
	Dropped  int64 // requests not answered: Concurrency answers were running
	Refused  int64 // malformed requests, or a reply subject outside the fleet's
	Failed   int64 // answers not encoded, sealed or sent
	// MaxInFlight is the most answers that were being made at once.
	MaxInFlight int64
}

// NewServer checks cfg and returns a Server; Run starts it.
func NewServer(cfg ServerConfig) (*Server, error) {
	switch {
	case cfg.Group.Count < 2 || cfg.Group.Index < 0 || cfg.Group.Index >= cfg.Group.Count:
		return nil, fmt.Errorf("fleet: group %d of %d: a fleet has at least 2 groups", cfg.Group.Index, cfg.Group.Count)
	case cfg.Bot == nil || cfg.Conn == nil:
		return nil, errors.New("fleet: server needs the bot and a NATS connection")
	case cfg.Signer == nil:
		return nil, errors.New("fleet: no signing key: an unsealed answer is one anybody with the bot's NATS credentials can give")
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, fmt.Errorf("fleet: replica id: %w", err)
	}
	return &Server{cfg: cfg, replica: hex.EncodeToString(id[:]), sem: make(chan struct{}, cfg.Concurrency)}, nil
}

// Stats returns the server's counts so far.
func (s *Server) Stats() Stats {
	return Stats{Answered: s.answered.Load(), Dropped: s.dropped.Load(), Refused: s.refused.Load(), Failed: s.failed.Load(), MaxInFlight: s.maxInFlight.Load()}
}

// Subject is the subject the server answers on.
func (s *Server) Subject() string { return wire.Subject(s.cfg.Group.Count, s.cfg.Group.Index) }

// Run answers requests until ctx ends, then waits for the answers being
// made.
func (s *Server) Run(ctx context.Context) error {
	if err := s.Start(); err != nil {
		return err
	}
	<-ctx.Done()
	s.Stop()
	return nil
}

// Start subscribes: once it returns, the server answers.
func (s *Server) Start() error {
	sub, err := s.cfg.Conn.Subscribe(s.Subject(), s.handle)
	if err != nil {
		return fmt.Errorf("fleet: subscribe %s: %w", s.Subject(), err)
	}
	// Requests are small; a flood queues at most this many before the
	// client library drops them (the server sees a slow consumer).
	if err := sub.SetPendingLimits(1024, 1<<20); err != nil {
		_ = sub.Unsubscribe()
		return fmt.Errorf("fleet: subscribe %s: %w", s.Subject(), err)
	}
	if err := s.cfg.Conn.Flush(); err != nil {
		s.cfg.Log.Warn().Err(err).Str("subject", s.Subject()).Msg("fleet subscription not confirmed yet")
	}
	s.mu.Lock()
	s.sub = sub
	s.mu.Unlock()
	s.cfg.Log.Info().Str("subject", s.Subject()).Str("replica", s.replica).Msg("answering the fleet's requests")
	return nil
}

// Stop unsubscribes and waits for the answers being made.
func (s *Server) Stop() {
	s.mu.Lock()
	sub := s.sub
	s.sub = nil
	s.mu.Unlock()
	if sub != nil {
		_ = sub.Unsubscribe()
	}
	s.wg.Wait()
}

// handle runs on the subscription's goroutine: it takes a slot or drops
// the request, so a flood never queues answers.
func (s *Server) handle(m *nats.Msg) {
	if !strings.HasPrefix(m.Reply, wire.AnswerPrefix+".") {
		// The reply subject is the requester's choice: the bot answers
		// into the fleet's answer subjects only, never onto a subject
		// its user may publish for other reasons.
		s.refused.Add(1)
		return
	}
	select {
	case s.sem <- struct{}{}:
	default:
		if s.dropped.Add(1)%100 == 1 {
			// Logged once a hundred: the flood is not to flood the log.
			s.cfg.Log.Warn().Int64("dropped", s.dropped.Load()).Int("concurrency", s.cfg.Concurrency).Msg("fleet requests dropped: every answer slot busy")
		}
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sub == nil {
		<-s.sem // stopped: Stop may be waiting already
		return
	}
	n := s.inFlight.Add(1)
	for {
		top := s.maxInFlight.Load()
		if n <= top || s.maxInFlight.CompareAndSwap(top, n) {
			break
		}
	}
	s.wg.Go(func() {
		defer func() { s.inFlight.Add(-1); <-s.sem }()
		s.answer(m)
	})
}

func (s *Server) answer(m *nats.Msg) {
	r, err := decodeRequest(m.Data)
	if err != nil {
		s.refused.Add(1)
		s.cfg.Log.Debug().Err(err).Msg("fleet request refused")
		return
	}
	a, err := answerFrom(s.cfg.Bot, r)
	if err != nil {
		s.refused.Add(1)
		s.cfg.Log.Debug().Err(err).Msg("fleet request refused")
		return
	}
	data, err := encode(a)
	if err != nil {
		s.failed.Add(1)
		s.cfg.Log.Error().Err(err).Str("op", r.Op).Msg("fleet answer not encoded")
		return
	}
	chunks, err := wire.Seal(s.cfg.Signer, s.cfg.Group.Count, s.cfg.Group.Index, m.Data, s.replica, data, int(s.cfg.Conn.MaxPayload()))
	if err != nil {
		s.failed.Add(1)
		s.cfg.Log.Error().Err(err).Str("op", r.Op).Msg("fleet answer not sealed")
		return
	}
	for _, c := range chunks {
		if err := s.cfg.Conn.Publish(m.Reply, c); err != nil {
			s.failed.Add(1)
			s.cfg.Log.Warn().Err(err).Str("op", r.Op).Msg("fleet answer not sent")
			return
		}
	}
	s.answered.Add(1)
}
