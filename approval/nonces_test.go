package approval

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/actions"
)

// A replica's memory of answered preflights never forgets one that could
// still be admitted: full of fresh nonces, it refuses new preflights
// (the bot proposes with its note) rather than evict; an entry goes only
// once every preflight that carries it is stale, so filling the memory
// (anyone who can have the bot ask, or holds its key) never lets a
// captured preflight be answered twice by one replica.
func TestPreflightNonceMemoryNeverEvictsAFreshNonce(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	cfg := CheckConfig{Source: "mgmt-1", Preflight: func(context.Context, actions.Change) (*actions.Preflight, error) { return &actions.Preflight{}, nil }}
	var seen nonces
	// The preflight an attacker captured: issued as far ahead as the
	// agent admits, so that it stays fresh the longest.
	captured := PreflightCheck{Source: "mgmt-1", IssuedAt: t0.Add(time.Minute), Nonce: "captured"}
	if refused := admitPreflight(cfg, &seen, t0, captured); refused != nil {
		t.Fatalf("the genuine preflight: %+v", refused)
	}
	for i := 1; i < maxNonces; i++ {
		if err := seen.first(fmt.Sprintf("flood-%05d", i), t0); err != nil {
			t.Fatalf("nonce %d: %v", i, err)
		}
	}
	for _, at := range []time.Duration{0, time.Minute, 2 * time.Minute} {
		now := t0.Add(at)
		if refused := admitPreflight(cfg, &seen, now, PreflightCheck{Source: "mgmt-1", IssuedAt: now, Nonce: "new-" + at.String()}); refused == nil || refused.Error != errTooManyNonces.Error() {
			t.Errorf("a new preflight at +%s with a full memory: %+v", at, refused)
		}
		if refused := admitPreflight(cfg, &seen, now, captured); refused == nil || refused.Error != "a preflight already answered (replayed)" {
			t.Errorf("the captured preflight replayed at +%s: %+v", at, refused)
		}
	}
	// Past two minutes the entries go, and the captured preflight with
	// them: it is stale by then.
	later := t0.Add(2*time.Minute + time.Nanosecond)
	if refused := admitPreflight(cfg, &seen, later, captured); refused == nil || refused.Error != "a preflight for another agent, or stale" {
		t.Errorf("the captured preflight after the memory forgot it: %+v", refused)
	}
	if err := seen.first("after", later); err != nil {
		t.Errorf("a new nonce once the old ones are stale: %v", err)
	}
	if err := seen.first("after", later); err == nil || errors.Is(err, errTooManyNonces) {
		t.Errorf("a nonce seen before: %v", err)
	}
}
