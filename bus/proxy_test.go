package bus

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// connectProxy is a loopback HTTP proxy that only tunnels (CONNECT) and
// counts what it tunnelled.
type connectProxy struct {
	ln      net.Listener
	tunnels atomic.Int32
	auth    atomic.Value // last Proxy-Authorization
	wg      sync.WaitGroup
}

func startConnectProxy(t *testing.T) *connectProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &connectProxy{ln: ln}
	p.auth.Store("")
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Go(func() { p.serve(c) })
		}
	})
	t.Cleanup(func() { ln.Close(); p.wg.Wait() })
	return p
}

func (p *connectProxy) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil || req.Method != http.MethodConnect {
		_, _ = io.WriteString(c, "HTTP/1.1 405 Method Not Allowed\r\n\r\n")
		return
	}
	p.auth.Store(req.Header.Get("Proxy-Authorization"))
	up, err := net.Dial("tcp", req.Host)
	if err != nil {
		_, _ = io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\n\r\n")
		return
	}
	defer up.Close()
	p.tunnels.Add(1)
	_, _ = io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
	go func() { _, _ = io.Copy(up, br); up.Close() }()
	_, _ = io.Copy(c, up)
}

// NATS through an HTTP CONNECT proxy: the connection works (JetStream
// included) and goes through the proxy, with its credentials.
func TestProxyDialerTunnelsNATS(t *testing.T) {
	e := startEmbedded(t, EmbeddedConfig{Name: "behind-proxy"})
	p := startConnectProxy(t)
	proxyURL := &url.URL{Scheme: "http", User: url.UserPassword("bot", "s3cret"), Host: p.ln.Addr().String()}
	d := &ProxyDialer{Proxy: func(*url.URL) (*url.URL, error) { return proxyURL, nil }}
	c := connect(t, Config{URLs: []string{e.ClientURL()}, Dialer: d})
	ctx := testContext(t)
	if _, err := EnsureStream(ctx, c.JS, eventsSpec); err != nil {
		t.Fatal(err)
	}
	if _, err := c.JS.Publish(ctx, "events.x", []byte("through the proxy")); err != nil {
		t.Fatal(err)
	}
	if p.tunnels.Load() == 0 {
		t.Error("the connection did not go through the proxy")
	}
	if got := p.auth.Load().(string); got != "Basic Ym90OnMzY3JldA==" {
		t.Errorf("Proxy-Authorization %q", got)
	}
}

// A proxy that refuses the tunnel gives an error naming it, without its
// credentials.
func TestProxyDialerRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = http.ReadRequest(bufio.NewReader(c))
			_, _ = io.WriteString(c, "HTTP/1.1 403 Forbidden\r\n\r\n")
			c.Close()
		}
	}()
	d := &ProxyDialer{Proxy: func(*url.URL) (*url.URL, error) {
		return &url.URL{Scheme: "http", User: url.UserPassword("bot", "s3cret"), Host: ln.Addr().String()}, nil
	}}
	_, err = d.Dial("tcp", "127.0.0.1:4222")
	if err == nil {
		t.Fatal("CONNECT refused but Dial succeeded")
	}
	if msg := err.Error(); !strings.Contains(msg, "403") || strings.Contains(msg, "s3cret") {
		t.Errorf("error %q", msg)
	}
}
