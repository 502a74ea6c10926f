package slackrec

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slack-go/slack/slacktest"
	"golang.org/x/net/websocket"
)

// Identity of the fake workspace and of the bot, as auth.test reports it and
// as signed requests carry it.
const (
	TeamID     = "T0HCPBOT"
	TeamDomain = "hcpbot-test"
	AppID      = "A0HCPBOT"
	BotUserID  = "U0HCPBOT"
	BotID      = "B0HCPBOT"
)

// MethodResponseURL is the Call.Method of posts to a ResponseURL.
const MethodResponseURL = "response_url"

// responseURLUses is how often Slack accepts posts to one response_url.
const responseURLUses = 5

// FailMode selects how calls fail during FailFor.
type FailMode int

const (
	// FailRateLimited answers 429 with a Retry-After covering the rest of the period.
	FailRateLimited FailMode = iota + 1
	// FailServerError answers 500.
	FailServerError
	// FailUnavailable answers 503.
	FailUnavailable
	// FailTimeout holds each call until the period ends or the client goes
	// away; a call still waiting when the period ends is then served normally,
	// like a slow Slack.
	FailTimeout
)

// Call is one recorded Web API request.
type Call struct {
	Method string // e.g. "chat.postMessage", or MethodResponseURL
	Time   time.Time
	// Form holds the query and form fields; for a JSON body (which Slack
	// also accepts) its top-level fields, non-strings as JSON text.
	Form url.Values
	JSON map[string]any // the body when it was a JSON object
	// Status is the HTTP status answered; 0 when the client went away first.
	Status  int
	Channel string
	token   string // never shown: Calls are printed in failures
}

// Message is a message in the recorder's store.
type Message struct {
	Channel   string
	TS        string
	ThreadTS  string // set on thread replies
	Text      string
	Blocks    json.RawMessage
	User      string // the recipient of an ephemeral message
	Ephemeral bool
	Updates   int // successful chat.update calls
	// Metadata is the message metadata posted with it, as Slack keeps it.
	Metadata json.RawMessage
}

type limit struct {
	rate  float64 // tokens per second; <= 0 disables the limit
	burst int
}

type options struct {
	post, update limit
	responses    map[string]any
	// sizeLimit: WithMessageSizeLimit.
	sizeLimit int
}

// Option configures a Recorder.
type Option func(*options)

// WithRate sets the per-channel rate of chat.postMessage and
// chat.postEphemeral (default 1/s, burst 3). perSecond <= 0 disables it.
func WithRate(perSecond float64, burst int) Option {
	return func(o *options) { o.post = limit{perSecond, max(burst, 1)} }
}

// WithUpdateRate sets the workspace-wide rate of chat.update (default Tier 3:
// 50/min, burst 10). perSecond <= 0 disables it.
func WithUpdateRate(perSecond float64, burst int) Option {
	return func(o *options) { o.update = limit{perSecond, max(burst, 1)} }
}

// WithMessageSizeLimit refuses, as Slack does past its undocumented limit
// on a message's total size (seen at 11-13k characters of text; bolt-js
// #2509, #2867), a message whose text and blocks together are over n
// characters (the text's, and the blocks' JSON): msg_blocks_too_long with
// blocks, msg_too_long without. 0 (the default) checks only the
// documented limits.
func WithMessageSizeLimit(n int) Option {
	return func(o *options) { o.sizeLimit = n }
}

// WithResponse makes the recorder answer method with body encoded as JSON,
// for the odd method a test needs beyond the built-in ones (it replaces a
// built-in answer too).
func WithResponse(method string, body any) Option {
	return func(o *options) { o.responses[method] = body }
}

// Recorder is a fake Slack Web API. It is safe for concurrent use.
type Recorder struct {
	srv  *slacktest.Server
	opts options
	done chan struct{} // closed at cleanup to release held calls

	inFlight atomic.Int32

	mu         sync.Mutex
	calls      []Call
	msgs       map[string][]*Message
	lastTS     int64 // microseconds, keeps ts unique and increasing
	buckets    map[string]*bucket
	notBefore  map[string]time.Time // per limit key: when the client was told it may retry
	limited    int
	violations int
	faults     []fault        // injected failures, in time order, back to back
	urls       int            // response_url counter
	urlUses    map[string]int // by response_url path

	socketsOpened []string      // app-level tokens, by apps.connections.open
	sockets       []*SocketConn // connected, in order

	blockViolations []BlockViolation // kept across Reset
	expectInvalid   bool
	channels        map[string]ChannelState
	revoked         map[string]bool // tokens; "" is all
	users           map[string]User
	groups          map[string][]string
	scopes          []string // the bot token's; nil grants every scope
}

