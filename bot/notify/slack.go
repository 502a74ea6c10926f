package notify

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hcpbot/hcpbot/bot/blockkit"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/slack-go/slack"
)

// Defaults of SlackConfig.
const (
	// Slack allows about one post per second and channel with short
	// bursts (about 3). A burst one smaller than Slack's keeps a token of
	// margin: we take ours before the request leaves, Slack counts on
	// arrival, and network jitter would otherwise earn the odd 429.
	DefaultPostRate  = 1.0
	DefaultPostBurst = 2
	// chat.update is Tier 3: about 50 per minute for the workspace.
	DefaultUpdateRate  = 50.0 / 60
	DefaultUpdateBurst = 3

	DefaultAttemptTimeout = 15 * time.Second
	DefaultBackoffBase    = 500 * time.Millisecond
	DefaultBackoffMax     = time.Minute
	// A claim only has to outlive one attempt (a KV write, one call and
	// the KV write of its result), and is renewed before every attempt.
	DefaultClaimLease = 30 * time.Second
	DefaultClaimPoll  = 500 * time.Millisecond
	// DefaultReplyShare lets a waiting reply through after this many root
	// posts in a row, so a storm of new roots delays replies but cannot
	// starve them.
	DefaultReplyShare = 3
	// DefaultReplyPatience is how long a reply yields to new roots before
	// it takes its share: a burst of six unrelated incidents posts all
	// six roots (one a second) before the first one's details.
	DefaultReplyPatience     = 10 * time.Second
	DefaultMaxPendingReplies = 10000
	// DefaultOrphanWait is how long the replies behind a leader-only
	// root dropped for want of the lease wait for a root: the leader
	// renders every incident it holds when it takes over, within a
	// flush; one it never posts (folded into a storm, healed unposted)
	// would otherwise keep them queued for as long as this process runs.
	DefaultOrphanWait = 10 * time.Minute
)

// Slack API methods, the "method" label of the metrics.
const (
	methodPost   = "chat.postMessage"
	methodUpdate = "chat.update"
	// Lookups of posts whose ts was not recorded (ledger.go).
	methodHistory = "conversations.history"
	methodReplies = "conversations.replies"
)

// SlackAPI is the part of *slack.Client the notifier uses.
type SlackAPI interface {
	PostMessageContext(ctx context.Context, channelID string, options ...slack.MsgOption) (string, string, error)
	UpdateMessageContext(ctx context.Context, channelID, timestamp string, options ...slack.MsgOption) (string, string, string, error)
	// The lookups find a post whose ts was never recorded (ledger.go).
	GetConversationHistoryContext(ctx context.Context, params *slack.GetConversationHistoryParameters) (*slack.GetConversationHistoryResponse, error)
	GetConversationRepliesContext(ctx context.Context, params *slack.GetConversationRepliesParameters) ([]slack.Message, bool, string, error)
}

// NewSlackClient returns a slack-go client for token. apiURL replaces
// Slack's ("https://slack.com/api/"), e.g. with a test recorder's; hc nil
// means http.DefaultClient, whose transport honours HTTPS_PROXY. The client
// does not retry by itself: the notifier owns retries and rate limits.
func NewSlackClient(token, apiURL string, hc *http.Client) *slack.Client {
	var opts []slack.Option
	if apiURL != "" {
		if !strings.HasSuffix(apiURL, "/") {
			apiURL += "/"
		}
		opts = append(opts, slack.OptionAPIURL(apiURL))
	}
	if hc != nil {
		opts = append(opts, slack.OptionHTTPClient(hc))
	}
	return slack.New(token, opts...)
}

