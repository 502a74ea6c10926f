package actions

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nkeys"
)

// ErrUnauthorized: the agent could not verify that the request was
// approved (signature, approval record, four-eyes, freshness). Nothing
// was changed; the request is audited as refused.
var ErrUnauthorized = errors.New("action request not authorized")

// CodeUnauthorized is the Reply code of ErrUnauthorized.
const CodeUnauthorized Code = "unauthorized"

// signingContext separates these signatures from anything else the key
// might ever sign.
const signingContext = "hcpbot-action-request-v1\n"

// Freshness bounds for a sealed request, judged by the agent's clock.
const (
	// DefaultMaxAge is how long after sealing a request is accepted: the
	// bot seals it right after the approval and sends it at once, so
	// anything older is a replay.
	DefaultMaxAge = 10 * time.Minute
	// maxClockSkew tolerates a bot clock ahead of the agent's.
	maxClockSkew = time.Minute
)

// SystemRequesterPrefix marks requesters that are not people (e.g. the
// diagnosis that proposed a fix). Under four-eyes they do not count as
// one of the two people.
const SystemRequesterPrefix = "hcpbot-"

// Approval is what the bot attests, in a sealed request, about the
// proposal it executes. The agent checks it against the approval store.
type Approval struct {
	ProposalID  string    `json:"proposalId"`
	Source      string    `json:"source"`
	RequestedBy string    `json:"requestedBy"`
	ApprovedBy  string    `json:"approvedBy"`
	FourEyes    bool      `json:"fourEyes"`
	CreatedAt   time.Time `json:"createdAt"`
	ApprovedAt  time.Time `json:"approvedAt"`
	ExpiresAt   time.Time `json:"expiresAt"`
	// RequestSHA256 is RequestDigest of the approved request.
	RequestSHA256 string `json:"requestSha256"`
}

// sealed is the signed content of an Envelope.
type sealed struct {
	Request  Change    `json:"request"`
	Approval Approval  `json:"approval"`
	IssuedAt time.Time `json:"issuedAt"`
	// Deadline is when the sender stops waiting for the answer: the
	// agent does not start later, and stops its work then, so that a
	// change never lands after the bot told the user it failed.
	Deadline time.Time `json:"deadline,omitzero"`
}

// Envelope is what travels on hcpbot.actions.<source>.request. The
// signature covers Payload as sent, so no canonical form is needed: the
// agent verifies the bytes, then decodes them.
type Envelope struct {
	Payload []byte `json:"payload"`
	Key     string `json:"key"`
	Sig     []byte `json:"sig"`
}

