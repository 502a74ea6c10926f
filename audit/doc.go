// Package audit keeps hcpbot's audit trail: who proposed, approved,
// rejected, executed or rolled back which change to which cluster, and
// which requests were refused and why.
//
// The trail is a JetStream stream (StreamName) that is append-only by
// construction: the stream denies message deletion and purging, and the
// server refuses to lift either setting once set, so a bot (or a person
// holding the bot's credentials) cannot quietly edit history. Records only
// leave the stream when they reach MaxAge (400 days by default). Deleting
// the whole stream is an account permission the bot should not be granted;
// that is outside what a stream setting can enforce.
//
// Every free-text field is passed through redact.RedactText before it is
// written, because summaries, diffs and error texts quote proxy settings
// that may carry credentials, and a secret in an immutable log cannot be
// removed afterwards.
//
// Appends are idempotent within the duplicate window: the record ID is sent
// as Nats-Msg-Id, so retrying an append whose acknowledgement was lost does
// not write the record twice.
package audit
