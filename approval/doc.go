// Package approval is hcpbot's trust boundary: the path from a person's
// approval to the agent's write to a production cluster, in one place.
//
// # Four things
//
//   - Proposal: a change (actions.Change) for one cluster, by a requester,
//     under a policy (four-eyes, how many approvals), until an expiry. The
//     bot seals its terms (ed25519, Signer) when it is made.
//   - Decision: one approval, rejection or expiry, sealed by the bot when
//     it is made, chained to the proposal's seal and to the decision
//     before it.
//   - Request: the bot's sealed order to the agent of the proposal's
//     management cluster to run it now.
//   - Result: the agent's answer, in a bucket only that agent may write.
//
// # The rule
//
// Permit decides whether a change may be made. It believes nothing a
// stored record says, only seals it verifies: the terms, then enough
// approvals by distinct people (under four-eyes none of them the
// requester, and the requester a person), before the expiry, no
// rejection, completed less than QueueHorizon ago. The agent asks it
// before every execution (agentprocess.go), the bot before every request it
// sends, its recovery sweep included (loop.go). Whoever can write the
// approval store without the bot's key can therefore not approve, move a
// decision to another proposal or reorder decisions; a record whose seals
// do not verify is never sent or run, and is reported (audit
// KindForged, hcpbot_approval_forgeries_total). The agent reads the
// record from the store's stream leader (leaderkv.go): a direct get may be
// answered by a replica that has not yet stored the approval, and the
// request sent right after it would be dropped as premature.
//
// # The flow
//
//	chat ─ Propose / Approve / Reject ─▶ Flow: seal, compare-and-set in the bucket, audit; answer at once
//	        (Propose of an exposure asks the agent first whether its node ports are free: preflight.go;
//	         Approve asks whether the approver's identity may make the change: identity.go)
//	Flow.Run (every bot replica): Permit ─▶ seal Request ─▶ wire ─▶ agent
//	agent (Serve, the leader): open Request ─▶ read record ─▶ Permit ─▶ mark running ─▶ executor
//	        ─▶ answer in the results bucket ─▶ Kubernetes Event + agent audit ─▶ ack
//	Flow.Run: read answer ─▶ record outcome (one replica wins) ─▶ audit ─▶ post (OnOutcome, Config.Outcomes)
//
// Chat handlers only decide and return; the loop converges, like the
// agent's watchers: it follows what this replica approved, and its sweep
// adopts what a dead replica left, expires what nobody decided, and
// reports forgeries.
//
// # Truthful outcomes
//
// A transient failure (NATS, the API server's 5xx, timeouts) is no
// answer: the agent hands the request back and it runs again, until its
// deadline. The executor marks what it writes with the action id, so a
// re-run after a crash finds its own change and reports it applied, with
// its Undo. Past the deadline the agent writes nothing and reports what
// the cluster holds (Executor.Observe). The bot waits for the answer
// until the deadline and ResultGrace; an answer that comes later still
// replaces "no answer". So what the user reads is what the cluster holds.
//
// # State
//
//	pending ──approve × N──▶ approved ──answer──▶ executed ──its rollback runs──▶ rolled-back
//	   │                        └──────────────▶ failed
//	   ├──reject──▶ rejected
//	   └──expire──▶ expired   (the sweep, or an approval that finds it late)
//
// pending, approved, rejected and expired follow from the seals; executed,
// failed and rolled-back from the agent's answers, recorded by the bot.
// Rolling back is a change like any other: proposed (ProposeRollback,
// from the agent's own record of what to undo), approved, run.
//
// The wire protocol (subjects, the agent's consumer, the results bucket)
// is package wire; the changes themselves are package actions; the trail
// is package audit.
//
// flow.go is over 450 lines: Propose, Approve and Reject share one
// compare-and-set path on the proposal's record (open, read, decide,
// expire), whose invariants — a decision sealed and bound to its
// proposal, one writer wins, every change audited — read as one piece;
// the agent's side is agent.go, agentprocess.go and agentexecute.go, the
// identity check identity.go (the bot asking) and identitycheck.go (the
// agent answering).
package approval