// RequestDigest identifies a request's content (hex SHA-256 of its JSON
// encoding; Go encodes a struct the same way every time).
func RequestDigest(req Change) (string, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return "", fmt.Errorf("encode request %s: %w", req.ID, err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// Signer seals approved requests with the bot's ed25519 key (an nkeys
// user seed, as `hcpbot keygen` writes).
type Signer struct {
	kp  nkeys.KeyPair
	pub string
}

// NewSigner reads a user seed ("SU…").
func NewSigner(seed []byte) (*Signer, error) {
	kp, err := nkeys.FromSeed(bytes.TrimSpace(seed))
	if err != nil {
		// The error of nkeys never quotes the seed, but say less anyway.
		return nil, errors.New("actions: signing key: not an nkeys seed")
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, fmt.Errorf("actions: signing key: %w", err)
	}
	if !nkeys.IsValidPublicUserKey(pub) {
		return nil, errors.New("actions: signing key: want a user seed (SU…); create one with `hcpbot keygen`")
	}
	return &Signer{kp: kp, pub: pub}, nil
}

// NewEphemeralSigner makes a key for one process (hcpbot all, the demo),
// whose agent trusts PublicKey.
func NewEphemeralSigner() (*Signer, error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, fmt.Errorf("actions: create signing key: %w", err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, fmt.Errorf("actions: signing key: %w", err)
	}
	return &Signer{kp: kp, pub: pub}, nil
}

// PublicKey is what agents list as trusted ("U…").
func (s *Signer) PublicKey() string { return s.pub }

// Seal encodes req with the approval a and signs it, issued at now.
func (s *Signer) Seal(req Change, a Approval, now time.Time) ([]byte, error) {
	return s.SealUntil(req, a, now, time.Time{})
}

// SealUntil is Seal for a sender that waits for the answer until
// deadline (zero: no deadline but the agent's own ExecuteTimeout).
func (s *Signer) SealUntil(req Change, a Approval, now, deadline time.Time) ([]byte, error) {
	if !deadline.IsZero() {
		deadline = deadline.UTC()
	}
	payload, err := json.Marshal(sealed{Request: req, Approval: a, IssuedAt: now.UTC(), Deadline: deadline})
	if err != nil {
		return nil, fmt.Errorf("actions: seal %s: %w", req.ID, err)
	}
	sig, err := s.kp.Sign(signingInput(payload))
	if err != nil {
		return nil, fmt.Errorf("actions: sign %s: %w", req.ID, err)
	}
	data, err := json.Marshal(Envelope{Payload: payload, Key: s.pub, Sig: sig})
	if err != nil {
		return nil, fmt.Errorf("actions: seal %s: %w", req.ID, err)
	}
	return data, nil
}

func signingInput(payload []byte) []byte {
	return append([]byte(signingContext), payload...)
}

// proposalContext separates proposal seals from request signatures.
const proposalContext = "hcpbot-proposal-v1\n"

// ProposalClaims are the fields of a proposal fixed when it is made. The
// bot seals them, so that whoever can write the approval store but lacks
// the signing key cannot change what was proposed, for where, or by whom
// (which would let one person be both requester and approver).
type ProposalClaims struct {
	ID            string    `json:"id"`
	Source        string    `json:"source"`
	RequestedBy   string    `json:"requestedBy"`
	FourEyes      bool      `json:"fourEyes"`
	CreatedAt     time.Time `json:"createdAt"`
	ExpiresAt     time.Time `json:"expiresAt"`
	RequestSHA256 string    `json:"requestSha256"`
}

// ProposalSeal is the bot's signature over a proposal's claims, stored
// with the proposal.
type ProposalSeal struct {
	Key string `json:"key"`
	Sig []byte `json:"sig"`
}

// ErrUnsealed: a proposal record without a valid seal by a trusted key.
var ErrUnsealed = errors.New("proposal record not sealed by a trusted key")

// SealProposal signs c.
func (s *Signer) SealProposal(c ProposalClaims) (ProposalSeal, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return ProposalSeal{}, fmt.Errorf("actions: seal proposal %s: %w", c.ID, err)
	}
	sig, err := s.kp.Sign(append([]byte(proposalContext), b...))
	if err != nil {
		return ProposalSeal{}, fmt.Errorf("actions: seal proposal %s: %w", c.ID, err)
	}
	return ProposalSeal{Key: s.pub, Sig: sig}, nil
}

// VerifyProposal checks that seal is a signature over c by one of keys;
// the error wraps ErrUnsealed.
func VerifyProposal(keys []string, c ProposalClaims, seal *ProposalSeal) error {
	switch {
	case seal == nil || len(seal.Sig) == 0:
		return fmt.Errorf("%w: proposal %s carries no seal", ErrUnsealed, c.ID)
	case !slices.Contains(keys, seal.Key):
		return fmt.Errorf("%w: proposal %s sealed by untrusted key %s", ErrUnsealed, c.ID, shortKey(seal.Key))
	}
	kp, err := nkeys.FromPublicKey(seal.Key)
	if err != nil {
		return fmt.Errorf("%w: proposal %s: %w", ErrUnsealed, c.ID, err)
	}
	b, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("%w: proposal %s: %w", ErrUnsealed, c.ID, err)
	}
	if err := kp.Verify(append([]byte(proposalContext), b...), seal.Sig); err != nil {
		return fmt.Errorf("%w: proposal %s was changed after it was made (requester, request, times or cluster)", ErrUnsealed, c.ID)
	}
	return nil
}

