// Package notify is the delivery layer between the correlator and Slack
// (or a console). It knows an incident only as a Key: one Key is one
// conversation, i.e. one Slack root message, edited in place as the
// incident evolves, with evidence and state changes as thread replies.
//
// The correlator calls Upsert (the current rendering of a Key's root, with
// a Version) and Reply (a thread reply with a de-duplication ID). Both only
// enqueue and return at once; Run delivers. Slack is the real notifier,
// Console writes readable text for the demo.
//
// # Pacing: never flood, never hammer
//
// Every channel has one queue and one worker, so at most one call per
// channel is in flight. A token bucket per channel paces chat.postMessage
// (default 1/s, burst 2: Slack's per-channel limit, one token of burst to
// spare), one bucket shared by all channels paces chat.update (Tier 3,
// default 50/min). The buckets are
// meant to keep us under the limit, not to find it: a 429 still stops the
// whole channel, and for chat.update the method everywhere, for exactly
// the Retry-After Slack gave, and restarts the bucket with a single token.
// 5xx answers, timeouts and network errors pause the channel with capped
// exponential backoff with jitter and are retried forever; application
// errors (channel_not_found, not_in_channel, invalid_blocks, ...) are
// permanent: the item is counted (hcpbot_slack_errors_total{error}) and
// dropped, never retried, except that a message refused for its size or
// blocks (invalid_blocks, msg_too_long, msg_blocks_too_long: Slack's
// undocumented total-size limit) is sent again as its text alone, cut to
// 4,000 characters, and, refused again, as the text's start with a note
// saying where the rest is: never dropped for its size. A channel refused for a reason only a person can fix
// (channel_not_found, not_in_channel, is_archived, token_revoked, ...) is
// logged once when it goes bad and once when a post there succeeds again,
// and listed by Unpostable meanwhile (`/hcp status` shows it); each new
// rendering for it is still tried once. bot/blockkit holds the limits
// Slack checks; blockkit.ClampBlocks keeps messages within them.
//
// # Coalescing, order and priority
//
// A Key has at most one pending rendering: a newer Upsert replaces it in
// place, so 200 updates of an incident during a storm cost one chat.update,
// and a Version no newer than the one delivered is dropped. Replies are
// never coalesced; their IDs de-duplicate them. Within a Key, items go out
// in the order they were queued (a pending rendering keeps the position of
// the oldest one it replaced), and replies wait for the root.
//
// Across Keys of a channel the worker takes turns (round robin), with
// priorities: new roots first (people must learn about a new incident),
// then updates and replies. Updates have their own budget and flow
// alongside posts. Roots and replies share the channel's post budget;
// during a run of new roots a reply that has waited ReplyPatience (10 s)
// gets every fourth post (ReplyShare), so replies are delayed, never
// starved, and a short burst of new incidents posts every root first.
//
// # One root per Key, across restarts and replicas
//
// The Key → {channel, ts, version} mapping and the IDs of posted replies
// live in a Store: a NATS KV bucket (KVStore) in production, shared by all
// bot replicas, or memory (MemoryStore). Records are small and one per
// root or reply; a bucket TTL (KVConfig.TTL, counted from a record's last
// write) bounds them. The ledger (ledger.go) keeps them: the worker asks
// it, and it alone reads and writes records. Before posting a root the
// worker has it create a claim record (Create: first writer wins) and
// write the ts right after Slack answered. A Key the instance has not met
// is claimed by that create at once (most are new incidents): the create
// is the look-up, and only a lost one reads the record. An instance that finds a claim of another
// waits for its ts and then sends updates instead; replies are claimed the
// same way. Claims are renewed before each attempt and may be taken over
// once older than ClaimLease, so a replica that died mid-post does not
// block a Key forever. A replica may die after Slack accepted a post and
// before the ts reached the store: every post therefore carries Slack
// message metadata with its Key and reply ID, and whoever takes a claim
// over first looks the post up (conversations.history for roots,
// conversations.replies for replies) and records its ts instead of
// posting again (hcpbot_slack_recovered_posts_total). It looks from the
// claim's first making (Record.Since, kept through every renewal and
// take-over), so a look that failed is repeated over the same window
// (TestTakenOverClaimIsLookedForFromItsFirstClaim). This needs the
// channels:history and groups:history scopes. Stopping Run is not dying:
// the call in flight completes and its result is stored.
//
// Updates read the stored version first and never send an older one,
// nor one whose Message.Digest equals the stored one: a correlator
// replaying its state after a restart re-renders every incident, and the
// messages that still show the truth are left alone.
// Two replicas updating the same Key at the same moment may still land out
// of order in Slack; the correlator is expected to own a Key on one
// replica at a time, which keeps that a rare, self-healing glitch (the next
// update wins).
//
// # Leader-only messages
//
// The correlator's incidents and storms are sent by the holder of the
// bot's lease alone (Message.LeaderOnly; SlackConfig.Leading is the
// lease, cmd/hcpbot wires bus.Lease.Leader). Their renderings wait in the
// queue (behind the channel's post budget, a pause, a store retry), and
// the lease may be lost meanwhile: a new leader taking over asks HasRoot
// for each incident and, finding no record, may fold it into a storm as a
// member without a message of its own. A root the old leader posted then
// would be a message nobody updates, saying "open" after the incident
// healed. So the worker asks Leading right before claiming a leader-only
// root, and again right after the claim was written: not leading, the
// rendering is dropped (hcpbot_slack_not_leading_total{kind="root"}, an
// info log) and a claim that attempt created is released. The second
// look closes the gap between the first and the write: Leading is true
// only while no other replica can hold the lease (bus.Lease), so a claim
// written while it still answers true is in the store before any new
// leader looks, and HasRoot counts a claim without ts as a root (its post
// may be in flight): that leader keeps the incident's message and
// updates it once the post lands (or, if its holder never posts it,
// takes the claim over after ClaimLease, looks for the post and posts
// it). A claim renewed or taken over is not released when the rendering
// is dropped: an earlier attempt's post may have landed under it, and is
// looked for (and recorded if found) before the drop. The
// replies queued behind a dropped root wait for the root another
// instance posts (looked up every ClaimPoll), as any replies without a
// rendering do, but OrphanWait at most: the leader may never post that
// root (a storm's member, an incident healed unposted), and they would
// stay queued, looked up, for as long as the process runs
// (hcpbot_slack_dropped_total{kind="reply"}); a reply's ID is claimed
// before it is posted, so one the leader queues again is posted once. Updates of a leader-only message
// are dropped too when not leading (kind="update"): the leader renders
// every incident again when it takes over. Digests, refusals and
// outcomes are not leader-only: whichever replica runs them posts them.
//
// # Metrics
//
//	hcpbot_slack_calls_total{method,outcome}
//	hcpbot_slack_queue_depth
//	hcpbot_slack_retry_after_seconds_total
//	hcpbot_slack_delivery_latency_seconds{kind}   enqueue → delivered
//	hcpbot_slack_dropped_total{kind}
//	hcpbot_slack_not_leading_total{kind}          leader-only, dropped: the lease is lost
//	hcpbot_slack_coalesced_total, hcpbot_slack_unchanged_total,
//	hcpbot_slack_deduplicated_total,
//	hcpbot_slack_duplicate_roots_total
//	hcpbot_slack_errors_total{error}               Slack's error code, or "other"
//	hcpbot_slack_unpostable_channels
//
// There is no channel label: channel ids are not secret, but their number
// is not ours to bound.
//
// # Code layout, in the order an item meets it
//
//   - notify.go: Message, Reply, Notifier and the checkers the correlator
//     asks (RootChecker, DeliveryChecker, ...).
//   - slack.go: Slack (Upsert, Reply, Run), its configuration and defaults.
//   - queue.go: a channel's queue and worker (chanQueue): coalescing,
//     pick (priorities, round robin, ReplyShare), run.
//   - deliver.go: what happens to a Key's item: resolve (is there a root?),
//     deliver (the one claim → look up → post → record sequence of a post,
//     root or reply: rootPost, replyPost), updateRoot; notLeading, the
//     leader-only roots dropped once the lease is lost.
//   - ledger.go: the ledger, delivery's record-keeping, the one type that
//     reads and writes records: claims (claim, release), taking over a dead
//     replica's claim and finding its post (find: the message metadata,
//     conversations.history/replies), the ts (record), and reading it back
//     (root, rootRecord; HasRoot, Delivered, FirstPosted for the
//     correlator). chanQueue calls it and keeps only what it knows of its
//     Keys.
//   - call.go: one Slack call: its pace (gate), deadline, retry or not,
//     the channel's pause after it, and a message's shorter forms.
//   - health.go: the channels Slack refuses (Unpostable).
//   - store.go: Store, MemoryStore, KVStore.
//   - metrics.go: the metrics above.
//   - text.go: Block Kit as text (PlainText, TextStyle), for the console
//     notifier, fallback texts and chatops' console.
//   - console.go: Console, the Notifier of the demo.
//
// bot/blockkit keeps messages within Block Kit's limits.
package notify
