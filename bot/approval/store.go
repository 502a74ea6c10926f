package approval

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/bot/audit"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/redact"
)

// Bucket is the key-value bucket holding proposals, keyed by action id.
const Bucket = bus.ProposalsBucket

// DefaultBucketTTL is how long a proposal is kept after its last change.
// Rollback needs the Undo stored with an executed proposal, so this bounds
// how late an action can be rolled back by id.
const DefaultBucketTTL = bus.ProposalsTTL

// maxCASAttempts bounds the re-read/re-try loop of one transition. Every
// write is a transition out of the state it read, so a second conflict
// is already unusual.
const maxCASAttempts = 5

// auditAttempts bounds retries of an audit append; the record ID makes
// them safe.
const auditAttempts = 3

// idPattern is actions' request id pattern; it is also a valid KV key.
var idPattern = regexp.MustCompile(`^[a-z]{1,8}-[0-9a-z]{4,32}$`)

var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// NewID returns a random action id: "act-" and 16 base32 characters.
func NewID() string {
	b := make([]byte, 10)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return "act-" + idEncoding.EncodeToString(b)
}

// Store keeps proposals in the shared bucket. Several Stores (bot
// replicas) on the same bucket are safe: every transition is a
// compare-and-set. A Store is safe for concurrent use.
type Store struct {
	kv     jetstream.KeyValue
	audit  audit.Appender
	policy Policy
	groups Groups
	sealer *actions.Signer
	now    func() time.Time
}

type storeOptions struct {
	groups    Groups
	replicas  int
	bucketTTL time.Duration
	sealer    *actions.Signer
	now       func() time.Time
}

// WithSealer seals every proposal's fixed fields (requester, request,
// cluster, times) with s when it is made, and refuses to approve one
// whose seal does not verify: whoever can write the bucket without the
// key cannot change what people approve. The agent checks the seal too.
func WithSealer(s *actions.Signer) StoreOption { return func(o *storeOptions) { o.sealer = s } }

// StoreOption configures NewStore.
type StoreOption func(*storeOptions)

// WithGroups resolves Policy.ApproverGroups; required when the policy
// names groups.
func WithGroups(g Groups) StoreOption { return func(o *storeOptions) { o.groups = g } }

// WithReplicas sets the bucket's replica count. Default 1.
func WithReplicas(n int) StoreOption { return func(o *storeOptions) { o.replicas = n } }

// WithBucketTTL sets how long proposals are kept after their last change.
// Default (and 0) DefaultBucketTTL: proposals are never kept forever.
func WithBucketTTL(d time.Duration) StoreOption { return func(o *storeOptions) { o.bucketTTL = d } }

// WithClock sets the clock for creation, expiry and Mark* times (tests).
func WithClock(now func() time.Time) StoreOption { return func(o *storeOptions) { o.now = now } }

// NewStore creates the bucket or brings it to the options, and returns a
// Store applying policy. Every transition is audited to a.
func NewStore(ctx context.Context, js jetstream.JetStream, a audit.Appender, policy Policy, opts ...StoreOption) (*Store, error) {
	o := storeOptions{replicas: 1, bucketTTL: DefaultBucketTTL, now: time.Now}
	for _, opt := range opts {
		opt(&o)
	}
	if a == nil {
		return nil, errors.New("approval: an audit log is required")
	}
	if err := policy.validate(); err != nil {
		return nil, err
	}
	if len(policy.ApproverGroups) > 0 && o.groups == nil {
		return nil, errors.New("approval: approver groups configured but no group resolver")
	}
	if policy.TTL == 0 {
		policy.TTL = DefaultTTL
	}
	if o.replicas < 1 || o.bucketTTL < 0 {
		return nil, errors.New("approval: replicas must be positive and the bucket TTL not negative")
	}
	kv, err := bus.EnsureKV(ctx, js, bus.ProposalsKV(o.bucketTTL, bus.WithReplicas(o.replicas)))
	if err != nil {
		return nil, fmt.Errorf("approval: ensure bucket %s: %w", Bucket, err)
	}
	return &Store{
		kv: kv, audit: a, groups: o.groups, sealer: o.sealer, now: o.now,
		policy: Policy{
			Approvers:      slices.Clone(policy.Approvers),
			ApproverGroups: slices.Clone(policy.ApproverGroups),
			FourEyes:       policy.FourEyes,
			TTL:            policy.TTL,
		},
	}, nil
}

type proposeOptions struct{ source string }

