// Package bot consumes the agents' events and turns them into incident
// messages: event → state model (bot/diagnose) → diagnoses → one message per
// hosted cluster, updated in place (bot/notify); people answer through
// bot/chatops.
//
// This first cut keeps one incident per hosted cluster and rebuilds its
// state by replaying the events stream at start (bounded by the stream's
// max age); the Slack side is idempotent across restarts because
// bot/notify keeps each incident's message ts in NATS KV and incident keys
// are derived from the event that opened them. Grouping windows, storms,
// silences and ownership across replicas come with the correlator.
package bot
