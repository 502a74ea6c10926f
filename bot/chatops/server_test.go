package chatops

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/bot/blockkit"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
	"github.com/hcpbot/hcpbot/internal/testenv/syncbuf"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/slack-go/slack"
)

func TestCommandAnsweredInline(t *testing.T) {
	e := newEnv(t, nil, nil)
	req := e.command("status mgmt-1:clusters/example", time.Now())

	a := do(t, req)
	if a.status != http.StatusOK {
		t.Fatalf("status %d %q", a.status, a.body)
	}
	if r := a.reply(t); r.Text != "echo: status mgmt-1:clusters/example" || r.ResponseType != "ephemeral" {
		t.Errorf("reply = %+v", r)
	}
	cmds := e.h.commands()
	if len(cmds) != 1 {
		t.Fatalf("handler got %d commands", len(cmds))
	}
	got := cmds[0]
	want := Request{Origin: Origin{
		Transport: TransportHTTP, TeamID: slackrec.TeamID, UserID: "U0ALICE", UserName: "alice",
		ChannelID: e.channel, ChannelName: "incidents", ResponseURL: got.ResponseURL, TriggerID: got.TriggerID,
	}, Command: Status{Cluster: refp("mgmt-1", "clusters", "example")}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("request = %#v\nwant %#v", got, want)
	}
	if got.TriggerID == "" || !strings.HasPrefix(got.ResponseURL, e.rec.APIURL()+"response/") {
		t.Errorf("trigger %q / response_url %q not passed on", got.TriggerID, got.ResponseURL)
	}
	if e.accepted("commands") != 1 || e.totalRejected() != 0 {
		t.Errorf("accepted %v, rejected %v", e.accepted("commands"), e.totalRejected())
	}
	if n := testutil.ToFloat64(e.srv.m.handled.WithLabelValues("http", "command", "status", "answered")); n != 1 {
		t.Errorf("handled{answered} = %v", n)
	}
	if calls := e.rec.CallsTo(slackrec.MethodResponseURL); len(calls) != 0 {
		t.Errorf("inline answer also posted to the response_url: %d", len(calls))
	}
}

func TestCommandInChannelWithBlocks(t *testing.T) {
	h := newFakeHandler()
	h.reply = func(any) Reply {
		return Reply{InChannel: true, Blocks: []slack.Block{slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, "*ok*", false, false), nil, nil)}}
	}
	e := newEnv(t, nil, h)
	a := do(t, e.command("incidents", time.Now()))
	var got map[string]any
	if err := json.Unmarshal(a.body, &got); err != nil {
		t.Fatal(err)
	}
	if got["response_type"] != "in_channel" || got["text"] != "*ok*" {
		t.Errorf("reply = %v", got)
	}
	if blocks, _ := got["blocks"].([]any); len(blocks) != 1 {
		t.Errorf("blocks = %v", got["blocks"])
	}
}

func TestUsageErrorAnsweredWithoutHandler(t *testing.T) {
	e := newEnv(t, nil, nil)
	for _, text := range []string{"status clusters/example;rm -rf /", "frobnicate <!channel>", "approve $(id)"} {
		a := do(t, e.command(text, time.Now()))
		if a.status != http.StatusOK {
			t.Fatalf("%q: status %d", text, a.status)
		}
		r := a.reply(t)
		if r.ResponseType != "ephemeral" || !strings.Contains(r.Text, "Usage: `/hcp ") {
			t.Errorf("%q: reply = %+v", text, r)
		}
		if strings.Contains(r.Text, "<!channel>") || strings.Contains(r.Text, "<cluster>") {
			t.Errorf("%q: reply not escaped for Slack: %q", text, r.Text)
		}
	}
	if e.h.called() != 0 {
		t.Errorf("handler called %d times", e.h.called())
	}
	if n := testutil.ToFloat64(e.srv.m.handled.WithLabelValues("http", "command", "status", "usage_error")); n != 1 {
		t.Errorf("usage errors counted %v", n)
	}
	a := do(t, e.command("help expose", time.Now()))
	if r := a.reply(t); !strings.Contains(r.Text, "/hcp expose &lt;cluster&gt;") || e.h.called() != 0 {
		t.Errorf("help reply = %+v (handler calls %d)", r, e.h.called())
	}
}