// ProposeOption configures Propose.
type ProposeOption func(*proposeOptions)

// ForSource names the management cluster whose agent is to execute the
// request; the dispatcher routes on it and audit records carry it.
func ForSource(source string) ProposeOption {
	return func(o *proposeOptions) { o.source = source }
}

// Propose stores req as a pending proposal by requestedBy and audits it.
// An empty req.ID gets a fresh one (NewID); req.RequestedBy is set to
// requestedBy, the authenticated user, whatever the caller put there. The
// request must pass actions' Validate: an approver must never be shown
// something the executor would refuse.
func (s *Store) Propose(ctx context.Context, req actions.Request, requestedBy string, opts ...ProposeOption) (Proposal, error) {
	var o proposeOptions
	for _, opt := range opts {
		opt(&o)
	}
	if req.ID == "" {
		req.ID = NewID()
	}
	req.RequestedBy = requestedBy
	if err := req.Validate(); err != nil {
		return Proposal{}, fmt.Errorf("approval: propose: %w", err)
	}
	now := s.now().UTC()
	p := Proposal{
		ID: req.ID, Request: req, Source: o.source, RequestedBy: requestedBy, FourEyes: s.policy.FourEyes,
		CreatedAt: now, ExpiresAt: now.Add(s.policy.TTL), State: StatePending,
	}
	if s.sealer != nil {
		claims, err := p.Claims()
		if err != nil {
			return Proposal{}, fmt.Errorf("approval: propose: %w", err)
		}
		seal, err := s.sealer.SealProposal(claims)
		if err != nil {
			return Proposal{}, fmt.Errorf("approval: propose: %w", err)
		}
		p.Seal = &seal
	}
	data, err := json.Marshal(p)
	if err != nil {
		return Proposal{}, fmt.Errorf("approval: encode proposal %s: %w", p.ID, err)
	}
	rev, err := s.kv.Create(ctx, p.ID, data)
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return Proposal{}, fmt.Errorf("approval: propose %s: %w", p.ID, ErrExists)
		}
		return Proposal{}, fmt.Errorf("approval: propose %s: %w", p.ID, err)
	}
	p.Revision = rev
	summary, diff := describe(req)
	return p, s.record(ctx, p, audit.KindProposed, requestedBy, now, func(r *audit.Record) {
		r.Summary, r.Diff = summary, diff
	})
}

// Get returns the proposal as stored (a pending proposal past ExpiresAt
// is reported as stored; see Proposal.Expired).
func (s *Store) Get(ctx context.Context, id string) (Proposal, error) {
	p, err := s.get(ctx, id)
	if err != nil {
		return Proposal{}, fmt.Errorf("approval: %w", err)
	}
	return p, nil
}

func (s *Store) get(ctx context.Context, id string) (Proposal, error) {
	if !idPattern.MatchString(id) {
		// Not a key we could have written; also keeps garbage out of
		// the KV API.
		return Proposal{}, fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	e, err := s.kv.Get(ctx, id)
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
			return Proposal{}, fmt.Errorf("%w: %s", ErrNotFound, id)
		}
		return Proposal{}, fmt.Errorf("read proposal %s: %w", id, err)
	}
	var p Proposal
	if err := json.Unmarshal(e.Value(), &p); err != nil {
		return Proposal{}, fmt.Errorf("decode proposal %s: %w", id, err)
	}
	p.Revision = e.Revision()
	return p, nil
}

