package approval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hcpbot/hcpbot/actions"
)

// Attestation is what the bot signs about an approved proposal when it
// sends the request to the agent (actions.Signer.Seal).
func (p Proposal) Attestation() (actions.Approval, error) {
	digest, err := actions.RequestDigest(p.Request)
	if err != nil {
		return actions.Approval{}, err
	}
	return actions.Approval{
		ProposalID: p.ID, Source: p.Source, RequestedBy: p.RequestedBy, ApprovedBy: p.DecidedBy,
		FourEyes: p.FourEyes, CreatedAt: p.CreatedAt, ApprovedAt: p.DecidedAt, ExpiresAt: p.ExpiresAt,
		RequestSHA256: digest,
	}, nil
}

// Claims are the proposal's fields fixed when it was made, which its Seal
// covers.
func (p Proposal) Claims() (actions.ProposalClaims, error) { return p.Record().Claims() }

// Record is the proposal as the agent's verifier reads it.
func (p Proposal) Record() actions.ApprovalRecord {
	return actions.ApprovalRecord{
		ID: p.ID, State: string(p.State), Source: p.Source, RequestedBy: p.RequestedBy, DecidedBy: p.DecidedBy,
		DecidedAt: p.DecidedAt, CreatedAt: p.CreatedAt, ExpiresAt: p.ExpiresAt, FourEyes: p.FourEyes, Request: p.Request,
		Seal: p.Seal,
	}
}

// Lookup reads proposals for the agent, which checks every action request
// against the store before executing it. It only reads: the agent's NATS
// user may not write the bucket. It binds to the bucket on first use, so
// an agent started before the bot (which creates the bucket) works once
// the bot is up.
type Lookup struct {
	js jetstream.JetStream
	mu sync.Mutex
	kv jetstream.KeyValue
}

var _ actions.ApprovalLookup = (*Lookup)(nil)

// NewLookup returns a Lookup on js.
func NewLookup(js jetstream.JetStream) *Lookup { return &Lookup{js: js} }

// LookupApproval implements actions.ApprovalLookup.
func (l *Lookup) LookupApproval(ctx context.Context, id string) (actions.ApprovalRecord, error) {
	if !idPattern.MatchString(id) {
		return actions.ApprovalRecord{}, fmt.Errorf("%w: %q", actions.ErrNoApproval, id)
	}
	kv, err := l.bucket(ctx)
	if err != nil {
		return actions.ApprovalRecord{}, err
	}
	e, err := kv.Get(ctx, id)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrKeyDeleted):
		return actions.ApprovalRecord{}, fmt.Errorf("%w: %s", actions.ErrNoApproval, id)
	case err != nil:
		return actions.ApprovalRecord{}, fmt.Errorf("approval: read proposal %s: %w", id, err)
	}
	var p Proposal
	if err := json.Unmarshal(e.Value(), &p); err != nil {
		return actions.ApprovalRecord{}, fmt.Errorf("approval: decode proposal %s: %w", id, err)
	}
	return p.Record(), nil
}

func (l *Lookup) bucket(ctx context.Context) (jetstream.KeyValue, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.kv != nil {
		return l.kv, nil
	}
	kv, err := l.js.KeyValue(ctx, Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("%w: bucket %s does not exist yet (no bot has started)", actions.ErrNoApproval, Bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("approval: bind bucket %s: %w", Bucket, err)
	}
	l.kv = kv
	return kv, nil
}
