package chatops

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// DefaultResponseURLPrefix is where Slack's response_urls live. Anything
// else in a payload is refused, so a forged or tampered payload cannot make
// the bot POST to an arbitrary host.
const DefaultResponseURLPrefix = "https://hooks.slack.com/"

const (
	// responseURLUses is how many posts Slack accepts per response_url...
	responseURLUses = 5
	// responseURLLife ...within this time after it was issued.
	responseURLLife = 30 * time.Minute
	// responseURLsTracked bounds the use counters kept.
	responseURLsTracked = 10000
	// postTimeout bounds one post when the caller's context does not.
	postTimeout = 10 * time.Second
)

// Errors of (*Responder).Post.
var (
	ErrResponseURLNotAllowed = errors.New("chatops: response_url outside the allowed prefix")
	ErrResponseURLUsedUp     = errors.New("chatops: response_url used up")
)

// Responder posts replies to response_urls: only under its prefix, at most
// five times per URL within its 30 minutes (as Slack allows), with
// timeouts and without following redirects. The use counts are per
// process. response_urls are bearer capabilities and are never logged.
type Responder struct {
	prefixes []*url.URL
	client   *http.Client
	now      func() time.Time

	mu   sync.Mutex
	uses *ttlMap[int]
}

// NewResponder returns a Responder for response_urls starting with prefix
// (DefaultResponseURLPrefix in production; "" means that). client nil gets
// one with timeouts that honours the proxy environment. Redirects are never
// followed, whatever client says.
func NewResponder(prefix string, client *http.Client) (*Responder, error) {
	return NewResponderFor(client, prefix)
}

// NewResponderFor is NewResponder for response_urls under any of prefixes
// (a Slack-compatible API elsewhere, whose response_urls point there, and
// Slack's own hooks host).
func NewResponderFor(client *http.Client, prefixes ...string) (*Responder, error) {
	if len(prefixes) == 0 {
		prefixes = []string{DefaultResponseURLPrefix}
	}
	r := &Responder{now: time.Now, uses: newTTLMap[int](responseURLLife, responseURLsTracked)}
	for _, prefix := range prefixes {
		if prefix == "" {
			prefix = DefaultResponseURLPrefix
		}
		p, err := url.Parse(prefix)
		if err != nil || (p.Scheme != "https" && p.Scheme != "http") || p.Host == "" || p.User != nil || p.RawQuery != "" || p.Fragment != "" {
			return nil, fmt.Errorf("chatops: response_url prefix %q must be an http(s) URL with a host and no credentials, query or fragment", prefix)
		}
		if !strings.HasSuffix(p.Path, "/") {
			p.Path += "/"
		}
		r.prefixes = append(r.prefixes, p)
	}
	var c http.Client
	if client != nil {
		c = *client
	} else {
		c = http.Client{Timeout: postTimeout, Transport: defaultTransport()}
	}
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	r.client = &c
	return r, nil
}

func defaultTransport() *http.Transport {
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment, // the bot runs behind a corporate proxy
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   5 * time.Second,
		ResponseHeaderTimeout: 10 * time.Second,
		MaxIdleConns:          10,
		IdleConnTimeout:       90 * time.Second,
		ForceAttemptHTTP2:     true,
	}
}

// Allowed reports whether Post would send to responseURL.
func (r *Responder) Allowed(responseURL string) bool {
	u, err := url.Parse(responseURL)
	if err != nil {
		return false
	}
	if u.User != nil || u.Opaque != "" || u.Fragment != "" || strings.Contains(u.Path, "/../") {
		return false
	}
	for _, p := range r.prefixes {
		if u.Scheme == p.Scheme && strings.EqualFold(u.Host, p.Host) && strings.HasPrefix(u.Path, p.Path) {
			return true
		}
	}
	return false
}

// Post sends reply to responseURL. A zero reply is not sent.
func (r *Responder) Post(ctx context.Context, responseURL string, reply Reply) error {
	if reply.IsZero() {
		return nil
	}
	if !r.Allowed(responseURL) {
		return ErrResponseURLNotAllowed
	}
	if !r.use(responseURL) {
		return ErrResponseURLUsedUp
	}
	body, err := json.Marshal(reply.wire())
	if err != nil {
		return fmt.Errorf("chatops: encoding reply: %w", err)
	}
	if _, hasDeadline := ctx.Deadline(); !hasDeadline {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, postTimeout)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, responseURL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("chatops: building response_url post: %w", err)
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	resp, err := r.client.Do(req)
	if err != nil {
		// The URL is a credential; net/http puts it in the error text.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return fmt.Errorf("chatops: posting to response_url: %w", err)
	}
	defer resp.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("chatops: response_url answered %d: %s", resp.StatusCode, strings.TrimSpace(string(snippet)))
	}
	return nil
}

// use counts a post to u and reports whether Slack would still accept it.
func (r *Responder) use(u string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	n, _ := r.uses.get(u, now)
	if n >= responseURLUses {
		return false
	}
	r.uses.put(u, n+1, now)
	return true
}
