package bus

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/rs/zerolog"

	"github.com/hcpbot/hcpbot/partition"
	"github.com/hcpbot/hcpbot/redact"
)

// Sentinel errors of the embedded server.
var (
	// ErrStoreDirRequired is returned when an embedded server is asked for
	// without a directory to keep JetStream data in.
	ErrStoreDirRequired = errors.New("bus: embedded server needs a StoreDir")
	// ErrServerNameRequired is returned for a cluster node without a name:
	// JetStream identifies raft peers by server name, so a node that came
	// back under a generated name would join as a stranger.
	ErrServerNameRequired = errors.New("bus: clustered embedded server needs a Name")
	// ErrNoUsers is returned for a server that would accept anyone: it
	// needs Users, or Open said explicitly (tests only).
	ErrNoUsers = errors.New("bus: embedded server without users: set Users, or Open for a test server")
)

const (
	defaultHost         = "127.0.0.1"
	defaultName         = "hcpbot"
	defaultStartTimeout = 30 * time.Second
)

// EmbeddedConfig describes an in-process nats-server with JetStream on
// disk. The product's embedded server is StartLocal's (a user per role,
// in-process unless a listen address is configured); StartEmbedded alone
// is the building block, and what test servers (natstest) start open.
type EmbeddedConfig struct {
	// StoreDir holds JetStream's files; required. Reusing it across restarts
	// keeps streams and their messages.
	StoreDir string
	// Name is the server name; required with Cluster and unique within it,
	// "hcpbot" otherwise.
	Name string
	// Host to listen on for clients; default 127.0.0.1 so a dev instance is
	// not reachable from the network by accident.
	Host string
	// Port for clients; 0 or -1 picks a free one.
	Port int
	// InProcessOnly: no client listener at all (Host and Port unused);
	// clients connect through Embedded.InProcessConn only.
	InProcessOnly bool
	// Users are the only clients the server accepts: nkey users, each
	// with its permissions (no anonymous user, no no_auth_user).
	Users []*server.NkeyUser
	// Open accepts every client without authentication, with every
	// right: for test servers only (natstest), and exclusive with Users.
	Open bool
	// Cluster, if set, makes this server one node of a JetStream cluster.
	Cluster *ClusterConfig
	// SyncAlways fsyncs every JetStream write before it is acknowledged
	// (nats.conf `sync_interval: always`, as the deploy's NATS runs).
	// Off, the server's default fsyncs every 2 minutes: a power loss of
	// the host can lose acknowledged events of that window (see
	// docs/reliability.md). make bench measures both (B1, B1-sync).
	SyncAlways bool
	// Mappings are account subject mappings installed in the account
	// every user is in (the global one): the partition tags of the events
	// (partition.Set.Mappings), as nats.conf's mappings block installs
	// them on a deployed server. Every node of a cluster needs the same.
	Mappings []partition.Mapping
	// StartTimeout bounds the wait for readiness; default 30s. A deadline
	// on the context passed to StartEmbedded applies as well.
	StartTimeout time.Duration
	// Logger receives the server's own log lines; the zero Logger discards them.
	Logger zerolog.Logger
}

// ClusterConfig makes an embedded server a node of a cluster.
type ClusterConfig struct {
	// Name of the cluster; the same on every node.
	Name string
	// Host and Port to listen on for routes from the other nodes; the host
	// defaults to 127.0.0.1, a port of 0 or -1 picks a free one.
	Host string
	Port int
	// Routes are the other nodes' route URLs (nats-route://host:port);
	// listing the node itself is harmless.
	Routes []string
}

// Embedded is a running in-process nats-server.
type Embedded struct {
	srv *server.Server
}

// StartEmbedded starts a nats-server with JetStream in this process and
// returns once it accepts clients and JetStream is enabled. In a cluster it
// does not wait for a meta leader: the other nodes may not be up yet.
func StartEmbedded(ctx context.Context, cfg EmbeddedConfig) (*Embedded, error) {
	opts, err := cfg.options()
	if err != nil {
		return nil, err
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("bus: new nats-server %q: %w", opts.ServerName, err)
	}
	lg := newServerLogger(cfg.Logger)
	srv.SetLoggerV2(lg, lg.debug, lg.trace, false)

	timeout := cfg.StartTimeout
	if timeout <= 0 {
		timeout = defaultStartTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	// Start blocks while JetStream recovers its store, so run it aside and
	// watch for readiness, a fatal log line, or the deadline.
	go srv.Start()
	if err := waitReady(ctx, srv, lg.fatal); err != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, fmt.Errorf("bus: start nats-server %q: %w", opts.ServerName, err)
	}
	return &Embedded{srv: srv}, nil
}

