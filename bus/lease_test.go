package bus

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// Two replicas: exactly one leads; when it stops the other takes over at
// once (the lease is released); when it dies (its connection gone, so it
// neither renews nor releases) the other takes over within the TTL.
func TestLeaseOneLeaderAndHandover(t *testing.T) {
	e := startEmbedded(t, EmbeddedConfig{Name: "lease"})
	ctx := testContext(t)
	const ttl = 3 * time.Second

	type replica struct {
		l    *Lease
		conn *Conn
		stop func()
	}
	start := func(id string) *replica {
		c := connect(t, Config{URLs: []string{e.ClientURL()}})
		l, err := NewLease(ctx, c.JS, "bot", id, zerolog.Nop(), WithLeaseTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		lctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() { _ = l.Run(lctx) })
		var once sync.Once
		stop := func() { once.Do(func() { cancel(); wg.Wait() }) }
		t.Cleanup(stop)
		return &replica{l: l, conn: c, stop: stop}
	}
	leaderOf := func(rs ...*replica) (*replica, *replica) {
		t.Helper()
		poll(t, 2*ttl, "exactly one leader", func() bool { return rs[0].l.Leader() != rs[1].l.Leader() })
		if rs[0].l.Leader() {
			return rs[0], rs[1]
		}
		return rs[1], rs[0]
	}

	leader, other := leaderOf(start("a"), start("b"))
	begin := time.Now()
	leader.stop()
	if leader.l.Leader() {
		t.Error("a stopped replica still says it leads")
	}
	poll(t, 2*ttl, "handover after a clean stop", other.l.Leader)
	t.Logf("handover after a clean stop: %s", time.Since(begin).Round(10*time.Millisecond))

	third := start("c")
	leader, other = leaderOf(other, third)
	begin = time.Now()
	leader.conn.Close() // dies: no renewal, no release
	poll(t, 2*ttl, "handover after the leader died", other.l.Leader)
	if took := time.Since(begin); took > ttl+ttl/2 {
		t.Errorf("handover took %s, lease TTL is %s", took, ttl)
	}
	poll(t, ttl, "the dead leader steps down", func() bool { return !leader.l.Leader() })
	t.Logf("handover after the leader died: %s", time.Since(begin).Round(10*time.Millisecond))
}

func TestLeaseNeedsIdentityAndTTL(t *testing.T) {
	e := startEmbedded(t, EmbeddedConfig{Name: "lease-args"})
	c := connect(t, Config{URLs: []string{e.ClientURL()}})
	ctx := testContext(t)
	if _, err := NewLease(ctx, c.JS, "bot", "", zerolog.Nop()); err == nil {
		t.Error("empty identity accepted")
	}
	if _, err := NewLease(ctx, c.JS, "bot", "x", zerolog.Nop(), WithLeaseTTL(time.Millisecond)); err == nil {
		t.Error("TTL under a second accepted")
	}
}

func poll(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
