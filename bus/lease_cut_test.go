package bus

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"
)

// cuttableDialer dials NATS directly until cut; then every connection it
// made turns into a black hole (reads and writes hang, as when a network
// path drops packets) and new dials fail. Closing it releases what hangs.
type cuttableDialer struct {
	cutOnce, closeOnce sync.Once
	cut, closed        chan struct{}
	mu                 sync.Mutex
	conns              []net.Conn
}

func newCuttableDialer(t *testing.T) *cuttableDialer {
	d := &cuttableDialer{cut: make(chan struct{}), closed: make(chan struct{})}
	t.Cleanup(d.close)
	return d
}

func (d *cuttableDialer) Dial(network, address string) (net.Conn, error) {
	select {
	case <-d.cut:
		return nil, errors.New("test: link cut")
	default:
	}
	c, err := net.DialTimeout(network, address, 5*time.Second)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.conns = append(d.conns, c)
	d.mu.Unlock()
	return &cuttableConn{Conn: c, d: d}, nil
}

func (d *cuttableDialer) freeze() { d.cutOnce.Do(func() { close(d.cut) }) }

func (d *cuttableDialer) close() {
	d.freeze()
	d.closeOnce.Do(func() {
		close(d.closed)
		d.mu.Lock()
		defer d.mu.Unlock()
		for _, c := range d.conns {
			_ = c.Close()
		}
	})
}

type cuttableConn struct {
	net.Conn
	d *cuttableDialer
}

// hang blocks once the link is cut, until the dialer closes.
func (c *cuttableConn) hang() bool {
	select {
	case <-c.d.cut:
		<-c.d.closed
		return true
	default:
		return false
	}
}

func (c *cuttableConn) Read(p []byte) (int, error) {
	if c.hang() {
		return 0, net.ErrClosed
	}
	n, err := c.Conn.Read(p)
	if c.hang() { // what arrived after the cut is lost
		return 0, net.ErrClosed
	}
	return n, err
}

func (c *cuttableConn) Write(p []byte) (int, error) {
	if c.hang() {
		return 0, net.ErrClosed
	}
	return c.Conn.Write(p)
}

// The holder's link to NATS is cut so that its KV calls hang instead of
// failing. It must stop reporting Leader by TTL/2 after it sent its last
// successful renewal (at the latest TTL/2 after the cut), however long the
// hung renewal blocks; the other replica takes over once the key ages out
// (TTL); sampled every few ms, there is never an instant where both lead.
func TestLeaseHolderStepsDownWhenNATSIsCut(t *testing.T) {
	e := startEmbedded(t, EmbeddedConfig{Name: "lease-cut"})
	ctx := testContext(t)
	const ttl = 3 * time.Second

	run := func(l *Lease) {
		lctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() { _ = l.Run(lctx) })
		t.Cleanup(func() { cancel(); wg.Wait() })
	}
	newLease := func(c *Conn, id string) *Lease {
		l, err := NewLease(ctx, c.JS, "bot", id, testLogger(t), WithLeaseTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}

	link := newCuttableDialer(t)
	holder := newLease(connect(t, Config{URLs: []string{e.ClientURL()}, Dialer: link}), "holder")
	// Registered after connect: the link closes (releasing what hangs)
	// before the connection does.
	t.Cleanup(link.close)
	run(holder)
	poll(t, 2*ttl, "the holder leads", holder.Leader)
	other := newLease(connect(t, Config{URLs: []string{e.ClientURL()}}), "other")
	run(other)

	// Let the holder renew a few times, so the cut falls mid-cycle.
	time.Sleep(ttl / 2)
	if !holder.Leader() || other.Leader() {
		t.Fatalf("before the cut: holder leads %v, other leads %v", holder.Leader(), other.Leader())
	}
	cut := time.Now()
	link.freeze()

	var lastHeld, firstOther time.Time // the last sample the holder led; the first the other did
	deadline := cut.Add(3 * ttl)
	for {
		// The time is read before Leader: a true answer means the holder
		// led at some instant at or after at.
		at := time.Now()
		h, o := holder.Leader(), other.Leader()
		if h {
			lastHeld = at
		}
		if h && o {
			t.Fatalf("both lead %s after the cut", at.Sub(cut))
		}
		if o {
			firstOther = at
			break
		}
		if at.After(deadline) {
			t.Fatalf("the other replica did not take over within %s of the cut (holder leads: %v)", 3*ttl, h)
		}
		time.Sleep(2 * time.Millisecond)
	}
	if holder.Leader() {
		t.Fatal("the cut holder leads again while the other leads")
	}
	// Its last successful renewal was sent before the cut, so it leads
	// until cut + TTL/2 at the latest.
	if held := lastHeld.Sub(cut); held >= ttl/2 {
		t.Errorf("the holder still led %s after the cut; bound TTL/2 = %s", held, ttl/2)
	}
	// The key ages out TTL after the server last stored it, about TTL/2
	// after the holder stepped down (less the staleness of the server's
	// coarse clock, 100 ms ticks; TTL/4 leaves room for a busy machine).
	if gap := firstOther.Sub(lastHeld); gap < ttl/4 {
		t.Errorf("the other took over %s after the holder last led; want at least TTL/4 = %s", gap, ttl/4)
	}
	t.Logf("holder last led %s after the cut, the other led %s after the cut",
		lastHeld.Sub(cut).Round(time.Millisecond), firstOther.Sub(cut).Round(time.Millisecond))
}