// signed builds a request to path with body signed by secret at ts.
func signed(t *testing.T, base, path, secret string, body []byte, ts time.Time) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	tsh, sig := slackrec.Sign(secret, ts, body)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set(headerTimestamp, tsh)
	req.Header.Set(headerSignature, sig)
	return req
}

func TestRejections(t *testing.T) {
	form := func(e *env, text string) []byte {
		return []byte(url.Values{"command": {"/hcp"}, "text": {text}, "user_id": {"U0ALICE"}, "team_id": {"T0HCPBOT"},
			"channel_id": {"C0INCIDENTS"}, "response_url": {e.rec.ResponseURL("C0INCIDENTS")}}.Encode())
	}
	payload := func(e *env, ic any) []byte {
		js, err := json.Marshal(ic)
		if err != nil {
			t.Fatal(err)
		}
		return []byte(url.Values{"payload": {string(js)}}.Encode())
	}
	now := time.Now()
	tests := []struct {
		name   string
		build  func(e *env) *http.Request
		status int
		reason string
	}{
		{"bad signature", func(e *env) *http.Request {
			return signed(t, e.http.URL, CommandsPath, "wrong-secret", form(e, "status"), now)
		}, 401, reasonBadSignature},
		{"tampered body", func(e *env) *http.Request {
			req := signed(t, e.http.URL, CommandsPath, testSecret, form(e, "status"), now)
			tampered := form(e, "approve act-7f3k9q")
			req.Body, req.ContentLength = ioNop(tampered), int64(len(tampered))
			return req
		}, 401, reasonBadSignature},
		{"signature not hex", func(e *env) *http.Request {
			req := e.command("status", now)
			req.Header.Set(headerSignature, "v0=zz"+strings.Repeat("0", 62))
			return req
		}, 401, reasonBadSignature},
		{"signature without v0", func(e *env) *http.Request {
			req := e.command("status", now)
			req.Header.Set(headerSignature, strings.TrimPrefix(req.Header.Get(headerSignature), "v0="))
			return req
		}, 401, reasonBadSignature},
		{"missing timestamp", func(e *env) *http.Request {
			req := e.command("status", now)
			req.Header.Del(headerTimestamp)
			return req
		}, 401, reasonMissingHeaders},
		{"missing signature", func(e *env) *http.Request {
			req := e.command("status", now)
			req.Header.Del(headerSignature)
			return req
		}, 401, reasonMissingHeaders},
		{"timestamp 6 min old", func(e *env) *http.Request {
			return e.command("status", now.Add(-6*time.Minute))
		}, 401, reasonStaleTimestamp},
		{"timestamp 6 min ahead", func(e *env) *http.Request {
			return e.command("status", now.Add(6*time.Minute))
		}, 401, reasonStaleTimestamp},
		{"signed timestamp with sign", func(e *env) *http.Request {
			body := form(e, "status")
			req := signed(t, e.http.URL, CommandsPath, testSecret, body, now)
			req.Header.Set(headerTimestamp, "+"+req.Header.Get(headerTimestamp))
			return req
		}, 401, reasonBadTimestamp},
		{"oversized body", func(e *env) *http.Request {
			body := form(e, "status "+strings.Repeat("a", DefaultMaxBodyBytes))
			return signed(t, e.http.URL, CommandsPath, testSecret, body, now)
		}, 400, reasonTooLarge},
		{"oversized body without length", func(e *env) *http.Request {
			body := form(e, "status "+strings.Repeat("a", DefaultMaxBodyBytes))
			req := signed(t, e.http.URL, CommandsPath, testSecret, body, now)
			req.ContentLength = -1 // chunked: the limit must hold while reading
			req.Body = ioNop(body)
			return req
		}, 400, reasonTooLarge},
		{"GET", func(e *env) *http.Request {
			req, _ := http.NewRequest(http.MethodGet, e.http.URL+CommandsPath, nil)
			return req
		}, 405, reasonMethod},
		{"JSON command", func(e *env) *http.Request {
			req := signed(t, e.http.URL, CommandsPath, testSecret, []byte(`{"text":"status"}`), now)
			req.Header.Set("Content-Type", "application/json")
			return req
		}, 400, reasonMalformed},
		{"bad user id", func(e *env) *http.Request {
			body := []byte(url.Values{"text": {"status"}, "user_id": {"U0ALICE\n"}, "response_url": {e.rec.ResponseURL("C")}}.Encode())
			return signed(t, e.http.URL, CommandsPath, testSecret, body, now)
		}, 400, reasonMalformed},
		{"foreign response_url", func(e *env) *http.Request {
			body := []byte(url.Values{"text": {"status"}, "user_id": {"U0ALICE"}, "response_url": {"https://attacker.example/collect"}}.Encode())
			return signed(t, e.http.URL, CommandsPath, testSecret, body, now)
		}, 400, reasonBadResponseURL},
		{"malformed payload JSON", func(e *env) *http.Request {
			body := []byte(url.Values{"payload": {`{"type":"block_actions","actions":[`}}.Encode())
			return signed(t, e.http.URL, ActionsPath, testSecret, body, now)
		}, 400, reasonMalformed},
		{"no payload", func(e *env) *http.Request {
			return signed(t, e.http.URL, ActionsPath, testSecret, []byte("x=1"), now)
		}, 400, reasonMalformed},
		{"unknown action id", func(e *env) *http.Request {
			return e.press("hcp_delete_cluster", "act-7f3k9q", now)
		}, 400, reasonUnknownAction},
		{"bad action value", func(e *env) *http.Request {
			return e.press(blockkit.ActionApprove, "act-7f3k9q;drop", now)
		}, 400, reasonBadActionValue},
		{"two actions", func(e *env) *http.Request {
			ic := slackrec.ButtonPress(slackrec.Press{UserID: "U0BOB", ActionID: blockkit.ActionApprove, Value: "act-7f3k9q"})
			ic.ActionCallback.BlockActions = append(ic.ActionCallback.BlockActions, ic.ActionCallback.BlockActions[0])
			return signed(t, e.http.URL, ActionsPath, testSecret, payload(e, ic), now)
		}, 400, reasonMalformed},
		{"view submission", func(e *env) *http.Request {
			ic := slackrec.ButtonPress(slackrec.Press{UserID: "U0BOB", ActionID: blockkit.ActionApprove, Value: "act-7f3k9q"})
			ic.Type = slack.InteractionTypeViewSubmission
			return signed(t, e.http.URL, ActionsPath, testSecret, payload(e, ic), now)
		}, 400, reasonUnsupportedType},
		{"action with foreign response_url", func(e *env) *http.Request {
			ic := slackrec.ButtonPress(slackrec.Press{UserID: "U0BOB", ActionID: blockkit.ActionApprove, Value: "act-7f3k9q",
				ResponseURL: "https://hooks.slack.com.attacker.example/actions/T/1/x"})
			return signed(t, e.http.URL, ActionsPath, testSecret, payload(e, ic), now)
		}, 400, reasonBadResponseURL},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, nil, nil)
			a := do(t, tt.build(e))
			if a.status != tt.status {
				t.Errorf("status %d %q, want %d", a.status, a.body, tt.status)
			}
			if got := e.rejected(tt.reason); got != 1 {
				t.Errorf("rejected{reason=%q} = %v, want 1", tt.reason, got)
			}
			if got := e.totalRejected(); got != 1 {
				t.Errorf("rejections = %v, want 1", got)
			}
			if e.accepted("commands")+e.accepted("actions") != 0 {
				t.Errorf("request counted as accepted")
			}
			// Give a wrongly started background handler a chance to show.
			time.Sleep(20 * time.Millisecond)
			if e.h.called() != 0 {
				t.Errorf("handler called %d times", e.h.called())
			}
			if n := len(e.rec.CallsTo(slackrec.MethodResponseURL)); n != 0 {
				t.Errorf("%d posts to response_url", n)
			}
			if !strings.Contains(e.logs.String(), `"reason":"`+tt.reason+`"`) {
				t.Errorf("rejection not logged: %s", e.logs.String())
			}
		})
	}
}

