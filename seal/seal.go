// Package seal is how hcpbot signs a record with the bot's action-signing
// key (an nkeys ed25519 user key) and verifies it: the one place for the
// steps every sealed record shares. Its users say what they seal and why:
// approval (proposals, decisions, the orders to run them), audit (trail
// records), bot/checkpoint (the bot's state), bot/silence (silences) and
// bot/fleet/wire (the bot groups' answers to each other).
//
// Every use of the key has its own context string, which starts what is
// signed: a signature made for one use can never pass for another. Sign
// prepends it, Verify expects it, and ForContext hands out the key for
// one use only (it refuses to sign anything else), so that the holder of
// one use's signer cannot make another use's signatures either.
//
// It imports nothing of hcpbot: approval, audit and the bot's stores
// import it without importing each other.
package seal

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nkeys"
)

// Signer is the key as one use sees it.
type Signer interface {
	// PublicKey is the nkeys public key ("U…") the seal verifies with.
	PublicKey() string
	// Sign returns the ed25519 signature of input, as nkeys makes it.
	// input starts with the use's context string: a Signer shared with
	// other uses of the key may refuse anything else (ForContext).
	Sign(input []byte) ([]byte, error)
}

// What Verify finds. Each user wraps them in its own sentinels too
// (Sentinels), which its callers match.
var (
	// ErrUnsealed: no key or no signature.
	ErrUnsealed = errors.New("unsigned")
	// ErrForged: the signature does not verify with the key named, or the
	// key is not a public nkey: whoever sealed it lacks that key.
	ErrForged = errors.New("bad signature")
	// ErrUntrustedKey: sealed by a key not trusted here (another
	// installation's, or one rotated out of approvals.trustedKeys).
	ErrUntrustedKey = errors.New("key not trusted")
)

// errContext: a context string not of the one form that keeps uses
// apart. A use's context is one line, its name, ended by its only
// newline: then the first line of what is signed names its use, and no
// use's input can start like another's. An empty context, or one without
// that newline, would let a signature for one use ("…-v1\n…") pass for
// another ("…-v10\n…", or anything at all).
var errContext = errors.New("seal: a context string is one line ended by a newline")

// checkContext refuses a context string that would not keep its use apart.
func checkContext(context string) error {
	if i := strings.IndexByte(context, '\n'); i < 1 || i != len(context)-1 {
		return fmt.Errorf("%w: %q", errContext, context)
	}
	return nil
}

// Sign signs body for the use whose context string is context: what is
// signed is context, then body.
func Sign(s Signer, context string, body []byte) ([]byte, error) {
	if err := checkContext(context); err != nil {
		return nil, err
	}
	return s.Sign(append([]byte(context), body...))
}

// Verify checks that sig is key's signature of context and body, and that
// key is one of trusted: nil, or an error that is ErrUnsealed,
// ErrUntrustedKey or ErrForged. Nothing of a sealed record is to be
// believed before it returns nil.
func Verify(trusted []string, key, context string, body, sig []byte) error {
	if err := checkContext(context); err != nil {
		// The verifier's own mistake: what it checks would bind no use,
		// so nothing verifies under it.
		return fmt.Errorf("%w: %w", ErrForged, err)
	}
	switch {
	case len(sig) == 0 || key == "":
		return ErrUnsealed
	case !slices.Contains(trusted, key):
		// Checked before the signature: an untrusted key's valid
		// signature proves nothing here either way, and whoever holds
		// that key could seal anything.
		return fmt.Errorf("%w: %.12s…", ErrUntrustedKey, key)
	}
	kp, err := nkeys.FromPublicKey(key)
	if err != nil {
		return fmt.Errorf("%w: key: %w", ErrForged, err)
	}
	if err := kp.Verify(append([]byte(context), body...), sig); err != nil {
		return ErrForged
	}
	return nil
}

// Sentinels are one user's own errors for what Verify finds, which that
// user's callers match with errors.Is.
type Sentinels struct {
	// Unsealed is for ErrUnsealed; nil: Forged is.
	Unsealed error
	// Forged is for ErrForged.
	Forged error
	// UntrustedKey is for ErrUntrustedKey.
	UntrustedKey error
}

// Of is the user's sentinel for err, an error of Verify: the user wraps
// both, fmt.Errorf("%w: …: %w", s.Of(err), err). It is never nil: a
// sentinel the user left out is Forged, and a missing Forged is
// ErrForged, so that what does not verify never reads as benign.
func (s Sentinels) Of(err error) error {
	forged := cmp.Or(s.Forged, ErrForged)
	switch {
	case errors.Is(err, ErrUntrustedKey):
		return cmp.Or(s.UntrustedKey, forged)
	case errors.Is(err, ErrUnsealed):
		return cmp.Or(s.Unsealed, forged)
	}
	return forged
}

// ForContext is the key pair kp, whose public key is pub, for the use
// whose context string is context: it signs only what starts with
// context, and otherwise fails with refusal (which says which use it is).
func ForContext(kp nkeys.KeyPair, pub, context, refusal string) Signer {
	return contextSigner{kp: kp, pub: pub, context: context, refusal: refusal}
}

type contextSigner struct {
	kp                    nkeys.KeyPair
	pub, context, refusal string
}

func (c contextSigner) PublicKey() string { return c.pub }

func (c contextSigner) Sign(input []byte) ([]byte, error) {
	// A malformed context (empty, or without its newline) would make a
	// key for every use, or for its use and its longer-named siblings.
	if checkContext(c.context) != nil || !bytes.HasPrefix(input, []byte(c.context)) {
		return nil, errors.New(c.refusal)
	}
	return c.kp.Sign(input)
}
