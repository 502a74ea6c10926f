package slackrec

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
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

// reply is an answer before it is written.
type reply struct {
	status int
	retry  int // Retry-After seconds, 0 for none
	body   any
}

func ok(fields map[string]any) reply {
	fields["ok"] = true
	return reply{status: http.StatusOK, body: fields}
}

func fail(status int, code string) reply {
	return reply{status: status, body: map[string]any{"ok": false, "error": code}}
}

func (r *Recorder) serve(w http.ResponseWriter, req *http.Request) {
	r.inFlight.Add(1)
	defer r.inFlight.Add(-1)
	c := readCall(req)
	if until, hold := r.holding(c.Time); hold {
		t := time.NewTimer(time.Until(until))
		defer t.Stop()
		select {
		case <-t.C:
		case <-req.Context().Done():
			r.record(c) // Status 0: nobody is listening
			return
		case <-r.done:
			c.Status = http.StatusServiceUnavailable
			r.record(c)
			w.WriteHeader(c.Status)
			return
		}
	}
	rep := r.answer(&c, req.URL.Path, time.Now())
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	if rep.retry > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(rep.retry))
	}
	w.WriteHeader(rep.status)
	_ = json.NewEncoder(w).Encode(rep.body)
}

// readCall reads what the client sent. Malformed bodies are recorded as far
// as they parse; the method handler then complains about missing fields.
func readCall(req *http.Request) Call {
	c := Call{Method: strings.TrimPrefix(req.URL.Path, "/"), Time: time.Now()}
	if ct, _, _ := mime.ParseMediaType(req.Header.Get("Content-Type")); ct == "application/json" {
		body, _ := io.ReadAll(io.LimitReader(req.Body, 10<<20))
		_ = json.Unmarshal(body, &c.JSON)
		c.Form = req.URL.Query()
		for k, v := range c.JSON {
			if s, isStr := v.(string); isStr {
				c.Form.Set(k, s)
			} else if js, err := json.Marshal(v); err == nil {
				c.Form.Set(k, string(js))
			}
		}
	} else {
		_ = req.ParseForm()
		c.Form = req.Form
	}
	c.Channel = c.Form.Get("channel")
	c.token = tokenOf(req, c.Form)
	if rest, found := strings.CutPrefix(c.Method, "response/"); found {
		c.Method = MethodResponseURL
		ch, _, _ := strings.Cut(rest, "/")
		c.Channel, _ = url.PathUnescape(ch)
	}
	return c
}

func (r *Recorder) holding(now time.Time) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f, on := r.failing(now)
	return f.until, on && f.mode == FailTimeout
}

func (r *Recorder) record(c Call) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, c)
}

// answer decides the reply and records the call under one lock, so a waiter
// never sees a call without its effect on the store.
func (r *Recorder) answer(c *Call, path string, now time.Time) reply {
	r.mu.Lock()
	defer r.mu.Unlock()
	rep := r.decide(c, path, now)
	c.Status = rep.status
	r.calls = append(r.calls, *c)
	return rep
}

func (r *Recorder) decide(c *Call, path string, now time.Time) reply {
	key, lim := r.limitFor(c)
	for _, k := range []string{"*", key} {
		if nb, found := r.notBefore[k]; found && now.Before(nb) {
			r.violations++
			return r.rateLimited(nb.Sub(now))
		}
	}
	if f, on := r.failing(now); on {
		switch f.mode {
		case FailRateLimited:
			rep := r.rateLimited(f.until.Sub(now))
			r.notBefore["*"] = now.Add(time.Duration(rep.retry) * time.Second)
			return rep
		case FailServerError:
			return fail(http.StatusInternalServerError, "fatal_error")
		case FailUnavailable:
			return fail(http.StatusServiceUnavailable, "service_unavailable")
		}
	}
	if rep, refused := r.refuse(c); refused {
		return rep
	}
	if key != "" && lim.rate > 0 {
		b := r.buckets[key]
		if b == nil {
			b = &bucket{tokens: float64(lim.burst), last: now}
			r.buckets[key] = b
		}
		if wait := b.take(lim, now); wait > 0 {
			rep := r.rateLimited(wait)
			r.notBefore[key] = now.Add(time.Duration(rep.retry) * time.Second)
			return rep
		}
	}

	if body, found := r.opts.responses[c.Method]; found {
		return reply{status: http.StatusOK, body: body}
	}
	switch c.Method {
	case "chat.postMessage":
		return r.post(c, false, now)
	case "chat.postEphemeral":
		return r.post(c, true, now)
	case "chat.update":
		return r.update(c)
	case "conversations.replies":
		return r.replies(c)
	case "conversations.history":
		return r.history(c)
	case "users.info":
		return r.userInfo(c)
	case "usergroups.users.list":
		return r.groupMembers(c)
	case "auth.test":
		return ok(map[string]any{"url": "https://" + TeamDomain + ".slack.com/", "team": TeamDomain,
			"user": "hcpbot", "team_id": TeamID, "user_id": BotUserID, "bot_id": BotID})
	case MethodResponseURL:
		return r.respond(c, path)
	}
	return fail(http.StatusOK, "unknown_method")
}

// limitFor names the bucket c draws from: Slack limits posting per channel
// (ephemerals included) and chat.update per workspace.
func (r *Recorder) limitFor(c *Call) (string, limit) {
	switch c.Method {
	case "chat.postMessage", "chat.postEphemeral":
		return "post:" + c.Channel, r.opts.post
	case "chat.update":
		return "update", r.opts.update
	}
	return "", limit{}
}

func (r *Recorder) rateLimited(wait time.Duration) reply {
	r.limited++
	rep := fail(http.StatusTooManyRequests, "ratelimited")
	rep.retry = max(1, int(math.Ceil(wait.Seconds())))
	return rep
}

