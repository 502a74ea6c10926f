// Package slackrec is the Slack side of the hcpbot test harness.
//
// New starts a loopback Slack Web API on slack-go's slacktest server that
// records every call, keeps a per-channel message store, answers
// chat.postMessage, chat.postEphemeral, chat.update, conversations.replies
// and auth.test the way Slack does, and enforces Slack's posting rate limits
// so a bot that ignores Retry-After is caught (Violations):
//
//	rec := slackrec.New(t)
//	api := slack.New("xoxb-test", slack.OptionAPIURL(rec.APIURL()))
//	// ... run the bot with api ...
//	rec.WaitFor(t, 5*time.Second, func(r *slackrec.Recorder) bool {
//		return len(r.Messages("C0INCIDENTS")) == 1
//	})
//
// It also serves conversations.history, users.info (AddUser) and
// usergroups.users.list (SetUserGroup), with the scopes the token was
// granted (SetScopes: missing_scope without users:read or usergroups:read,
// the profile's e-mail only with users:read.email); WithResponse stubs any
// other method.
//
// Every message posted, updated or sent to a response_url is checked
// against Block Kit's documented limits (package bot/blockkit): one
// over them is answered invalid_blocks (a text over 40,000 characters
// msg_too_long), as Slack answers it, and recorded (BlockViolations). Any
// such message fails the test at its end unless the test called
// ExpectInvalid: no test of a correct bot sends one.
//
// SetChannel makes a channel not found, one the bot is not a member of, or
// archived, and RevokeToken revokes a token: the recorder then answers
// channel_not_found, not_in_channel, is_archived or token_revoked on the
// methods Slack would.
//
// FailFor injects 429s (with Retry-After), 5xx answers or hung requests for
// a period, on every method served; FailSequence chains such periods (429,
// then 5xx, then hangs, ...).
// ResponseURL hands out response_url endpoints served by the same recorder.
//
// Socket Mode: apps.connections.open, called with an app-level token
// (xapp-…), hands out a ws:// URL on the recorder; Socket returns the
// connection a client opened with a token, SocketConn.Send delivers
// envelopes over it as Slack does (hello first, pings every 5 s) and
// SocketConn.Ack reads the client's acknowledgements back.
//
// The other direction, Slack calling the bot, is covered by Sign,
// CommandRequest and InteractionRequest, which build requests signed exactly
// as Slack signs them; ButtonPress builds the block_actions payload of a
// button click.
package slackrec