// SlackConfig configures a Slack notifier. Zero values mean the defaults.
type SlackConfig struct {
	Client SlackAPI // required, e.g. NewSlackClient(...)
	// Store keeps Key → root message and the replies posted; shared by
	// replicas and surviving restarts with a KVStore. Nil means a
	// MemoryStore.
	Store      Store
	Registerer prometheus.Registerer // nil: metrics are not registered
	Log        zerolog.Logger

	PostRate    float64 // chat.postMessage per second and channel
	PostBurst   int
	UpdateRate  float64 // chat.update per second, workspace-wide
	UpdateBurst int

	AttemptTimeout time.Duration // one Slack call plus its store writes
	BackoffBase    time.Duration // first pause after a 5xx or network error
	BackoffMax     time.Duration

	ClaimLease time.Duration // after this, another instance takes a claim over
	ClaimPoll  time.Duration // how often to look for another instance's root
	OrphanWait time.Duration // see DefaultOrphanWait

	ReplyShare        int           // see DefaultReplyShare
	ReplyPatience     time.Duration // see DefaultReplyPatience; negative: none
	MaxPendingReplies int           // beyond this Reply returns ErrQueueFull; < 0: no limit
	// InstanceID names this process in claims; default random. Two live
	// instances must never share one.
	InstanceID string
	// Leading reports whether this replica holds the bot's lease (the
	// correlator's Config.Leader); nil means always. A Message marked
	// LeaderOnly is claimed, posted and updated only while it says so.
	Leading func() bool
}

func (c *SlackConfig) defaults() {
	orF := func(v *float64, d float64) {
		if *v <= 0 {
			*v = d
		}
	}
	orI := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	orD := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	orF(&c.PostRate, DefaultPostRate)
	orI(&c.PostBurst, DefaultPostBurst)
	orF(&c.UpdateRate, DefaultUpdateRate)
	orI(&c.UpdateBurst, DefaultUpdateBurst)
	orD(&c.AttemptTimeout, DefaultAttemptTimeout)
	orD(&c.BackoffBase, DefaultBackoffBase)
	orD(&c.BackoffMax, DefaultBackoffMax)
	orD(&c.ClaimLease, DefaultClaimLease)
	orD(&c.ClaimPoll, DefaultClaimPoll)
	orD(&c.OrphanWait, DefaultOrphanWait)
	orI(&c.ReplyShare, DefaultReplyShare)
	if c.ReplyPatience == 0 {
		c.ReplyPatience = DefaultReplyPatience
	}
	orI(&c.MaxPendingReplies, DefaultMaxPendingReplies)
	if c.InstanceID == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		c.InstanceID = hex.EncodeToString(b[:])
	}
}

// Slack is the Notifier that posts to Slack. See the package documentation
// for how it paces, retries, orders and de-duplicates.
type Slack struct {
	cfg     SlackConfig
	log     zerolog.Logger
	m       *metrics
	update  *gate // chat.update is limited per workspace, shared by channels
	pending atomic.Int64
	health  channelHealth
	ledger  *ledger

	mu       sync.Mutex
	queues   map[string]*chanQueue
	runCtx   context.Context
	running  bool
	stopped  bool
	stopping sync.WaitGroup
}

var _ Notifier = (*Slack)(nil)

// NewSlack returns a Slack notifier; call Run to deliver.
func NewSlack(cfg SlackConfig) (*Slack, error) {
	if cfg.Client == nil {
		return nil, errors.New("notify: SlackConfig.Client is required")
	}
	cfg.defaults()
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	s := &Slack{
		cfg:    cfg,
		log:    cfg.Log.With().Str("component", "notify-slack").Str("instance", cfg.InstanceID).Logger(),
		m:      m,
		update: newGate(cfg.UpdateRate, cfg.UpdateBurst),
		queues: map[string]*chanQueue{},
		health: channelHealth{bad: map[string]ChannelProblem{}},
	}
	store := cfg.Store
	if store == nil {
		store = NewMemoryStore()
	}
	s.ledger = &ledger{
		store: store, client: cfg.Client, m: m, log: s.log,
		owner: cfg.InstanceID, lease: cfg.ClaimLease, poll: cfg.ClaimPoll,
	}
	return s, nil
}

