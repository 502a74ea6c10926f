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
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bus"
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

type proposeOptions struct {
	source string
	cause  *Cause
}

// ProposeOption configures Propose.
type ProposeOption func(*proposeOptions)

// ForSource names the management cluster whose agent is to execute the
// request; the dispatcher routes on it and audit records carry it.
func ForSource(source string) ProposeOption {
	return func(o *proposeOptions) { o.source = source }
}

// ForDiagnosis records the diagnosis a fix is proposed for: the incident
// it heals keeps it as its headline while the fix rolls out, and names it
// when resolved. It is what the bot showed, not part of the change.
func ForDiagnosis(rule, title, summary string) ProposeOption {
	return func(o *proposeOptions) { o.cause = &Cause{Rule: rule, Title: title, Summary: summary} }
}

// Propose stores req as a pending proposal by requestedBy and audits it.
// An empty req.ID gets a fresh one (NewID); req.RequestedBy is set to
// requestedBy, the authenticated user, whatever the caller put there. The
// request must pass actions' Validate: an approver must never be shown
// something the executor would refuse.
func (s *Store) Propose(ctx context.Context, req actions.Change, requestedBy string, opts ...ProposeOption) (Proposal, error) {
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
		CreatedAt: now, ExpiresAt: now.Add(s.policy.TTL), State: StatePending, Cause: o.cause,
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
		if p.Cause != nil {
			note, err := json.Marshal(p.Cause)
			if err != nil {
				return Proposal{}, fmt.Errorf("approval: propose: %w", err)
			}
			cs, err := s.sealer.SealNote(p.ID, note)
			if err != nil {
				return Proposal{}, fmt.Errorf("approval: propose: %w", err)
			}
			p.CauseSeal = &cs
		}
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
