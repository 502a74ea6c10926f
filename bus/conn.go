// Package bus is the NATS wiring shared by the agent and the bot: the
// connection (reconnecting forever, credentials — a .creds file or its
// content, or an nkey seed file — never logged, a role's own inbox
// prefix), the permission split of the roles (permissions.go, the same as
// configs/deploy/nats/nats.conf), an optional in-process JetStream server
// for single-binary setups (StartLocal: a user per role with its
// permissions, in-process connections only unless a listen address is
// configured), idempotent creation of the streams and key-value buckets
// the bot owns, and WaitForStream for processes that may only look them up.
package bus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/rs/zerolog"

	"github.com/hcpbot/hcpbot/internal/jitter"
	"github.com/hcpbot/hcpbot/redact"
)

const (
	defaultConnectTimeout   = 5 * time.Second
	defaultReconnectWait    = 250 * time.Millisecond
	defaultMaxReconnectWait = 10 * time.Second
	// Corporate proxies and load balancers drop idle TCP flows silently;
	// pinging well inside their idle timeouts notices that in about a
	// minute instead of nats.go's default four.
	pingInterval = 20 * time.Second
	maxPingsOut  = 3
)

// Config says how to reach NATS. Credentials are used, never logged.
type Config struct {
	// URLs of the NATS servers (nats://, tls://, or host:port). Empty
	// starts an in-process server from Embedded instead (StartLocal),
	// and connects to it in-process as Role.
	URLs []string
	// Embedded configures the in-process server used when URLs is empty;
	// its StoreDir is then required. Role's own user is added to it.
	Embedded LocalConfig
	// Role is whom Connect connects as to the server it starts (URLs
	// empty): its user and its inbox prefix. The zero Role is the bot.
	// With URLs the credentials below say who connects.
	Role Role
	// Name identifies this client in the server's monitoring.
	Name string

	// At most one of these is normally set.
	CredsFile string // JWT + NKey seed .creds file
	// Creds is the content of a .creds file (user JWT + NKey seed), for
	// credentials handed over in an environment variable: parsed once,
	// kept in memory, never written to disk.
	Creds []byte
	// NkeySeedFile is a file holding an nkey user seed (SU...): the
	// server knows the user by its public key (nats.conf `nkey:`).
	NkeySeedFile string
	User         string
	Password     string
	Token        string

	// CAFile verifies the servers' TLS certificates.
	CAFile string
	// InboxPrefix replaces "_INBOX" in every reply subject of this
	// connection (core requests, JetStream API, publish acks, consumer
	// deliveries), so that a server can let each role subscribe to its
	// own replies only. Empty keeps "_INBOX".
	InboxPrefix string
	// ConnectTimeout bounds one dial + handshake; default 5s.
	ConnectTimeout time.Duration
	// ReconnectWait is the first pause after every server failed; it
	// doubles per round up to MaxReconnectWait (default 250ms and 10s).
	ReconnectWait    time.Duration
	MaxReconnectWait time.Duration

	// Dialer replaces the TCP dialer, e.g. a ProxyDialer for processes
	// behind a corporate HTTP proxy.
	Dialer nats.CustomDialer
}

// Conn is a live NATS connection with its JetStream handle.
type Conn struct {
	NC *nats.Conn
	// JS is whole: it is what every component is built from, and each
	// takes the part it uses (BucketManager, jetstream.Publisher…).
	JS jetstream.JetStream

	log   zerolog.Logger
	local *Local // owned: shut down by Close

	mu           sync.Mutex
	onReconnect  []func()
	onDisconnect []func(error)

	connected chan struct{} // closed on the first successful connect
	done      chan struct{} // closed once the connection is closed for good
	closing   atomic.Bool
	closeOnce sync.Once
}

// Connect connects to NATS, starting the embedded server first if no URLs
// are configured (StartLocal, with Role's user; the connection is
// in-process and owns the server: Close shuts it down). It waits for the
// first connection until ctx is done, so a client started before its
// server simply waits; authentication errors end the wait early. Once
// connected, the client reconnects forever.
func Connect(ctx context.Context, cfg Config, log zerolog.Logger) (*Conn, error) {
	if len(cfg.URLs) > 0 {
		return dial(ctx, cfg, cfg.URLs, nil, log)
	}
	lcfg := cfg.Embedded
	if src, ok := cfg.Role.Agent(); ok && !slices.Contains(lcfg.Agents, src) {
		lcfg.Agents = append(slices.Clone(lcfg.Agents), src)
	}
	l, err := StartLocal(ctx, lcfg, log)
	if err != nil {
		return nil, err
	}
	c, err := l.Connect(ctx, cfg.Role, cfg, log)
	if err != nil {
		l.Shutdown()
		return nil, err
	}
	c.local = l
	return c, nil
}

