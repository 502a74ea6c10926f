package approval

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nkeys"

	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bot/checkpoint"
	"github.com/hcpbot/hcpbot/bot/fleet/wire"
	"github.com/hcpbot/hcpbot/bot/silence"
	"github.com/hcpbot/hcpbot/seal"
)

// What the bot signs, each under its own context string, so that a
// signature made for one can never pass for another: a proposal's terms,
// a person's decision, the order to run an approved proposal, and (for
// the audit package) a trail record.
const (
	proposalContext = "hcpbot-proposal-v2\n"
	decisionContext = "hcpbot-decision-v1\n"
	requestContext  = "hcpbot-request-v2\n"
)

// Signer is the bot's ed25519 key (an nkeys user seed, as `hcpbot keygen`
// writes). Only the bot holds it; agents trust its public key.
type Signer struct {
	kp  nkeys.KeyPair
	pub string
}

// NewSigner reads a user seed ("SU…").
func NewSigner(seed []byte) (*Signer, error) {
	kp, err := nkeys.FromSeed(bytes.TrimSpace(seed))
	if err != nil {
		// nkeys never quotes the seed, but say less anyway.
		return nil, errors.New("approval: signing key: not an nkeys seed")
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, fmt.Errorf("approval: signing key: %w", err)
	}
	if !nkeys.IsValidPublicUserKey(pub) {
		return nil, errors.New("approval: signing key: want a user seed (SU…); create one with `hcpbot keygen`")
	}
	return &Signer{kp: kp, pub: pub}, nil
}

// NewEphemeralSigner makes a key for one process (`hcpbot all`, the demo),
// whose agent trusts PublicKey.
func NewEphemeralSigner() (*Signer, error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, fmt.Errorf("approval: create signing key: %w", err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, fmt.Errorf("approval: signing key: %w", err)
	}
	return &Signer{kp: kp, pub: pub}, nil
}

// PublicKey is what agents list as trusted ("U…").
func (s *Signer) PublicKey() string { return s.pub }

// ForAudit is the key as the audit trail signs its records with it: it
// signs only what starts with audit.SigningContext, so no record can pass
// for a proposal, a decision or a request.
func (s *Signer) ForAudit() audit.Signer {
	return s.forContext(audit.SigningContext, "the audit signer signs audit records only")
}

// ForCheckpoints is the key as the bot seals its checkpoints with it
// (package bot/checkpoint): it signs only what starts with
// checkpoint.SigningContext, so no checkpoint passes for a proposal, a
// decision, a request or an audit record, nor they for it.
func (s *Signer) ForCheckpoints() checkpoint.Signer {
	return s.forContext(checkpoint.SigningContext, "the checkpoint signer signs checkpoints only")
}

// ForFleet is the key as the bot groups seal their answers to each other
// with it (package bot/fleet): it signs only what starts with
// wire.SigningContext, so no fleet answer passes for a checkpoint, a
// proposal, a decision, a request or an audit record, nor they for it.
func (s *Signer) ForFleet() wire.Signer {
	return s.forContext(wire.SigningContext, "the fleet signer signs fleet answers only")
}

// ForSilences is the key as the bot seals its silences with it (package
// bot/silence): it signs only what starts with silence.SigningContext, so
// no silence passes for a proposal, a decision, a request, an audit
// record or a checkpoint, nor they for it.
func (s *Signer) ForSilences() silence.Signer {
	return s.forContext(silence.SigningContext, "the silence signer signs silences only")
}

// forContext is the key for one use: it signs only what starts with that
// use's context string.
func (s *Signer) forContext(context, refusal string) seal.Signer {
	return seal.ForContext(s.kp, s.pub, context, "approval: "+refusal)
}

// Seal is a signed value: Body is the JSON the signature covers, kept as
// bytes so that what is verified is exactly what was signed.
type Seal struct {
	Body []byte `json:"body"`
	Key  string `json:"key"`
	Sig  []byte `json:"sig"`
}

// Sentinel errors of seals.
var (
	// ErrForged: a seal does not verify — its signature is wrong, or it is
	// bound to another proposal or decision than the one it is stored
	// with. Whoever wrote it lacks the bot's key.
	ErrForged = errors.New("seal does not verify")
	// ErrUntrustedKey: a seal made with a key not trusted here (a key the
	// bot had before a rotation, or another installation's).
	ErrUntrustedKey = errors.New("sealed by a key that is not trusted")
)

func (s *Signer) seal(context string, v any) (Seal, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return Seal{}, fmt.Errorf("approval: seal: %w", err)
	}
	sig, err := seal.Sign(s.forContext(context, "a seal signs under its own context only"), context, body)
	if err != nil {
		return Seal{}, fmt.Errorf("approval: seal: %w", err)
	}
	return Seal{Body: body, Key: s.pub, Sig: sig}, nil
}

// sentinels are the errors of seals for what seal.Verify finds.
var sentinels = seal.Sentinels{Forged: ErrForged, UntrustedKey: ErrUntrustedKey}

// open verifies s under context with one of keys and decodes its body
// into v, strictly: a field the signer did not write could mean something
// nobody approved.
func (s Seal) open(context string, keys []string, v any) error {
	if err := seal.Verify(keys, s.Key, context, s.Body, s.Sig); err != nil {
		return fmt.Errorf("%w: %w", sentinels.Of(err), err)
	}
	if err := decodeStrict(s.Body, v); err != nil {
		return fmt.Errorf("%w: signed body does not decode: %w", ErrForged, err)
	}
	return nil
}

// selfSigned reports whether s carries a valid signature by its own key,
// trusted or not: a record sealed throughout by one valid but untrusted
// key was made by a bot with another key (stale), not forged.
func (s Seal) selfSigned(context string) bool {
	return seal.Verify([]string{s.Key}, s.Key, context, s.Body, s.Sig) == nil
}

// digest names a seal: the hex SHA-256 of its context, body and
// signature. Decisions chain on it and requests point at it.
func (s Seal) digest(context string) string {
	h := sha256.New()
	h.Write([]byte(context))
	h.Write(s.Body)
	h.Write([]byte{0})
	h.Write(s.Sig)
	return hex.EncodeToString(h.Sum(nil))
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

func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
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
