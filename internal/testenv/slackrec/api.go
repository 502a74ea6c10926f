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
	"time"
)

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