// newLoopback serves h on a loopback port until the test ends.
func newLoopback(t *testing.T, h http.Handler) string {
	t.Helper()
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return ts.URL
}

func ioNop(b []byte) *nopCloser { return &nopCloser{bytes.NewReader(b)} }

type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }

func TestReplayRejected(t *testing.T) {
	e := newEnv(t, nil, nil)
	again := replayable(t, e.command("approve act-7f3k9q", time.Now()))
	if a := do(t, again()); a.status != http.StatusOK {
		t.Fatalf("first: %d %q", a.status, a.body)
	}
	if a := do(t, again()); a.status != http.StatusUnauthorized {
		t.Errorf("replay: %d %q", a.status, a.body)
	}
	// The same signature in upper-case hex verifies too: still a replay.
	up := again()
	up.Header.Set(headerSignature, "v0="+strings.ToUpper(strings.TrimPrefix(up.Header.Get(headerSignature), "v0=")))
	if a := do(t, up); a.status != http.StatusUnauthorized {
		t.Errorf("upper-case replay: %d %q", a.status, a.body)
	}
	if e.h.called() != 1 || e.rejected(reasonReplay) != 2 || e.accepted("commands") != 1 {
		t.Errorf("handler calls %d, replays %v, accepted %v", e.h.called(), e.rejected(reasonReplay), e.accepted("commands"))
	}
	// A button press replayed.
	press := replayable(t, e.press(blockkit.ActionApprove, "act-7f3k9q", time.Now()))
	if a := do(t, press()); a.status != http.StatusOK {
		t.Fatalf("press: %d", a.status)
	}
	if a := do(t, press()); a.status != http.StatusUnauthorized {
		t.Errorf("press replay: %d", a.status)
	}
	e.rec.WaitFor(t, 5*time.Second, func(*slackrec.Recorder) bool { return len(e.h.actions()) == 1 })
	time.Sleep(20 * time.Millisecond)
	if n := len(e.h.actions()); n != 1 {
		t.Errorf("handler got %d actions", n)
	}
}

