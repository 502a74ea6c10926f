// Package approval holds proposed cluster changes until someone allowed to
// approves or rejects them, and tracks each one through execution and
// rollback.
//
// Proposals live in a NATS key-value bucket (Bucket) shared by every bot
// replica, so a button pressed on any replica sees the same state. Every
// state change is a compare-and-set on the key's revision: of any number
// of concurrent decisions (double clicks, two replicas, a replayed Slack
// payload) exactly one succeeds and the others get ErrAlreadyDecided. The
// one winner is therefore the only caller that may send the request to the
// agent; ApproveAndRun does exactly that.
//
// Every transition and every refusal is written to the audit trail
// (package audit). A transition is written to the bucket first and then
// audited, with an ID derived from the proposal and the transition so that
// a retried audit append is not doubled; when the audit cannot be written
// the transition stands and the caller gets ErrAudit with the proposal.
//
// State machine:
//
//	pending ──approve──▶ approved ──executed──▶ executed ──rolled back──▶ rolled-back
//	   │                    └──────failed─────▶ failed
//	   ├──reject──▶ rejected
//	   └──expire──▶ expired   (Expire sweep, or lazily when approved late)
//
// Rolling back is a change like any other, so it goes through the same
// flow: the bot proposes a request of type rollback carrying the executed
// action's Undo (id "rbk-" + the original's suffix, so that a second
// request for the same rollback finds the first), an approver approves it
// (four-eyes applies), the agent runs it, and only then is the original
// marked rolled back (MarkRolledBack, by the rollback's approver). Every
// step is audited like any proposal's.
package approval
