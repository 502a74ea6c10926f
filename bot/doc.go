// Package bot consumes the agents' events and turns them into incident
// messages people can act on:
//
//	events stream ─▶ state model (bot/diagnose) ─▶ diagnoses (rules, inhibition)
//	   ─▶ correlator (this package: incidents, group wait/interval, silences,
//	      storms via bot/storm) ─▶ notifier (bot/notify: Slack or console)
//
// This package is the correlator only. People talk to the bot through
// bot/chatops (transport) and bot/command (the /hcp answers, which read the
// correlator through a narrow interface, and the approval flow); changes go
// through package approval and, approved, to the agents. The words of a
// Slack message (button action ids, escaping, mentions, Block Kit limits)
// are bot/blockkit's, a leaf this package, the chat layer, the digest and
// the notifier share: the correlator imports no chat input
// (TestCorrelatorImportsNoChatInput).
//
// # State: the stream is the durable state
//
// Every replica reads the events stream from its start (or from its
// newest checkpoint: below) with an ordered consumer and rebuilds the
// same per-cluster picture (bounded by the stream's max age). There is no per-replica durable consumer to ack: the
// picture is a pure function of the stream, every replica needs all of it
// to answer commands, and a replayed event cannot be "lost" by an ack that
// raced a crash. Nothing is sent until the replay has reached the stream's
// end as it was at start, so a restarted bot never notifies from a
// half-built picture. The stream keeps events for its max age only; every
// bot start asks the agents to restate (event.RestateSubject) and they
// restate periodically, so the picture covers quiet clusters too.
//
// A deleted HostedCluster's open incident is resolved at once, saying so;
// ForgetAfter later every replica forgets the cluster (model, incident,
// storm membership), so deleted clusters cost no memory.
//
// A restart must not rewrite Slack with the past. Replayed, the clearing of
// an incident's signals counts from the event's time, so what healed more
// than ResolveTimeout ago is resolved at once; an incident whose signals
// are clear is never rendered open (live or replayed: it waits for its
// resolution or for the signals to come back); a resolved incident that
// has a message (posted by the previous run) is updated to resolved, and
// the storms of the previous run are found again from the replayed
// incidents so theirs is too. Every rendering carries a digest of what it
// shows, durations left out (notify.Message.Digest): the messages that
// already show it are left alone, so a bot restarted while every cluster
// is healthy sends nothing at all.
//
// # Checkpoints: replaying only the last hour
//
// A replay of the whole stream is 72 h of events (1,000,000 at 2,000
// hosted clusters). The leader writes a checkpoint of this state every
// Config.CheckpointEvery (hourly) and at a clean shutdown, and a starting
// replica restores the newest one and consumes the stream from the
// sequence after it (resume.go, state.go; package bot/checkpoint has the
// format, the seal by the bot's signing key, the verification and what
// happens on a mismatch: a full replay, never a crash). The checkpoint
// holds the incidents themselves,
// with their keys: a replay from a later point could not derive a key
// from an opening it never saw.
//
// # One sender: a lease in NATS KV
//
// Only the holder of the "bot" lease (bus.Lease) sends; the others keep
// their state warm and take over within the lease TTL. Keys are derived
// from event times (incidents: cluster + opening event; storms: cause +
// first member), so a new leader or a restarted bot arrives at the same
// keys, and bot/notify's KV store (Key → Slack ts, posted reply IDs) turns
// what it sends into in-place updates, never second posts. A new leader
// first asks the notifier whether each incident already has a message,
// so incidents posted before a storm formed keep their own message. It
// then reads where the events stream stands: an incident opened by a
// later event needs no such question, as no other replica could post
// while it held the lease (takeover.go liveSince,
// TestLiveIncidentsAreNotLookedUp), which keeps a store round trip off
// every new incident's way to its first message (B2). What it knew while
// it led does not outlive the lease: once lost (even if taken back
// before a flush looked), every incident is to be looked up again, and
// one replaced meanwhile waits as pending (stepDown,
// TestLiveCheckedForgottenWhenTheLeaseIsLost).
//
// What the correlator sends is marked notify.Message.LeaderOnly, and the
// notifier posts it only while this replica holds the lease
// (notify.SlackConfig.Leading, wired to the same lease by cmd/hcpbot):
// renderings queued behind Slack's pace, or on a store retry, when the
// lease is lost are dropped, not posted. Posted, a root the new leader's
// look-up did not find (nothing claimed it yet) would be a message it
// never updates, e.g. of an incident it folded into a storm
// (TestOldLeaderPostsNoRootAfterTheLoss; bot/notify doc.go,
// "Leader-only messages"). What was dropped is sent again by whoever
// takes the lease next, this replica too after a flap: takeOver marks
// every incident and storm it holds dirty, and puts back the resolutions
// of replaced incidents it sent while leading (sentPending, kept for
// retain: TestFlapResendsPendingResolution); bus.Lease reports a lapse
// even when the renewal lands before its timer fires, so a flap is
// never missed (LeaderChanged).
//
// # Partitions: several bot groups
//
// With Config.Partitions.Count > 1 the bot is one group of several, each
// holding the management clusters partition.Set.Of gives it (its own
// lease "bot-p<P>-<k>", checkpoint and storm keys; docs/partitions.md).
// It still reads the whole stream and skips, before decoding, the events
// of sources it does not hold (partition.go), so any history replays
// right; the tag NATS adds (event.Tag) is only checked.
//
// # Correlation (Alertmanager's dispatch, for this domain)
//
//   - One incident per hosted cluster at a time, holding every diagnosis of
//     it; inhibition is in bot/diagnose (a root cause explains its
//     symptoms, which then appear as evidence, not as separate incidents).
//   - GroupWait holds a new incident before its first message, so the
//     first message has the whole picture; GroupInterval paces updates;
//     ResolveTimeout keeps a flapping cluster in one incident.
//   - New evidence and state changes go to the thread (notify.Reply, with
//     de-duplicating IDs); the message itself is updated in place.
//   - Silences (a Silencer, from bot/silence) keep an incident quiet: a
//     posted one is updated once to say so, then left alone until the
//     silence ends.
//   - Storms: incidents of one channel sharing a cause (the same proxy
//     edit, the same proxy, the same management cluster: bot/storm) within
//     StormWindow, StormThreshold or more of them, become one storm
//     message, listing every cluster in its thread, StormPage per reply.
//     While a storm may be brewing around a new incident (incidents
//     sharing a cause with it could still reach StormThreshold within
//     StormWindow at the pace they opened at, and the newest of them is
//     younger than GroupWait), it is held back, for StormWindow at most,
//     rather than posted one by one; incidents with no cause in common
//     never hold each other back. Members stay incidents of
//     their own: /hcp incidents and /hcp diagnose reach each one.
//
// # Following the fix to the end
//
// An approved fix that ran while an incident was open becomes its Remedy
// (remediation.go): the headline keeps the root cause the fix was approved
// for, the message tracks the rollout (diagnose.Rollout: NodePools
// updating, kube-apiserver-proxy pods direct N of M, nodes Ready N of M,
// pods crashlooping), and the resolved message tells the story (root
// cause, fix, requester and approver, time to fix and to heal) with the
// timeline in its thread. Not healed within Config.HealDeadline, or a node
// lost after the fix, and it says so and offers the rollback. The fixes
// come from the approval store (RecordRemediation; bot/command feeds it
// from the proposals bucket before the replay starts), and an incident
// finds its fix by cluster and time, so every replica and every restart
// arrives at the same remedy and the same timeline (timeline.go: steps
// from the events by their own time, plus the store's proposal, approval,
// execution and rollback).
//
// What a restart may repeat: a storm's member page cut short by the crash
// can be listed again in the thread (never a root message).
//
// # The flush: named stages
//
// Events only record (evaluate); the flush decides what goes out, on the
// leader once the replay caught up, as Alertmanager's notify pipeline
// does: an ordered list of named stages, each taking the incidents (or
// storms) still due and returning those it lets on. A stage is a type
// (stage[T]: Name, Exec) holding only what it needs, passed in by
// incidentStages and stormStages (stages.go, the one place that lists
// them in order and says why): config values, the Silenced func, the
// remedy check, the notifier and its counters, and, for a stage that
// holds, a holder made for its ONE reason (hold.go). A held notification
// is logged (debug) and counted once per incident or storm and reason in
// hcpbot_bot_notifications_suppressed_total (TestHoldCountsOnce,
// TestFlushCountsSuppressedByReason); nothing new to show is not counted.
// Every stage holds for its one reason at most, whatever it is given
// (TestStagesHoldForOneReason); the order is proved by
// TestIncidentStagesOrder.
//
// flush (flush.go) reads: the gate (a follower or a replaying bot looks
// at no incident, it only sweeps pending resolutions; what the replay
// held is counted once caught up, reason replaying: TestReplayHeldCounted),
// the takeover's work when there is some (takeover.go: a first run of
// resolve, then, outside the lock, the notifier asked which incidents
// about to be handled and which storms of the previous run have a
// message; those storms revived; the stream's next sequence read once
// per lead), the two pipelines, then pruning and
// the gauges.
//
// The incident stages, in order: name, type (file), why it is there,
// the ONE reason it holds for, the test.
//
//  1. resolve, resolveStage (clock.go): resolves what stayed clear for
//     ResolveTimeout; first, so an incident healed long ago (after a
//     restart) is handled as resolved from the start, never rendered
//     open. Holds nothing. TestResolveStage.
//  2. remedy, remedyStage (remediation.go): brings an incident's fix up
//     to date (learned from the store, a rollout step, the heal deadline)
//     before anything decides what its rendering shows. Holds nothing.
//     TestRemedyStage.
//  3. silence, silenceStage (silenced.go): refreshes which incidents a
//     silence covers, before anything decides to post. Holds nothing.
//     TestSilenceStage.
//  4. root-lookup, rootLookupStage (flush.go): stages 4 to 8 decide when
//     the flush first handles an incident (they let on what it handled
//     before); this one holds a resolved one until the notifier said
//     whether it has a message. Reason root-lookup. TestRootLookupStage.
//  5. new-resolved, newResolvedStage (flush.go): handles a resolved one
//     at once; one never posted is dropped: nobody was told it opened.
//     Reason resolved-unposted. TestNewResolvedStage.
//  6. new-silenced, newSilencedStage (silenced.go): an open one a silence
//     covers is never posted while it lasts. Reason silenced.
//     TestNewSilencedStage.
//  7. new-clearing, newClearingStage (clock.go): an open one whose
//     signals cleared waits for their return or its resolution. Reason
//     clearing. TestNewClearingStage.
//  8. group-wait, groupWaitStage (clock.go): an open one waits GroupWait,
//     so its first message has the whole picture. Reason group-wait.
//     TestGroupWaitStage (also stages 4 to 8 together).
//  9. storm, stormStage (storms.go): folds incidents past their group
//     wait into storms, so a storm forms before any member could be
//     posted on its own; holds one around which a storm may be brewing.
//     Reason storm-brewing. TestStormStage.
//  10. unchanged, unchangedStage (flush.go): what has nothing new to show,
//     or is not handled yet, stops here, uncounted. TestUnchangedStage.
//  11. storm-member, stormMemberStage (storms.go): drops a member with no
//     message of its own (its storm speaks for it), before any stage could
//     hold it for later. Reason storm-member. TestStormMemberStage.
//  12. resolved-unposted, resolvedUnpostedStage (flush.go): drops a
//     resolved incident that never had a message: nobody was told it
//     opened. Reason resolved-unposted. TestResolvedUnpostedStage.
//  13. silenced, silencedStage (silenced.go): lets one rendering say an
//     incident is silenced, then holds it; before clearing, so it stays
//     quiet whatever its signals do. Reason silenced. TestSilencedStage,
//     TestSilencedStaysQuietThroughClearing.
//  14. clearing, clearingStage (clock.go): holds an open incident whose
//     signals cleared: a rendering would show a problem that is gone.
//     Reason clearing. TestClearingStage.
//  15. group-interval, groupIntervalStage (clock.go): paces renderings
//     GroupInterval apart; last, so pacing applies only to what would
//     really go out (the one silenced rendering is not paced). Reason
//     group-interval. TestGroupIntervalStage.
//  16. send, sendStage (flush.go): hands the rendering and the thread
//     replies it warrants to the notifier; one that said it is silenced
//     is from then on held for the silence. Reason silenced.
//     TestSendStage.
//
// The storm stages (stormStages, stages.go; types in storm_stages.go), in
// order, for the same reasons; each is proved by its subtest of
// TestStormStagesEach:
//
//  1. settle, settleStormStage: resolves a storm with no open member, and
//     lists members that joined since its message went out at once, not
//     when the group interval lets the message change. Holds nothing.
//  2. unchanged, unchangedStormStage: nothing new to show stops here,
//     uncounted.
//  3. clearing, clearingStormStage: every open member's signals cleared.
//     Reason clearing.
//  4. group-interval, groupIntervalStormStage: the message is paced.
//     Reason group-interval.
//  5. resolved-unposted, resolvedUnpostedStormStage: resolved before its
//     message was posted: dropped. Reason resolved-unposted.
//  6. send, sendStormStage: the message, then its new members' pages.
//
// # Files
//
//	doc.go             this overview
//	bot.go             Incident, Bot and New, incident keys, fingerprints
//	consume.go         Run: the ordered consumer, decoding (another group's events skipped undecoded), applying in order, the catch-up; dead letters
//	evaluate.go        evaluate (events only record) and the full diagnoses, built when someone looks rather than per event
//	config.go          Config and its defaults
//	stages.go          the flush's stages in order, incident and storm pipelines, and why; the stage interface and the pipeline
//	hold.go            the reasons a stage holds for, and holding (logged, counted once)
//	flush.go           the flush: gate, takeover's work, pipelines; the stages root-lookup, new-resolved, unchanged, resolved-unposted, send
//	clock.go           notifyState, the flush loop, and the stages that decide by time or wait for signals (resolve, new-clearing, group-wait, clearing, group-interval)
//	silenced.go        the stages of silences (silence, new-silenced, silenced)
//	storms.go          Storm: forming (the storm and storm-member stages)
//	storm_stages.go    the storm pipeline's stages and the member pages
//	takeover.go        a new leader asks which messages exist; storms of the previous run revived
//	pending.go         resolutions still to send of replaced incidents, kept bounded
//	partition.go       one group of several: the events it skips, its storm keys
//	resume.go          restoring a checkpoint at start, writing them on the leader
//	state.go           what a checkpoint holds of the correlator, and back
//	forget.go          what is forgotten, and when
//	remediation.go     an incident's fix: remedy, rollout, heal deadline (the remedy stage)
//	timeline.go        an incident's story, step by step
//	render.go          what every rendering shares: severity icon, who, digest, an evidence line
//	render_incident.go the incident's root message: open (Render, its buttons) and resolved
//	render_thread.go   the incident's thread replies: the evidence, the reasoning, what changed
//	render_storm.go    the storm's message and the pages listing its clusters
//	views.go           the read views (copies) the /hcp answers and digests use
//	metrics.go         the metrics below
//
// No file of this package is over 450 lines.
//
// # Metrics
//
//	hcpbot_bot_events_consumed_total{type}
//	hcpbot_bot_events_dead_lettered_total{reason}
//	hcpbot_bot_incidents_open{diagnosis}
//	hcpbot_bot_storms_open
//	hcpbot_bot_notifications_total{kind}      incident, storm, reply
//	hcpbot_bot_notifications_suppressed_total{reason}  held back by a flush stage (above)
//	hcpbot_bot_event_to_notify_seconds        fact observed → notification queued
package bot