func (cfg EmbeddedConfig) options() (*server.Options, error) {
	if cfg.StoreDir == "" {
		return nil, ErrStoreDirRequired
	}
	if hasUsers := len(cfg.Users) > 0; hasUsers == cfg.Open {
		// Neither (anyone gets in by default) or both (which one?).
		return nil, ErrNoUsers
	}
	name := cfg.Name
	if name == "" && cfg.Cluster == nil {
		name = defaultName
	}
	opts := &server.Options{
		ServerName: name,
		Host:       orDefault(cfg.Host, defaultHost),
		Port:       randomIfUnset(cfg.Port),
		JetStream:  true,
		StoreDir:   cfg.StoreDir,
		SyncAlways: cfg.SyncAlways,
		// The host process owns signal handling.
		NoSigs:                 true,
		DisableJetStreamBanner: true,
		DontListen:             cfg.InProcessOnly,
		Nkeys:                  cfg.Users,
	}
	if c := cfg.Cluster; c != nil {
		if cfg.Name == "" {
			return nil, ErrServerNameRequired
		}
		routes := make([]*url.URL, 0, len(c.Routes))
		for _, r := range c.Routes {
			u, err := url.Parse(r)
			if err != nil || u.Host == "" {
				return nil, fmt.Errorf("bus: bad route URL %q", redact.RedactURL(r))
			}
			routes = append(routes, u)
		}
		opts.Cluster = server.ClusterOpts{
			Name: c.Name,
			Host: orDefault(c.Host, defaultHost),
			Port: randomIfUnset(c.Port),
		}
		opts.Routes = routes
	}
	if len(cfg.Mappings) > 0 {
		// nats.conf's top-level mappings do the same: the global account,
		// which users without an account are in.
		acc := server.NewAccount(server.DEFAULT_GLOBAL_ACCOUNT)
		for _, m := range cfg.Mappings {
			if err := acc.AddMapping(m.Src, m.Dest); err != nil {
				return nil, fmt.Errorf("bus: subject mapping %s -> %s: %w", m.Src, m.Dest, err)
			}
		}
		opts.Accounts = []*server.Account{acc}
	}
	return opts, nil
}

func waitReady(ctx context.Context, srv *server.Server, fatal <-chan string) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		// ReadyForConnections polls internally and returns as soon as the
		// listeners are up; the short bound keeps us responsive to ctx.
		if srv.ReadyForConnections(50*time.Millisecond) && srv.JetStreamEnabled() {
			return nil
		}
		select {
		case msg := <-fatal:
			return errors.New(msg)
		case <-ctx.Done():
			return fmt.Errorf("not ready: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

// ClientURL is the URL clients connect to, with the port actually bound;
// "" for a server without a listener (InProcessOnly).
func (e *Embedded) ClientURL() string {
	if e.srv.Addr() == nil {
		return ""
	}
	return e.srv.ClientURL()
}

// Listening is the address clients can dial, nil without a listener.
func (e *Embedded) Listening() *net.TCPAddr {
	a, _ := e.srv.Addr().(*net.TCPAddr)
	return a
}

// InProcessConn is a client connection inside this process
// (nats.InProcessServer): no socket, but the server's authentication and
// permissions as over TCP.
func (e *Embedded) InProcessConn() (net.Conn, error) { return e.srv.InProcessConn() }

// Server exposes the running server, for tests and health checks.
func (e *Embedded) Server() *server.Server { return e.srv }

// Shutdown stops the server and waits until it has stopped, so its StoreDir
// and ports can be reused. Safe to call more than once.
func (e *Embedded) Shutdown() {
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// randomIfUnset maps 0 to -1: nats-server reads 0 as "the default port"
// (4222/none), we read it as "any free port".
func randomIfUnset(port int) int {
	if port == 0 {
		return server.RANDOM_PORT
	}
	return port
}

// serverLogger adapts server.Logger to zerolog.
type serverLogger struct {
	log          zerolog.Logger
	debug, trace bool
	// fatal carries the first Fatalf line: nats-server calls it when it
	// cannot go on (port taken, store unusable) and expects the process to
	// exit, which an embedded server must not do.
	fatal chan string
}

func newServerLogger(l zerolog.Logger) *serverLogger {
	lvl := max(l.GetLevel(), zerolog.GlobalLevel())
	return &serverLogger{
		log: l,
		// Only ask the server for debug/trace output someone will read;
		// producing it is not free.
		debug: lvl <= zerolog.DebugLevel,
		trace: lvl <= zerolog.TraceLevel,
		fatal: make(chan string, 1),
	}
}

func (l *serverLogger) Noticef(format string, v ...any) { l.log.Info().Msgf(format, v...) }
func (l *serverLogger) Warnf(format string, v ...any)   { l.log.Warn().Msgf(format, v...) }
func (l *serverLogger) Errorf(format string, v ...any)  { l.log.Error().Msgf(format, v...) }
func (l *serverLogger) Debugf(format string, v ...any)  { l.log.Debug().Msgf(format, v...) }
func (l *serverLogger) Tracef(format string, v ...any)  { l.log.Trace().Msgf(format, v...) }

func (l *serverLogger) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.log.Error().Bool("fatal", true).Msg(msg)
	select {
	case l.fatal <- msg:
	default:
	}
}