// New starts a Recorder on loopback and stops it when tb ends.
func New(tb testing.TB, opts ...Option) *Recorder {
	tb.Helper()
	r := &Recorder{
		opts: options{
			post:      limit{1, 3},
			update:    limit{50.0 / 60, 10},
			responses: map[string]any{},
		},
		done:   make(chan struct{}),
		users:  map[string]User{},
		groups: map[string][]string{},
	}
	for _, o := range opts {
		o(&r.opts)
	}
	r.clear()
	// slacktest keeps the first handler registered for a pattern, so taking
	// "/" and every built-in route routes all calls through the recorder.
	// Its /ws (RTM) is left alone.
	r.srv = slacktest.NewTestServer(func(c slacktest.Customize) {
		for _, p := range []string{"/",
			"/conversations.info", "/rtm.start", "/rtm.connect", "/chat.postMessage",
			"/chat.postEphemeral", "/conversations.create", "/conversations.setTopic",
			"/conversations.setPurpose", "/conversations.rename", "/conversations.invite",
			"/conversations.inviteShared", "/users.info", "/users.lookupByEmail",
			"/bots.info", "/auth.test", "/reactions.add",
		} {
			c.Handle(p, r.serve)
		}
		c.Handle("/"+MethodConnectionsOpen, r.openSocket)
		c.Handle(socketPath, websocket.Server{Handler: r.serveSocket}.ServeHTTP)
	})
	r.srv.Start()
	tb.Cleanup(func() {
		close(r.done)
		r.srv.Stop()
		r.checkLimits(tb)
	})
	return r
}

// APIURL is the base URL for slack.OptionAPIURL.
func (r *Recorder) APIURL() string { return r.srv.GetAPIURL() }

// ResponseURL returns a new response_url for channel. Like Slack's, it
// accepts 5 posts; they are recorded as MethodResponseURL calls on channel.
func (r *Recorder) ResponseURL(channel string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.urls++
	return fmt.Sprintf("%sresponse/%s/%d", r.APIURL(), url.PathEscape(channel), r.urls)
}

// FailFor fails every call in mode for d from now; d <= 0 ends a failure.
// It replaces any failures injected before.
func (r *Recorder) FailFor(mode FailMode, d time.Duration) {
	r.FailSequence(FailStep{Mode: mode, For: d})
}

// FailStep is one period of a FailSequence.
type FailStep struct {
	Mode FailMode
	For  time.Duration
}

// FailSequence injects failures back to back from now: the first step's
// mode for its For, then the next one's, and so on; Slack answers normally
// after the last. A 429 step's Retry-After covers the rest of that step.
// It replaces any failures injected before; no steps ends them.
func (r *Recorder) FailSequence(steps ...FailStep) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.faults = nil
	at := time.Now()
	for _, s := range steps {
		if s.For <= 0 {
			continue
		}
		r.faults = append(r.faults, fault{mode: s.Mode, from: at, until: at.Add(s.For)})
		at = at.Add(s.For)
	}
}

// FailingUntil is when the injected failures end (zero if none are set).
func (r *Recorder) FailingUntil() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.faults) == 0 {
		return time.Time{}
	}
	return r.faults[len(r.faults)-1].until
}

// fault is one step of a FailSequence in absolute time.
type fault struct {
	mode        FailMode
	from, until time.Time
}

// failing returns the fault in force at now; r.mu is held.
func (r *Recorder) failing(now time.Time) (fault, bool) {
	for _, f := range r.faults {
		if !now.Before(f.from) && now.Before(f.until) {
			return f, true
		}
	}
	return fault{}, false
}

// Reset forgets calls, messages, counters, limits, failures, channel states
// and revoked tokens; not block violations (BlockViolations), users, user
// groups and scopes. Timestamps keep increasing across a reset.
func (r *Recorder) Reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.clear()
}

func (r *Recorder) clear() {
	r.calls = nil
	r.msgs = map[string][]*Message{}
	r.buckets = map[string]*bucket{}
	r.notBefore = map[string]time.Time{}
	r.limited, r.violations = 0, 0
	r.faults = nil
	r.urlUses = map[string]int{}
	r.channels = map[string]ChannelState{}
	r.revoked = map[string]bool{}
}

