package silence

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/hcpbot/hcpbot/seal"
)

// SigningContext starts what a Signer signs: the silence's id (its key
// in Bucket), a newline and the silence's JSON follow.
const SigningContext = "hcpbot-silence-v1\n"

// Signer seals the silences a Store writes. The bot passes its
// action-signing key (approval.Signer.ForSilences), which signs only what
// starts with SigningContext.
type Signer = seal.Signer

// sealed is what a sealed silence's key holds: the silence's JSON as
// signed, the key and the signature. The bytes verified are the bytes
// decoded.
type sealed struct {
	Silence json.RawMessage `json:"silence"`
	Key     string          `json:"key"`
	Sig     []byte          `json:"sig"`
}

// signedBody is what the seal covers after SigningContext: the id binds
// the silence to its key in Bucket.
func signedBody(id string, body []byte) []byte {
	return append([]byte(id+"\n"), body...)
}

// sentinels are a sealing Store's errors for what seal.Verify finds.
var sentinels = seal.Sentinels{Unsealed: ErrUnsealed, Forged: ErrForged, UntrustedKey: ErrUntrustedKey}

// Seal is the value a sealing Store stores under sil.ID for sil. Tests
// use it to write a silence the bot's key vouches for.
func Seal(signer Signer, sil Silence) ([]byte, error) {
	body, err := json.Marshal(sil)
	if err != nil {
		return nil, fmt.Errorf("silence: encode %s: %w", sil.ID, err)
	}
	sig, err := seal.Sign(signer, SigningContext, signedBody(sil.ID, body))
	if err != nil {
		return nil, fmt.Errorf("silence: seal %s: %w", sil.ID, err)
	}
	return json.Marshal(sealed{Silence: body, Key: signer.PublicKey(), Sig: sig})
}

// maxRecord bounds the record a Store reads: a silence is well under 4
// KiB (a reason of 500 characters redacted), a larger value is nobody's.
const maxRecord = 16 << 10

// encode is what Add stores for sil: sealed when the Store has a signer.
func (s *Store) encode(sil Silence) ([]byte, error) {
	if s.signer != nil {
		return Seal(s.signer, sil)
	}
	data, err := json.Marshal(sil)
	if err != nil {
		return nil, fmt.Errorf("silence: encode %s: %w", sil.ID, err)
	}
	return data, nil
}

// open reads the record stored under key: its seal verified first when
// the Store seals, then the fields Add checks. Nothing of an unverified
// record is believed.
func (s *Store) open(key string, value []byte, now time.Time) (Silence, error) {
	if len(value) > maxRecord {
		return Silence{}, fmt.Errorf("silence: %w: %s: a record of %d bytes", ErrInvalid, key, len(value))
	}
	body := value
	var env sealed
	isSealed := json.Unmarshal(value, &env) == nil && len(env.Silence) > 0
	switch {
	case isSealed && s.signer != nil:
		if err := s.verify(key, env); err != nil {
			return Silence{}, err
		}
		body = env.Silence
	case isSealed:
		// Unsealed mode cannot verify: the body is read as any
		// unsealed record is (a bot that sealed before, without its
		// key now).
		body = env.Silence
	case s.signer != nil:
		return Silence{}, fmt.Errorf("%w: %s: written by an hcpbot of before sealing, or by someone without the signing key", ErrUnsealed, key)
	}
	var sil Silence
	if err := json.Unmarshal(body, &sil); err != nil {
		return Silence{}, fmt.Errorf("silence: %w: %s does not decode: %w", ErrInvalid, key, err)
	}
	if sil.ID != key || !idPattern.MatchString(sil.ID) {
		return Silence{}, fmt.Errorf("silence: %w: %s holds silence %q", ErrInvalid, key, clip(sil.ID, 40))
	}
	// What Add would refuse applies no more when read: a sealed record
	// too (a key rotated out keeps signing whatever its holder wants).
	if err := s.validate(sil); err != nil {
		return Silence{}, fmt.Errorf("%w (record %s)", err, key)
	}
	// The maximum counts from CreatedAt, which the sealer chose: a
	// silence "made" next year would apply from now until a week after
	// then. Add stamps it with the clock of the replica that made it.
	if sil.CreatedAt.After(now.Add(replicaSkew)) {
		return Silence{}, fmt.Errorf("silence: %w: record %s made at %s, later than now (%s): it would last longer than the maximum of %s from now",
			ErrInvalid, key, sil.CreatedAt.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339), s.max)
	}
	return sil, nil
}

// verify checks env's seal for the record under key.
func (s *Store) verify(key string, env sealed) error {
	if err := seal.Verify(s.trusted, env.Key, SigningContext, signedBody(key, env.Silence), env.Sig); err != nil {
		return fmt.Errorf("%w: %s: %w", sentinels.Of(err), key, err)
	}
	return nil
}
