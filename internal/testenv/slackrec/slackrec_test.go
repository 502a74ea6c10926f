package slackrec_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
)

const channel = "C0INCIDENT"

func client(rec *slackrec.Recorder, opts ...slack.Option) *slack.Client {
	return slack.New("xoxb-test", append([]slack.Option{slack.OptionAPIURL(rec.APIURL())}, opts...)...)
}

func section(text string) slack.MsgOption {
	return slack.MsgOptionBlocks(slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, text, false, false), nil, nil))
}

func post(t *testing.T, api *slack.Client, ch string, opts ...slack.MsgOption) string {
	t.Helper()
	_, ts, err := api.PostMessage(ch, opts...)
	if err != nil {
		t.Fatalf("PostMessage(%s): %v", ch, err)
	}
	return ts
}

func TestPostMessageRecordedAndThreaded(t *testing.T) {
	rec := slackrec.New(t)
	api := client(rec)

	ts := post(t, api, channel, slack.MsgOptionText("kube-apiserver-proxy cannot reach the API", false), section("*diagnosis*"))
	reply := post(t, api, channel, slack.MsgOptionText("details", false), slack.MsgOptionTS(ts))
	if reply <= ts {
		t.Errorf("reply ts %q not after parent %q", reply, ts)
	}

	calls := rec.CallsTo("chat.postMessage")
	if len(calls) != 2 || calls[0].Channel != channel || calls[0].Status != http.StatusOK {
		t.Fatalf("calls = %+v", calls)
	}
	if got := calls[0].Form.Get("text"); got != "kube-apiserver-proxy cannot reach the API" {
		t.Errorf("recorded text = %q", got)
	}

	m, found := rec.Message(channel, ts)
	if !found || m.Text != "kube-apiserver-proxy cannot reach the API" || !strings.Contains(string(m.Blocks), `"*diagnosis*"`) {
		t.Fatalf("stored message = %+v (found %v)", m, found)
	}
	if th := rec.Thread(channel, ts); len(th) != 2 || th[1].TS != reply || th[1].ThreadTS != ts {
		t.Fatalf("Thread = %+v", th)
	}

	msgs, _, _, err := api.GetConversationReplies(&slack.GetConversationRepliesParameters{ChannelID: channel, Timestamp: ts})
	if err != nil {
		t.Fatalf("GetConversationReplies: %v", err)
	}
	if len(msgs) != 2 || msgs[0].Timestamp != ts || msgs[0].ReplyCount != 1 || msgs[1].Text != "details" {
		t.Fatalf("replies = %+v", msgs)
	}
	if len(msgs[0].Blocks.BlockSet) != 1 {
		t.Errorf("parent blocks = %+v, want the section back", msgs[0].Blocks.BlockSet)
	}
	_, _, _, err = api.GetConversationReplies(&slack.GetConversationRepliesParameters{ChannelID: channel, Timestamp: "1.000001"})
	if err == nil || err.Error() != "thread_not_found" {
		t.Errorf("replies of unknown ts: err = %v", err)
	}
}

func TestPostMessageValidates(t *testing.T) {
	rec := slackrec.New(t)
	api := client(rec)
	if _, _, err := api.PostMessage(channel); err == nil || err.Error() != "no_text" {
		t.Errorf("empty post: err = %v, want no_text", err)
	}
	if len(rec.Messages(channel)) != 0 {
		t.Errorf("rejected post was stored")
	}
}

