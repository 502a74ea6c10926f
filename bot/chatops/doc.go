// Package chatops is how people's input reaches hcpbot: the /hcp command
// grammar, Slack request authentication, the Slack HTTP endpoints, Socket
// Mode and a local console. It parses, validates and authenticates, then
// calls a small Handler; it knows nothing about incidents or approvals.
//
// Grammar: Parse turns the text after /hcp into a typed Command (Status,
// FixNoProxy, Expose, ...) or a *UsageError with the command's usage line
// and a one-line hint. Validation is strict and happens before anything
// else: Kubernetes names as Kubernetes validates them, ids by IDPattern,
// noProxy entries by ParseNoProxyEntry, bounded durations and reasons.
//
// Slack HTTP: Server serves CommandsPath and ActionsPath. Every request is
// size-limited, signature-checked with slack.NewSecretsVerifier, refused
// when its timestamp is more than MaxClockSkew off, and refused when it was
// seen before (ReplayGuard: MemoryReplayGuard for one replica,
// KVReplayGuard on NATS KV for several). Rejections answer 401 (auth,
// replay) or 400 (oversized, malformed, unknown button), do nothing else,
// and are logged and counted in hcpbot_slack_requests_rejected_total.
//
// Slack wants an answer within 3 seconds: a handler that has not answered
// after the ack timeout (2.5 s) leaves the user with "working on it"; its
// reply is then posted to the request's response_url by a Responder, which
// only posts under an allowed prefix (https://hooks.slack.com/ in
// production) and at most five times per URL.
//
// Server answers 404 for any other path, so it can be the whole handler of
// the listener that faces Slack. Bodies are capped with http.MaxBytesReader
// (WithMaxBodyBytes, default 64 KiB): past the cap the connection is closed.
//
// RunSocketMode serves the same Handler over Socket Mode with the same
// options: give it the same shared ReplayGuard (envelopes are keyed by
// envelope_id, apart from HTTP keys) and Responder as the Server, so a
// redelivered envelope reaching another replica is dropped and late
// replies are checked alike. Console serves it on a terminal as a fixed
// local user, or as one of several (Console.Users; "as NAME" switches):
// the demo's two approvers at one keyboard. It prints replies with
// PlainText: notify's Block Kit renderer in the console's spelling.
package chatops
