package notify

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/slack-go/slack"

	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
)

// testWait bounds every wait; generous for a loaded 2-core machine.
const testWait = 60 * time.Second

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testWait)
	t.Cleanup(cancel)
	return ctx
}

// kvStore opens a KVStore on its own NATS connection, as a separate
// process would.
func kvStore(t *testing.T, e *bus.Embedded, bucket string) *KVStore {
	t.Helper()
	ctx := testContext(t)
	conn, err := bus.Connect(ctx, bus.Config{URLs: []string{e.ClientURL()}, Name: "notify-test"}, natstest.Logger(t))
	if err != nil {
		t.Fatalf("bus.Connect: %v", err)
	}
	t.Cleanup(conn.Close)
	s, err := NewKVStore(ctx, conn.JS, KVConfig{Bucket: bucket})
	if err != nil {
		t.Fatalf("NewKVStore: %v", err)
	}
	return s
}

// exchange is one HTTP call to Slack as the client saw it.
type exchange struct {
	method     string
	start, end time.Time
	status     int // 0: no answer (timeout, cancelled)
	retryAfter time.Duration
}

// tap records what the recorder does not: when answers arrived and the
// Retry-After they carried.
// Its intercept, if set, may answer a call in Slack's place (for errors the
// recorder does not produce) from the call's form.
type tap struct {
	intercept func(method string, form url.Values) (slackError string)

	mu  sync.Mutex
	log []exchange
}

func (tp *tap) RoundTrip(req *http.Request) (*http.Response, error) {
	ex := exchange{method: strings.TrimPrefix(req.URL.Path, "/"), start: time.Now()}
	if tp.intercept != nil && req.Body != nil {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, err
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		form, _ := url.ParseQuery(string(body))
		if code := tp.intercept(ex.method, form); code != "" {
			tp.mu.Lock()
			tp.log = append(tp.log, exchange{method: ex.method, start: ex.start, end: time.Now(), status: http.StatusOK})
			tp.mu.Unlock()
			return &http.Response{
				StatusCode: http.StatusOK, Status: "200 OK", Request: req,
				Header: http.Header{"Content-Type": {"application/json"}},
				Body:   io.NopCloser(strings.NewReader(`{"ok":false,"error":"` + code + `"}`)),
			}, nil
		}
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	ex.end = time.Now()
	if err == nil {
		ex.status = resp.StatusCode
		if s := resp.Header.Get("Retry-After"); s != "" {
			var secs int
			_, _ = fmt.Sscan(s, &secs)
			ex.retryAfter = time.Duration(secs) * time.Second
		}
	}
	tp.mu.Lock()
	tp.log = append(tp.log, ex)
	tp.mu.Unlock()
	return resp, err
}

func (tp *tap) exchanges() []exchange {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return append([]exchange(nil), tp.log...)
}

func (tp *tap) count(pred func(exchange) bool) int {
	n := 0
	for _, ex := range tp.exchanges() {
		if pred(ex) {
			n++
		}
	}
	return n
}

// inRetryAfterWindows counts calls started while a Retry-After received
// earlier had not elapsed: what "never hammer" forbids.
func (tp *tap) inRetryAfterWindows() int {
	exs := tp.exchanges()
	n := 0
	for _, limited := range exs {
		if limited.status != http.StatusTooManyRequests {
			continue
		}
		until := limited.end.Add(limited.retryAfter)
		for _, ex := range exs {
			if ex.start.After(limited.end) && ex.start.Before(until) {
				n++
			}
		}
	}
	return n
}

type fixture struct {
	n   *Slack
	tap *tap
	reg *prometheus.Registry
}

func newSlack(t *testing.T, rec *slackrec.Recorder, store Store, mod func(*SlackConfig)) fixture {
	t.Helper()
	return newSlackTap(t, rec, store, &tap{}, mod)
}

func newSlackTap(t *testing.T, rec *slackrec.Recorder, store Store, tp *tap, mod func(*SlackConfig)) fixture {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg := SlackConfig{
		Client:     NewSlackClient("xoxb-test-token", rec.APIURL(), &http.Client{Transport: tp}),
		Store:      store,
		Registerer: reg,
		Log:        natstest.Logger(t),
	}
	if mod != nil {
		mod(&cfg)
	}
	n, err := NewSlack(cfg)
	if err != nil {
		t.Fatalf("NewSlack: %v", err)
	}
	return fixture{n: n, tap: tp, reg: reg}
}

// run starts n.Run and returns a stop function that waits for Run to
// return; the test's cleanup stops it too.
func run(t *testing.T, n Notifier) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(testWait):
				t.Errorf("Run did not return after cancel")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testWait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// roots returns the root messages of channel by the key their text starts
// with ("<key> v<version>").
func roots(rec *slackrec.Recorder, channel string) map[string][]slackrec.Message {
	out := map[string][]slackrec.Message{}
	for _, m := range rec.Messages(channel) {
		if m.ThreadTS == "" {
			key, _, _ := strings.Cut(m.Text, " ")
			out[key] = append(out[key], m)
		}
	}
	return out
}

// replyTexts returns the texts of the thread under ts.
func replyTexts(rec *slackrec.Recorder, channel, ts string) []string {
	var out []string
	for i, m := range rec.Thread(channel, ts) {
		if i > 0 {
			out = append(out, m.Text)
		}
	}
	return out
}

func mustUpsert(t *testing.T, n Notifier, m Message) {
	t.Helper()
	if err := n.Upsert(t.Context(), m); err != nil {
		t.Fatalf("Upsert(%s v%d): %v", m.Key, m.Version, err)
	}
}

func mustReply(t *testing.T, n Notifier, r Reply) {
	t.Helper()
	if err := n.Reply(t.Context(), r); err != nil {
		t.Fatalf("Reply(%s/%s): %v", r.Key, r.ID, err)
	}
}

func msg(channel, key string, v uint64) Message {
	return Message{Key: key, Channel: channel, Version: v, Text: fmt.Sprintf("%s v%d", key, v)}
}

func reply(channel, key, id string) Reply {
	return Reply{Key: key, Channel: channel, ID: id, Text: id}
}

// counter reads a counter or the sum of a counter vector from reg.
func counter(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if want, set := labels[lp.GetName()]; set && want != lp.GetValue() {
					continue metric
				}
			}
			switch {
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				sum += m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return sum
}

func okCalls(rec *slackrec.Recorder, method string) int {
	n := 0
	for _, c := range rec.CallsTo(method) {
		if c.Status == http.StatusOK {
			n++
		}
	}
	return n
}

var slackRateLimited = slack.RateLimitedError{RetryAfter: 3 * time.Second}

func slackStatus(code int) error {
	return slack.StatusCodeError{Code: code, Status: http.StatusText(code)}
}

func slackCode(code string) error { return slack.SlackErrorResponse{Err: code} }