// update applies change to the current value of id and writes the result
// with compare-and-set on the revision it read; on a conflict it re-reads
// and asks change again, so change always judges the latest state. change
// reports whether to write; an error it returns is returned after the
// write (if any), so a transition can both happen and be a refusal (lazy
// expiry).
func (s *Store) update(ctx context.Context, id string, change func(p *Proposal) (write bool, err error)) (Proposal, error) {
	for attempt := 1; ; attempt++ {
		p, err := s.get(ctx, id)
		if err != nil {
			return Proposal{}, err
		}
		write, cerr := change(&p)
		if !write {
			return p, cerr
		}
		data, err := json.Marshal(p)
		if err != nil {
			return Proposal{}, fmt.Errorf("encode proposal %s: %w", id, err)
		}
		rev, err := s.kv.Update(ctx, id, data, p.Revision)
		if err == nil {
			p.Revision = rev
			return p, cerr
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !errors.Is(err, jetstream.ErrKeyExists) {
			return Proposal{}, fmt.Errorf("write proposal %s: %w", id, err)
		}
		if attempt == maxCASAttempts {
			return Proposal{}, fmt.Errorf("write proposal %s: still changing after %d attempts: %w", id, attempt, err)
		}
	}
}

type decideOptions struct {
	cluster *actions.ClusterRef
}

// DecideOption configures Approve and Reject.
type DecideOption func(*decideOptions)

// ExpectCluster refuses the decision with ErrWrongCluster unless the
// proposal acts on c. Callers pass the cluster of the thread or button the
// decision came from.
func ExpectCluster(c actions.ClusterRef) DecideOption {
	return func(o *decideOptions) { o.cluster = &c }
}

// Approve approves proposal id as userID at now. Of concurrent calls for
// one proposal exactly one returns it approved; the rest fail with
// ErrAlreadyDecided. Refusals wrap ErrNotFound, ErrWrongCluster,
// ErrNotApprover, ErrOwnRequest, ErrExpired, ErrAlreadyDecided or
// ErrGroupLookup and are audited as "refused". A pending proposal past its
// expiry is marked expired here (and audited) as well as refused.
func (s *Store) Approve(ctx context.Context, id, userID string, now time.Time, opts ...DecideOption) (Proposal, error) {
	p, err := s.approve(ctx, id, userID, now, opts)
	if err != nil && !errors.Is(err, ErrAudit) {
		return p, s.refused(ctx, "approve", id, userID, now, p, err)
	}
	return p, err
}

func (s *Store) approve(ctx context.Context, id, userID string, now time.Time, opts []DecideOption) (Proposal, error) {
	var o decideOptions
	for _, opt := range opts {
		opt(&o)
	}
	p, err := s.get(ctx, id)
	if err != nil {
		return Proposal{}, err
	}
	// Checks on what never changes come first, outside the CAS loop: the
	// group lookup may be a slow API call.
	if o.cluster != nil && *o.cluster != p.Request.Cluster {
		return p, fmt.Errorf("%w: %s is for %s, not %s", ErrWrongCluster, id, p.Request.Cluster, o.cluster)
	}
	if s.sealer != nil {
		claims, err := p.Claims()
		if err != nil {
			return p, err
		}
		if err := actions.VerifyProposal([]string{s.sealer.PublicKey()}, claims, p.Seal); err != nil {
			return p, fmt.Errorf("%w: %w", ErrTampered, err)
		}
	}
	// Four-eyes before the approver check: it needs no group lookup, and
	// either way the requester cannot approve. The rule of the policy now
	// or of the proposal when it was made, whichever is stricter; a
	// requester that is not a person (the diagnosis) is no second pair of
	// eyes.
	if s.policy.FourEyes || p.FourEyes {
		switch {
		case userID == p.RequestedBy:
			return p, ErrOwnRequest
		case strings.HasPrefix(p.RequestedBy, actions.SystemRequesterPrefix):
			return p, fmt.Errorf("%w: requested by %s, not a person; propose it again", ErrOwnRequest, p.RequestedBy)
		}
	}
	if err := s.authorize(ctx, userID); err != nil {
		return p, err
	}
	// update may call the closure more than once; only the last call's
	// verdict was written.
	expired := false
	p, err = s.update(ctx, id, func(p *Proposal) (bool, error) {
		expired = false
		switch {
		case p.State == StateExpired:
			return false, ErrExpired
		case p.State.Decided():
			return false, fmt.Errorf("%w: %s by %s", ErrAlreadyDecided, p.State, p.DecidedBy)
		case p.Expired(now):
			p.State, p.DecidedAt, p.DecidedBy = StateExpired, now.UTC(), ""
			expired = true
			return true, ErrExpired
		}
		p.State, p.DecidedBy, p.DecidedAt = StateApproved, userID, now.UTC()
		return true, nil
	})
	if expired {
		if aerr := s.record(ctx, p, audit.KindExpired, "", now, nil); aerr != nil {
			return p, errors.Join(err, aerr)
		}
	}
	if err != nil {
		return p, err
	}
	return p, s.record(ctx, p, audit.KindApproved, userID, now, func(r *audit.Record) {
		r.Summary, r.Diff = describe(p.Request)
	})
}

// Reject rejects proposal id as userID with reason (stored and audited
// with credentials redacted). Approvers may reject,
// and so may the requester (withdrawing a proposal needs no second pair of
// eyes). Refusals and races are as for Approve.
func (s *Store) Reject(ctx context.Context, id, userID, reason string, now time.Time, opts ...DecideOption) (Proposal, error) {
	p, err := s.reject(ctx, id, userID, reason, now, opts)
	if err != nil && !errors.Is(err, ErrAudit) {
		return p, s.refused(ctx, "reject", id, userID, now, p, err)
	}
	return p, err
}

func (s *Store) reject(ctx context.Context, id, userID, reason string, now time.Time, opts []DecideOption) (Proposal, error) {
	var o decideOptions
	for _, opt := range opts {
		opt(&o)
	}
	p, err := s.get(ctx, id)
	if err != nil {
		return Proposal{}, err
	}
	if o.cluster != nil && *o.cluster != p.Request.Cluster {
		return p, fmt.Errorf("%w: %s is for %s, not %s", ErrWrongCluster, id, p.Request.Cluster, o.cluster)
	}
	if userID != p.RequestedBy {
		if err := s.authorize(ctx, userID); err != nil {
			return p, err
		}
	}
	p, err = s.update(ctx, id, func(p *Proposal) (bool, error) {
		switch {
		case p.State == StateExpired:
			return false, ErrExpired
		case p.State.Decided():
			return false, fmt.Errorf("%w: %s by %s", ErrAlreadyDecided, p.State, p.DecidedBy)
		}
		// Rejecting an expired but still pending proposal is allowed: the
		// outcome (not run) is the same and the reason is worth keeping.
		p.State, p.DecidedBy, p.DecidedAt, p.Reason = StateRejected, userID, now.UTC(), redact.RedactText(reason)
		return true, nil
	})
	if err != nil {
		return p, err
	}
	return p, s.record(ctx, p, audit.KindRejected, userID, now, func(r *audit.Record) {
		r.Summary, _ = describe(p.Request)
		r.Reason = reason
	})
}

// Expire marks every pending proposal past its expiry at now as expired
// and audits each; it returns how many it expired. Bot replicas may run it
// concurrently: each proposal is expired once.
func (s *Store) Expire(ctx context.Context, now time.Time) (int, error) {
	lister, err := s.kv.ListKeys(ctx)
	if err != nil {
		return 0, fmt.Errorf("approval: list proposals: %w", err)
	}
	defer func() { _ = lister.Stop() }()
	n := 0
	var errs []error
	for id := range lister.Keys() {
		expired := false
		p, err := s.update(ctx, id, func(p *Proposal) (bool, error) {
			expired = false // only the last call's verdict was written
			if !p.Expired(now) {
				return false, nil
			}
			p.State, p.DecidedAt, p.DecidedBy = StateExpired, now.UTC(), ""
			expired = true
			return true, nil
		})
		switch {
		case errors.Is(err, ErrNotFound):
			continue // aged out meanwhile
		case err != nil:
			errs = append(errs, err)
			continue
		case !expired:
			continue
		}
		n++
		if err := s.record(ctx, p, audit.KindExpired, "", now, nil); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return n, fmt.Errorf("approval: expire: %w", err)
	}
	return n, nil
}

// MarkExecuted records that the approved proposal id was carried out with
// res. It fails with ErrWrongState unless the proposal is approved, so a
// result reported twice is recorded once.
func (s *Store) MarkExecuted(ctx context.Context, id string, res actions.Result) (Proposal, error) {
	now := s.now()
	p, err := s.update(ctx, id, func(p *Proposal) (bool, error) {
		if p.State != StateApproved {
			return false, fmt.Errorf("%w: %s is %s, not %s", ErrWrongState, id, p.State, StateApproved)
		}
		p.State, p.Result, p.ExecutedAt = StateExecuted, &res, now.UTC()
		return true, nil
	})
	if err != nil {
		return p, fmt.Errorf("approval: mark executed: %w", err)
	}
	return p, s.record(ctx, p, audit.KindExecuted, p.DecidedBy, now, func(r *audit.Record) {
		r.Summary = res.Summary
		r.Diff = res.Diff
		r.Result = string(res.Outcome)
	})
}

// MarkFailed records that the approved proposal id could not be carried
// out, with the reason and the result if there is one. ErrWrongState as
// for MarkExecuted.
func (s *Store) MarkFailed(ctx context.Context, id, reason string, res *actions.Result) (Proposal, error) {
	now := s.now()
	p, err := s.update(ctx, id, func(p *Proposal) (bool, error) {
		if p.State != StateApproved {
			return false, fmt.Errorf("%w: %s is %s, not %s", ErrWrongState, id, p.State, StateApproved)
		}
		// Error texts quote proxy URLs; the bucket is read back into chat.
		p.State, p.Reason, p.Result = StateFailed, redact.RedactText(reason), res
		return true, nil
	})
	if err != nil {
		return p, fmt.Errorf("approval: mark failed: %w", err)
	}
	return p, s.record(ctx, p, audit.KindFailed, p.DecidedBy, now, func(r *audit.Record) {
		r.Summary, _ = describe(p.Request)
		r.Reason = reason
		if res != nil {
			r.Result, r.Diff = string(res.Outcome)+": "+res.Summary, res.Diff
		}
	})
}

// MarkRolledBack records that the executed proposal id was undone by
// userID with res (the rollback's result). ErrWrongState unless executed.
func (s *Store) MarkRolledBack(ctx context.Context, id, userID string, res actions.Result) (Proposal, error) {
	now := s.now()
	p, err := s.update(ctx, id, func(p *Proposal) (bool, error) {
		if p.State != StateExecuted {
			return false, fmt.Errorf("%w: %s is %s, not %s", ErrWrongState, id, p.State, StateExecuted)
		}
		// Result keeps the original execution (and its Undo); the
		// rollback's own result goes to the audit trail.
		p.State, p.RolledBackBy, p.RolledBackAt = StateRolledBack, userID, now.UTC()
		return true, nil
	})
	if err != nil {
		return p, fmt.Errorf("approval: mark rolled back: %w", err)
	}
	return p, s.record(ctx, p, audit.KindRolledBack, userID, now, func(r *audit.Record) {
		r.Summary, r.Diff, r.Result = res.Summary, res.Diff, string(res.Outcome)
	})
}

// authorize checks userID against the policy, fail-closed.
func (s *Store) authorize(ctx context.Context, userID string) error {
	if userID == "" {
		return ErrNotApprover
	}
	if slices.Contains(s.policy.Approvers, userID) {
		return nil
	}
	var errs []error
	for _, g := range s.policy.ApproverGroups {
		members, err := s.groups.GroupMembers(ctx, g)
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

// record audits a transition of p. The record ID is derived from the
// proposal and the transition: each transition happens once, so a retried
// append (here or by the caller) is de-duplicated.
func (s *Store) record(ctx context.Context, p Proposal, kind audit.Kind, actor string, at time.Time, fill func(*audit.Record)) error {
	r := audit.Record{
		ID: p.ID + "." + string(kind), Time: at, Actor: actor, Kind: kind,
		ActionID: p.ID, Cluster: p.Request.Cluster.String(), Source: p.Source,
	}
	if fill != nil {
		fill(&r)
	}
	return s.append(ctx, r)
}

// refused audits a refused decision and returns cause, joined with the
// audit failure if the record could not be written.
func (s *Store) refused(ctx context.Context, verb, id, userID string, at time.Time, p Proposal, cause error) error {
	r := audit.Record{
		ID: audit.NewID(), Time: at, Actor: userID, Kind: audit.KindRefused,
		ActionID: id, Summary: verb + " refused", Reason: cause.Error(),
	}
	if p.ID != "" {
		r.Cluster, r.Source = p.Request.Cluster.String(), p.Source
	}
	if !idPattern.MatchString(id) {
		// Whatever was sent is kept, but only as (redacted) text.
		r.ActionID, r.Reason = "", fmt.Sprintf("%s (action id %q)", cause, id)
	}
	err := fmt.Errorf("approval: %s %s: %w", verb, id, cause)
	if aerr := s.append(ctx, r); aerr != nil {
		return errors.Join(err, aerr)
	}
	return err
}

func (s *Store) append(ctx context.Context, r audit.Record) error {
	var err error
	for attempt := range auditAttempts {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return fmt.Errorf("%w: %s: %w", ErrAudit, r.ID, errors.Join(err, ctx.Err()))
			case <-time.After(time.Duration(attempt) * 100 * time.Millisecond):
			}
		}
		if err = s.audit.Append(ctx, r); err == nil || errors.Is(err, audit.ErrInvalid) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrAudit, r.ID, err)
	}
	return nil
}