// dial connects to urls (only named, with extra options that reach the
// server another way) as cfg says.
func dial(ctx context.Context, cfg Config, urls []string, extra []nats.Option, log zerolog.Logger) (*Conn, error) {
	c := &Conn{
		log:       log,
		connected: make(chan struct{}),
		done:      make(chan struct{}),
	}
	redacted := redact.URLs(urls)
	log.Info().Strs("urls", redacted).Msg("connecting to NATS")

	opts, err := c.options(cfg)
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(strings.Join(urls, ","), append(opts, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("bus: connect to %v: %w", redacted, err)
	}

	select {
	case <-c.connected:
	case <-c.done:
		return nil, fmt.Errorf("bus: connect to %v: %w", redacted, lastError(nc))
	case <-ctx.Done():
		c.closing.Store(true)
		nc.Close()
		return nil, fmt.Errorf("bus: connect to %v: %w (last error: %v)", redacted, ctx.Err(), nc.LastError())
	}

	// Asynchronous publishes whose acknowledgement never comes (a stream
	// leader died) must leave the client's pending set, or they fill it.
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(asyncPublishTimeout))
	if err != nil {
		c.closing.Store(true)
		nc.Close()
		return nil, fmt.Errorf("bus: jetstream: %w", err)
	}
	c.NC, c.JS = nc, js
	log.Info().Str("url", redact.RedactURL(nc.ConnectedUrl())).Str("server", nc.ConnectedServerName()).
		Str("cluster", nc.ConnectedClusterName()).Msg("connected to NATS")
	return c, nil
}

func (c *Conn) options(cfg Config) ([]nats.Option, error) {
	opts := []nats.Option{
		nats.Name(cfg.Name),
		nats.Timeout(durationOr(cfg.ConnectTimeout, defaultConnectTimeout)),
		nats.PingInterval(pingInterval),
		nats.MaxPingsOutstanding(maxPingsOut),
		// An agent that gives up on NATS is useless; keep trying, but
		// spread the attempts so a fleet does not stampede a restarting server.
		nats.MaxReconnects(-1),
		nats.CustomReconnectDelay(reconnectDelay(
			durationOr(cfg.ReconnectWait, defaultReconnectWait),
			durationOr(cfg.MaxReconnectWait, defaultMaxReconnectWait),
		)),
		nats.RetryOnFailedConnect(true),
		nats.ConnectHandler(func(*nats.Conn) { close(c.connected) }),
		nats.DisconnectErrHandler(c.disconnected),
		nats.ReconnectHandler(c.reconnected),
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
			c.log.Debug().Err(err).Msg("NATS connect attempt failed")
		}),
		nats.ClosedHandler(func(nc *nats.Conn) {
			ev := c.log.Info()
			if err := nc.LastError(); err != nil {
				ev = c.log.Error().Err(err)
			}
			ev.Msg("NATS connection closed")
			close(c.done)
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			ev := c.log.Warn().Err(err)
			if sub != nil {
				ev = ev.Str("subject", sub.Subject)
			}
			ev.Msg("NATS async error")
		}),
	}
	if cfg.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(cfg.CredsFile))
	}
	if len(cfg.Creds) > 0 {
		o, err := credsOption(cfg.Creds)
		if err != nil {
			return nil, err
		}
		opts = append(opts, o)
	}
	if cfg.User != "" || cfg.Password != "" {
		opts = append(opts, nats.UserInfo(cfg.User, cfg.Password))
	}
	if cfg.Token != "" {
		opts = append(opts, nats.Token(cfg.Token))
	}
	if cfg.NkeySeedFile != "" {
		// Reads the file for the public key now and again for every
		// signature; the seed is never kept in this package.
		o, err := nats.NkeyOptionFromSeed(cfg.NkeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("bus: nkey seed file %s: %w", cfg.NkeySeedFile, err)
		}
		opts = append(opts, o)
	}
	if cfg.CAFile != "" {
		opts = append(opts, nats.RootCAs(cfg.CAFile))
	}
	if cfg.InboxPrefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(cfg.InboxPrefix))
	}
	if cfg.Dialer != nil {
		opts = append(opts, nats.SetCustomDialer(cfg.Dialer))
	}
	return opts, nil
}

