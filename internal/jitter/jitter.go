// Package jitter is the one retry pause of hcpbot: a doubling backoff with
// "equal jitter" (half of the pause fixed, half random), so that processes
// that failed together (bot replicas, a fleet of agents after a NATS
// restart) do not retry together, while none waits less than half its
// share.
//
// It is a pure function of the attempt number because its callers count
// attempts themselves (nats.go's reconnect handler, the Slack sender's
// failures per message). k8s.io/apimachinery's wait.Backoff is a stateful
// sequence (Step) whose jitter adds on top of its cap, and nats.go has no
// exponential delay of its own (ReconnectJitter is a fixed wait plus
// jitter), hence this package.
package jitter

import (
	"math/rand/v2"
	"time"
)

// Backoff is the pause after the n-th consecutive failure: base doubled
// n-1 times, at most limit (n below 1 counts as 1), of which a random part
// up to half is taken off. It lies in [d/2, d] for that d.
func Backoff(n int, base, limit time.Duration) time.Duration {
	d := limit
	if shift := max(n-1, 0); shift < 32 && base<<shift < limit && base<<shift > 0 {
		d = base << shift
	}
	half := d / 2
	return half + rand.N(half+1)
}
