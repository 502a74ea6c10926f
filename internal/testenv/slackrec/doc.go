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
// FailFor injects 429s, 5xx answers or hung requests for a period;
// FailSequence chains such periods (429, then 5xx, then hangs, ...).
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
