package approval

import (
	"crypto/rand"
	"encoding/base32"
	"errors"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/hcpbot/hcpbot/actions"
)

// Sentinel errors; test them with errors.Is. Each refusal of Approve and
// Reject wraps one of them and is audited as "refused".
var (
	// ErrNotFound: no proposal has that id (or it aged out of the bucket).
	ErrNotFound = errors.New("no such proposal")
	// ErrNotApprover: the user is neither an approver nor in an approver
	// group.
	ErrNotApprover = errors.New("not allowed to approve")
	// ErrOwnRequest: four-eyes is on and the user proposed the change.
	ErrOwnRequest = errors.New("four-eyes: cannot approve your own request")
	// ErrAlreadyApproved: the user's approval is already counted; under a
	// policy of several approvals another person has to add theirs.
	ErrAlreadyApproved = errors.New("you already approved")
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
	// ErrAudit: an audit record could not be written. From Approve: the
	// approval was not made (it is audited before it is sealed); from
	// Propose and Reject: the change of state was stored, and the
	// returned proposal shows it.
	ErrAudit = errors.New("audit record not written")
	// ErrExists: Propose was given the id of an existing proposal.
	ErrExists = errors.New("proposal id already in use")
	// ErrStale: the record is sealed throughout by a key this bot does
	// not trust (another key before a rotation, or a restarted `hcpbot
	// all` that made a new one): not forged, but nothing can be done
	// with it; propose again.
	ErrStale = errors.New("proposal sealed with a key this bot no longer has")
	// ErrLegacy: a proposal made by an hcpbot before decisions were
	// sealed (it carries a sealed request but no sealed decisions):
	// never run, listed or approved; propose it again.
	ErrLegacy = errors.New("proposal made by an older hcpbot, without sealed decisions")
	// ErrNotApproved: the seals do not prove enough approvals.
	ErrNotApproved = errors.New("not approved")
	// ErrTooLate: the approval is older than QueueHorizon: nobody waits
	// for its result any more, so it must not start now.
	ErrTooLate = errors.New("approved too long ago to start now")
)

// State is where a proposal is in its life.
type State string

// Proposal states. pending, approved, rejected and expired follow from
// the sealed decisions; executed, failed and rolled-back from what the
// agent answered.
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

// SystemRequesterPrefix marks requesters that are not people (the
// diagnosis that proposed a fix). Under four-eyes they are no second
// pair of eyes.
const SystemRequesterPrefix = "hcpbot-"

// Proposal is a change waiting for, or past, its decision. The fields
// up to Cause are its terms, fixed and sealed by the bot when it is made;
// the rest is derived, when the record is read, from the sealed decisions
// and from what the agent answered — never stored as a claim.
type Proposal struct {
	// ID is the action id, the bucket key.
	ID string `json:"id"`
	// Source is the management cluster whose agent executes the change.
	Source string         `json:"source"`
	Change actions.Change `json:"change"`
	// RequestedBy is who proposed it: a Slack user id, or the diagnosis
	// (SystemRequesterPrefix).
	RequestedBy string `json:"requestedBy"`
	// FourEyes and Approvals are the policy when it was made: the
	// stricter of them and the policy at decision time applies, on both
	// sides.
	FourEyes  bool      `json:"fourEyes,omitempty"`
	Approvals int       `json:"approvals"`
	CreatedAt time.Time `json:"createdAt"`
	ExpiresAt time.Time `json:"expiresAt"`
	// Cause is the diagnosis the change was proposed for, as the bot
	// showed it; nil for a change a person asked for without one.
	Cause *Cause `json:"cause,omitempty"`

	// Decisions are the sealed decisions, verified, in order.
	Decisions []Decision `json:"-"`
	State     State      `json:"-"`
	// Approvers are the distinct people whose approvals count, in order.
	Approvers []string `json:"-"`
	// DecidedBy and DecidedAt are who completed the decision (the last
	// counted approval, the rejection, or "" for an expiry) and when.
	DecidedBy string    `json:"-"`
	DecidedAt time.Time `json:"-"`
	// Reason is the rejection reason, or why execution failed.
	Reason string `json:"-"`
	// Result is the agent's report once executed (or failed with one). It
	// keeps Undo, which a rollback needs (and takes from the agent's own
	// record, not from here).
	Result *actions.Result `json:"-"`
	// Code classifies a failure (the agent's answer), and Collision
	// details a refused exposure's node ports.
	Code      Code                   `json:"-"`
	Collision *actions.PortCollision `json:"-"`
	// ExecutedAt is when the outcome was recorded.
	ExecutedAt time.Time `json:"-"`
	// RolledBackBy and RolledBackAt record the rollback.
	RolledBackBy string    `json:"-"`
	RolledBackAt time.Time `json:"-"`
	// Channel is where the decision was asked for, so that any replica
	// can post the outcome there.
	Channel string `json:"-"`
	// IdentityNote, after Approve, says that the approver's Kubernetes
	// identity could not be checked (the agent did not answer, or gave no
	// answer the bot could trust): the change runs as that identity, and
	// RBAC decides then.
	IdentityNote string `json:"-"`
	// PreflightNote, after Propose of an exposure, says what the agent
	// found of its node ports (free now), or that they could not be
	// checked and are checked when it runs.
	PreflightNote string `json:"-"`

	// digest names the sealed terms; decisions chain on it.
	digest string
	// tampered says why an outcome or rolled-back mark of the record was
	// ignored: it does not verify (written without the bot's key).
	tampered error
	// revision is the bucket revision the record was read at.
	revision uint64
}

