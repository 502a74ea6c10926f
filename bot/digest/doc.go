// Package digest builds and posts the scheduled proxy-compliance digest.
//
// [Build] is pure: from the bot's hosted clusters (their HostedCluster
// proxy spec and networks, run through noproxy.Lint), their diagnoses and
// open incidents and active silences, the NodePort exposures in place
// (executed expose proposals not rolled back: who asked, who approved,
// when) and the actions executed since the previous digest, it makes a [Digest] grouped per management cluster,
// with the trend (new and fixed findings) against the previous digest's
// finding set.
//
// [Runner] fires each configured digest at the ticks of its cron schedule,
// read in the digest's time zone. Every bot replica runs one; the first to
// create the key "<name>.<tick unix>" in a NATS KV bucket posts the tick and
// the others skip it. The keys outlive restarts (the bucket keeps them for
// a week), so a restarted replica never posts a tick twice. On-demand
// digests (`/hcp digest now`) take a key of their own.
//
// Proxy URLs reach the bot with their credentials replaced by package
// event, and noproxy findings never carry credentials; the renderers still
// pass every free text through redact.RedactText, so a password pasted into
// noProxy cannot reach Slack either.
package digest