// noteContext separates the signatures of what the bot attaches to a
// proposal for itself (the diagnosis it fixes) from requests and claims.
const noteContext = "hcpbot-proposal-note-v1\n"

// SealNote signs data the bot attaches to proposal id for its own later
// reading; the agent never reads notes.
func (s *Signer) SealNote(id string, data []byte) (ProposalSeal, error) {
	sig, err := s.kp.Sign(noteMessage(id, data))
	if err != nil {
		return ProposalSeal{}, fmt.Errorf("actions: seal note of %s: %w", id, err)
	}
	return ProposalSeal{Key: s.pub, Sig: sig}, nil
}

// VerifyNote checks that seal is a signature over proposal id's note data
// by one of keys; the error wraps ErrUnsealed.
func VerifyNote(keys []string, id string, data []byte, seal *ProposalSeal) error {
	if seal == nil || len(seal.Sig) == 0 || !slices.Contains(keys, seal.Key) {
		return fmt.Errorf("%w: note of proposal %s", ErrUnsealed, id)
	}
	kp, err := nkeys.FromPublicKey(seal.Key)
	if err != nil {
		return fmt.Errorf("%w: note of proposal %s: %w", ErrUnsealed, id, err)
	}
	if err := kp.Verify(noteMessage(id, data), seal.Sig); err != nil {
		return fmt.Errorf("%w: note of proposal %s was changed after it was made", ErrUnsealed, id)
	}
	return nil
}

func noteMessage(id string, data []byte) []byte {
	return append([]byte(noteContext+id+"\n"), data...)
}

// ApprovalRecord is the approval store's view of a proposal, as the agent
// reads it.
type ApprovalRecord struct {
	ID          string
	State       string
	Source      string
	RequestedBy string
	DecidedBy   string
	DecidedAt   time.Time
	CreatedAt   time.Time
	ExpiresAt   time.Time
	FourEyes    bool
	Request     Change
	// Seal is the bot's seal of the proposal's claims (ProposalClaims).
	Seal *ProposalSeal
}

// Claims are the sealed fields of the record.
func (r ApprovalRecord) Claims() (ProposalClaims, error) {
	digest, err := RequestDigest(r.Request)
	if err != nil {
		return ProposalClaims{}, err
	}
	return ProposalClaims{ID: r.ID, Source: r.Source, RequestedBy: r.RequestedBy, FourEyes: r.FourEyes,
		CreatedAt: r.CreatedAt, ExpiresAt: r.ExpiresAt, RequestSHA256: digest}, nil
}

// The states of ApprovalRecord.State the verifier tells apart.
const (
	stateApproved = "approved"
	statePending  = "pending"
)

// ErrNoApproval: the approval store has no proposal with that id.
var ErrNoApproval = errors.New("no such proposal in the approval store")

// ApprovalLookup reads proposals from the approval store (read-only).
type ApprovalLookup interface {
	LookupApproval(ctx context.Context, id string) (ApprovalRecord, error)
}

