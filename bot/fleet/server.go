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
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/hcpbot/hcpbot/bot/fleet/wire"
	"github.com/hcpbot/hcpbot/partition"
)

// Defaults of a Server.
const (
	// DefaultConcurrency is how many requests a server answers at once.
	DefaultConcurrency = 4
	// DefaultBacklog is how many requests wait for an answer slot; the
	// others are dropped. A burst of commands (a few people, the digest)
	// waits milliseconds; dropping it made each command wait its whole
	// deadline and say a group did not answer.
	DefaultBacklog = 64
	// DefaultMaxWait is how long a request may wait for a slot: after
	// that its asker (DefaultTimeout) has likely given up, and answering
	// a flood's old requests would only delay the new ones.
	DefaultMaxWait = 2 * time.Second
)

// ServerConfig configures a Server.
type ServerConfig struct {
	// Group is this replica's group: Index of Count (Count > 1).
	Group partition.ID
	Bot   Local
	Conn  *nats.Conn
	// Signer seals the answers: approval.Signer.ForFleet.
	Signer wire.Signer
	// Concurrency bounds the requests answered at once; default
	// DefaultConcurrency. Backlog (default DefaultBacklog) more wait for
	// a slot, each at most MaxWait (default DefaultMaxWait); the others
	// are dropped.
	Concurrency int
	Backlog     int
	MaxWait     time.Duration
	Log         zerolog.Logger
}

// waiting is a request heard while every slot was busy.
type waiting struct {
	m  *nats.Msg
	at time.Time
}

// Server answers the fleet's requests to its group from the local bot.
type Server struct {
	cfg     ServerConfig
	replica string
	sem     chan struct{}
	backlog chan waiting
	stopped atomic.Bool
	wg      sync.WaitGroup
	mu      sync.Mutex
	sub     *nats.Subscription

	answered, dropped, refused, failed atomic.Int64
	inFlight, maxInFlight              atomic.Int64
}

// Stats counts what a server did with the requests it heard.
type Stats struct {
	Answered int64 // answers sent
	Dropped  int64 // requests not answered: the backlog was full, or they waited longer than MaxWait
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
	if cfg.Backlog <= 0 {
		cfg.Backlog = DefaultBacklog
	}
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = DefaultMaxWait
	}
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, fmt.Errorf("fleet: replica id: %w", err)
	}
	return &Server{cfg: cfg, replica: hex.EncodeToString(id[:]), sem: make(chan struct{}, cfg.Concurrency), backlog: make(chan waiting, cfg.Backlog)}, nil
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
	s.stopped.Store(false)
	s.mu.Unlock()
	s.cfg.Log.Info().Str("subject", s.Subject()).Str("replica", s.replica).Msg("answering the fleet's requests")
	return nil
}

// Stop unsubscribes and waits for the answers being made.
func (s *Server) Stop() {
	s.mu.Lock()
	sub := s.sub
	s.sub = nil
	s.stopped.Store(true)
	s.mu.Unlock()
	if sub != nil {
		_ = sub.Unsubscribe()
	}
	s.wg.Wait()
}

// handle runs on the subscription's goroutine: it puts the request in
// the backlog (or drops it: full) and starts a worker when a slot is
// free; a busy worker takes it when done. So a flood costs Concurrency
// answers at a time and a backlog of small requests, never a queue
// without bound.
func (s *Server) handle(m *nats.Msg) {
	switch {
	case !strings.HasPrefix(m.Reply, wire.AnswerPrefix+"."):
		// The reply subject is the requester's choice: the bot answers
		// into the fleet's answer subjects only, never onto a subject
		// its user may publish for other reasons.
		s.refused.Add(1)
		return
	case len(m.Data) > maxRequest:
		s.refused.Add(1) // before it takes room in the backlog
		return
	}
	select {
	case s.backlog <- waiting{m: m, at: time.Now()}:
	default:
		s.drop("fleet requests dropped: every answer slot busy and the backlog full")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sub == nil {
		return // stopped: Stop may be waiting already
	}
	select {
	case s.sem <- struct{}{}:
	default:
		return // every slot busy: a worker takes it when done
	}
	s.enter()
	s.wg.Go(s.work)
}

func (s *Server) drop(why string) {
	if s.dropped.Add(1)%100 == 1 {
		// Logged once a hundred: the flood is not to flood the log.
		s.cfg.Log.Warn().Int64("dropped", s.dropped.Load()).Int("concurrency", s.cfg.Concurrency).Int("backlog", s.cfg.Backlog).Msg(why)
	}
}

// enter counts an answer slot taken.
func (s *Server) enter() {
	n := s.inFlight.Add(1)
	for {
		top := s.maxInFlight.Load()
		if n <= top || s.maxInFlight.CompareAndSwap(top, n) {
			return
		}
	}
}

// work holds a slot and answers the backlog until it is empty. A request
// put in the backlog just as the last worker found it empty is seen by
// that worker's check after it gave its slot back, or finds the slot
// free itself (handle puts it in, then tries for a slot).
func (s *Server) work() {
	for {
		for done := false; !done; {
			select {
			case w := <-s.backlog:
				switch {
				case s.stopped.Load():
				case time.Since(w.at) > s.cfg.MaxWait:
					s.drop("fleet requests dropped: waited too long for an answer slot")
				default:
					s.answer(w.m)
				}
			default:
				done = true
			}
		}
		s.inFlight.Add(-1)
		<-s.sem
		if len(s.backlog) == 0 || s.stopped.Load() {
			return
		}
		select {
		case s.sem <- struct{}{}:
			s.enter()
		default:
			return // another worker holds a slot and will see it
		}
	}
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
