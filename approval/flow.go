package approval

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/approval/wire"
	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/identity"
	"github.com/hcpbot/hcpbot/redact"
)

// DefaultTTL is how long a proposal can be approved unless Policy.TTL
// says otherwise.
const DefaultTTL = time.Hour

// Policy says who may approve, and how many must.
type Policy struct {
	// Approvers are Slack user IDs.
	Approvers []string
	// ApproverGroups are Slack user-group IDs whose members may approve;
	// membership is read from Groups at approval time.
	ApproverGroups []string
	// FourEyes forbids approving your own request: the requester's
	// approvals do not count, and the diagnosis is no requester.
	FourEyes bool
	// Approvals is how many distinct people must approve; 0 means 1.
	Approvals int
	// TTL is how long a proposal stays approvable; 0 means DefaultTTL.
	TTL time.Duration
}

func (p Policy) validate() error {
	if p.TTL < 0 || p.Approvals < 0 {
		return fmt.Errorf("approval: negative proposal TTL %v or approvals %d", p.TTL, p.Approvals)
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

// Config configures the bot's side of the flow.
type Config struct {
	// Signer seals proposals, decisions and requests; required.
	Signer *Signer
	// TrustedKeys are other public keys whose seals count as the bot's
	// own: during a key rotation the next key (before the replicas switch
	// to it) and then the previous one, so that no replica takes the
	// other's seals for forgeries.
	TrustedKeys []string
	// Trail records every change of state and every refusal; required.
	Trail  audit.Appender
	Policy Policy
	// Groups resolves Policy.ApproverGroups (required when it names any)
	// and the Slack groups of Identities.
	Groups Groups
	// Identities maps approvers to the Kubernetes identities the agent
	// acts as (package identity); empty: the agent acts as itself. Each
	// approval is then checked by the agent (SubjectAccessReviews) before
	// it counts.
	Identities identity.Map
	// Emails finds the Slack e-mail an identity derived from it needs.
	Emails Emails
	// Replicas of the proposals bucket (1, 3 or 5); 0 means 1.
	Replicas int
	// BucketTTL is how long a proposal is kept after its last change; 0
	// means bus.ProposalsTTL. It bounds how late a change can be rolled
	// back.
	BucketTTL time.Duration
	// Outcomes posts the outcome of a proposal that no caller of this
	// process waits for (its approver's replica died; the agent answered
	// after a restart), e.g. into Proposal.Channel. Nil only logs it.
	Outcomes func(ctx context.Context, p Proposal)
	// SweepInterval is how often the recovery sweep reads every proposal;
	// 0 means DefaultSweepInterval.
	SweepInterval time.Duration
	Log           zerolog.Logger
	// Registerer receives the flow's metrics; nil registers none.
	Registerer prometheus.Registerer
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Flow is the bot's side of the approval path: it stores proposals and
// the sealed decisions on them (every replica shares the bucket; every
// change is a compare-and-set), and its loop (Run) sends what Permit
// accepts to the agent, follows the answer, records and posts it,
// re-sends what a dead replica left, and expires what nobody decided.
// Chat calls Propose, Approve and Reject, which answer at once; outcomes
// come later (ApproveOption OnOutcome, Config.Outcomes). A Flow is safe
// for concurrent use.
type Flow struct {
	kv         store
	queue      *wire.Queue
	trail      audit.Appender
	signer     *Signer
	keys       []string
	policy     Policy
	groups     Groups
	identities identity.Map
	emails     Emails
	nc         *nats.Conn
	outcomes   func(ctx context.Context, p Proposal)
	sweep      time.Duration
	log        zerolog.Logger
	now        func() time.Time
	m          *flowMetrics

	mu       sync.Mutex
	inflight map[string]*flight
	reported map[string]uint64
	// valid are the proposals this replica has read with valid seals: one
	// that later reads as sealed by another key, or in an older shape, was
	// rewritten, and is reported as such.
	valid map[string]bool
	wake  chan struct{}
}

// FlowJetStream is what NewFlow takes: the bot's side of the queue
// creates the stream and buckets, sends requests (wire.Queue) and asks
// the agents' identity checks on the connection. It consumes nothing: the
// agents do (AgentJetStream).
type FlowJetStream interface {
	bus.BucketManager
	wire.Transport
	Conn() *nats.Conn
}

// NewFlow ensures the proposals bucket, the actions stream and the
// results bucket (the bot owns them; agents only use them) and returns
// the flow.
func NewFlow(ctx context.Context, js FlowJetStream, cfg Config) (*Flow, error) {
	switch {
	case cfg.Signer == nil:
		return nil, errors.New("approval: a signing key is required: agents run only what it seals")
	case cfg.Trail == nil:
		return nil, errors.New("approval: an audit trail is required")
	case len(cfg.Policy.ApproverGroups) > 0 && cfg.Groups == nil:
		return nil, errors.New("approval: approver groups configured but no group resolver")
	case cfg.Replicas < 0 || cfg.BucketTTL < 0:
		return nil, errors.New("approval: replicas and the bucket TTL must not be negative")
	}
	if err := cfg.Policy.validate(); err != nil {
		return nil, err
	}
	if len(cfg.TrustedKeys) > 0 {
		if err := CheckKeys(cfg.TrustedKeys); err != nil {
			return nil, fmt.Errorf("approval: trusted keys: %w", err)
		}
	}
	pol := cfg.Policy
	pol.Approvers, pol.ApproverGroups = slices.Clone(pol.Approvers), slices.Clone(pol.ApproverGroups)
	if pol.TTL == 0 {
		pol.TTL = DefaultTTL
	}
	pol.Approvals = max(pol.Approvals, 1)
	replicas := bus.WithReplicas(max(cfg.Replicas, 1))
	kv, err := bus.EnsureKV(ctx, js, bus.ProposalsKV(cfg.BucketTTL, replicas))
	if err != nil {
		return nil, fmt.Errorf("approval: ensure bucket %s: %w", bus.ProposalsBucket, err)
	}
	if _, err := bus.EnsureStream(ctx, js, bus.ActionsStream(replicas)); err != nil {
		return nil, fmt.Errorf("approval: %w", err)
	}
	if _, err := bus.EnsureKV(ctx, js, bus.ActionResultsKV(replicas)); err != nil {
		return nil, fmt.Errorf("approval: %w", err)
	}
	f := &Flow{
		kv: store{kv: kv}, queue: wire.NewQueue(js), trail: cfg.Trail, signer: cfg.Signer,
		keys:   append([]string{cfg.Signer.PublicKey()}, cfg.TrustedKeys...),
		policy: pol, groups: cfg.Groups, identities: cfg.Identities, emails: cfg.Emails, nc: js.Conn(),
		outcomes: cfg.Outcomes, sweep: cfg.SweepInterval,
		log: cfg.Log, now: cfg.Now, m: newFlowMetrics(cfg.Registerer),
		inflight: map[string]*flight{}, reported: map[string]uint64{}, valid: map[string]bool{}, wake: make(chan struct{}, 1),
	}
	if f.now == nil {
		f.now = time.Now
	}
	if f.sweep <= 0 {
		f.sweep = DefaultSweepInterval
	}
	return f, nil
}

// trust is what the bot accepts as proof: its own seals, under its
// current policy or the proposal's, whichever is stricter.
func (f *Flow) trust() Trust {
	return Trust{Keys: f.keys, FourEyes: f.policy.FourEyes, Approvals: f.policy.Approvals}
}

// FourEyes reports whether the policy requires two people.
func (f *Flow) FourEyes() bool { return f.policy.FourEyes }

// Authorize reports whether userID may approve, by the policy (nil when
// allowed; ErrNotApprover or ErrGroupLookup otherwise), fail-closed.
func (f *Flow) Authorize(ctx context.Context, userID string) error {
	if userID == "" || !person(userID) {
		return ErrNotApprover
	}
	if slices.Contains(f.policy.Approvers, userID) {
		return nil
	}
	var errs []error
	for _, g := range f.policy.ApproverGroups {
		members, err := f.groups.GroupMembers(ctx, g)
		if err != nil {
			// Another group may still grant it; only if none does is
			// the failure the answer.
			errs = append(errs, fmt.Errorf("group %s: %w", g, err))
			continue
		}
		if slices.Contains(members, userID) {
			return nil
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrGroupLookup, errors.Join(errs...))
	}
	return ErrNotApprover
}

type proposeOptions struct {
	source, channel string
	cause           *Cause
}

// ProposeOption configures Propose.
type ProposeOption func(*proposeOptions)

// ForSource names the management cluster whose agent is to execute the
// change.
func ForSource(source string) ProposeOption {
	return func(o *proposeOptions) { o.source = source }
}

// ForDiagnosis records the diagnosis a fix is proposed for: the incident
// it heals keeps it as its headline while the fix rolls out. It is sealed
// with the terms, so what chat shows of it is the bot's own words.
func ForDiagnosis(rule, title, summary string) ProposeOption {
	return func(o *proposeOptions) { o.cause = &Cause{Rule: rule, Title: title, Summary: summary} }
}

// InChannel records where the proposal was made, so that its outcome can
// be posted there by any replica.
func InChannel(channel string) ProposeOption {
	return func(o *proposeOptions) { o.channel = channel }
}

// Propose stores ch as a pending proposal by requestedBy, sealed, and
// audits it. An empty ch.ID gets a fresh one (NewID); ch.RequestedBy is
// set to requestedBy, the authenticated user, whatever the caller put
// there. The change must pass actions' Validate: an approver must never
// be shown something the executor would refuse. An exposure is first
// checked by the agent of its source (preflight): one whose node ports
// are taken there is not proposed (a *actions.PortCollisionError naming
// each port and the Service holding it, with free ones), nor one the
// agent finds invalid; one the agent does not answer for is proposed
// with Proposal.PreflightNote saying so.
func (f *Flow) Propose(ctx context.Context, ch actions.Change, requestedBy string, opts ...ProposeOption) (Proposal, error) {
	var o proposeOptions
	for _, opt := range opts {
		opt(&o)
	}
	if ch.ID == "" {
		ch.ID = NewID()
	}
	ch.RequestedBy = requestedBy
	if err := ch.Validate(); err != nil {
		return Proposal{}, fmt.Errorf("approval: propose: %w", err)
	}
	if _, err := wire.Subject(o.source); err != nil {
		return Proposal{}, fmt.Errorf("approval: propose %s: no usable management cluster: %w", ch.ID, err)
	}
	var note string
	if ch.Type == actions.TypeExposeNodePort {
		// A taken node port is found now, not after two people approved.
		var err error
		if note, err = f.preflight(ctx, o.source, ch); err != nil {
			return Proposal{}, fmt.Errorf("approval: propose %s: %w", ch.ID, err)
		}
	}
	now := f.now().UTC()
	p := Proposal{
		ID: ch.ID, Source: o.source, Change: ch, RequestedBy: requestedBy,
		FourEyes: f.policy.FourEyes, Approvals: f.policy.Approvals,
		CreatedAt: now, ExpiresAt: now.Add(f.policy.TTL), Cause: o.cause,
	}
	terms, err := f.signer.seal(proposalContext, p)
	if err != nil {
		return Proposal{}, err
	}
	rec, err := f.kv.create(ctx, p.ID, Record{Proposal: terms, Channel: o.channel})
	if err != nil {
		return Proposal{}, fmt.Errorf("approval: %w", err)
	}
	p, err = f.read(ctx, p.ID, rec)
	if err != nil {
		return p, fmt.Errorf("approval: propose %s: %w", ch.ID, err)
	}
	p.PreflightNote = note
	summary, diff := Describe(p.Change)
	return p, f.record(ctx, p, audit.KindProposed, requestedBy, "", now, func(r *audit.Record) {
		r.Summary, r.Diff = summary, diff
	})
}

// Get returns the proposal as its seals prove it, with its outcome.
func (f *Flow) Get(ctx context.Context, id string) (Proposal, error) {
	rec, err := f.kv.get(ctx, id)
	if err != nil {
		return Proposal{}, fmt.Errorf("approval: %w", err)
	}
	p, err := view(rec, f.trust())
	if err != nil {
		return p, fmt.Errorf("approval: %s: %w", id, err)
	}
	return p, nil
}

type decideOptions struct {
	cluster   *actions.ClusterRef
	channel   string
	onOutcome func(Proposal)
}

// DecideOption configures Approve and Reject.
type DecideOption func(*decideOptions)

// ExpectCluster refuses the decision with ErrWrongCluster unless the
// proposal acts on c: callers pass the cluster of the thread or button
// the decision came from.
func ExpectCluster(c actions.ClusterRef) DecideOption {
	return func(o *decideOptions) { o.cluster = &c }
}

// OnOutcome calls fn with the proposal once the approval this decision
// completes has an outcome (executed or failed), if this process records
// it; otherwise Config.Outcomes posts it.
func OnOutcome(fn func(Proposal)) DecideOption {
	return func(o *decideOptions) { o.onOutcome = fn }
}

// DecidedIn records where the decision was made when the proposal has no
// channel yet, for the outcome.
func DecidedIn(channel string) DecideOption {
	return func(o *decideOptions) { o.channel = channel }
}

// Approve adds userID's sealed approval to proposal id and returns at
// once: when it completes the decision, the loop (Run) sends the request
// and the outcome follows (OnOutcome). Of concurrent approvals that would
// each complete it, exactly one does; the others get ErrAlreadyDecided.
// Refusals wrap ErrNotFound, ErrForged, ErrStale, ErrWrongCluster,
// ErrNotApprover, ErrOwnRequest, ErrAlreadyApproved, ErrExpired,
// ErrAlreadyDecided or ErrGroupLookup and are audited as "refused". A
// pending proposal past its expiry is expired here (and audited) as well
// as refused.
//
// The approval is audited before it is sealed: one that cannot be
// audited is not made (ErrAudit, try again), so no cluster change happens
// off the record. One refused after its audit record was written (a race
// with another decision) is followed by the refusal's record.
func (f *Flow) Approve(ctx context.Context, id, userID string, opts ...DecideOption) (Proposal, error) {
	var o decideOptions
	for _, opt := range opts {
		opt(&o)
	}
	now := f.now()
	p, err := f.approve(ctx, id, userID, now, o)
	if err != nil && !errors.Is(err, ErrAudit) {
		return p, f.refused(ctx, "approve", id, userID, now, p, err)
	}
	return p, err
}

func (f *Flow) approve(ctx context.Context, id, userID string, now time.Time, o decideOptions) (Proposal, error) {
	p, err := f.open(ctx, id, o)
	if err != nil {
		return p, err
	}
	need, fourEyes := f.trust().need(p)
	// Four-eyes before the approver check: it needs no group lookup, and
	// either way the requester cannot approve.
	if fourEyes {
		switch {
		case userID == p.RequestedBy:
			return p, ErrOwnRequest
		case !person(p.RequestedBy):
			return p, fmt.Errorf("%w: requested by %s, not a person; propose it again", ErrOwnRequest, p.RequestedBy)
		}
	}
	if err := f.Authorize(ctx, userID); err != nil {
		return p, err
	}
	// Who the agent will act as, and whether that identity may make the
	// change: an approval it may not make does not count.
	var via, email, note string
	asApprover := f.identities.Required
	if !f.identities.Empty() {
		v, e, _, err := f.approverIdentity(ctx, p.Source, userID)
		switch {
		case errors.Is(err, ErrNoIdentity) && !f.identities.Required:
			// The agent acts as itself.
		case err != nil:
			return p, err
		default:
			// The bot tells this approver the change runs as their
			// identity: the agent must find it too, required or not.
			via, email, asApprover = v, e, true
			if note, err = f.checkIdentity(ctx, p, userID, via, email); err != nil {
				return p, err
			}
		}
	}
	if p.Expired(now) && p.State == StatePending {
		return f.expireNow(ctx, p, now)
	}
	// The approval goes on the record before it is sealed: one that
	// cannot be audited is never sealed, so nothing runs off the record.
	// (Sealed first, a failed audit would leave an approval to withdraw,
	// and whoever can write the store could drop the withdrawal.)
	n := len(p.Approvers) + 1
	if p.State == StatePending && !p.HasApproved(userID) {
		if err := f.record(ctx, p, audit.KindApproved, userID, userID, now, func(r *audit.Record) {
			r.Summary, r.Diff = Describe(p.Change)
			r.Summary = fmt.Sprintf("%s (approval %d of %d)", r.Summary, n, need)
		}); err != nil {
			return p, fmt.Errorf("approval of %s not made: %w", id, err)
		}
	}
	rec, err := f.kv.update(ctx, id, func(rec *Record) (bool, error) {
		cur, err := f.undecided(*rec)
		switch {
		case err != nil:
			return false, err
		case cur.HasApproved(userID):
			return false, fmt.Errorf("%w %s (%d of %d approvals)", ErrAlreadyApproved, id, len(cur.Approvers), need)
		}
		if o.channel != "" && rec.Channel == "" {
			rec.Channel = o.channel
		}
		return true, f.decide(rec, cur, Decision{By: userID, Verdict: VerdictApprove, At: now.UTC(), Via: via, Email: email, AsApprover: asApprover}, nil)
	})
	if err != nil {
		// Decided otherwise since the approval was audited (a race with
		// another decision): the refusal's record (Approve) follows it.
		return p, fmt.Errorf("approval not recorded: %w", err)
	}
	if p, err = view(rec, f.trust()); err != nil {
		return p, err
	}
	p.IdentityNote = note
	if p.State == StateApproved {
		f.follow(p.ID, o.onOutcome)
	}
	return p, nil
}

// expireNow seals the expiry of pending proposal p, audits it and returns
// ErrExpired.
func (f *Flow) expireNow(ctx context.Context, p Proposal, now time.Time) (Proposal, error) {
	written := false
	rec, err := f.kv.update(ctx, p.ID, func(rec *Record) (bool, error) {
		written = false // only the last call's verdict was written
		cur, err := f.undecided(*rec)
		if err != nil {
			return false, err
		}
		written = true
		return true, f.decide(rec, cur, Decision{Verdict: VerdictExpire, At: now.UTC()}, nil)
	})
	if err != nil {
		return p, err
	}
	if q, err := view(rec, f.trust()); err == nil {
		p = q
	}
	if !written {
		return p, ErrExpired
	}
	return p, errors.Join(ErrExpired, f.record(ctx, p, audit.KindExpired, "", "", now, nil))
}

// Reject rejects proposal id as userID with reason (stored and audited
// with credentials redacted). Approvers may reject, and so may the
// requester (withdrawing a proposal needs no second pair of eyes).
// Refusals and races are as for Approve.
func (f *Flow) Reject(ctx context.Context, id, userID, reason string, opts ...DecideOption) (Proposal, error) {
	var o decideOptions
	for _, opt := range opts {
		opt(&o)
	}
	now := f.now()
	p, err := f.reject(ctx, id, userID, reason, now, o)
	if err != nil && !errors.Is(err, ErrAudit) {
		return p, f.refused(ctx, "reject", id, userID, now, p, err)
	}
	return p, err
}

func (f *Flow) reject(ctx context.Context, id, userID, reason string, now time.Time, o decideOptions) (Proposal, error) {
	p, err := f.open(ctx, id, o)
	if err != nil {
		return p, err
	}
	if userID != p.RequestedBy || !person(userID) {
		if err := f.Authorize(ctx, userID); err != nil {
			return p, err
		}
	}
	reason = redact.RedactText(reason)
	rec, err := f.kv.update(ctx, id, func(rec *Record) (bool, error) {
		cur, err := f.undecided(*rec)
		if err != nil {
			return false, err
		}
		// Rejecting an expired but still pending proposal is allowed: the
		// outcome (not run) is the same and the reason is worth keeping.
		return true, f.decide(rec, cur, Decision{By: userID, Verdict: VerdictReject, At: now.UTC(), Reason: reason}, nil)
	})
	if err != nil {
		return p, err
	}
	if p, err = view(rec, f.trust()); err != nil {
		return p, err
	}
	return p, f.record(ctx, p, audit.KindRejected, userID, userID, now, func(r *audit.Record) {
		r.Summary, _ = Describe(p.Change)
		r.Reason = reason
	})
}

// undecided is the proposal rec holds, its seals verified, while it is
// open to a decision: else ErrExpired or ErrAlreadyDecided. Each decision
// checks it again on the record it is about to replace.
func (f *Flow) undecided(rec Record) (Proposal, error) {
	cur, err := view(rec, f.trust())
	switch {
	case err != nil:
		return cur, err
	case cur.State == StateExpired:
		return cur, ErrExpired
	case cur.State.Decided():
		return cur, fmt.Errorf("%w: %s by %s", ErrAlreadyDecided, cur.State, cur.DecidedBy)
	}
	return cur, nil
}

// open reads proposal id for a decision and checks what every decision
// checks first: that its seals verify and the cluster is the one the
// caller expects. A proposal returned with an error is the one read, for
// the refusal's audit.
func (f *Flow) open(ctx context.Context, id string, o decideOptions) (Proposal, error) {
	rec, err := f.kv.get(ctx, id)
	if err != nil {
		if errors.Is(err, ErrLegacy) {
			f.noteRewrite(ctx, id, rec, err)
		}
		return Proposal{}, err
	}
	p, err := f.read(ctx, id, rec)
	if err != nil {
		return p, err
	}
	if o.cluster != nil && *o.cluster != p.Change.Cluster {
		return p, fmt.Errorf("%w: %s is for %s, not %s", ErrWrongCluster, id, p.Change.Cluster, o.cluster)
	}
	return p, nil
}

// read is view with what reading teaches this replica: records whose
// seals do not verify, or whose outcome does not, are reported as
// forgeries; one that verified before and now reads as another key's or
// an older shape was rewritten, and is reported too.
func (f *Flow) read(ctx context.Context, id string, rec Record) (Proposal, error) {
	p, err := view(rec, f.trust())
	switch {
	case err == nil:
		f.mu.Lock()
		f.valid[id] = true
		f.mu.Unlock()
		if p.tampered != nil {
			f.reportForgery(ctx, id, rec, p.tampered)
		}
	case errors.Is(err, ErrStale), errors.Is(err, ErrLegacy):
		f.noteRewrite(ctx, id, rec, err)
	default:
		f.reportForgery(ctx, id, rec, err)
	}
	return p, err
}

// noteRewrite reports a stale or legacy record this replica has read
// valid before.
func (f *Flow) noteRewrite(ctx context.Context, id string, rec Record, err error) {
	f.mu.Lock()
	seen := f.valid[id]
	f.mu.Unlock()
	if seen {
		f.reportForgery(ctx, id, rec, fmt.Errorf("%w: it verified before: %w", ErrForged, err))
	}
}

// decide seals d as the next decision on cur (chained to the last seal
// of rec) and appends it to rec; it returns ret, for update's closure.
func (f *Flow) decide(rec *Record, cur Proposal, d Decision, ret error) error {
	d.ProposalID = cur.ID
	d.Prev = cur.digest
	if n := len(rec.Decisions); n > 0 {
		d.Prev = rec.Decisions[n-1].digest(decisionContext)
	}
	s, err := f.signer.seal(decisionContext, d)
	if err != nil {
		return err
	}
	rec.Decisions = append(rec.Decisions, s)
	return ret
}
