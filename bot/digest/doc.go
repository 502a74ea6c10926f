// Package digest builds and posts the scheduled proxy-compliance digest.
//
// [Build] is pure: from the bot's hosted clusters (their HostedCluster
// proxy spec and networks, run through noproxy.Lint and noproxy.LintClients
// with the client families each cluster's workloads use: Cluster.Clients,
// else Input.Clients, else noproxy.DefaultClients), their diagnoses and
// open incidents and active silences, the NodePort exposures in place
// (executed expose proposals not rolled back: who asked, who approved,
// when) and the actions executed since the previous digest, it makes a [Digest] grouped per management cluster,
// with the trend (new and fixed findings) against the previous digest's
// finding set.
//
// [Runner] fires each configured digest at the ticks of its cron schedule,
// read in the digest's time zone. Every bot replica runs one; the first to
// create the key "<name>.<tick unix>" in a NATS KV bucket takes the tick,
// for a lease (Config.TickLease), and marks it posted once its post is
// queued. The others wait: for the posted mark, or for the lease to pass,
// and then one of them takes the tick over (compare-and-set) and posts it.
// Delivery is thus at least once, and the post is still once per tick: the
// root's Key is derived from the tick and the replies carry IDs, so the
// notifier turns a takeover after a partial post into an update of the
// same message and thread. The posted mark follows the queueing in the
// replica's notifier, not Slack's answer: a replica that dies between the
// two (normally milliseconds; longer while Slack rate-limits) still loses
// that post. The keys outlive restarts (the bucket keeps
// them for a week, a few writes each), so a restarted replica never posts
// a tick twice. On-demand digests (`/hcp digest now`) take a key of their
// own, at most once: only the replica asked answers.
//
// Proxy URLs reach the bot with their credentials replaced by package
// event, and noproxy findings never carry credentials; the renderers still
// pass every free text through redact.RedactText, so a password pasted into
// noProxy cannot reach Slack either.
package digest
