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
// # What needs action, and what "compliant" means
//
// Each finding is classified ([Classify], with the reason for each code in
// classify.go): it needs action when something is broken, will break or
// is unsafe and a change to the cluster's configuration fixes it (the API
// tunnelled through the proxy, an unusable proxy URL, credentials in it,
// a proxy CA expiring, ignition sent through the proxy, an entry no
// client matches, ...); it is informational otherwise (an entry HyperShift
// adds to the rendered list by itself, a CIDR that urllib cannot read
// while the platform's Go clients can, a repetition, a suggested list).
// A cluster is compliant when it has no finding that needs action;
// informational findings never make it non-compliant. Open incidents,
// silences, NodePort exposures and actions taken are listed, not judged;
// an unwatched cluster and an exposure on no cluster the bot knows are
// listed under "needs action" all the same. Every digest says so in a
// line ([CompliantLine]).
//
// The root lists what needs action ([Digest.NeedsAction]) ranked: most
// severe first (critical, then warning), then clusters with an open
// incident (hurting now), then the oldest (first seen in an earlier
// digest: the snapshot keeps first sightings), then by cluster, code and
// entry. Each cluster's thread reply shows its findings that need action
// (with their fixes) before its informational ones, so Slack's bound cuts
// the informational ones first; a compliant cluster with nothing in place
// gets no reply in Slack (the console digest lists everything).
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
