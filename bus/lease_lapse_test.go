package bus

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// A holder whose step-down deadline passed unreported (Run's tick and
// lapse timers both ready after a scheduling stall, and select took the
// tick; or a renewal answered just after the deadline) renews the key: it
// did not lead in between, and whoever asked Leader then acted on it (the
// notifier drops a leader-only root), so OnLeaderChange must hear of the
// loss, not only of the lease held: the bot counts losses to render again
// what it sent before one (bot.LeaderChanged).
func TestLeaseLapseRenewedIsReported(t *testing.T) {
	e := startEmbedded(t, EmbeddedConfig{Name: "lease-lapse"})
	ctx := testContext(t)
	c := connect(t, Config{URLs: []string{e.ClientURL()}})
	var mu sync.Mutex
	var changes []bool
	// A TTL and a bound on each call far above any store round trip: on a
	// busy machine a renewal taking a second must not read as lost.
	l, err := NewLease(ctx, c.JS, "bot", "a", zerolog.Nop(), WithLeaseTTL(time.Minute), OnLeaderChange(func(leader bool) {
		mu.Lock()
		changes = append(changes, leader)
		mu.Unlock()
	}))
	if err != nil {
		t.Fatal(err)
	}
	period := 20 * time.Second
	rev := l.attempt(ctx, 0, period)
	if rev == 0 || !l.Leader() {
		t.Fatal("the first replica did not win the lease")
	}
	// The deadline passes with nothing reported (Run's goroutine stalled).
	l.until.Store(int64(l.now()))
	if l.Leader() {
		t.Fatal("still leading past the deadline")
	}
	if rev = l.attempt(ctx, rev, period); rev == 0 || !l.Leader() {
		t.Fatal("the renewal on our revision failed")
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []bool{true, false, true}; !slices.Equal(changes, want) {
		t.Errorf("OnLeaderChange got %v, want %v: the lapse between the deadline and the renewal is a loss", changes, want)
	}
}
