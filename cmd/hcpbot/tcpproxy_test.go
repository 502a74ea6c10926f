package main

import (
	"net"
	"sync"
	"testing"
)

// tcpProxy forwards loopback TCP connections to a loopback target, and
// plays two network failures between a process and a server:
//
//   - Pause holds every byte in both directions, and every new
//     connection, until Resume: a partition that drops packets silently.
//     Nothing is closed, so clients notice only by their own timeouts.
//   - Cut closes every connection and refuses new ones (accepted, then
//     closed at once) until Resume: a server gone, or a firewall REJECT.
type tcpProxy struct {
	target string
	l      net.Listener

	mu     sync.Mutex
	open   chan struct{} // closed while forwarding; replaced by Pause
	cut    bool
	closed bool
	conns  map[net.Conn]struct{}
}

// startTCPProxy forwards to target until the test ends.
func startTCPProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{target: target, l: l, open: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	close(p.open)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Addr is where clients connect instead of target.
func (p *tcpProxy) Addr() string { return p.l.Addr().String() }

// Pause stops forwarding, holding what arrives.
func (p *tcpProxy) Pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
		p.open = make(chan struct{})
	default: // already paused
	}
}

// Cut closes every connection and refuses new ones.
func (p *tcpProxy) Cut() {
	p.mu.Lock()
	p.cut = true
	conns := p.conns
	p.conns = map[net.Conn]struct{}{}
	p.mu.Unlock()
	for c := range conns {
		c.Close()
	}
}

// Resume forwards again: held bytes flow on, new connections go through.
func (p *tcpProxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
	select {
	case <-p.open:
	default:
		close(p.open)
	}
}

// gate waits while paused; false once the proxy is closed or cut.
func (p *tcpProxy) gate() bool {
	p.mu.Lock()
	open := p.open
	p.mu.Unlock()
	<-open
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.closed && !p.cut
}

// track registers c, or closes it when the proxy is cut or closed.
func (p *tcpProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.cut {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *tcpProxy) accept() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			continue
		}
		go func() {
			if !p.gate() {
				c.Close()
				return
			}
			var d net.Dialer
			s, err := d.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				return
			}
			if !p.track(s) {
				c.Close()
				return
			}
			go p.pipe(s, c)
			p.pipe(c, s)
		}()
	}
}

// pipe copies from src to dst through the gate, closing both at the end.
func (p *tcpProxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.gate() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF or closed: the other direction ends with it
		}
	}
}

func (p *tcpProxy) close() {
	p.l.Close()
	p.mu.Lock()
	p.closed = true
	conns := p.conns
	p.conns = map[net.Conn]struct{}{}
	p.mu.Unlock()
	p.Resume() // wake the gates, which now report closed
	for c := range conns {
		c.Close()
	}
}
