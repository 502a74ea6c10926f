package chatops

import (
	"context"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/hcpbot/hcpbot/bot/blockkit"
	"github.com/slack-go/slack"
)

// Handler is what the rest of the bot implements to act on people's input.
// Requests reaching it are authenticated and validated: the command is
// parsed, ids match IDPattern, the response_url is allowed.
//
// A Handler must be safe for concurrent use. It should answer within about
// two seconds: after the ack timeout (WithAckTimeout) the user is told
// "working on it" and the reply, whenever it comes (ctx is cancelled after
// the handler timeout, WithHandlerTimeout), is posted to the response_url
// instead. Help is answered by this package and never reaches a Handler.
type Handler interface {
	HandleCommand(ctx context.Context, req Request) Reply
	HandleAction(ctx context.Context, req ActionRequest) Reply
}

// Transport says how a request reached the bot.
type Transport string

const (
	TransportHTTP       Transport = "http"       // Slack HTTP request, signature verified
	TransportSocketMode Transport = "socketmode" // Slack Socket Mode envelope
	TransportConsole    Transport = "console"    // local console, trusted
)

// Origin is who asked, from where, and how to answer later.
type Origin struct {
	Transport Transport
	TeamID    string
	UserID    string
	// UserName is informational (Slack deprecated it); authorise on UserID.
	UserName    string
	ChannelID   string
	ChannelName string
	// ResponseURL accepts later replies (see Responder); "" when there is none.
	ResponseURL string
	TriggerID   string
}

// Request is a parsed command.
type Request struct {
	Origin
	Command Command
}

// ActionRequest is a pressed button.
type ActionRequest struct {
	Origin
	ActionID  string // one of the Action* constants
	Value     string // the action or incident id the button carries
	MessageTS string // ts of the message holding the button, if any
}

// requestError says why a Slack payload was refused; Reason is the metric
// label of hcpbot_slack_requests_rejected_total.
type requestError struct {
	Reason string
	Detail string
}

func (e *requestError) Error() string { return "chatops: " + e.Reason + ": " + e.Detail }

// Rejection reasons. Kept in one list so every label exists from the start.
const (
	reasonMethod          = "method"
	reasonMissingHeaders  = "missing_headers"
	reasonBadTimestamp    = "bad_timestamp"
	reasonStaleTimestamp  = "stale_timestamp"
	reasonTooLarge        = "too_large"
	reasonBadSignature    = "bad_signature"
	reasonReplay          = "replay"
	reasonGuardError      = "replay_guard_error"
	reasonMalformed       = "malformed"
	reasonBadResponseURL  = "bad_response_url"
	reasonUnknownAction   = "unknown_action"
	reasonBadActionValue  = "bad_action_value"
	reasonUnsupportedType = "unsupported_interaction"
)

var rejectReasons = []string{
	reasonMethod, reasonMissingHeaders, reasonBadTimestamp, reasonStaleTimestamp,
	reasonTooLarge, reasonBadSignature, reasonReplay, reasonGuardError, reasonMalformed,
	reasonBadResponseURL, reasonUnknownAction, reasonBadActionValue, reasonUnsupportedType,
}

var (
	// Slack ids: U…, W…, T…, C…, G…, D…, E… in upper case.
	slackIDRE   = regexp.MustCompile(`^[A-Z0-9]{2,32}$`)
	triggerIDRE = regexp.MustCompile(`^[0-9A-Za-z._-]{1,128}$`)
	messageTSRE = regexp.MustCompile(`^[0-9]{1,12}\.[0-9]{1,9}$`)
)

func malformed(detail string) *requestError {
	return &requestError{Reason: reasonMalformed, Detail: detail}
}

// cleanName keeps a display name printable and short.
func cleanName(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return -1
		}
		return r
	}, s)
	if utf8.RuneCountInString(s) > 80 {
		s = string([]rune(s)[:80])
	}
	return s
}

// newOrigin validates what Slack says about the requester. The request is
// authenticated, but validating costs little and keeps whatever a bug or a
// compromised secret lets through out of logs and API calls.
func newOrigin(t Transport, team, user, userName, channel, channelName, responseURL, trigger string, allowed func(string) bool) (Origin, error) {
	if !slackIDRE.MatchString(user) {
		return Origin{}, malformed("user_id")
	}
	for _, id := range []string{team, channel} {
		if id != "" && !slackIDRE.MatchString(id) {
			return Origin{}, malformed("team_id or channel_id")
		}
	}
	if trigger != "" && !triggerIDRE.MatchString(trigger) {
		return Origin{}, malformed("trigger_id")
	}
	if responseURL != "" && !allowed(responseURL) {
		return Origin{}, &requestError{Reason: reasonBadResponseURL, Detail: "response_url outside the allowed prefix"}
	}
	return Origin{
		Transport: t, TeamID: team, UserID: user, UserName: cleanName(userName),
		ChannelID: channel, ChannelName: cleanName(channelName), ResponseURL: responseURL, TriggerID: trigger,
	}, nil
}

// originFromCommand translates a slash command (HTTP form or Socket Mode
// payload alike).
func originFromCommand(t Transport, sc slack.SlashCommand, allowed func(string) bool) (Origin, error) {
	return newOrigin(t, sc.TeamID, sc.UserID, sc.UserName, sc.ChannelID, sc.ChannelName, sc.ResponseURL, sc.TriggerID, allowed)
}

// actionFromCallback translates a block_actions interaction with one of the
// known buttons.
func actionFromCallback(t Transport, ic *slack.InteractionCallback, allowed func(string) bool) (ActionRequest, error) {
	if ic.Type != slack.InteractionTypeBlockActions {
		return ActionRequest{}, &requestError{Reason: reasonUnsupportedType, Detail: "interaction type " + quote(string(ic.Type))}
	}
	acts := ic.ActionCallback.BlockActions
	if len(acts) != 1 || acts[0] == nil {
		return ActionRequest{}, malformed("block_actions must carry exactly one action")
	}
	a := acts[0]
	if !blockkit.KnownAction(a.ActionID) {
		return ActionRequest{}, &requestError{Reason: reasonUnknownAction, Detail: "action_id " + quote(a.ActionID)}
	}
	if !ValidID(a.Value) {
		return ActionRequest{}, &requestError{Reason: reasonBadActionValue, Detail: "value " + quote(a.Value)}
	}
	channel := ic.Container.ChannelID
	if channel == "" {
		channel = ic.Channel.ID
	}
	o, err := newOrigin(t, ic.Team.ID, ic.User.ID, ic.User.Name, channel, ic.Channel.Name, ic.ResponseURL, ic.TriggerID, allowed)
	if err != nil {
		return ActionRequest{}, err
	}
	ts := ic.Container.MessageTs
	if ts == "" {
		ts = ic.Message.Timestamp
	}
	if ts != "" && !messageTSRE.MatchString(ts) {
		return ActionRequest{}, malformed("message_ts")
	}
	return ActionRequest{Origin: o, ActionID: a.ActionID, Value: a.Value, MessageTS: ts}, nil
}