type failingGuard struct{}

func (failingGuard) FirstSeen(context.Context, string) (bool, error) {
	return false, context.DeadlineExceeded
}

func TestReplayGuardDownFailsClosed(t *testing.T) {
	e := newEnv(t, nil, nil, WithReplayGuard(failingGuard{}))
	if a := do(t, e.command("approve act-7f3k9q", time.Now())); a.status != http.StatusServiceUnavailable {
		t.Errorf("status %d", a.status)
	}
	if e.h.called() != 0 || e.rejected(reasonGuardError) != 1 {
		t.Errorf("handler calls %d, guard errors %v", e.h.called(), e.rejected(reasonGuardError))
	}
}

func TestInjectedClock(t *testing.T) {
	// The bot's clock runs 6 minutes ahead: a fresh request is stale to it.
	e := newEnv(t, nil, nil, WithClock(func() time.Time { return time.Now().Add(6 * time.Minute) }))
	if a := do(t, e.command("status", time.Now())); a.status != http.StatusUnauthorized || e.rejected(reasonStaleTimestamp) != 1 {
		t.Errorf("status %d, stale %v", a.status, e.rejected(reasonStaleTimestamp))
	}
	// 4 minutes old by the wall clock, 10 by the bot's: stale.
	if a := do(t, e.command("status", time.Now().Add(-4*time.Minute))); a.status != http.StatusUnauthorized {
		t.Errorf("status %d", a.status)
	}
	// 4 minutes ahead by the wall clock is fine for both.
	if a := do(t, e.command("status", time.Now().Add(4*time.Minute))); a.status != http.StatusOK {
		t.Errorf("status %d %q", a.status, a.body)
	}
}

func TestSlowCommandAcksThenPostsToResponseURL(t *testing.T) {
	h := newFakeHandler()
	h.delay = time.Second
	h.reply = func(any) Reply { return Reply{Text: "diagnosis ready", InChannel: true} }
	e := newEnv(t, nil, h, WithAckTimeout(100*time.Millisecond))

	a := do(t, e.command("diagnose clusters/example", time.Now()))
	if a.status != http.StatusOK || a.took >= h.delay {
		t.Fatalf("ack: %d after %v", a.status, a.took)
	}
	if r := a.reply(t); r.Text != workingReply.Text || r.ResponseType != "ephemeral" {
		t.Errorf("ack = %+v", r)
	}
	e.rec.WaitFor(t, 5*time.Second, func(r *slackrec.Recorder) bool {
		return len(r.CallsTo(slackrec.MethodResponseURL)) == 1
	})
	c := e.rec.CallsTo(slackrec.MethodResponseURL)[0]
	if c.Status != http.StatusOK || c.Channel != e.channel || c.JSON["text"] != "diagnosis ready" || c.JSON["response_type"] != "in_channel" {
		t.Errorf("late post = %+v", c)
	}
	if n := testutil.ToFloat64(e.srv.m.handled.WithLabelValues("http", "command", "diagnose", "deferred")); n != 1 {
		t.Errorf("deferred = %v", n)
	}
	// Slack's side records the post before the client has read the
	// response and counted it, so the count is polled, not read once.
	posted := func() float64 { return testutil.ToFloat64(e.srv.m.posts.WithLabelValues("ok")) }
	for deadline := time.Now().Add(5 * time.Second); posted() != 1 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := posted(); n != 1 {
		t.Errorf("posts ok = %v", n)
	}
}

