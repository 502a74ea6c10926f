package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/hcpbot/hcpbot/bot"
	"github.com/hcpbot/hcpbot/bot/command"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/bot/fleet/wire"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/partition"
)

// Defaults of a Client.
const (
	// DefaultTimeout bounds one call's wait for the groups' answers when
	// the caller's context allows more: a command's reply (chatops'
	// handler timeout) must not wait on a dead group for long.
	DefaultTimeout = 5 * time.Second
	// DefaultMaxAnswer bounds one answer, inflated: the largest, the
	// digest's cluster states, is about 11 MB for a group of 5,000 hosted
	// clusters (2.2 MB per 1,000, BenchmarkFleetAnswers2000), and a group
	// of the fleet's size must fit several of them beside its own state in
	// the pod's 512 MiB (docs/capacity.md).
	DefaultMaxAnswer = 48 << 20
	// inboxBytes bounds what a call's subscription holds unread.
	inboxBytes = 64 << 20
	// noResponders is the status of the server's message that nobody is
	// subscribed to a request's subject.
	noResponders = "503"
)

// ClientConfig configures a Client.
type ClientConfig struct {
	// Set is the fleet's groups (Count > 1) and which holds which
	// management cluster; Self is this replica's group.
	Set  partition.Set
	Self int
	// Bot is this replica's correlator: its group answers in-process.
	Bot  Local
	Conn *nats.Conn
	// Trusted are the keys an answer may be sealed with: the bot's
	// signing key and approvals.trustedKeys. Required.
	Trusted []string
	// Timeout bounds a call (default DefaultTimeout), MaxAnswer an answer
	// (default DefaultMaxAnswer).
	Timeout   time.Duration
	MaxAnswer int
	Log       zerolog.Logger
}

// Client reads the whole fleet: a command.Fleet for the command handler
// and digest.Gatherer for the digest. It is safe for concurrent use.
type Client struct {
	cfg ClientConfig
}

var (
	_ command.Fleet     = (*Client)(nil)
	_ command.FleetView = (*view)(nil)
)

