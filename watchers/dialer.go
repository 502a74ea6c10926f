package watchers

import (
	"context"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// connDialer dials one hosted API server's connections, counts the open
// ones in a gauge shared by all clusters, and can close them all.
type connDialer struct {
	d     net.Dialer
	gauge prometheus.Gauge

	mu     sync.Mutex
	conns  map[*countedConn]struct{}
	closed bool
}

func newConnDialer(g prometheus.Gauge) *connDialer {
	return &connDialer{d: net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}, gauge: g, conns: map[*countedConn]struct{}{}}
}

func (c *connDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	conn, err := c.d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	cc := &countedConn{Conn: conn, owner: c}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		conn.Close()
		return nil, net.ErrClosed
	}
	c.conns[cc] = struct{}{}
	c.gauge.Inc()
	return cc, nil
}

// closeAll closes every open connection and refuses new ones.
func (c *connDialer) closeAll() {
	c.mu.Lock()
	c.closed = true
	conns := make([]*countedConn, 0, len(c.conns))
	for cc := range c.conns {
		conns = append(conns, cc)
	}
	c.mu.Unlock()
	for _, cc := range conns {
		cc.Close()
	}
}

type countedConn struct {
	net.Conn
	owner *connDialer
	once  sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() {
		c.owner.mu.Lock()
		delete(c.owner.conns, c)
		c.owner.mu.Unlock()
		c.owner.gauge.Dec()
	})
	return c.Conn.Close()
}