// Upsert implements Notifier. It returns at once; pending upserts of one
// Key collapse to the newest Version.
func (s *Slack) Upsert(ctx context.Context, m Message) error {
	if err := m.validate(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("notify: upsert %q: %w", m.Key, err)
	}
	m.Blocks = blockkit.ClampBlocks(m.Blocks)
	m.Text = blockkit.Truncate(m.Text, blockkit.MaxMessageText)
	q, err := s.queue(m.Channel)
	if err != nil {
		return err
	}
	q.addUpsert(m, time.Now())
	return nil
}

// Reply implements Notifier. It returns at once; a reply whose ID is
// already queued for the Key is dropped here, one already posted when its
// turn comes.
func (s *Slack) Reply(ctx context.Context, r Reply) error {
	if err := r.validate(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("notify: reply %q/%q: %w", r.Key, r.ID, err)
	}
	if limit := s.cfg.MaxPendingReplies; limit > 0 && s.pending.Load() >= int64(limit) {
		return ErrQueueFull
	}
	r.Blocks = blockkit.ClampBlocks(r.Blocks)
	r.Text = blockkit.Truncate(r.Text, blockkit.MaxMessageText)
	q, err := s.queue(r.Channel)
	if err != nil {
		return err
	}
	q.addReply(r, time.Now())
	return nil
}

// Run implements Notifier: one worker per channel delivers until ctx is
// done. A call in flight then still completes (bounded by AttemptTimeout)
// and its result is stored, so a stopped instance leaves no root behind
// that the next one would post again. Items still queued are lost with the
// process; the correlator re-sends its state after a restart.
func (s *Slack) Run(ctx context.Context) error {
	s.mu.Lock()
	if s.running || s.stopped {
		s.mu.Unlock()
		return errors.New("notify: Run called more than once")
	}
	s.running, s.runCtx = true, ctx
	for _, q := range s.queues {
		s.start(q)
	}
	s.mu.Unlock()

	<-ctx.Done()
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
	s.stopping.Wait()
	return nil
}

// Pending counts the items waiting for Slack: one per Key with an
// undelivered rendering, plus the undelivered replies.
func (s *Slack) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, q := range s.queues {
		n += q.pending()
	}
	return n
}

func (s *Slack) queue(channel string) (*chanQueue, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return nil, ErrStopped
	}
	q := s.queues[channel]
	if q == nil {
		q = newChanQueue(s, channel)
		s.queues[channel] = q
		if s.running {
			s.start(q)
		}
	}
	return q, nil
}

// start runs q's worker; s.mu is held and Run has not finished.
func (s *Slack) start(q *chanQueue) {
	s.stopping.Add(1)
	go func() {
		defer s.stopping.Done()
		q.run(s.runCtx)
	}()
}

// leading says whether a LeaderOnly rendering may be sent now.
func (s *Slack) leading() bool { return s.cfg.Leading == nil || s.cfg.Leading() }

var _ RootChecker = (*Slack)(nil)

var _ PostTimes = (*Slack)(nil)

var _ DeliveryChecker = (*Slack)(nil)

var _ RootsChecker = (*Slack)(nil)

// HasRoots implements RootsChecker: a store that lists its roots is read
// once, and only the keys it lists are looked up one by one.
func (s *Slack) HasRoots(ctx context.Context, keys []string) ([]bool, error) {
	return s.ledger.hasRoots(ctx, keys)
}

// Delivered implements DeliveryChecker from the store: a claim is not a
// delivery (its post may still fail), a root is delivered once its record
// holds the digest, a reply once its record has a ts.
func (s *Slack) Delivered(ctx context.Context, key, digest string, replyIDs []string) (bool, error) {
	return s.ledger.delivered(ctx, key, digest, replyIDs)
}

// FirstPosted implements PostTimes from the root's Slack ts, which is the
// time Slack stored the message.
func (s *Slack) FirstPosted(ctx context.Context, key string) (time.Time, bool, error) {
	return s.ledger.firstPosted(ctx, key)
}

// HasRoot implements RootChecker from the store: a claimed root counts,
// since its post may be in flight.
func (s *Slack) HasRoot(ctx context.Context, key string) (bool, error) {
	return s.ledger.hasRoot(ctx, key)
}