// Calls returns every call recorded so far, in the order they were answered.
func (r *Recorder) Calls() []Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Call(nil), r.calls...)
}

// CallsTo returns the recorded calls of method.
func (r *Recorder) CallsTo(method string) []Call {
	var out []Call
	for _, c := range r.Calls() {
		if c.Method == method {
			out = append(out, c)
		}
	}
	return out
}

// Messages returns channel's messages, thread replies and ephemerals
// included, oldest first.
func (r *Recorder) Messages(channel string) []Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return copies(r.msgs[channel])
}

// Message returns the message at channel and ts.
func (r *Recorder) Message(channel, ts string) (Message, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if m := r.find(channel, ts); m != nil {
		return *m, true
	}
	return Message{}, false
}

// Backdate moves the top-level message at channel and ts back by d, as if
// an instance that died before the test had posted it then, and returns
// its new ts. Its thread, if any, does not follow it.
func (r *Recorder) Backdate(channel, ts string, d time.Duration) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.find(channel, ts)
	if m == nil {
		return "", fmt.Errorf("slackrec: no message %s in %s", ts, channel)
	}
	var sec, usec int64
	if _, err := fmt.Sscanf(ts, "%d.%d", &sec, &usec); err != nil {
		return "", fmt.Errorf("slackrec: ts %q: %w", ts, err)
	}
	at := sec*1e6 + usec - d.Microseconds()
	m.TS = fmt.Sprintf("%d.%06d", at/1e6, at%1e6)
	// Channels keep posting order, which history and threads rely on.
	slices.SortStableFunc(r.msgs[channel], func(a, b *Message) int { return strings.Compare(a.TS, b.TS) })
	return m.TS, nil
}

// Thread returns the parent at channel and ts followed by its replies, as
// conversations.replies does; nil if there is no such message.
func (r *Recorder) Thread(channel, ts string) []Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return copies(r.thread(channel, ts))
}

// copies detaches messages from the store, which later calls change.
func copies(ms []*Message) []Message {
	var out []Message
	for _, m := range ms {
		out = append(out, *m)
	}
	return out
}

// InFlight counts the calls being served, such as those FailTimeout holds.
func (r *Recorder) InFlight() int { return int(r.inFlight.Load()) }

// RateLimited counts the calls answered 429, injected ones included.
func (r *Recorder) RateLimited() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.limited
}

// Violations counts the calls that came before the Retry-After they had been
// given elapsed. A well-behaved client has none.
func (r *Recorder) Violations() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.violations
}

// WaitFor polls cond until it holds, failing tb after timeout.
func (r *Recorder) WaitFor(tb testing.TB, timeout time.Duration, cond func(*Recorder) bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond(r) {
		if time.Now().After(deadline) {
			tb.Fatalf("slackrec: condition not met within %v; calls: %s", timeout, r.summary())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// WaitResponse waits until a post to a response_url of channel (see
// ResponseURL) has a text that done accepts, and returns that text.
func (r *Recorder) WaitResponse(tb testing.TB, timeout time.Duration, channel string, done func(text string) bool) string {
	tb.Helper()
	var text string
	r.WaitFor(tb, timeout, func(r *Recorder) bool {
		for _, c := range r.CallsTo(MethodResponseURL) {
			if c.Channel == channel && done(c.Form.Get("text")) {
				text = c.Form.Get("text")
				return true
			}
		}
		return false
	})
	return text
}

// summary lists the calls without their forms, which carry the token.
func (r *Recorder) summary() string {
	var b strings.Builder
	for _, c := range r.Calls() {
		fmt.Fprintf(&b, "\n  %s %s %s %d", c.Time.Format("15:04:05.000"), c.Method, c.Channel, c.Status)
	}
	return b.String()
}

func (r *Recorder) find(channel, ts string) *Message {
	for _, m := range r.msgs[channel] {
		if m.TS == ts {
			return m
		}
	}
	return nil
}

func (r *Recorder) thread(channel, ts string) []*Message {
	parent := r.find(channel, ts)
	if parent == nil || parent.Ephemeral {
		return nil
	}
	out := []*Message{parent}
	for _, m := range r.msgs[channel] {
		if m.ThreadTS == ts && m.TS != ts && !m.Ephemeral {
			out = append(out, m)
		}
	}
	return out
}