// NewClient checks cfg and returns a Client.
func NewClient(cfg ClientConfig) (*Client, error) {
	switch {
	case cfg.Set.Count < 2 || cfg.Self < 0 || cfg.Self >= cfg.Set.Count:
		return nil, fmt.Errorf("fleet: group %d of %d: a fleet has at least 2 groups", cfg.Self, cfg.Set.Count)
	case cfg.Bot == nil || cfg.Conn == nil:
		return nil, errors.New("fleet: client needs the bot and a NATS connection")
	case len(cfg.Trusted) == 0:
		return nil, errors.New("fleet: no trusted key: an answer nobody can verify is one anybody with the bot's NATS credentials can give")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.MaxAnswer <= 0 {
		cfg.MaxAnswer = DefaultMaxAnswer
	}
	return &Client{cfg: cfg}, nil
}

// View returns the fleet's picture for one command (command.Fleet).
func (c *Client) View(ctx context.Context) command.FleetView { return c.view(ctx) }

func (c *Client) view(ctx context.Context) *view {
	return &view{c: c, ctx: ctx, failed: map[int]string{}, cache: map[string]map[int]answer{}}
}

// once runs read on a view of its own and logs the groups that did not
// answer: for callers of the plain Correlator methods, which cannot
// return them.
func once[T any](c *Client, read func(*view) T) T {
	v := c.view(context.Background())
	out := read(v)
	if m := v.Missing(); len(m) > 0 {
		c.cfg.Log.Warn().Strs("missing", m).Msg("fleet read without every group")
	}
	return out
}

// The command.Correlator methods, each on a view of its own. The command
// handler reads through View instead, so that it can say what is missing.

func (c *Client) Clusters() []diagnose.Key {
	return once(c, (*view).Clusters)
}

func (c *Client) Diagnose(k diagnose.Key) ([]diagnose.Diagnosis, bool) {
	a := once(c, func(v *view) answer { return v.cluster(k) })
	return a.Diagnoses, a.Known
}

func (c *Client) Explain(k diagnose.Key) ([]diagnose.Verdict, bool) {
	a := once(c, func(v *view) answer { return v.cluster(k) })
	return a.Verdicts, a.Explained
}

func (c *Client) Unwatched(k diagnose.Key) (string, bool) {
	a := once(c, func(v *view) answer { return v.cluster(k) })
	return a.Unwatched, a.NotWatched
}

func (c *Client) HostedCluster(k diagnose.Key) (event.HostedClusterState, bool) {
	a := once(c, func(v *view) answer { return v.cluster(k) })
	return a.HC, a.HasHC
}

func (c *Client) Incidents() []bot.Incident { return once(c, (*view).Incidents) }

func (c *Client) Storms() []bot.StormState { return once(c, (*view).Storms) }

func (c *Client) Timeline(key string) (bot.Incident, []bot.Step, bool) {
	a := once(c, func(v *view) answer { return v.timeline(key) })
	return a.Incident, a.Steps, a.Known
}

// ClusterStates is every group's cluster states, sorted by key
// (digest.States).
func (c *Client) ClusterStates() []bot.ClusterState {
	states, _ := c.GatherStates(context.Background())
	return states
}

// GatherStates is every group's cluster states, sorted by key, and the
// groups that did not answer, one sentence each (digest.Gatherer).
func (c *Client) GatherStates(ctx context.Context) ([]bot.ClusterState, []string) {
	v := c.view(ctx)
	var out []bot.ClusterState
	for _, a := range inOrder(v.ask(request{Op: opStates}, v.all())) {
		out = append(out, a.States...)
	}
	slices.SortStableFunc(out, func(x, y bot.ClusterState) int { return compareKeys(x.Key, y.Key) })
	out = slices.CompactFunc(out, func(x, y bot.ClusterState) bool { return x.Key == y.Key })
	return out, v.Missing()
}

// fanOut asks the remote groups r over NATS, once each, while the local
// group (when local) answers in-process, and waits for the first valid
// answer of every group until the call's deadline. It returns the
// answers and, for every group without one, why.
func (c *Client) fanOut(ctx context.Context, r request, local bool, remote []int) (map[int]answer, map[int]string) {
	answers, missing := map[int]answer{}, map[int]string{}
	var err error
	if r.Nonce == "" {
		if r, err = withNonce(r); err != nil {
			for _, g := range remote {
				missing[g] = err.Error()
			}
			remote = nil
		}
	}
	var (
		wg     sync.WaitGroup
		got    map[int]answer
		failed map[int]string
	)
	if len(remote) > 0 {
		wg.Go(func() { got, failed = c.askRemote(ctx, r, remote) })
	}
	if local {
		if a, err := answerFrom(c.cfg.Bot, r); err != nil {
			missing[c.cfg.Self] = err.Error()
		} else {
			answers[c.cfg.Self] = a
		}
	}
	wg.Wait()
	for g, a := range got {
		answers[g] = a
	}
	for g, why := range failed {
		missing[g] = why
	}
	return answers, missing
}

func withNonce(r request) (request, error) {
	n, err := newRequest(r.Op)
	if err != nil {
		return r, err
	}
	r.Nonce = n.Nonce
	return r, nil
}

// askRemote publishes r to each group of groups with a reply subject of
// its own, and collects the answers' chunks there: each verified before
// anything of it is believed, whole answers decoded, the first per group
// kept.
func (c *Client) askRemote(ctx context.Context, r request, groups []int) (map[int]answer, map[int]string) {
	answers, missing := map[int]answer{}, map[int]string{}
	fail := func(why string) (map[int]answer, map[int]string) {
		for _, g := range groups {
			missing[g] = why
		}
		return answers, missing
	}
	data, err := marshalRequest(r)
	if err != nil {
		return fail(err.Error())
	}
	digest := wire.RequestDigest(data)
	var id [12]byte
	if _, err := rand.Read(id[:]); err != nil {
		return fail(err.Error())
	}
	// One reply subject per group asked, so that the server's "no
	// responders" status says which group has no replica subscribed.
	inbox := wire.AnswerPrefix + "." + hex.EncodeToString(id[:])
	msgs := make(chan *nats.Msg, 64)
	done := make(chan struct{})
	defer close(done)
	sub, err := c.cfg.Conn.Subscribe(inbox+".*", func(m *nats.Msg) {
		select {
		case msgs <- m:
		case <-done:
		}
	})
	if err != nil {
		return fail("cannot subscribe to the answers: " + err.Error())
	}
	defer func() { _ = sub.Unsubscribe() }()
	// A flood into the inbox is dropped by the client library, not kept
	// (the answers of P groups travel compressed: 2,000 clusters' states
	// are a few MB).
	_ = sub.SetPendingLimits(4096, inboxBytes)
	pending := map[int]*wire.Assembly{}
	for _, g := range groups {
		reply := inbox + "." + strconv.Itoa(g)
		if err := c.cfg.Conn.PublishMsg(&nats.Msg{Subject: wire.Subject(c.cfg.Set.Count, g), Reply: reply, Data: data}); err != nil {
			missing[g] = "request not sent: " + err.Error()
			continue
		}
		pending[g] = &wire.Assembly{Max: c.cfg.MaxAnswer}
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	start := time.Now()
	var invalid int
	var lastInvalid error
	for len(pending) > 0 {
		var m *nats.Msg
		select {
		case m = <-msgs:
		case <-ctx.Done():
		}
		if m == nil {
			break
		}
		if len(m.Data) == 0 && m.Header.Get("Status") == noResponders {
			// The server says no replica of the group is subscribed.
			// Whoever may publish here could say so falsely, and could
			// as well keep the group's answers from coming (a flood):
			// believing it costs nothing more, and spares the wait.
			if g, err := strconv.Atoi(strings.TrimPrefix(m.Subject, inbox+".")); err == nil && pending[g] != nil {
				missing[g] = "no replica of it is subscribed to " + wire.Subject(c.cfg.Set.Count, g)
				delete(pending, g)
			}
			continue
		}
		ch, err := wire.Open(m.Data, c.cfg.Trusted, c.cfg.Set.Count, digest)
		if err != nil {
			invalid, lastInvalid = invalid+1, err
			continue
		}
		asm := pending[ch.Group]
		if asm == nil {
			continue // a group not asked, or answered already
		}
		whole, done, err := asm.Add(ch)
		if err != nil {
			invalid, lastInvalid = invalid+1, err
			continue
		}
		if !done {
			continue
		}
		a, err := decode(whole, c.cfg.MaxAnswer)
		if err != nil {
			// Sealed by the bot's key and still unreadable: another
			// build's answer. Another replica may answer in this one's.
			invalid, lastInvalid = invalid+1, err
			continue
		}
		answers[ch.Group] = a
		delete(pending, ch.Group)
	}
	if invalid > 0 {
		c.cfg.Log.Error().Err(lastInvalid).Int("ignored", invalid).Str("op", r.Op).Msg("fleet answers that do not verify were ignored (a forgery, or a key not in approvals.trustedKeys)")
	}
	for g := range pending {
		why := fmt.Sprintf("no answer within %s", time.Since(start).Round(time.Millisecond))
		if invalid > 0 {
			why += fmt.Sprintf("; %d answers that did not verify were ignored", invalid)
		}
		missing[g] = why
	}
	return answers, missing
}