// A handler that answers at once and learns the outcome later (a queued
// action) posts it with Later to the request's response_url, after its
// own answer; a console user sees it printed.
func TestLaterPostsToResponseURL(t *testing.T) {
	h := newFakeHandler()
	h.reply = func(any) Reply { return Reply{Text: "queued", InChannel: true} }
	h.seen = func(ctx context.Context) {
		later := Later(ctx)
		if later == nil {
			t.Error("no Later for a request with a response_url")
			return
		}
		go func() {
			time.Sleep(50 * time.Millisecond)
			later(Reply{Text: "outcome", InChannel: true, ReplaceOriginal: true})
		}()
	}
	e := newEnv(t, nil, h)
	a := do(t, e.command("approve act-abcd1234", time.Now()))
	if r := a.reply(t); a.status != http.StatusOK || r.Text != "queued" {
		t.Fatalf("answer %d %+v", a.status, r)
	}
	e.rec.WaitFor(t, 5*time.Second, func(r *slackrec.Recorder) bool {
		return len(r.CallsTo(slackrec.MethodResponseURL)) == 1
	})
	if c := e.rec.CallsTo(slackrec.MethodResponseURL)[0]; c.JSON["text"] != "outcome" || c.JSON["replace_original"] != true {
		t.Errorf("later post = %+v", c.JSON)
	}

	var out syncbuf.Buffer
	done := make(chan struct{})
	h.seen = func(ctx context.Context) {
		go func() { Later(ctx)(Reply{Text: "outcome on the console"}); close(done) }()
	}
	c := &Console{In: strings.NewReader("approve act-abcd1234\n"), Out: &out, Handler: h}
	if err := c.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-done
	if !strings.Contains(out.String(), "outcome on the console") {
		t.Errorf("console: %q", out.String())
	}
}

// TestDefaultAckWithinSlackDeadline runs with the production timeouts: the
// acknowledgement must beat Slack's 3 seconds.
func TestDefaultAckWithinSlackDeadline(t *testing.T) {
	if testing.Short() {
		t.Skip("takes 3 s")
	}
	h := newFakeHandler()
	h.delay = 3200 * time.Millisecond
	e := newEnv(t, nil, h)
	a := do(t, e.command("diagnose clusters/example", time.Now()))
	if a.status != http.StatusOK || a.took >= 3*time.Second || a.took < DefaultAckTimeout {
		t.Errorf("ack %d after %v", a.status, a.took)
	}
	e.rec.WaitFor(t, 10*time.Second, func(r *slackrec.Recorder) bool {
		return len(r.CallsTo(slackrec.MethodResponseURL)) == 1
	})
}

func TestActionPostsReply(t *testing.T) {
	h := newFakeHandler()
	h.reply = func(any) Reply { return Reply{Text: "approved by <@U0BOB>", ReplaceOriginal: true, InChannel: true} }
	e := newEnv(t, nil, h)
	a := do(t, e.press(blockkit.ActionApprove, "act-7f3k9q", time.Now()))
	if a.status != http.StatusOK || len(a.body) != 0 {
		t.Fatalf("ack %d %q", a.status, a.body)
	}
	e.rec.WaitFor(t, 5*time.Second, func(r *slackrec.Recorder) bool {
		return len(r.CallsTo(slackrec.MethodResponseURL)) == 1
	})
	c := e.rec.CallsTo(slackrec.MethodResponseURL)[0]
	if c.JSON["replace_original"] != true || c.JSON["text"] != "approved by <@U0BOB>" {
		t.Errorf("post = %v", c.JSON)
	}
	acts := e.h.actions()
	if len(acts) != 1 {
		t.Fatalf("actions %d", len(acts))
	}
	got := acts[0]
	if got.ActionID != blockkit.ActionApprove || got.Value != "act-7f3k9q" || got.UserID != "U0BOB" || got.UserName != "bob" ||
		got.ChannelID != e.channel || got.TeamID != slackrec.TeamID || got.MessageTS != "1712345678.000100" ||
		got.Transport != TransportHTTP || got.TriggerID == "" {
		t.Errorf("action = %#v", got)
	}
	if e.accepted("actions") != 1 {
		t.Errorf("accepted = %v", e.accepted("actions"))
	}
}

