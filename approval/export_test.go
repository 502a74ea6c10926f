package approval

import "encoding/json"

// SealRequest seals req as the bot does (for tests that play the bot, or
// an attacker holding the bot's key).
func SealRequest(s *Signer, req Request) []byte {
	seal, err := s.seal(requestContext, req)
	if err != nil {
		panic(err)
	}
	b, _ := json.Marshal(seal)
	return b
}

// RequestContext is the context string of requests, for tests that sign
// with a key of their own.
const RequestContext = requestContext

// DecisionContext likewise for decisions.
const DecisionContext = decisionContext

// Digest is p's terms digest, which requests name.
func Digest(p Proposal) string { return p.digest }

// SealPreflight seals c as the bot seals an exposure's preflight (for
// tests that replay one, or hold the bot's key).
func SealPreflight(s *Signer, c PreflightCheck) []byte {
	seal, err := s.seal(preflightContext, c)
	if err != nil {
		panic(err)
	}
	b, _ := json.Marshal(seal)
	return b
}

// PreflightContext is the context string of preflights.
const PreflightContext = preflightContext

// MaxPreflights is how many preflights an agent replica reads at once.
const MaxPreflights = maxPreflights
