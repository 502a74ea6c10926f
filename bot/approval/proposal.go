package approval

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hcpbot/hcpbot/actions"
)

// Sentinel errors; test them with errors.Is. Each refusal of Approve and
// Reject wraps one of the first six and is audited as "refused".
var (
	// ErrNotFound: no proposal has that id (or it aged out of the bucket).
	ErrNotFound = errors.New("no such proposal")
	// ErrNotApprover: the user is neither an approver nor in an approver
	// group.
	ErrNotApprover = errors.New("not allowed to approve")
	// ErrOwnRequest: four-eyes is on and the user proposed the change.
	ErrOwnRequest = errors.New("four-eyes: cannot approve your own request")
	// ErrExpired: the proposal was not approved in time.
	ErrExpired = errors.New("proposal expired")
	// ErrAlreadyDecided: someone (maybe this same user, a second click or
	// another replica) decided first.
	ErrAlreadyDecided = errors.New("proposal already decided")
	// ErrWrongCluster: the proposal is for another cluster than the one
	// the caller expected, e.g. an action id pasted into the wrong
	// cluster's thread.
	ErrWrongCluster = errors.New("proposal is for another cluster")

	// ErrGroupLookup: approver group membership could not be read; the
	// approval is refused rather than guessed.
	ErrGroupLookup = errors.New("approver group lookup failed")
	// ErrWrongState: Mark* was called on a proposal in a state the
	// transition does not start from (e.g. executed twice).
	ErrWrongState = errors.New("proposal is not in the state this transition starts from")
	// ErrAudit: the state change was stored but its audit record could not
	// be written. The returned proposal shows the new state.
	ErrAudit = errors.New("audit record not written")
	// ErrExists: Propose was given the id of an existing proposal.
	ErrExists = errors.New("proposal id already in use")
	// ErrTampered: the stored proposal's seal does not verify: it was
	// written by someone without the bot's key.
	ErrTampered = errors.New("proposal record was changed outside hcpbot")
)

// State is where a proposal is in its life cycle.
type State string

// Proposal states; see the package documentation for the transitions.
const (
	StatePending    State = "pending"
	StateApproved   State = "approved"
	StateRejected   State = "rejected"
	StateExpired    State = "expired"
	StateExecuted   State = "executed"
	StateFailed     State = "failed"
	StateRolledBack State = "rolled-back"
)

// Decided reports whether the proposal is past pending.
func (s State) Decided() bool { return s != StatePending }

// Proposal is a change waiting for, or past, its approval.
type Proposal struct {
	// ID is the action id (Request.ID), the bucket key.
	ID      string         `json:"id"`
	Request actions.Change `json:"request"`
	// Source is the management cluster whose agent executes the request.
	Source      string `json:"source,omitempty"`
	RequestedBy string `json:"requestedBy"`
	// FourEyes records that the policy required two people when the
	// proposal was made; the agent checks it again before executing.
	FourEyes  bool      `json:"fourEyes,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
	ExpiresAt time.Time `json:"expiresAt"`
	State     State     `json:"state"`
	// DecidedBy and DecidedAt record the approval, rejection or expiry.
	DecidedBy string    `json:"decidedBy,omitempty"`
	DecidedAt time.Time `json:"decidedAt,omitzero"`
	// Reason is the rejection reason or why execution failed.
	Reason string `json:"reason,omitempty"`
	// Result is the executor's report once executed (or failed with a
	// result). It keeps Undo, which a later rollback needs.
	Result *actions.Result `json:"result,omitempty"`
	// ExecutedAt is when the execution was recorded (MarkExecuted); zero
	// for proposals executed before it was kept.
	ExecutedAt time.Time `json:"executedAt,omitzero"`
	// RolledBackBy and RolledBackAt record the rollback.
	RolledBackBy string    `json:"rolledBackBy,omitempty"`
	RolledBackAt time.Time `json:"rolledBackAt,omitzero"`

	// Cause is the diagnosis the change was proposed for (ForDiagnosis);
	// nil for a change a person asked for without one (expose).
	Cause *Cause `json:"cause,omitempty"`
	// CauseSeal is the bot's signature over Cause (with a sealer): the
	// bot shows Cause in Slack, so a rewritten one is dropped on reading.
	CauseSeal *actions.ProposalSeal `json:"causeSeal,omitempty"`

	// Seal is the bot's signature over the fields fixed at Propose
	// (Claims), when the Store has a sealer.
	Seal *actions.ProposalSeal `json:"seal,omitempty"`

	// Revision is the bucket revision this value was read at or written
	// as; not stored.
	Revision uint64 `json:"-"`
}

// Cause is the diagnosis a change was proposed for, as the bot showed it.
type Cause struct {
	Rule    string `json:"rule"`
	Title   string `json:"title"`
	Summary string `json:"summary,omitempty"`
}

// Expired reports whether a pending proposal can no longer be approved at
// now.
func (p Proposal) Expired(now time.Time) bool {
	return p.State == StatePending && !now.Before(p.ExpiresAt)
}

// Executed returns when the proposal was executed: ExecutedAt, or for
// proposals stored before that was kept, the approval time (execution
// follows the approval at once).
func (p Proposal) Executed() time.Time {
	if !p.ExecutedAt.IsZero() {
		return p.ExecutedAt
	}
	return p.DecidedAt
}

// DefaultTTL is how long a proposal can be approved unless Policy.TTL says
// otherwise.
const DefaultTTL = time.Hour

// Policy says who may approve.
type Policy struct {
	// Approvers are Slack user IDs.
	Approvers []string
	// ApproverGroups are Slack user-group IDs whose members may approve;
	// membership is read from Groups at approval time.
	ApproverGroups []string
	// FourEyes forbids approving your own request.
	FourEyes bool
	// TTL is how long a proposal stays approvable; 0 means DefaultTTL.
	TTL time.Duration
}

func (p Policy) validate() error {
	if p.TTL < 0 {
		return fmt.Errorf("approval: negative proposal TTL %v", p.TTL)
	}
	for _, id := range slices.Concat(p.Approvers, p.ApproverGroups) {
		if strings.TrimSpace(id) == "" {
			return errors.New("approval: empty approver or group id")
		}
	}
	return nil
}

// Groups resolves user groups to their members. In production this is
// Slack's usergroups.users.list; membership changes there take effect on
// the next approval.
type Groups interface {
	GroupMembers(ctx context.Context, groupID string) ([]string, error)
}

// StaticGroups is a fixed group → members map, for tests and for setups
// without Slack user groups.
type StaticGroups map[string][]string

// GroupMembers implements Groups. An unknown group has no members.
func (g StaticGroups) GroupMembers(_ context.Context, groupID string) ([]string, error) {
	return slices.Clone(g[groupID]), nil
}
