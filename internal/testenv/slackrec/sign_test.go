package slackrec_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
)

const (
	secret = "8f742231b10e8888abcd99yyyzzz85a5"
	// The bot's endpoint is only a URL here; nothing dials it.
	botURL = "http://127.0.0.1:1/slack"
)

// verify checks req the way a bot does with slack-go, and leaves its body
// readable again for parsing.
func verify(t *testing.T, req *http.Request, secret string) error {
	t.Helper()
	body, err := io.ReadAll(req.Body)
	if err != nil {
		t.Fatal(err)
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	v, err := slack.NewSecretsVerifier(req.Header, secret)
	if err != nil {
		return err
	}
	if _, err := v.Write(body); err != nil {
		t.Fatal(err)
	}
	return v.Ensure()
}

func TestSignMatchesSlackGoVector(t *testing.T) {
	// From slack-go's security_test.go.
	body := `{"token":"aF5ynEYQH0dFN9imlgcADxDB","team_id":"XXXXXXXXX","api_app_id":"YYYYYYYYY","event":{"type":"app_mention","user":"AAAAAAAAA","text":"<@EEEEEEEEE> hello world","client_msg_id":"477cc591-ch73-a14z-4db8-g0cd76321bec","ts":"1531431954.000073","channel":"TTTTTTTTT","event_ts":"1531431954.000073"},"type":"event_callback","event_id":"TvBP7LRED7","event_time":1531431954,"authed_users":["EEEEEEEEE"]}`
	ts, sig := slackrec.Sign("e6b19c573432dcc6b075501d51b51bb8", time.Unix(1531431954, 0), []byte(body))
	if ts != "1531431954" || sig != "v0=adada4ed31709aef585c2580ca3267678c6a8eaeb7e0c1aca3ee57b656886b2c" {
		t.Errorf("Sign = %s, %s", ts, sig)
	}
}

func TestCommandRequest(t *testing.T) {
	cmd := slack.SlashCommand{
		ChannelID: "C0INCIDENT", ChannelName: "incidents", UserID: "U0ALICE", UserName: "alice",
		Command: "/hcp", Text: "approve inc-7 & more", ResponseURL: "https://hooks.slack.com/commands/T0HCPBOT/1/abc",
	}
	req, err := slackrec.CommandRequest(context.Background(), botURL, secret, cmd, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if req.Header.Get("Content-Type") != "application/x-www-form-urlencoded" ||
		req.Header.Get("User-Agent") != "Slackbot 1.0 (+https://api.slack.com/robots)" {
		t.Errorf("headers = %v", req.Header)
	}
	if err := verify(t, req, secret); err != nil {
		t.Fatalf("slack-go rejected the signature: %v", err)
	}
	got, err := slack.SlashCommandParse(req)
	if err != nil {
		t.Fatal(err)
	}
	want := cmd
	want.TeamID, want.TeamDomain, want.APIAppID, want.TriggerID = slackrec.TeamID, slackrec.TeamDomain, slackrec.AppID, got.TriggerID
	if got != want || got.TriggerID == "" {
		t.Errorf("parsed %+v\nwant   %+v", got, want)
	}
}

func TestRequestsSlackGoRejects(t *testing.T) {
	ctx := context.Background()
	cmd := slack.SlashCommand{Command: "/hcp", Text: "status"}

	req, _ := slackrec.CommandRequest(ctx, botURL, secret, cmd, time.Now())
	if err := verify(t, req, "another-secret"); !errors.Is(err, slack.ErrInvalidSignature) {
		t.Errorf("wrong secret: err = %v", err)
	}

	req, _ = slackrec.CommandRequest(ctx, botURL, secret, cmd, time.Now())
	body, _ := io.ReadAll(req.Body)
	req.Body = io.NopCloser(bytes.NewReader(bytes.Replace(body, []byte("status"), []byte("approve"), 1)))
	if err := verify(t, req, secret); !errors.Is(err, slack.ErrInvalidSignature) {
		t.Errorf("tampered body: err = %v", err)
	}

	req, _ = slackrec.CommandRequest(ctx, botURL, secret, cmd, time.Now().Add(-6*time.Minute))
	if err := verify(t, req, secret); !errors.Is(err, slack.ErrExpiredTimestamp) {
		t.Errorf("old timestamp: err = %v", err)
	}
}

func TestButtonPressRoundTrip(t *testing.T) {
	rec := slackrec.New(t)
	api := client(rec)
	approve := slack.NewActionBlock("fix", slack.NewButtonBlockElement("approve", "fix-42",
		slack.NewTextBlockObject(slack.PlainTextType, "Approve", false, false)))
	ts := post(t, api, channel, slack.MsgOptionText("proposed fix", false), slack.MsgOptionBlocks(approve))
	m, _ := rec.Message(channel, ts)

	ic := slackrec.ButtonPress(slackrec.Press{
		UserID: "U0ALICE", UserName: "alice", ActionID: "approve", BlockID: "fix", Value: "fix-42",
		ResponseURL: rec.ResponseURL(channel), Message: &m,
	})
	for _, payload := range []any{ic, *ic} {
		req, err := slackrec.InteractionRequest(context.Background(), botURL, secret, payload, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if err := verify(t, req, secret); err != nil {
			t.Fatalf("slack-go rejected the signature: %v", err)
		}
		got, err := slack.InteractionCallbackParse(req)
		if err != nil {
			t.Fatal(err)
		}
		acts := got.ActionCallback.BlockActions
		if got.Type != slack.InteractionTypeBlockActions || len(acts) != 1 || acts[0].ActionID != "approve" ||
			acts[0].Value != "fix-42" || got.User.ID != "U0ALICE" || got.Channel.ID != channel ||
			got.Container.MessageTs != ts || got.Message.Timestamp != ts || len(got.Message.Blocks.BlockSet) != 1 {
			t.Fatalf("parsed %+v", got)
		}

		// The bot answers on the response_url; the recorder takes it.
		if _, _, err := api.PostMessage("", slack.MsgOptionResponseURL(got.ResponseURL, slack.ResponseTypeInChannel),
			slack.MsgOptionReplaceOriginal(got.ResponseURL), slack.MsgOptionText("approved by alice", false)); err != nil {
			t.Fatalf("response_url: %v", err)
		}
	}
	if c := rec.CallsTo(slackrec.MethodResponseURL); len(c) != 2 || c[1].JSON["replace_original"] != true {
		t.Errorf("response_url calls = %+v", c)
	}
}
