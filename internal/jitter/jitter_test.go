package jitter

import (
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	base, limit := 100*time.Millisecond, 2*time.Second
	for n, ceil := range map[int]time.Duration{
		-1: base, 0: base, 1: base, 2: 2 * base, 3: 4 * base, 5: 16 * base, 6: limit, 33: limit, 100: limit,
	} {
		seen := map[time.Duration]bool{}
		for range 50 {
			d := Backoff(n, base, limit)
			if d < ceil/2 || d > ceil {
				t.Fatalf("n=%d: pause %v outside [%v, %v]", n, d, ceil/2, ceil)
			}
			seen[d] = true
		}
		// Jittered: 50 draws from a range of ceil/2 nanoseconds are not
		// all equal.
		if len(seen) < 2 {
			t.Errorf("n=%d: 50 pauses all %v: not jittered", n, Backoff(n, base, limit))
		}
	}
}

// A zero base (unset) or a huge one never overflows into a negative or
// zero pause: the limit applies.
func TestBackoffBounds(t *testing.T) {
	if d := Backoff(3, 0, time.Second); d < time.Second/2 || d > time.Second {
		t.Errorf("zero base: %v", d)
	}
	if d := Backoff(40, time.Hour, 2*time.Hour); d < time.Hour || d > 2*time.Hour {
		t.Errorf("overflowing shift: %v", d)
	}
}