// credsOption authenticates with the user JWT and NKey seed of a .creds
// file's content, as nats.UserCredentials does with a file: the JWT is
// sent, the server's nonce signed with the seed. Errors never quote the
// content.
func credsOption(b []byte) (nats.Option, error) {
	jwt, err := nkeys.ParseDecoratedJWT(b)
	if err != nil || jwt == "" || jwt == string(b) {
		return nil, errors.New("bus: NATS credentials: no user JWT block (a .creds file holds a user JWT and an NKey seed)")
	}
	kp, err := nkeys.ParseDecoratedUserNKey(b)
	if err != nil {
		return nil, fmt.Errorf("bus: NATS credentials: no user NKey seed: %w", err)
	}
	return nats.UserJWT(
		func() (string, error) { return jwt, nil },
		func(nonce []byte) ([]byte, error) { return kp.Sign(nonce) },
	), nil
}

func (c *Conn) disconnected(_ *nats.Conn, err error) {
	if c.closing.Load() {
		return
	}
	c.log.Warn().Err(err).Msg("disconnected from NATS")
	c.mu.Lock()
	fns := c.onDisconnect
	c.mu.Unlock()
	for _, fn := range fns {
		fn(err)
	}
}

func (c *Conn) reconnected(nc *nats.Conn) {
	c.log.Info().Str("url", redact.RedactURL(nc.ConnectedUrl())).Str("server", nc.ConnectedServerName()).
		Msg("reconnected to NATS")
	c.mu.Lock()
	fns := c.onReconnect
	c.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

// OnReconnect registers fn to run after every reconnect (not the first
// connect): whatever was published while disconnected may be lost, so the
// agent resyncs here. Callbacks run one at a time on the client's callback
// goroutine and must not block; hand long work to another goroutine.
func (c *Conn) OnReconnect(fn func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.onReconnect = append(c.onReconnect, fn)
}

// OnDisconnect registers fn to run when the connection drops, with the
// cause. It is not called for Close. Same rules as OnReconnect.
func (c *Conn) OnDisconnect(fn func(error)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.onDisconnect = append(c.onDisconnect, fn)
}

// Embedded reports whether this connection runs its own in-process server
// (no URLs configured).
func (c *Conn) Embedded() bool { return c.local != nil }

// Local is the embedded server this connection runs (no URLs
// configured), nil otherwise: other roles of the process connect to it
// (Local.Connect), and its owner creates what a process without a bot
// needs (Local.CreateStream).
func (c *Conn) Local() *Local { return c.local }

// Done is closed once the connection is closed for good: by Close, or
// because the server rejected the credentials.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Close drains the connection (pending messages are delivered, in-flight
// handlers finish), waits for it to close, then shuts down the embedded
// server if Connect started one. Safe to call more than once.
func (c *Conn) Close() {
	c.closeOnce.Do(func() {
		c.closing.Store(true)
		// Drain fails when there is nothing to drain (closed, or between
		// servers); closing directly is then all that is left to do.
		if err := c.NC.Drain(); err != nil {
			c.NC.Close()
		}
		<-c.done
		c.shutdownEmbedded()
	})
}

func (c *Conn) shutdownEmbedded() {
	if c.local != nil {
		c.local.Shutdown()
	}
}

func lastError(nc *nats.Conn) error {
	if err := nc.LastError(); err != nil {
		return err
	}
	return nats.ErrConnectionClosed
}

// reconnectDelay is the pause before reconnect round attempts (nats.go
// counts from 0 or 1): jitter.Backoff from base up to limit.
func reconnectDelay(base, limit time.Duration) nats.ReconnectDelayHandler {
	return func(attempts int) time.Duration { return jitter.Backoff(attempts, base, limit) }
}

func durationOr(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// asyncPublishTimeout bounds how long the client waits for the
// acknowledgement of an asynchronous publish; the publisher retries
// sooner (watchers.JetStreamPublisher), this only bounds the bookkeeping.
const asyncPublishTimeout = 10 * time.Second