// Cause is the diagnosis a change was proposed for.
type Cause struct {
	Rule    string `json:"rule"`
	Title   string `json:"title"`
	Summary string `json:"summary,omitempty"`
}

// Verdict is what a decision says.
type Verdict string

// Verdicts. An expiry is the bot's own decision, sealed like a person's.
const (
	VerdictApprove Verdict = "approve"
	VerdictReject  Verdict = "reject"
	VerdictExpire  Verdict = "expire"
)

// Decision is one verdict on a proposal, sealed by the bot when it is
// made. Prev chains it to what came before (the proposal's seal, then
// each decision's), so decisions can be neither moved to another
// proposal nor reordered.
type Decision struct {
	ProposalID string    `json:"proposalId"`
	Prev       string    `json:"prev"`
	By         string    `json:"by,omitempty"`
	Verdict    Verdict   `json:"verdict"`
	At         time.Time `json:"at"`
	Reason     string    `json:"reason,omitempty"`
	// Via and Email are how the bot found the approver's Kubernetes
	// identity (package identity): the Slack group of the map entry, or
	// the e-mail an EmailPrefix entry needs. The agent maps the approver
	// with its own map, taking these from the seal (only the bot can ask
	// Slack).
	Via   string `json:"via,omitempty"`
	Email string `json:"email,omitempty"`
	// AsApprover: the bot requires that the change be made as this
	// approver's Kubernetes identity (identities.required in the bot's
	// configuration, or the bot's map gives the approver one: they were
	// told the change runs as it). Sealed so that an agent whose own copy of the
	// section lacks it (not yet updated, or dropped) still never makes
	// the change with its own rights: it applies the stricter of the seal
	// and its configuration. Absent from decisions sealed before it
	// existed, which read as false.
	AsApprover bool `json:"asApprover,omitempty"`
}

// Expired reports whether a pending proposal can no longer be approved at
// now.
func (p Proposal) Expired(now time.Time) bool {
	return p.State == StatePending && !now.Before(p.ExpiresAt)
}

// Executed returns when the outcome was recorded, or the approval time
// for a proposal without one.
func (p Proposal) Executed() time.Time {
	if !p.ExecutedAt.IsZero() {
		return p.ExecutedAt
	}
	return p.DecidedAt
}

// Deadline is when the agent stops accepting the approved proposal:
// QueueHorizon after the approval that completed it.
func (p Proposal) Deadline() time.Time { return p.DecidedAt.Add(QueueHorizon) }

// Failure is why a failed proposal failed, as an error wrapping the
// sentinel of its code (actions' or this package's); nil unless failed.
func (p Proposal) Failure() error {
	if p.State != StateFailed {
		return nil
	}
	return Result{Code: p.Code, Error: p.Reason, Collision: p.Collision}.Err()
}

// HasApproved reports whether user's approval is counted.
func (p Proposal) HasApproved(user string) bool { return slices.Contains(p.Approvers, user) }

// Needed is how many approvals the proposal needs.
func (p Proposal) Needed() int { return max(p.Approvals, 1) }

// person reports whether requester is a person, not the diagnosis.
func person(requester string) bool {
	return requester != "" && !strings.HasPrefix(requester, SystemRequesterPrefix)
}

// QueueHorizon is how long after the approval that completed it a
// proposal may still start. The bot waits for the result until then (and
// ResultGrace more), so nothing starts after the user was told it will
// not.
const QueueHorizon = 10 * time.Minute

// ResultGrace is how long past a proposal's deadline the bot still waits
// for the agent's answer: an execution that started just before the
// deadline finishes within actions' ExecuteTimeout.
const ResultGrace = 2 * time.Minute

// idPattern is the action id pattern of actions; it is also a valid KV key.
var idPattern = regexp.MustCompile(`^[a-z]{1,8}-[0-9a-z]{4,32}$`)

var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// NewID returns a random action id: "act-" and 16 base32 characters.
func NewID() string {
	b := make([]byte, 10)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return "act-" + idEncoding.EncodeToString(b)
}
