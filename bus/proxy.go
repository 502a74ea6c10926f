package bus

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"golang.org/x/net/http/httpproxy"

	"github.com/hcpbot/hcpbot/redact"
)

// ProxyDialer reaches NATS servers through an HTTP proxy with CONNECT, the
// way the bot's other traffic leaves a corporate network: the proxy for a
// server is the one HTTPS_PROXY / NO_PROXY choose for https://host:port
// (Go's rules, as for Slack). Servers NO_PROXY exempts, and loopback, are
// dialled directly.
type ProxyDialer struct {
	// Proxy returns the proxy for a URL; nil means none. Default: the
	// environment's (httpproxy.FromEnvironment).
	Proxy   func(*url.URL) (*url.URL, error)
	Timeout time.Duration // dial + CONNECT; default 10s
}

// ProxyFromEnvironment returns a ProxyDialer for the process environment,
// or nil when no HTTPS_PROXY is set (plain TCP then).
func ProxyFromEnvironment() *ProxyDialer {
	cfg := httpproxy.FromEnvironment()
	if cfg.HTTPSProxy == "" {
		return nil
	}
	return &ProxyDialer{Proxy: cfg.ProxyFunc()}
}

// Dial implements nats.CustomDialer.
func (d *ProxyDialer) Dial(network, address string) (net.Conn, error) {
	timeout := d.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	proxyFor := d.Proxy
	if proxyFor == nil {
		proxyFor = httpproxy.FromEnvironment().ProxyFunc()
	}
	proxy, err := proxyFor(&url.URL{Scheme: "https", Host: address})
	if err != nil {
		return nil, fmt.Errorf("bus: proxy for %s: %w", address, err)
	}
	var dialer net.Dialer
	if proxy == nil {
		return dialer.DialContext(ctx, network, address)
	}
	conn, err := dialer.DialContext(ctx, "tcp", proxy.Host)
	if err != nil {
		return nil, fmt.Errorf("bus: dial proxy %s: %w", redact.RedactURL(proxy.String()), err)
	}
	if err := httpConnect(ctx, conn, proxy, address); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// httpConnect asks the proxy for a tunnel to address.
func httpConnect(ctx context.Context, conn net.Conn, proxy *url.URL, address string) error {
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
		defer conn.SetDeadline(time.Time{})
	}
	req := fmt.Sprintf("CONNECT %s HTTP/1.1\r\nHost: %s\r\n", address, address)
	if u := proxy.User; u != nil {
		pw, _ := u.Password()
		req += "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(u.Username()+":"+pw)) + "\r\n"
	}
	if _, err := conn.Write([]byte(req + "\r\n")); err != nil {
		return fmt.Errorf("bus: CONNECT through %s: %w", redact.RedactURL(proxy.String()), err)
	}
	// Read the answer byte by byte: NATS speaks first (INFO), and bytes
	// after the answer's blank line belong to the client, not to a buffer.
	head := make([]byte, 0, 256)
	one := make([]byte, 1)
	for !bytes.HasSuffix(head, []byte("\r\n\r\n")) {
		if len(head) >= maxConnectAnswer {
			return fmt.Errorf("bus: proxy %s: CONNECT answer too long", redact.RedactURL(proxy.String()))
		}
		if _, err := io.ReadFull(conn, one); err != nil {
			return fmt.Errorf("bus: CONNECT through %s: %w", redact.RedactURL(proxy.String()), err)
		}
		head = append(head, one[0])
	}
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(head)), &http.Request{Method: http.MethodConnect})
	if err != nil {
		return fmt.Errorf("bus: CONNECT through %s: %w", redact.RedactURL(proxy.String()), err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("bus: proxy %s refused CONNECT %s: %s", redact.RedactURL(proxy.String()), address, resp.Status)
	}
	return nil
}

// maxConnectAnswer bounds the proxy's answer to CONNECT.
const maxConnectAnswer = 8 << 10