func TestRawBodies(t *testing.T) {
	rec := slackrec.New(t)
	rec.ExpectInvalid() // the broken blocks at the end
	do := func(contentType, body string) map[string]any {
		t.Helper()
		resp, err := http.Post(rec.APIURL()+"chat.postMessage", contentType, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
		return out
	}

	// Slack also takes JSON; the fields land in Form as well.
	got := do("application/json", `{"channel":"C0JSON","text":"hi","blocks":[{"type":"divider"}]}`)
	if got["ok"] != true {
		t.Fatalf("JSON post answered %v", got)
	}
	c := rec.CallsTo("chat.postMessage")[0]
	if c.Channel != "C0JSON" || c.JSON["text"] != "hi" || c.Form.Get("blocks") != `[{"type":"divider"}]` {
		t.Errorf("recorded %+v", c)
	}
	if m := rec.Messages("C0JSON"); len(m) != 1 || string(m[0].Blocks) != `[{"type":"divider"}]` {
		t.Errorf("stored %+v", m)
	}

	if got := do("application/x-www-form-urlencoded", "channel=C0FORM&blocks=%5B%7B"); got["error"] != "invalid_blocks" {
		t.Errorf("broken blocks answered %v", got)
	}
	if v := rec.BlockViolations(); len(v) != 1 || v[0].Channel != "C0FORM" {
		t.Errorf("BlockViolations = %v", v)
	}
}

func TestUpdate(t *testing.T) {
	rec := slackrec.New(t)
	api := client(rec)
	ts := post(t, api, channel, slack.MsgOptionText("investigating", false), section("old"))

	if _, _, _, err := api.UpdateMessage(channel, ts, slack.MsgOptionText("resolved", false)); err != nil {
		t.Fatalf("UpdateMessage: %v", err)
	}
	m, _ := rec.Message(channel, ts)
	if m.Text != "resolved" || m.Updates != 1 || !strings.Contains(string(m.Blocks), "old") {
		t.Errorf("after update: %+v (blocks must be kept when not sent)", m)
	}
	_, _, _, err := api.UpdateMessage(channel, "1.000002", slack.MsgOptionText("x", false))
	if err == nil || err.Error() != "message_not_found" {
		t.Errorf("update of unknown ts: err = %v", err)
	}
	if c := rec.CallsTo("chat.update"); len(c) != 2 {
		t.Errorf("chat.update calls = %d, want 2", len(c))
	}
}

func TestEphemeral(t *testing.T) {
	rec := slackrec.New(t)
	api := client(rec)
	ts, err := api.PostEphemeral(channel, "U0ALICE", slack.MsgOptionText("only you", false))
	if err != nil || ts == "" {
		t.Fatalf("PostEphemeral = %q, %v", ts, err)
	}
	m, found := rec.Message(channel, ts)
	if !found || !m.Ephemeral || m.User != "U0ALICE" {
		t.Errorf("stored = %+v", m)
	}
	if rec.Thread(channel, ts) != nil {
		t.Errorf("ephemeral message must not be a thread")
	}
}

func TestAuthTestUnknownAndStubbed(t *testing.T) {
	rec := slackrec.New(t, slackrec.WithResponse("users.info", map[string]any{
		"ok": true, "user": map[string]any{"id": "U0ALICE", "name": "alice"},
	}))
	api := client(rec)

	auth, err := api.AuthTest()
	if err != nil || auth.UserID != slackrec.BotUserID || auth.TeamID != slackrec.TeamID {
		t.Fatalf("AuthTest = %+v, %v", auth, err)
	}
	if u, err := api.GetUserInfo("U0ALICE"); err != nil || u.Name != "alice" {
		t.Errorf("GetUserInfo = %+v, %v", u, err)
	}
	// reactions.add is one of slacktest's own routes: it must be recorded too.
	if err := api.AddReaction("eyes", slack.NewRefToMessage(channel, "1.000001")); err == nil || err.Error() != "unknown_method" {
		t.Errorf("AddReaction err = %v, want unknown_method", err)
	}
	calls := rec.Calls()
	if len(calls) != 3 || calls[2].Method != "reactions.add" || calls[2].Channel != channel {
		t.Errorf("calls = %+v", calls)
	}
}

func TestRateLimitPerChannel(t *testing.T) {
	// Slow refill, so a loaded machine cannot earn a token mid-test.
	rec := slackrec.New(t, slackrec.WithRate(0.1, 3))
	api := client(rec)
	for i := range 3 {
		post(t, api, channel, slack.MsgOptionText(fmt.Sprint(i), false))
	}
	_, _, err := api.PostMessage(channel, slack.MsgOptionText("too fast", false))
	var rl *slack.RateLimitedError
	if !errors.As(err, &rl) || rl.RetryAfter < time.Second {
		t.Fatalf("4th post: err = %v, want RateLimitedError with RetryAfter >= 1s", err)
	}
	// Another channel has its own budget.
	post(t, api, "C0OTHER", slack.MsgOptionText("fine", false))
	if got := rec.Violations(); got != 0 {
		t.Errorf("Violations = %d before any early retry", got)
	}

	// Retrying at once ignores Retry-After.
	if _, _, err := api.PostMessage(channel, slack.MsgOptionText("again", false)); !errors.As(err, &rl) {
		t.Fatalf("early retry: err = %v", err)
	}
	if rec.RateLimited() != 2 || rec.Violations() != 1 {
		t.Errorf("RateLimited = %d, Violations = %d; want 2, 1", rec.RateLimited(), rec.Violations())
	}
	if c := rec.CallsTo("chat.postMessage"); c[3].Status != http.StatusTooManyRequests {
		t.Errorf("limited call recorded with status %d", c[3].Status)
	}
	if n := len(rec.Messages(channel)); n != 3 {
		t.Errorf("stored %d messages, want 3", n)
	}
}

func TestWellBehavedClientHasNoViolations(t *testing.T) {
	rec := slackrec.New(t, slackrec.WithRate(1, 1))
	api := client(rec, slack.OptionRetryConfig(slack.RetryConfig{MaxRetries: 2, RetryAfterDuration: time.Minute}))
	post(t, api, channel, slack.MsgOptionText("first", false))
	post(t, api, channel, slack.MsgOptionText("second waits for Retry-After", false))
	if rec.RateLimited() != 1 || rec.Violations() != 0 {
		t.Errorf("RateLimited = %d, Violations = %d; want 1, 0", rec.RateLimited(), rec.Violations())
	}
}

func TestUpdateRateLimited(t *testing.T) {
	rec := slackrec.New(t, slackrec.WithUpdateRate(0.1, 2))
	api := client(rec)
	ts := post(t, api, channel, slack.MsgOptionText("v0", false))
	for i := range 2 {
		if _, _, _, err := api.UpdateMessage(channel, ts, slack.MsgOptionText(fmt.Sprint("v", i+1), false)); err != nil {
			t.Fatalf("update %d: %v", i, err)
		}
	}
	_, _, _, err := api.UpdateMessage(channel, ts, slack.MsgOptionText("v3", false))
	var rl *slack.RateLimitedError
	if !errors.As(err, &rl) || rl.RetryAfter < time.Second {
		t.Fatalf("3rd update: err = %v", err)
	}
	// Posting is limited separately.
	post(t, api, channel, slack.MsgOptionText("still posting", false))
	if m, _ := rec.Message(channel, ts); m.Updates != 2 || m.Text != "v2" {
		t.Errorf("message = %+v", m)
	}
}

func TestFailFor(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mode  slackrec.FailMode
		check func(error) bool
		code  int
	}{
		{"ratelimited", slackrec.FailRateLimited, func(err error) bool {
			var rl *slack.RateLimitedError
			return errors.As(err, &rl) && rl.RetryAfter >= 30*time.Second
		}, http.StatusTooManyRequests},
		{"server error", slackrec.FailServerError, func(err error) bool {
			var sc slack.StatusCodeError
			return errors.As(err, &sc) && sc.Code == http.StatusInternalServerError
		}, http.StatusInternalServerError},
		{"unavailable", slackrec.FailUnavailable, func(err error) bool {
			var sc slack.StatusCodeError
			return errors.As(err, &sc) && sc.Code == http.StatusServiceUnavailable
		}, http.StatusServiceUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := slackrec.New(t)
			api := client(rec)
			rec.FailFor(tc.mode, 30*time.Second)
			if _, err := api.AuthTest(); !tc.check(err) {
				t.Fatalf("err = %#v", err)
			}
			if c := rec.Calls(); len(c) != 1 || c[0].Status != tc.code {
				t.Fatalf("calls = %+v", c)
			}
			rec.FailFor(tc.mode, 0)
			if tc.mode == slackrec.FailRateLimited {
				// The client was told to wait 30s; coming back now is early.
				if _, err := api.AuthTest(); err == nil || rec.Violations() != 1 {
					t.Fatalf("early call: err = %v, Violations = %d", err, rec.Violations())
				}
				rec.Reset()
			}
			if _, err := api.AuthTest(); err != nil {
				t.Fatalf("after the failure ended: %v", err)
			}
		})
	}
}