// describe renders a request for people: a one-line summary and, for a
// noProxy patch, the change as a diff.
func describe(req actions.Request) (summary, diff string) {
	switch {
	case req.Type == actions.TypeNoProxyPatch && req.NoProxy != nil:
		target := req.NoProxy.Target
		if target == "" {
			target = actions.TargetHostedCluster
		}
		summary = fmt.Sprintf("add %s to the noProxy of %s %s", strings.Join(req.NoProxy.Add, ", "), target, req.Cluster)
		after := strings.Join(req.NoProxy.Add, ",")
		if req.NoProxy.Expected != "" {
			after = req.NoProxy.Expected + "," + after
		}
		diff = fmt.Sprintf("- noProxy: %s\n+ noProxy: %s", req.NoProxy.Expected, after)
	case req.Type == actions.TypeExposeNodePort && req.Expose != nil:
		ports := "all ports"
		if len(req.Expose.Ports) > 0 {
			ps := make([]string, len(req.Expose.Ports))
			for i, p := range req.Expose.Ports {
				ps[i] = fmt.Sprint(p.Port)
			}
			ports = "ports " + strings.Join(ps, ", ")
		}
		summary = fmt.Sprintf("expose Service %s/%s (%s) of %s on NodePorts", req.Expose.Namespace, req.Expose.Service, ports, req.Cluster)
	case req.Type == actions.TypeRollback && req.Rollback != nil:
		summary = fmt.Sprintf("roll back %s (%s) on %s", req.Rollback.Undo.ActionID, req.Rollback.Undo.Type, req.Cluster)
	default:
		summary = fmt.Sprintf("%s on %s", req.Type, req.Cluster)
	}
	return summary, diff
}

