package notify

import (
	"sync"
	"time"

	"github.com/hcpbot/hcpbot/internal/jitter"
)

// gate paces one Slack rate limit: a token bucket (our own estimate of
// Slack's budget, so we rarely hit a 429 at all) plus a hard stop until a
// Retry-After Slack gave us has elapsed.
type gate struct {
	mu     sync.Mutex
	rate   float64 // tokens per second; <= 0 means unlimited
	burst  float64
	tokens float64
	last   time.Time
	until  time.Time // no call before this
}

// epsilon absorbs float rounding, so that a gate readyAt calls ready also
// takes, instead of the worker spinning for a nanosecond's worth of token.
const epsilon = 1e-9

func newGate(rate float64, burst int) *gate {
	b := float64(max(burst, 1))
	return &gate{rate: rate, burst: b, tokens: b, last: time.Now()}
}

func (g *gate) refill(now time.Time) {
	if now.After(g.last) {
		g.tokens = min(g.burst, g.tokens+now.Sub(g.last).Seconds()*g.rate)
		g.last = now
	}
}

// readyAt is the earliest time take can succeed; not after now means now.
func (g *gate) readyAt(now time.Time) time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	at := now
	if g.rate > 0 {
		g.refill(now)
		if g.tokens < 1-epsilon {
			at = now.Add(time.Duration((1 - g.tokens) / g.rate * float64(time.Second)))
		}
	}
	if g.until.After(at) {
		at = g.until
	}
	return at
}

// take spends a token if one is available now.
func (g *gate) take(now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if now.Before(g.until) {
		return false
	}
	if g.rate <= 0 {
		return true
	}
	g.refill(now)
	if g.tokens < 1-epsilon {
		return false
	}
	g.tokens = max(g.tokens-1, 0)
	return true
}

// block stops the gate until the given time and restarts it with a single
// token: Slack just said we were too fast, so resuming with a full burst
// would only earn the next 429.
func (g *gate) block(until time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if until.After(g.until) {
		g.until = until
	}
	if g.rate > 0 && until.After(g.last) {
		g.tokens, g.last = 1, until
	}
}

// backoff is the pause after the n-th consecutive failure (n >= 1):
// doubling from base up to limit, jittered so that replicas that failed
// together do not retry together (package jitter).
func backoff(n int, base, limit time.Duration) time.Duration { return jitter.Backoff(n, base, limit) }