func TestFailForTimeout(t *testing.T) {
	rec := slackrec.New(t)

	rec.FailFor(slackrec.FailTimeout, time.Minute)
	impatient := client(rec, slack.OptionHTTPClient(&http.Client{Timeout: 200 * time.Millisecond}))
	start := time.Now()
	if _, _, err := impatient.PostMessage(channel, slack.MsgOptionText("lost", false)); err == nil {
		t.Fatal("PostMessage succeeded during a timeout failure")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("client waited %v; the client timeout should bound it", d)
	}
	rec.WaitFor(t, 5*time.Second, func(r *slackrec.Recorder) bool {
		c := r.CallsTo("chat.postMessage")
		return len(c) == 1 && c[0].Status == 0
	})
	if len(rec.Messages(channel)) != 0 {
		t.Error("an abandoned call was stored")
	}

	// A patient client gets its answer once the period ends.
	rec.FailFor(slackrec.FailTimeout, 150*time.Millisecond)
	start = time.Now()
	post(t, client(rec), channel, slack.MsgOptionText("slow", false))
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Errorf("answered after %v, before the period ended", d)
	}
}

// FailSequence runs its steps back to back, then Slack answers again.
func TestFailSequence(t *testing.T) {
	rec := slackrec.New(t)
	api := client(rec)
	impatient := client(rec, slack.OptionHTTPClient(&http.Client{Timeout: 200 * time.Millisecond}))
	start := time.Now()
	rec.FailSequence(
		slackrec.FailStep{Mode: slackrec.FailRateLimited, For: time.Second},
		slackrec.FailStep{Mode: slackrec.FailServerError, For: 0}, // skipped
		slackrec.FailStep{Mode: slackrec.FailServerError, For: time.Second},
		slackrec.FailStep{Mode: slackrec.FailTimeout, For: 500 * time.Millisecond},
	)
	if until := rec.FailingUntil(); until.Sub(start) < 2500*time.Millisecond || until.Sub(start) > 3*time.Second {
		t.Fatalf("FailingUntil = start + %v, want 2.5s", until.Sub(start))
	}
	after := func(d time.Duration) {
		rec.WaitFor(t, 10*time.Second, func(*slackrec.Recorder) bool { return time.Since(start) > d })
	}
	var rl *slack.RateLimitedError
	if _, err := api.AuthTest(); !errors.As(err, &rl) || rl.RetryAfter != time.Second {
		t.Fatalf("step 1: err = %#v, want a 429 with Retry-After 1s", err)
	}
	after(1100 * time.Millisecond)
	var sc slack.StatusCodeError
	if _, err := api.AuthTest(); !errors.As(err, &sc) || sc.Code != http.StatusInternalServerError {
		t.Fatalf("step 2: err = %#v, want a 500", err)
	}
	after(2100 * time.Millisecond)
	if _, err := impatient.AuthTest(); err == nil {
		t.Fatal("step 3: answered during a timeout step")
	}
	rec.WaitFor(t, 10*time.Second, func(r *slackrec.Recorder) bool { return time.Now().After(r.FailingUntil()) })
	if _, err := api.AuthTest(); err != nil {
		t.Fatalf("after the sequence: %v", err)
	}
	if rec.Violations() != 0 || rec.RateLimited() != 1 {
		t.Errorf("violations %d, 429s %d; want 0 and 1", rec.Violations(), rec.RateLimited())
	}
	rec.FailSequence() // no steps: nothing fails
	if !rec.FailingUntil().IsZero() {
		t.Error("FailSequence() left failures set")
	}
}

