// Package bench is the benchmark harness of issue 8 (`make bench`): each
// benchmark runs the real parts — the agent's code against a real
// kube-apiserver, JetStream on disk in the embedded nats-server, the bot's
// correlator, the Slack recorder — measures the figures of its scenario and,
// in the same run, a physical reference (the bare operation the product
// builds on), so that results read as ratios that survive a noisy machine.
//
// A benchmark records one Result; results are merged by id into
// results.json in the output folder (HCPBOT_BENCH_OUT, default bench/out),
// with CPU and heap profiles next to it, and benchtable prints them:
//
//	make bench                      # all of B1–B8, then the table
//	make bench BENCH=B2             # one of them
//
// B1 runs three times: on the embedded server's default (fsync every 2
// minutes) with the bot a follower; as B1-leader, the same with the bot the
// leader (its flush, diagnoses and rendering included); and, as result
// B1-sync, on one that fsyncs every write before acknowledging it, as the
// deploy's NATS does (sync_interval: always).
//
// B2 has three rows. B2 is the floor: the bot in-process with group wait
// 0 and a channel per trial, beside the bare operations of its path and a
// bare informer → webhook watcher answering the same transitions.
// B2-prod and B2-approve run the hcpbot binary (`hcpbot all`, built from
// this tree) as users run it: production defaults (group wait 5 s, one
// shared channel, four-eyes), Slack's rate limits at the recorder and a
// NATS server that fsyncs every write; B2-prod reports the first post
// minus the group wait, B2-approve a signed /hcp approve to the
// HostedCluster patched and the confirmation posted, stage by stage.
//
// B3-burst is the opposite of B3's storm: six unrelated failures on six
// clusters, which must each be posted right after the group wait, not
// held for the storm window (first post minus publication, relative to
// the group wait).
//
// B6 (cold start) fills an embedded JetStream with a fleet's 72 hours,
// 100,000 and 1,000,000 events, and times a bot started on it, without a
// checkpoint and from one an hour old (checkpoint_current_s). B7 (fleet)
// runs 20 management clusters × 100 hosted clusters × 24 nodes on three
// nats-server processes; HCPBOT_BENCH_FLEET=sources x clusters x nodes
// (e.g. 4x25x24) sizes its fleet. B8 (partitions) runs 50 × 400 × 24
// (20,000 hosted clusters) in four bot groups of two replicas on three
// nats-server processes: a zone outage, a kill of one group's leader
// mid-delivery, a restart of every bot from the groups' checkpoints;
// HCPBOT_BENCH_PARTITIONS sizes it (quick: 8x50x24).
//
// Scale: HCPBOT_BENCH_QUICK=1 runs every scenario small, for developing
// the harness; figures measured so are marked quick and never meet targets.
package bench
