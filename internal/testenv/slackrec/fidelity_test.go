package slackrec_test

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
)

func header(text string) slack.MsgOption {
	return slack.MsgOptionBlocks(slack.NewHeaderBlock(slack.NewTextBlockObject(slack.PlainTextType, text, false, false)))
}

// TestBlockLimits: a message over a Block Kit limit is refused as Slack
// refuses it, on every method that carries blocks, and counted.
func TestBlockLimits(t *testing.T) {
	rec := slackrec.New(t, slackrec.WithRate(0, 1))
	rec.ExpectInvalid()
	api := client(rec)
	long := strings.Repeat("h", 151)

	if _, _, err := api.PostMessage(channel, slack.MsgOptionText("t", false), header(long)); err == nil || err.Error() != "invalid_blocks" {
		t.Errorf("151-character header: err = %v, want invalid_blocks", err)
	}
	if _, _, err := api.PostMessage(channel, slack.MsgOptionText(strings.Repeat("x", 40001), false)); err == nil || err.Error() != "msg_too_long" {
		t.Errorf("40,001-character text: err = %v, want msg_too_long", err)
	}
	if len(rec.Messages(channel)) != 0 {
		t.Errorf("a refused message was stored")
	}
	ts := post(t, api, channel, slack.MsgOptionText("t", false), header("fine"))
	if _, _, _, err := api.UpdateMessage(channel, ts, slack.MsgOptionText("t", false), header(long)); err == nil || err.Error() != "invalid_blocks" {
		t.Errorf("update: err = %v, want invalid_blocks", err)
	}
	if m, _ := rec.Message(channel, ts); m.Updates != 0 || !strings.Contains(string(m.Blocks), `"fine"`) {
		t.Errorf("a refused update changed the message: %+v", m)
	}
	if _, err := api.PostEphemeral(channel, "U0ALICE", slack.MsgOptionText("t", false), header(long)); err == nil || err.Error() != "invalid_blocks" {
		t.Errorf("ephemeral: err = %v, want invalid_blocks", err)
	}
	resp, err := http.Post(rec.ResponseURL(channel), "application/json",
		strings.NewReader(`{"text":"t","blocks":[{"type":"header","text":{"type":"plain_text","text":"`+long+`"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("response_url: a 151-character header answered %d, want 400", resp.StatusCode)
	}

	v := rec.BlockViolations()
	var methods []string
	for _, x := range v {
		methods = append(methods, x.Method+" "+x.Code)
	}
	want := []string{"chat.postMessage invalid_blocks", "chat.postMessage msg_too_long", "chat.update invalid_blocks",
		"chat.postEphemeral invalid_blocks", slackrec.MethodResponseURL + " invalid_blocks"}
	if fmt.Sprint(methods) != fmt.Sprint(want) {
		t.Errorf("BlockViolations = %v, want %v", methods, want)
	}
	if !strings.Contains(v[0].Detail, "blocks[0].text.text: 151 characters, limit 150") {
		t.Errorf("Detail = %q", v[0].Detail)
	}
}

// cleanupTB is a testing.TB whose cleanups the test runs and whose errors
// it reads.
type cleanupTB struct {
	testing.TB
	cleanups []func()
	errs     []string
}

func (c *cleanupTB) Helper()          {}
func (c *cleanupTB) Cleanup(f func()) { c.cleanups = append(c.cleanups, f) }
func (c *cleanupTB) Errorf(format string, args ...any) {
	c.errs = append(c.errs, fmt.Sprintf(format, args...))
}
func (c *cleanupTB) end() {
	for i := len(c.cleanups) - 1; i >= 0; i-- {
		c.cleanups[i]()
	}
}

// TestViolationsFailAtCleanup: a test that sent a message Slack would
// refuse fails when it ends, unless it said it expected to.
func TestViolationsFailAtCleanup(t *testing.T) {
	for _, expect := range []bool{false, true} {
		tb := &cleanupTB{}
		rec := slackrec.New(tb)
		if expect {
			rec.ExpectInvalid()
		}
		_, _, err := client(rec).PostMessage(channel, slack.MsgOptionText("t", false), header(strings.Repeat("h", 151)))
		tb.end()
		if err == nil {
			t.Fatal("a 151-character header was accepted")
		}
		if expect != (len(tb.errs) == 0) {
			t.Errorf("ExpectInvalid %v: errors at cleanup %q", expect, tb.errs)
		}
	}
	tb := &cleanupTB{}
	post(t, client(slackrec.New(tb)), channel, slack.MsgOptionText("t", false), header("fine"))
	tb.end()
	if len(tb.errs) != 0 {
		t.Errorf("a valid message failed the test: %q", tb.errs)
	}
}

// TestChannelStates: each state answers as Slack does on the methods it
// concerns, and leaves the others alone.
func TestChannelStates(t *testing.T) {
	rec := slackrec.New(t, slackrec.WithRate(0, 1))
	api := client(rec)
	ts := post(t, api, channel, slack.MsgOptionText("root", false))
	calls := map[string]func() error{
		"post": func() error { _, _, err := api.PostMessage(channel, slack.MsgOptionText("t", false)); return err },
		"ephemeral": func() error {
			_, err := api.PostEphemeral(channel, "U0ALICE", slack.MsgOptionText("t", false))
			return err
		},
		"update": func() error {
			_, _, _, err := api.UpdateMessage(channel, ts, slack.MsgOptionText("t", false))
			return err
		},
		"history": func() error {
			_, err := api.GetConversationHistory(&slack.GetConversationHistoryParameters{ChannelID: channel})
			return err
		},
		"replies": func() error {
			_, _, _, err := api.GetConversationReplies(&slack.GetConversationRepliesParameters{ChannelID: channel, Timestamp: ts})
			return err
		},
		"response_url": func() error {
			_, _, err := api.PostMessage("", slack.MsgOptionResponseURL(rec.ResponseURL(channel), slack.ResponseTypeEphemeral), slack.MsgOptionText("t", false))
			return err
		},
	}
	tests := []struct {
		state slackrec.ChannelState
		want  map[string]string // by call; "" is ok
	}{
		{slackrec.ChannelNotFound, map[string]string{"post": "channel_not_found", "ephemeral": "channel_not_found", "update": "channel_not_found",
			"history": "channel_not_found", "replies": "channel_not_found", "response_url": ""}},
		{slackrec.ChannelNotMember, map[string]string{"post": "not_in_channel", "ephemeral": "not_in_channel", "update": "not_in_channel",
			"history": "not_in_channel", "replies": "not_in_channel", "response_url": ""}},
		{slackrec.ChannelArchived, map[string]string{"post": "is_archived", "ephemeral": "is_archived", "update": "is_archived",
			"history": "", "replies": "", "response_url": ""}},
		{slackrec.ChannelOK, map[string]string{"post": "", "ephemeral": "", "update": "", "history": "", "replies": "", "response_url": ""}},
	}
	for _, tt := range tests {
		rec.SetChannel(channel, tt.state)
		for name, call := range calls {
			got := ""
			if err := call(); err != nil {
				got = err.Error()
			}
			if got != tt.want[name] {
				t.Errorf("state %d, %s: err %q, want %q", tt.state, name, got, tt.want[name])
			}
		}
	}
	// Other channels are not affected.
	rec.SetChannel(channel, slackrec.ChannelNotFound)
	post(t, api, "C0OTHER", slack.MsgOptionText("fine", false))
}

// TestRevokeToken: a revoked token is refused on every method; another
// token, and response_urls, still work.
func TestRevokeToken(t *testing.T) {
	rec := slackrec.New(t)
	api := client(rec)
	rec.RevokeToken("xoxb-test")
	if _, _, err := api.PostMessage(channel, slack.MsgOptionText("t", false)); err == nil || err.Error() != "token_revoked" {
		t.Errorf("post: err = %v, want token_revoked", err)
	}
	if _, err := api.AuthTest(); err == nil || err.Error() != "token_revoked" {
		t.Errorf("auth.test: err = %v, want token_revoked", err)
	}
	if _, err := api.GetUserGroupMembers("S0APPROVERS"); err == nil || err.Error() != "token_revoked" {
		t.Errorf("usergroups.users.list: err = %v, want token_revoked", err)
	}
	if _, _, err := api.PostMessage("", slack.MsgOptionResponseURL(rec.ResponseURL(channel), slack.ResponseTypeEphemeral), slack.MsgOptionText("t", false)); err != nil {
		t.Errorf("response_url: %v", err)
	}
	if _, err := slack.New("xoxb-other", slack.OptionAPIURL(rec.APIURL())).AuthTest(); err != nil {
		t.Errorf("another token: %v", err)
	}
	rec.RevokeToken("")
	if _, err := slack.New("xoxb-other", slack.OptionAPIURL(rec.APIURL())).AuthTest(); err == nil || err.Error() != "token_revoked" {
		t.Errorf("every token revoked: err = %v", err)
	}
}

func TestUsersAndGroups(t *testing.T) {
	rec := slackrec.New(t)
	api := client(rec)
	rec.AddUser(slackrec.User{ID: "U0ALICE", Name: "alice", RealName: "Alice A"})
	rec.SetUserGroup("S0APPROVERS", "U0ALICE", "U0BOB")

	if u, err := api.GetUserInfo("U0ALICE"); err != nil || u.Name != "alice" || u.RealName != "Alice A" || u.IsBot {
		t.Errorf("users.info alice = %+v, %v", u, err)
	}
	if u, err := api.GetUserInfo(slackrec.BotUserID); err != nil || !u.IsBot {
		t.Errorf("users.info of the bot = %+v, %v", u, err)
	}
	if _, err := api.GetUserInfo("U0NOBODY"); err == nil || err.Error() != "user_not_found" {
		t.Errorf("unknown user: err = %v", err)
	}
	if m, err := api.GetUserGroupMembers("S0APPROVERS"); err != nil || fmt.Sprint(m) != "[U0ALICE U0BOB]" {
		t.Errorf("usergroups.users.list = %v, %v", m, err)
	}
	if _, err := api.GetUserGroupMembers("S0NONE"); err == nil || err.Error() != "no_such_subteam" {
		t.Errorf("unknown group: err = %v", err)
	}
}

// TestScopes: users.info shows the profile's e-mail only to a token with
// users:read.email, and like usergroups.users.list answers missing_scope,
// naming the scope needed and those provided, without its read scope.
func TestScopes(t *testing.T) {
	rec := slackrec.New(t)
	api := client(rec)
	rec.AddUser(slackrec.User{ID: "U0ALICE", Name: "alice", Email: "alice@corp.example"})
	rec.AddUser(slackrec.User{ID: "U0BOB", Name: "bob", Email: "bob@corp.example", EmailUnconfirmed: true})
	rec.SetUserGroup("S0APPROVERS", "U0ALICE")

	// Every scope until SetScopes.
	if u, err := api.GetUserInfo("U0ALICE"); err != nil || u.Profile.Email != "alice@corp.example" || !u.IsEmailConfirmed {
		t.Errorf("all scopes: %+v, %v", u, err)
	}
	if u, err := api.GetUserInfo("U0BOB"); err != nil || u.Profile.Email != "bob@corp.example" || u.IsEmailConfirmed {
		t.Errorf("unconfirmed e-mail: confirmed %v, %v", u.IsEmailConfirmed, err)
	}
	rec.SetScopes("chat:write", "commands", "users:read", "usergroups:read")
	if u, err := api.GetUserInfo("U0ALICE"); err != nil || u.Name != "alice" || u.Profile.Email != "" {
		t.Errorf("without users:read.email: %+v, %v", u, err)
	}
	if _, err := api.GetUserGroupMembers("S0APPROVERS"); err != nil {
		t.Errorf("usergroups:read granted: %v", err)
	}
	rec.SetScopes("chat:write", "commands")
	var se slack.SlackErrorResponse
	if _, err := api.GetUserInfo("U0ALICE"); !errors.As(err, &se) || se.Err != "missing_scope" || se.Needed != "users:read" || se.Provided != "chat:write,commands" {
		t.Errorf("without users:read: %#v", err)
	}
	if _, err := api.GetUserGroupMembers("S0APPROVERS"); !errors.As(err, &se) || se.Err != "missing_scope" || se.Needed != "usergroups:read" {
		t.Errorf("without usergroups:read: %#v", err)
	}
	rec.SetScopes("users:read", "users:read.email")
	rec.Reset()
	if u, err := api.GetUserInfo("U0ALICE"); err != nil || u.Profile.Email != "alice@corp.example" {
		t.Errorf("scopes and users kept across Reset: %+v, %v", u, err)
	}
}

// TestEveryMethodRateLimited: FailFor's 429 with Retry-After reaches every
// method the recorder serves.
func TestEveryMethodRateLimited(t *testing.T) {
	methods := map[string]func(rec *slackrec.Recorder, api *slack.Client, ts string) error{
		"chat.postMessage": func(_ *slackrec.Recorder, api *slack.Client, _ string) error {
			_, _, err := api.PostMessage(channel, slack.MsgOptionText("t", false))
			return err
		},
		"chat.postEphemeral": func(_ *slackrec.Recorder, api *slack.Client, _ string) error {
			_, err := api.PostEphemeral(channel, "U0ALICE", slack.MsgOptionText("t", false))
			return err
		},
		"chat.update": func(_ *slackrec.Recorder, api *slack.Client, ts string) error {
			_, _, _, err := api.UpdateMessage(channel, ts, slack.MsgOptionText("t", false))
			return err
		},
		"conversations.history": func(_ *slackrec.Recorder, api *slack.Client, _ string) error {
			_, err := api.GetConversationHistory(&slack.GetConversationHistoryParameters{ChannelID: channel})
			return err
		},
		"conversations.replies": func(_ *slackrec.Recorder, api *slack.Client, ts string) error {
			_, _, _, err := api.GetConversationReplies(&slack.GetConversationRepliesParameters{ChannelID: channel, Timestamp: ts})
			return err
		},
		"users.info": func(_ *slackrec.Recorder, api *slack.Client, _ string) error {
			_, err := api.GetUserInfo("U0ALICE")
			return err
		},
		"usergroups.users.list": func(_ *slackrec.Recorder, api *slack.Client, _ string) error {
			_, err := api.GetUserGroupMembers("S0APPROVERS")
			return err
		},
		"auth.test": func(_ *slackrec.Recorder, api *slack.Client, _ string) error {
			_, err := api.AuthTest()
			return err
		},
		slackrec.MethodResponseURL: func(rec *slackrec.Recorder, _ *slack.Client, _ string) error {
			// slack-go reads no Retry-After from a response_url: ask directly.
			resp, err := http.Post(rec.ResponseURL(channel), "application/json", bytes.NewBufferString(`{"text":"t"}`))
			if err != nil {
				return err
			}
			resp.Body.Close()
			switch {
			case resp.StatusCode == http.StatusOK:
				return nil
			case resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") != "":
				return &slack.RateLimitedError{RetryAfter: time.Second}
			}
			return fmt.Errorf("status %d, Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
		},
	}
	for method, call := range methods {
		t.Run(method, func(t *testing.T) {
			rec := slackrec.New(t)
			rec.AddUser(slackrec.User{ID: "U0ALICE", Name: "alice"})
			rec.SetUserGroup("S0APPROVERS", "U0ALICE")
			api := client(rec)
			ts := post(t, api, channel, slack.MsgOptionText("root", false))
			if err := call(rec, api, ts); err != nil {
				t.Fatalf("before FailFor: %v", err)
			}
			rec.FailFor(slackrec.FailRateLimited, 3*time.Second)
			err := call(rec, api, ts)
			var rl *slack.RateLimitedError
			if !errors.As(err, &rl) || rl.RetryAfter < time.Second {
				t.Fatalf("during FailFor: err = %v, want a 429 with Retry-After", err)
			}
			for _, c := range rec.CallsTo(method) {
				if c.Status == http.StatusTooManyRequests {
					return
				}
			}
			t.Errorf("no 429 recorded for %s", method)
		})
	}
}
