// Package watchers is the agent: client-go informers on the management
// cluster and, through each HostedCluster's admin kubeconfig Secret, on the
// hosted clusters, turning cluster state into events (package event) for
// NATS JetStream.
//
// It follows kubernetes/sample-controller: New takes the management
// cluster's informer factories (kube and dynamic), registers its informers
// on them and the caller starts them; they live as long as the process, so
// a replica that does not lead keeps warm caches and a new leader's Run
// starts from them (queueing every cached object, as a fresh informer's
// adds would). NewInformerFactories builds them on clients whose lists wait
// for an API server that refuses connections (InformerConfig), so that
// living through an outage does not leave them backed off for a minute
// after it. Informer handlers only enqueue a key; one sync function per
// kind reads the object from its lister (cached: the one lister-get and
// decode preamble), derives the fact it states (facts.go) and publishes it
// when the fact changed.
// Events are transitions, not informer updates: an object whose fact is
// unchanged publishes nothing. Each fact has a deterministic transition key,
// so a restarted agent or a second replica publishes the same Nats-Msg-Id
// and JetStream drops the copy.
//
// On start, after NATS reconnects and after the publish buffer overflowed,
// the agent publishes a snapshot of the current problem state (events marked
// with the snapshot run, closed by a SnapshotDone), so a consumer that
// missed events converges, like a controller's resync. The leader also
// restates with fresh event IDs (event.WithRestatement) every
// Config.RestateInterval (a sixth of the stream's max age) and on Restate
// (a bot started and asked, event.RestateSubject), at most once per
// RestateMinGap: the stream always holds a copy of every current fact, so
// a bot's knowledge never depends on the stream's retention.
//
// Per-node events carry problems only; so that the bot knows each hosted
// cluster's real size, the agent also publishes a node summary (total,
// Ready, NotReady, Unknown, joining, not joining, and Ready nodes that are
// cordoned: HyperShift counts only Ready, schedulable nodes as available
// workers, support/util/util.go:568-590) when its counts change,
// at most once per NodeSummaryInterval per cluster (nodesummary.go), and in
// every snapshot. A Node without a Ready condition is joining (not a
// problem, not published) for NodeJoinGrace after its creation; the node is
// requeued for the moment the grace runs out and is then published as not
// joining.
//
// Two records of each hosted cluster are its own evidence of its control
// plane's reachability (evidence.go):
//   - its aggregated APIServices (apiregistration.k8s.io/v1 with
//     spec.service, through a dynamic informer caching name, spec.service
//     and the Available condition only). kube-aggregator marks one
//     Available=False (FailedDiscoveryCheck, MissingEndpoints,
//     ServiceNotFound, ...) when it cannot reach its server; HyperShift's
//     openshift APIServices are reached through konnectivity
//     (hypershift#313). Published (APIServiceState) when (status, reason)
//     changes, a problem while not True; True again or deleted, Cleared.
//   - the ConfigMap kube-system/control-plane-connectivity-check (watched
//     by name, data.lastSucceeded only), stamped about every 60 s by the
//     workers' kas-connection-checker pods when they reach the API server
//     through the path workloads use. Published (ConnectivityCheck) only
//     when its state changes: missing, no record, unparsable, fresh, or
//     stale (older than Config.ConnectivityStaleAfter, HyperShift's 5
//     minutes). A stamp that stops moving changes nothing in the API, so
//     one ticker (Config.ConnectivityInterval) re-judges every cached
//     stamp at the agent's clock; a fresh stamp after a fresh one is no
//     news, and a cluster whose API server is unreachable is not judged
//     (its cache cannot move).
//
// Both are problem facts restated in snapshots, like the others.
//
// The publisher holds events NATS refuses and retries them. A refusal that
// retrying alone does not cure (no stream, permissions, too large) lasting
// ProblemAfter is an episode: Problem fails the agent's /readyz with the
// reason, the error kind is counted, one line is logged at its start and
// one at its end, and OnStreamMissing may re-create a deleted stream.
//
// A HostedCluster's event also summarises the trusted CA ConfigMap its
// proxy names (trustedca.go): found, a problem, the number of
// certificates, the first expiry and its subject. A ConfigMap informer
// caches stubs that carry that summary instead of the data, so the PEM is
// never cached or logged; a ConfigMap event re-syncs the HostedClusters
// that name it, and its resourceVersion is part of their transition key.
//
// A HostedCluster's admin kubeconfig Secret is untrusted input: the hosted
// client is built by package kubeconfig from inline data only. A Secret
// that is missing, does not decode or is refused (an exec plugin, a file
// path, ...) leaves the cluster unwatched, reported once as a reachability
// event with Unwatched set and the reason, and again once it is fixed.
//
// hosted.go is over 450 lines: it is the life of one hosted cluster's
// watch — the kubeconfig Secret, the connection, its health, the
// reachability published — over the hostedCluster and hostedConn state and
// the locking they share; each step hands the next its state.
//
// publisher.go is over 450 lines: JetStreamPublisher is one loop (queue,
// send, settle, retry, fail) over the in-flight publishes it owns; its
// ordering and deduplication rules hold only read together.
package watchers