// Verifier is the agent's check that a request was approved: a trusted
// signature over the request and its approval, AND the approval store
// agreeing that the proposal is approved, unexpired and not yet executed,
// for exactly this content. Either alone is not enough: the signature
// keeps out whoever can publish on NATS, the store keeps out a replay of
// a request that was signed once.
type Verifier struct {
	// Keys are the trusted public keys ("U…"); two during a rotation.
	Keys []string
	// Store is the approval store. Required.
	Store ApprovalLookup
	// Source is this agent's management cluster: requests for others are
	// refused.
	Source string
	// FourEyes makes the agent require two distinct people (a person as
	// requester and another as approver) whatever the bot's policy says.
	FourEyes bool
	// Approvers, if set, are the only users whose approval is accepted.
	// Approver groups are resolved by the bot; an agent that lists users
	// here accepts no one else.
	Approvers []string
	// MaxAge bounds the age of a sealed request; 0 means DefaultMaxAge.
	MaxAge time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Verified is a request the Verifier accepted, with what it attests.
type Verified struct {
	Request  Change
	Approval Approval
	Key      string
	// Deadline is when the sender stops waiting; zero if it set none.
	Deadline time.Time

	// checked is Request as Open validated it (zero from Peek): what
	// Serve executes.
	checked checked
}

// CheckKeys validates a list of trusted public keys.
func CheckKeys(keys []string) error {
	if len(keys) == 0 {
		return errors.New("no trusted action keys")
	}
	for _, k := range keys {
		if !nkeys.IsValidPublicUserKey(k) {
			return fmt.Errorf("trusted action key %q is not an nkeys user public key (U…)", k)
		}
	}
	return nil
}

// Open verifies data, an encoded Envelope, and returns the request it
// carries. Every refusal wraps ErrUnauthorized (or ErrInvalid for what
// is not an envelope at all); v.Store errors other than ErrNoApproval wrap
// ErrInternal.
func (v *Verifier) Open(ctx context.Context, data []byte) (Verified, error) {
	out, s, err := v.peek(data)
	if err != nil {
		return out, err
	}
	c, err := check(s.Request)
	if err != nil {
		return out, err
	}
	if err := v.checkApproval(s); err != nil {
		return out, fmt.Errorf("%w: %w", ErrUnauthorized, err)
	}
	rec, err := v.Store.LookupApproval(ctx, s.Request.ID)
	switch {
	case errors.Is(err, ErrNoApproval):
		return out, fmt.Errorf("%w: proposal %s is not in the approval store", ErrUnauthorized, s.Request.ID)
	case err != nil:
		return out, fmt.Errorf("%w: read proposal %s: %w", ErrInternal, s.Request.ID, err)
	}
	if err := matchRecord(s.Approval, rec); err != nil {
		return out, fmt.Errorf("%w: %w", ErrUnauthorized, err)
	}
	claims, err := rec.Claims()
	if err != nil {
		return out, err
	}
	if err := VerifyProposal(v.Keys, claims, rec.Seal); err != nil {
		return out, fmt.Errorf("%w: %w", ErrUnauthorized, err)
	}
	out.checked = c
	return out, nil
}

// Peek checks only that data is an envelope signed by a trusted key and
// returns what it says, without judging the approval: the agent uses it
// to find the action id of a redelivered request, whose stored result
// then answers it. Nothing may be executed on Peek's word alone; Open
// decides that.
func (v *Verifier) Peek(data []byte) (Verified, error) {
	out, _, err := v.peek(data)
	return out, err
}

func (v *Verifier) peek(data []byte) (Verified, sealed, error) {
	var env Envelope
	if err := decodeStrict(data, &env); err != nil {
		return Verified{}, sealed{}, fmt.Errorf("%w: decode envelope: %w", ErrInvalid, err)
	}
	if len(env.Payload) == 0 || len(env.Sig) == 0 || env.Key == "" {
		return Verified{}, sealed{}, fmt.Errorf("%w: unsigned request", ErrUnauthorized)
	}
	if len(v.Keys) == 0 {
		return Verified{}, sealed{}, fmt.Errorf("%w: this agent trusts no signing key (agent.trustedKeys / --trusted-keys)", ErrUnauthorized)
	}
	if !slices.Contains(v.Keys, env.Key) {
		return Verified{}, sealed{}, fmt.Errorf("%w: signed by untrusted key %s", ErrUnauthorized, shortKey(env.Key))
	}
	kp, err := nkeys.FromPublicKey(env.Key)
	if err != nil {
		return Verified{}, sealed{}, fmt.Errorf("%w: key %s: %w", ErrUnauthorized, shortKey(env.Key), err)
	}
	if err := kp.Verify(signingInput(env.Payload), env.Sig); err != nil {
		return Verified{}, sealed{}, fmt.Errorf("%w: bad signature", ErrUnauthorized)
	}
	var s sealed
	if err := decodeStrict(env.Payload, &s); err != nil {
		// Signed garbage: the bot would never seal it.
		return Verified{}, sealed{}, fmt.Errorf("%w: signed payload does not decode: %w", ErrInvalid, err)
	}
	return Verified{Request: s.Request, Approval: s.Approval, Key: env.Key, Deadline: s.Deadline}, s, nil
}

// checkApproval judges what the signed approval says on its own.
func (v *Verifier) checkApproval(s sealed) error {
	a := s.Approval
	now := time.Now()
	if v.Now != nil {
		now = v.Now()
	}
	maxAge := v.MaxAge
	if maxAge <= 0 {
		maxAge = DefaultMaxAge
	}
	digest, err := RequestDigest(s.Request)
	if err != nil {
		return err
	}
	switch {
	case a.ProposalID != s.Request.ID:
		return fmt.Errorf("approval of %s attached to request %s", a.ProposalID, s.Request.ID)
	case a.Source != v.Source:
		return fmt.Errorf("approved for management cluster %q, this is %q", a.Source, v.Source)
	case a.RequestSHA256 != digest:
		return errors.New("request content differs from what was approved")
	case s.IssuedAt.After(now.Add(maxClockSkew)):
		return fmt.Errorf("sealed in the future (%s)", s.IssuedAt.UTC().Format(time.RFC3339))
	case now.Sub(s.IssuedAt) > maxAge:
		return fmt.Errorf("sealed %s ago, more than %s: a replay", now.Sub(s.IssuedAt).Round(time.Second), maxAge)
	case !s.Deadline.IsZero() && !now.Before(s.Deadline):
		return fmt.Errorf("arrived after its sender stopped waiting (%s)", s.Deadline.Format(time.RFC3339))
	case a.ApprovedBy == "":
		return errors.New("no approver")
	case !a.ExpiresAt.IsZero() && a.ApprovedAt.After(a.ExpiresAt):
		return errors.New("approved after the proposal expired")
	case v.FourEyes || a.FourEyes:
		if err := twoPeople(a.RequestedBy, a.ApprovedBy); err != nil {
			return err
		}
	}
	if len(v.Approvers) > 0 && !slices.Contains(v.Approvers, a.ApprovedBy) {
		return fmt.Errorf("%s is not an approver this agent accepts", a.ApprovedBy)
	}
	return nil
}

// twoPeople is the four-eyes rule: a person requested, another approved.
func twoPeople(requester, approver string) error {
	switch {
	case requester == "" || strings.HasPrefix(requester, SystemRequesterPrefix):
		return fmt.Errorf("four-eyes: requested by %q, not a person, and approved by %s alone", requester, approver)
	case requester == approver:
		return fmt.Errorf("four-eyes: %s requested and approved alone", approver)
	}
	return nil
}

// matchRecord checks the signed approval against the approval store.
func matchRecord(a Approval, rec ApprovalRecord) error {
	switch rec.State {
	case stateApproved:
	case statePending:
		return fmt.Errorf("proposal %s is not approved", rec.ID)
	default:
		return fmt.Errorf("proposal %s is %s, not approved", rec.ID, rec.State)
	}
	digest, err := RequestDigest(rec.Request)
	if err != nil {
		return err
	}
	switch {
	case digest != a.RequestSHA256:
		return fmt.Errorf("proposal %s holds another request than the signed one", rec.ID)
	case rec.Source != a.Source:
		return fmt.Errorf("proposal %s is for management cluster %q", rec.ID, rec.Source)
	case rec.RequestedBy != a.RequestedBy || rec.DecidedBy != a.ApprovedBy:
		return fmt.Errorf("proposal %s was requested by %s and approved by %s, not as signed", rec.ID, rec.RequestedBy, rec.DecidedBy)
	case !rec.ExpiresAt.IsZero() && rec.DecidedAt.After(rec.ExpiresAt):
		return fmt.Errorf("proposal %s was approved after it expired", rec.ID)
	case rec.FourEyes || a.FourEyes:
		return twoPeople(rec.RequestedBy, rec.DecidedBy)
	}
	return nil
}

func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	// An unknown field could carry something the approver never saw.
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data")
	}
	return nil
}

// shortKey names a public key in messages without the whole of it.
func shortKey(k string) string {
	if len(k) > 12 {
		return k[:12] + "…"
	}
	return k
}
