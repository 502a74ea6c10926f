package chatops

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
	"github.com/hcpbot/hcpbot/internal/testenv/syncbuf"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"github.com/slack-go/slack"
)

const testSecret = "8f14e45fceea167a5a36dedd4bea2543-test-signing-secret"

// fakeHandler records what reaches it and answers with reply (default: an
// echo of the command), after delay.
type fakeHandler struct {
	delay time.Duration
	reply func(any) Reply
	panic bool
	// seen, if set, is given the handler's context (e.g. for Later).
	seen func(ctx context.Context)

	mu    sync.Mutex
	cmds  []Request
	acts  []ActionRequest
	calls chan struct{}
}

func newFakeHandler() *fakeHandler { return &fakeHandler{calls: make(chan struct{}, 100)} }

func (h *fakeHandler) answer(ctx context.Context, req any, echo string) Reply {
	h.calls <- struct{}{}
	if h.seen != nil {
		h.seen(ctx)
	}
	if h.delay > 0 {
		select {
		case <-time.After(h.delay):
		case <-ctx.Done():
		}
	}
	if h.panic {
		panic("handler bug")
	}
	if h.reply != nil {
		return h.reply(req)
	}
	return Reply{Text: "echo: " + echo}
}

func (h *fakeHandler) HandleCommand(ctx context.Context, req Request) Reply {
	h.mu.Lock()
	h.cmds = append(h.cmds, req)
	h.mu.Unlock()
	return h.answer(ctx, req, req.Command.String())
}

func (h *fakeHandler) HandleAction(ctx context.Context, req ActionRequest) Reply {
	h.mu.Lock()
	h.acts = append(h.acts, req)
	h.mu.Unlock()
	return h.answer(ctx, req, req.ActionID+" "+req.Value)
}

func (h *fakeHandler) commands() []Request {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Request(nil), h.cmds...)
}

func (h *fakeHandler) actions() []ActionRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]ActionRequest(nil), h.acts...)
}

func (h *fakeHandler) called() int { return len(h.calls) }

// syncBuffer is shared by the goroutines under test and the test.
type syncBuffer = syncbuf.Buffer

// env is one bot replica on loopback, with the Slack recorder its
// response_urls point at.
type env struct {
	t       *testing.T
	rec     *slackrec.Recorder
	h       *fakeHandler
	srv     *Server
	http    *httptest.Server
	reg     *prometheus.Registry
	logs    *syncBuffer
	channel string
}

func newEnv(t *testing.T, rec *slackrec.Recorder, h *fakeHandler, opts ...Option) *env {
	t.Helper()
	if rec == nil {
		rec = slackrec.New(t)
	}
	if h == nil {
		h = newFakeHandler()
	}
	responder, err := NewResponder(rec.APIURL()+"response/", nil)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, rec: rec, h: h, reg: prometheus.NewRegistry(), logs: &syncBuffer{}, channel: "C0INCIDENTS"}
	base := []Option{WithRegisterer(e.reg), WithResponder(responder), WithLogger(zerolog.New(e.logs))}
	e.srv, err = NewServer(testSecret, h, append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	e.http = httptest.NewServer(e.srv)
	t.Cleanup(func() {
		e.http.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if logs := e.logs.String(); strings.Contains(logs, testSecret) || strings.Contains(logs, "v0=") ||
			strings.Contains(logs, "/response/") {
			t.Errorf("logs leak a secret, signature or response_url:\n%s", logs)
		}
	})
	return e
}

func (e *env) command(text string, ts time.Time) *http.Request {
	e.t.Helper()
	req, err := slackrec.CommandRequest(context.Background(), e.http.URL+CommandsPath, testSecret, slack.SlashCommand{
		Command: "/hcp", Text: text, UserID: "U0ALICE", UserName: "alice",
		ChannelID: e.channel, ChannelName: "incidents", ResponseURL: e.rec.ResponseURL(e.channel),
	}, ts)
	if err != nil {
		e.t.Fatal(err)
	}
	return req
}

func (e *env) press(actionID, value string, ts time.Time) *http.Request {
	e.t.Helper()
	req, err := slackrec.InteractionRequest(context.Background(), e.http.URL+ActionsPath, testSecret, slackrec.ButtonPress(slackrec.Press{
		UserID: "U0BOB", UserName: "bob", ChannelID: e.channel, MessageTS: "1712345678.000100",
		ActionID: actionID, BlockID: "approval", Value: value, ResponseURL: e.rec.ResponseURL(e.channel),
	}), ts)
	if err != nil {
		e.t.Fatal(err)
	}
	return req
}

// replayable returns copies of req, body and headers included, to send
// the same request several times.
func replayable(t *testing.T, req *http.Request) func() *http.Request {
	t.Helper()
	body, err := io.ReadAll(req.Body)
	if err != nil {
		t.Fatal(err)
	}
	return func() *http.Request {
		c := req.Clone(context.Background())
		c.Body = io.NopCloser(bytes.NewReader(body))
		c.ContentLength = int64(len(body))
		return c
	}
}

// retarget points a copy of req at another replica.
func retarget(req *http.Request, base string) *http.Request {
	c := req.Clone(context.Background())
	u := *req.URL
	nu, _ := http.NewRequest(http.MethodPost, base+u.Path, nil)
	c.URL, c.Host = nu.URL, nu.URL.Host
	return c
}

type answer struct {
	status int
	body   []byte
	took   time.Duration
}

func do(t *testing.T, req *http.Request) answer {
	t.Helper()
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, body: body, took: time.Since(start)}
}

func (a answer) reply(t *testing.T) wireReply {
	t.Helper()
	var w struct {
		ResponseType    string          `json:"response_type"`
		Text            string          `json:"text"`
		Blocks          json.RawMessage `json:"blocks"`
		ReplaceOriginal bool            `json:"replace_original"`
	}
	if err := json.Unmarshal(a.body, &w); err != nil {
		t.Fatalf("answer %d %q is not a reply: %v", a.status, a.body, err)
	}
	return wireReply{ResponseType: w.ResponseType, Text: w.Text, ReplaceOriginal: w.ReplaceOriginal}
}

func (e *env) rejected(reason string) float64 {
	return testutil.ToFloat64(e.srv.m.rejected.WithLabelValues(reason))
}

func (e *env) accepted(endpoint string) float64 {
	return testutil.ToFloat64(e.srv.m.accepted.WithLabelValues(endpoint))
}

func (e *env) totalRejected() float64 {
	var n float64
	for _, r := range rejectReasons {
		n += e.rejected(r)
	}
	return n
}