// maxListed bounds how many proposals Exposures reads from the bucket; a
// bucket holding more (90 days of proposals at an unusual rate) gives a
// partial answer and ErrTruncated. A variable for tests.
var maxListed = 10000

// ErrTruncated: Exposures stopped after reading its bound of proposals; the answer it
// returns with this error is partial.
var ErrTruncated = errors.New("proposal list truncated")

// Exposures returns the NodePort exposures in place: the executed expose
// proposals that have not been rolled back, oldest execution first. A
// proposal still marked executed but undone by an executed rollback (whose
// marking of the original failed) is left out too. It reads at most
// maxListed (10000) proposals (ErrTruncated, with the exposures found so far).
func (s *Store) Exposures(ctx context.Context) ([]Proposal, error) {
	var exposed []Proposal
	undone := map[string]bool{}
	err := s.scan(ctx, func(p Proposal) {
		switch {
		case p.State != StateExecuted:
		case p.Request.Type == actions.TypeExposeNodePort && p.Request.Expose != nil:
			exposed = append(exposed, p)
		case p.Request.Type == actions.TypeRollback && p.Request.Rollback != nil:
			undone[p.Request.Rollback.Undo.ActionID] = true
		}
	})
	exposed = slices.DeleteFunc(exposed, func(p Proposal) bool { return undone[p.ID] })
	slices.SortFunc(exposed, func(a, b Proposal) int {
		if c := a.Executed().Compare(b.Executed()); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	if err != nil {
		return exposed, fmt.Errorf("approval: exposures: %w", err)
	}
	return exposed, nil
}

// Approved returns the proposals approved but without a recorded outcome
// yet: their requests are queued for (or running in) the agent, or were
// never sent because the bot stopped right after the approval. Bounded
// like Exposures.
func (s *Store) Approved(ctx context.Context) ([]Proposal, error) {
	var out []Proposal
	err := s.scan(ctx, func(p Proposal) {
		if p.State == StateApproved {
			out = append(out, p)
		}
	})
	if err != nil {
		return out, fmt.Errorf("approval: approved proposals: %w", err)
	}
	return out, nil
}

// scan calls f with every stored proposal, reading at most maxListed
// (ErrTruncated, after calling f with those read).
func (s *Store) scan(ctx context.Context, f func(Proposal)) error {
	w, err := s.kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("list proposals: %w", err)
	}
	defer func() { _ = w.Stop() }()
	var errs []error
	for n := 0; ; {
		select {
		case <-ctx.Done():
			return fmt.Errorf("list proposals: %w", ctx.Err())
		case e, ok := <-w.Updates():
			if !ok || e == nil {
				return errors.Join(errs...) // nil marks the end of the current values
			}
			if n++; n > maxListed {
				return errors.Join(append(errs, fmt.Errorf("%w: read %d proposals", ErrTruncated, maxListed))...)
			}
			var p Proposal
			if err := json.Unmarshal(e.Value(), &p); err != nil {
				errs = append(errs, fmt.Errorf("decode proposal %s: %w", e.Key(), err))
				continue
			}
			p.Revision = e.Revision()
			f(p)
		}
	}
}
