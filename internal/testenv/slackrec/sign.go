package slackrec

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/slack-go/slack"
)

// userAgent is what Slack sends on slash commands and interactions.
const userAgent = "Slackbot 1.0 (+https://api.slack.com/robots)"

// Sign returns the X-Slack-Request-Timestamp and X-Slack-Signature headers
// Slack sends with body at ts.
func Sign(secret string, ts time.Time, body []byte) (timestamp, signature string) {
	timestamp = strconv.FormatInt(ts.Unix(), 10)
	mac := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(mac, "v0:%s:", timestamp)
	mac.Write(body)
	return timestamp, "v0=" + hex.EncodeToString(mac.Sum(nil))
}

// CommandRequest builds the signed POST Slack sends to endpoint for a slash
// command. Empty TeamID, TeamDomain, APIAppID and TriggerID get this
// workspace's values; enterprise fields are sent only when set.
func CommandRequest(ctx context.Context, endpoint, secret string, cmd slack.SlashCommand, ts time.Time) (*http.Request, error) {
	if cmd.TeamID == "" {
		cmd.TeamID = TeamID
	}
	if cmd.TeamDomain == "" {
		cmd.TeamDomain = TeamDomain
	}
	if cmd.APIAppID == "" {
		cmd.APIAppID = AppID
	}
	if cmd.TriggerID == "" {
		cmd.TriggerID = triggerID(ts)
	}
	form := url.Values{
		"token":                 {cmd.Token},
		"team_id":               {cmd.TeamID},
		"team_domain":           {cmd.TeamDomain},
		"channel_id":            {cmd.ChannelID},
		"channel_name":          {cmd.ChannelName},
		"user_id":               {cmd.UserID},
		"user_name":             {cmd.UserName},
		"command":               {cmd.Command},
		"text":                  {cmd.Text},
		"api_app_id":            {cmd.APIAppID},
		"is_enterprise_install": {strconv.FormatBool(cmd.IsEnterpriseInstall)},
		"response_url":          {cmd.ResponseURL},
		"trigger_id":            {cmd.TriggerID},
	}
	if cmd.EnterpriseID != "" {
		form.Set("enterprise_id", cmd.EnterpriseID)
		form.Set("enterprise_name", cmd.EnterpriseName)
	}
	return signedRequest(ctx, endpoint, secret, []byte(form.Encode()), ts)
}

// InteractionRequest builds the signed POST Slack sends to endpoint for an
// interaction: payload, usually a slack.InteractionCallback, as JSON in the
// form field "payload".
func InteractionRequest(ctx context.Context, endpoint, secret string, payload any, ts time.Time) (*http.Request, error) {
	// InteractionCallback marshals its block state only through a pointer.
	if ic, isValue := payload.(slack.InteractionCallback); isValue {
		payload = &ic
	}
	js, err := json.Marshal(payload)
	if err != nil {
		return nil, fmt.Errorf("slackrec: encoding interaction payload: %w", err)
	}
	form := url.Values{"payload": {string(js)}}
	return signedRequest(ctx, endpoint, secret, []byte(form.Encode()), ts)
}

func signedRequest(ctx context.Context, endpoint, secret string, body []byte, ts time.Time) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("slackrec: building request: %w", err)
	}
	timestamp, signature := Sign(secret, ts, body)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("User-Agent", userAgent)
	req.Header.Set("X-Slack-Request-Timestamp", timestamp)
	req.Header.Set("X-Slack-Signature", signature)
	return req, nil
}

// triggerID looks like Slack's: "<digits>.<team digits>.<hex>".
func triggerID(ts time.Time) string {
	return fmt.Sprintf("%d.%d.%x", ts.UnixMicro(), 4744562912, ts.UnixNano())
}

// Press describes a button click for ButtonPress.
type Press struct {
	UserID, UserName string
	ChannelID        string
	MessageTS        string
	ActionID         string
	BlockID          string
	Value            string
	ResponseURL      string // e.g. from (*Recorder).ResponseURL
	// Message, when set, is the clicked message (e.g. from
	// (*Recorder).Message): it supplies ChannelID and MessageTS if they are
	// empty, and its text and blocks, as Slack includes them in the payload.
	Message *Message
}

// ButtonPress builds the block_actions payload Slack sends when a user
// clicks a button.
func ButtonPress(p Press) *slack.InteractionCallback {
	now := time.Now()
	actionTS := fmt.Sprintf("%d.%06d", now.Unix(), now.Nanosecond()/1000)
	msg := slack.Message{Msg: slack.Msg{Type: "message", User: BotUserID, BotID: BotID}}
	if m := p.Message; m != nil {
		if p.ChannelID == "" {
			p.ChannelID = m.Channel
		}
		if p.MessageTS == "" {
			p.MessageTS = m.TS
		}
		msg.Text, msg.ThreadTimestamp = m.Text, m.ThreadTS
		if len(m.Blocks) > 0 {
			// Best effort: blocks slack-go could send, it can read back.
			_ = json.Unmarshal(m.Blocks, &msg.Blocks)
		}
	}
	msg.Timestamp = p.MessageTS
	ic := &slack.InteractionCallback{
		Type:        slack.InteractionTypeBlockActions,
		TriggerID:   triggerID(now),
		ResponseURL: p.ResponseURL,
		APIAppID:    AppID,
		Team:        slack.Team{ID: TeamID, Domain: TeamDomain},
		User:        slack.User{ID: p.UserID, Name: p.UserName, Username: p.UserName, TeamID: TeamID},
		Container: slack.Container{
			Type: "message", MessageTs: p.MessageTS, ChannelID: p.ChannelID,
			IsEphemeral: p.Message != nil && p.Message.Ephemeral,
		},
		Message: msg,
		ActionCallback: slack.ActionCallbacks{BlockActions: []*slack.BlockAction{{
			ActionID: p.ActionID, BlockID: p.BlockID, Type: "button", Value: p.Value, ActionTs: actionTS,
		}}},
	}
	ic.Channel.ID = p.ChannelID
	return ic
}
