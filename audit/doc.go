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
//
// # The chain
//
// The bot's records go on event.AuditSubject(source), each agent's on
// event.AgentAuditSubject(source). On each subject every record names its
// predecessor: the stream sequence of the subject's previous message and
// the hex SHA-256 of that message's exact bytes (PrevSeq, PrevDigest); the
// first record of a subject names none. Append reads the subject's last
// message once, keeps it, and publishes with the expected last sequence
// of the subject, so that of two writers (bot replicas) chaining onto the
// same record only one succeeds; the other reads again and retries. An
// uncontended append is one publish.
//
// With WithSigner, every record the bot writes also carries its public key
// and an ed25519 signature over SigningContext and the record's bytes
// without the signature, chain fields included. The agents' records are
// not signed: NATS permissions let only the agent of X write
// hcpbot.audit.X.agent.
//
// Verify (and a Verifier: `/hcp audit verify`, and hourly on the leader
// with its metrics) reads the whole stream and reports, by sequence and
// subject: a broken link (the named predecessor's digest differs, or a
// record names none after others), a gap (the named predecessor is
// missing, or is not the subject's previous record: removed records, a
// forked or replayed chain), a bot record unsigned, signed by an untrusted
// key or not matching its signature, a bot record on a subject other than
// its source's, an unchained record after its subject's chain began, and
// messages that are no records. Records from before the chain are counted
// as legacy; a subject whose oldest record names a predecessor that aged
// out of the stream is fine.
//
// What that proves, and what not:
//
//   - Whoever holds the bot's NATS user (not its signing key) can append
//     records, but not one that verifies: it is reported unsigned or badly
//     signed. Copying a signed record elsewhere or replaying it is
//     reported as a gap, a broken link or misplaced.
//   - Nobody without stream admin rights can delete, change or reorder a
//     record; with them (an operator recreating the stream without
//     deny-delete), removing a record that has a successor on its subject
//     is reported as a gap.
//   - Cutting off the newest records of a subject leaves no successor to
//     notice; it needs stream admin rights (deny-delete, deny-purge), and
//     the chain does not detect it. Removing the oldest records looks like
//     ageing out.
//   - A signed record of a subject whose records have all aged out can be
//     replayed there: it names a predecessor before the stream's first
//     sequence, as a legitimate survivor would (its Time gives it away).
//   - The signing key proves the bot wrote a record, not that what it
//     says is true; an agent's records are as trustworthy as the NATS
//     permissions that keep its subject to it.
package audit