func TestHandlerPanicIsContained(t *testing.T) {
	h := newFakeHandler()
	h.panic = true
	e := newEnv(t, nil, h)
	a := do(t, e.command("incidents", time.Now()))
	if r := a.reply(t); a.status != http.StatusOK || !strings.Contains(r.Text, "Internal error") {
		t.Errorf("answer %d %+v", a.status, r)
	}
	if n := testutil.ToFloat64(e.srv.m.handled.WithLabelValues("http", "command", "incidents", "panic")); n != 1 {
		t.Errorf("panic counted %v", n)
	}
}

func TestShutdownWaitsForLateReplies(t *testing.T) {
	rec := slackrec.New(t)
	h := newFakeHandler()
	h.delay = 800 * time.Millisecond
	responder, _ := NewResponder(rec.APIURL()+"response/", nil)
	srv, err := NewServer(testSecret, h, WithAckTimeout(50*time.Millisecond), WithResponder(responder))
	if err != nil {
		t.Fatal(err)
	}
	ts := newLoopback(t, srv)
	req, _ := slackrec.CommandRequest(context.Background(), ts+CommandsPath, testSecret, slack.SlashCommand{
		Text: "incidents", UserID: "U0ALICE", ChannelID: "C0X", ResponseURL: rec.ResponseURL("C0X")}, time.Now())
	if a := do(t, req); a.status != http.StatusOK {
		t.Fatal(a.status)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(rec.CallsTo(slackrec.MethodResponseURL)); n != 1 {
		t.Errorf("late replies posted before Shutdown returned: %d", n)
	}
	// After shutdown: a polite refusal, no handler call.
	req, _ = slackrec.CommandRequest(context.Background(), ts+CommandsPath, testSecret, slack.SlashCommand{
		Text: "incidents", UserID: "U0ALICE", ChannelID: "C0X", ResponseURL: rec.ResponseURL("C0X")}, time.Now())
	if a := do(t, req); !strings.Contains(string(a.body), "restarting") || h.called() != 1 {
		t.Errorf("after shutdown: %d %q, calls %d", a.status, a.body, h.called())
	}
}

func TestAuthenticateMiddleware(t *testing.T) {
	e := newEnv(t, nil, nil)
	var got []byte
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = make([]byte, r.ContentLength)
		_, _ = r.Body.Read(got)
		w.WriteHeader(http.StatusNoContent)
	})
	ts := newLoopback(t, e.srv.Authenticate(next))
	body := []byte(`{"type":"url_verification","challenge":"x"}`)
	if a := do(t, signed(t, ts, "/slack/events", testSecret, body, time.Now())); a.status != http.StatusNoContent || !bytes.Equal(got, body) {
		t.Errorf("status %d, next got %q", a.status, got)
	}
	if a := do(t, signed(t, ts, "/slack/events", "nope", body, time.Now())); a.status != http.StatusUnauthorized {
		t.Errorf("status %d", a.status)
	}
	if e.accepted("other") != 1 || e.rejected(reasonBadSignature) != 1 {
		t.Errorf("accepted %v rejected %v", e.accepted("other"), e.rejected(reasonBadSignature))
	}
}

func TestMetricsRegistered(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := newFakeHandler()
	if _, err := NewServer(testSecret, h, WithRegisterer(reg)); err != nil {
		t.Fatal(err)
	}
	// A second server (or RunSocketMode) on the same registry shares them.
	if _, err := NewServer(testSecret, h, WithRegisterer(reg)); err != nil {
		t.Fatal(err)
	}
	n, err := testutil.GatherAndCount(reg, "hcpbot_slack_requests_rejected_total")
	if err != nil || n != len(rejectReasons) {
		t.Errorf("rejected series = %d, %v", n, err)
	}
	if _, err := NewServer("", h); err != ErrNoSigningSecret {
		t.Errorf("no secret: %v", err)
	}
}

func TestConcurrentRequests(t *testing.T) {
	e := newEnv(t, nil, nil)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			req := e.command("audit "+string(rune('1'+i%9)), time.Now())
			if a := do(t, req); a.status != http.StatusOK {
				t.Errorf("status %d", a.status)
			}
		})
	}
	wg.Wait()
	if e.h.called() != 20 {
		t.Errorf("calls %d", e.h.called())
	}
}