// readBlocks returns a chat.* call's blocks; validate checks them.
func readBlocks(c *Call) json.RawMessage {
	s := c.Form.Get("blocks")
	if s == "" {
		return nil
	}
	return json.RawMessage(s)
}

func (r *Recorder) post(c *Call, ephemeral bool, now time.Time) reply {
	if c.Channel == "" {
		return fail(http.StatusOK, "channel_not_found")
	}
	text := c.Form.Get("text")
	blocks := readBlocks(c)
	if text == "" && blocks == nil && c.Form.Get("attachments") == "" {
		return fail(http.StatusOK, "no_text")
	}
	if rep, valid := r.validate(c, text, blocks); !valid {
		return rep
	}
	r.lastTS = max(r.lastTS+1, now.UnixMicro())
	m := &Message{
		Channel: c.Channel, TS: fmt.Sprintf("%d.%06d", r.lastTS/1e6, r.lastTS%1e6),
		ThreadTS: c.Form.Get("thread_ts"), Text: text, Blocks: blocks,
		Ephemeral: ephemeral,
	}
	if md := c.Form.Get("metadata"); md != "" && json.Valid([]byte(md)) {
		m.Metadata = json.RawMessage(md)
	}
	if ephemeral {
		m.User = c.Form.Get("user")
	}
	r.msgs[c.Channel] = append(r.msgs[c.Channel], m)
	if ephemeral {
		return ok(map[string]any{"message_ts": m.TS})
	}
	return ok(map[string]any{"channel": m.Channel, "ts": m.TS, "message": r.wire(m)})
}

func (r *Recorder) update(c *Call) reply {
	m := r.find(c.Channel, c.Form.Get("ts"))
	if m == nil || m.Ephemeral {
		return fail(http.StatusOK, "message_not_found")
	}
	blocks := readBlocks(c)
	if rep, valid := r.validate(c, c.Form.Get("text"), blocks); !valid {
		return rep
	}
	// Slack keeps what an update leaves out; "[]" clears the blocks.
	if c.Form.Has("text") {
		m.Text = c.Form.Get("text")
	}
	if c.Form.Has("blocks") {
		m.Blocks = blocks
	}
	m.Updates++
	return ok(map[string]any{"channel": m.Channel, "ts": m.TS, "text": m.Text, "message": r.wire(m)})
}

func (r *Recorder) replies(c *Call) reply {
	msgs := r.thread(c.Channel, c.Form.Get("ts"))
	if msgs == nil {
		return fail(http.StatusOK, "thread_not_found")
	}
	out := make([]map[string]any, 0, len(msgs))
	for _, m := range msgs {
		out = append(out, r.wire(m))
	}
	if len(msgs) > 1 {
		out[0]["thread_ts"] = msgs[0].TS
		out[0]["reply_count"] = len(msgs) - 1
	}
	return ok(map[string]any{"messages": out, "has_more": false})
}

// history serves conversations.history: the channel's top-level
// messages newest first, since "oldest", in pages of "limit" (cursor: the
// index to go on from).
func (r *Recorder) history(c *Call) reply {
	oldest := c.Form.Get("oldest")
	var top []*Message
	for _, m := range r.msgs[c.Channel] {
		if m.Ephemeral || (m.ThreadTS != "" && m.ThreadTS != m.TS) || (oldest != "" && m.TS < oldest) {
			continue
		}
		top = append(top, m)
	}
	slices.Reverse(top)
	from, _ := strconv.Atoi(c.Form.Get("cursor"))
	limit, _ := strconv.Atoi(c.Form.Get("limit"))
	if limit <= 0 || limit > 1000 {
		limit = 100
	}
	from = min(max(from, 0), len(top))
	to := min(from+limit, len(top))
	out := make([]map[string]any, 0, to-from)
	for _, m := range top[from:to] {
		out = append(out, r.wire(m))
	}
	resp := map[string]any{"messages": out, "has_more": to < len(top)}
	if to < len(top) {
		resp["response_metadata"] = map[string]any{"next_cursor": strconv.Itoa(to)}
	}
	return ok(resp)
}

// respond serves a response_url, which Slack stops accepting after a few
// posts. The error code for a used-up URL is a guess.
func (r *Recorder) respond(c *Call, path string) reply {
	r.urlUses[path]++
	if r.urlUses[path] > responseURLUses {
		return fail(http.StatusNotFound, "used_url")
	}
	text, blocks := responseBody(c)
	if rep, valid := r.validate(c, text, blocks); !valid {
		// Like an incoming webhook, a response_url says so in its status.
		rep.status = http.StatusBadRequest
		return rep
	}
	return ok(map[string]any{})
}

// wire renders m as Slack returns a message object.
func (r *Recorder) wire(m *Message) map[string]any {
	o := map[string]any{"type": "message", "ts": m.TS, "text": m.Text, "user": BotUserID, "bot_id": BotID}
	if m.ThreadTS != "" {
		o["thread_ts"] = m.ThreadTS
	}
	if len(m.Blocks) > 0 {
		o["blocks"] = m.Blocks
	}
	if len(m.Metadata) > 0 {
		o["metadata"] = m.Metadata
	}
	return o
}

// bucket is a token bucket; tokens refill continuously up to the burst.
type bucket struct {
	tokens float64
	last   time.Time
}

// take spends a token, or says how long until one is available.
func (b *bucket) take(l limit, now time.Time) time.Duration {
	if now.After(b.last) {
		b.tokens = min(float64(l.burst), b.tokens+now.Sub(b.last).Seconds()*l.rate)
		b.last = now
	}
	if b.tokens >= 1 {
		b.tokens--
		return 0
	}
	return time.Duration((1 - b.tokens) / l.rate * float64(time.Second))
}