func TestCleanupReleasesHeldCalls(t *testing.T) {
	errc := make(chan error, 1)
	t.Run("inner", func(t *testing.T) {
		rec := slackrec.New(t)
		rec.FailFor(slackrec.FailTimeout, time.Hour)
		go func() { _, err := client(rec).AuthTest(); errc <- err }()
		rec.WaitFor(t, 5*time.Second, func(r *slackrec.Recorder) bool { return r.InFlight() == 1 })
	})
	// Cleanup has run, so the held call must have been answered.
	select {
	case err := <-errc:
		if err == nil {
			t.Error("held call succeeded")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("held call not released by cleanup")
	}
}

func TestResponseURL(t *testing.T) {
	rec := slackrec.New(t)
	api := client(rec)
	u := rec.ResponseURL(channel)
	for i := range 6 {
		_, _, err := api.PostMessage("", slack.MsgOptionResponseURL(u, slack.ResponseTypeEphemeral), slack.MsgOptionText(fmt.Sprint("r", i), false))
		if (err != nil) != (i == 5) {
			t.Fatalf("post %d to response_url: err = %v", i, err)
		}
	}
	c := rec.CallsTo(slackrec.MethodResponseURL)
	if len(c) != 6 || c[0].Channel != channel || c[0].JSON["text"] != "r0" || c[5].Status != http.StatusNotFound {
		t.Errorf("calls = %+v", c)
	}
	if rec.ResponseURL(channel) == u {
		t.Error("ResponseURL repeated a URL")
	}
}

func TestConcurrentPosters(t *testing.T) {
	rec := slackrec.New(t, slackrec.WithRate(0, 0))
	api := client(rec)
	const posters, each = 8, 20
	var wg sync.WaitGroup
	for p := range posters {
		wg.Go(func() {
			for i := range each {
				ch := fmt.Sprint("C", p%2)
				if _, _, err := api.PostMessage(ch, slack.MsgOptionText(fmt.Sprint(p, "/", i), false)); err != nil {
					t.Errorf("poster %d: %v", p, err)
					return
				}
				_ = rec.Messages(ch)
				_ = rec.Calls()
			}
		})
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, ch := range []string{"C0", "C1"} {
		msgs := rec.Messages(ch)
		if len(msgs) != posters/2*each {
			t.Errorf("%s holds %d messages, want %d", ch, len(msgs), posters/2*each)
		}
		for i, m := range msgs {
			if seen[m.TS] || (i > 0 && m.TS <= msgs[i-1].TS) {
				t.Fatalf("ts %q repeated or out of order", m.TS)
			}
			seen[m.TS] = true
		}
	}
}
