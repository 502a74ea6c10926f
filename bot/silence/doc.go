// Package silence keeps the bot's silences: a hosted cluster or one
// incident muted until a given time, like Alertmanager's silences.
//
// Silences live in a NATS key-value bucket (Bucket) shared by every bot
// replica, keyed by silence id. Each Store keeps an in-memory copy that Run
// keeps in sync through a watch on the bucket, so that Match, called for
// every notification, costs a map lookup and no network round trip. A
// silence added on this replica is in the copy as soon as Add returns;
// one added on another replica arrives through the watch, normally within
// milliseconds.
//
// Silences are never edited: a new one is added (an earlier one still
// applies until it expires). Expired silences never match; they are
// dropped from the copy lazily and from the bucket by its TTL, which is
// comfortably above the longest silence.
//
// Every silence is audited (audit.KindSilenced), with its reason redacted.
//
// # Who may write one: the seal
//
// A silence mutes what the bot posts about a hosted cluster or an
// incident: whoever can write one hides an outage from the people on
// call. The bucket's permission is not enough: a stolen bot NATS seed
// writes it, and that seed cannot publish an event (docs/security.md).
// So, given the bot's action-signing key (WithSigner:
// approval.Signer.ForSilences, which signs only what starts with
// SigningContext), every silence is sealed, bound to its key in the
// bucket, and a record is applied only once its seal verifies against
// the bot's key or a trusted one (approvals.trustedKeys) and its fields
// pass the checks Add makes. Anything else — unsealed (written by an
// hcpbot before silences were sealed, or by someone without the key),
// sealed by another key, the bot's seal over another silence, another
// kind of signature — silences nothing: it is logged as an error and
// listed by Refused, which `/hcp status` shows.
//
// The bot never deletes or replaces a silence (the bucket's TTL ages
// records out well after they expire, without a delete marker): a
// delete, purge or replacement of a sealed silence that still applies is
// someone else's. A replica that read the silence keeps applying it
// until it expires and lists the deletion by Refused. A replica started
// after the deletion never saw it: no seal proves a record absent. What
// holds it is the signed audit record of its creation; at start a
// sealing Store compares the trail with the bucket and lists by Refused
// the silences the trail names, still within their time, that the
// bucket lacks. It does not apply them: an audit record is no silence's
// seal (the bot's NATS user appends to the trail; `/hcp audit verify`
// reports what it did not sign).
//
// Without a signing key (a bot without approvals) silences are stored
// and read unsealed, as before sealing: Sealed reports false and the
// bot warns at start that the bucket's writers choose what is silenced.
package silence
