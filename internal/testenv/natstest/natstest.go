package natstest

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/internal/testenv/testlog"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/rs/zerolog"
)

// Timeout bounds every wait in this package. Elections take a few seconds
// with the server's production timers, longer on a loaded machine.
const Timeout = 30 * time.Second

// Streams created without an account live in the global one.
const account = server.DEFAULT_GLOBAL_ACCOUNT

// Logger returns a logger writing to tb.Log, at warn level unless
// NATSTEST_LOG names another zerolog level (e.g. NATSTEST_LOG=debug).
// Lines logged after the test has finished are dropped: server and client
// goroutines may outlive it by a moment, and tb.Log would then panic.
func Logger(tb testing.TB) zerolog.Logger {
	tb.Helper()
	lvl := zerolog.WarnLevel
	if s := os.Getenv("NATSTEST_LOG"); s != "" {
		if l, err := zerolog.ParseLevel(s); err == nil {
			lvl = l
		}
	}
	return testlog.New(tb, lvl)
}

// RunServer starts a standalone JetStream server on a random loopback port
// with its store in tb.TempDir(), shut down when the test ends. It is open
// (no users, every right): a test server, not the product's embedded
// server (bus.StartLocal), whose roles tests reach with bus.Local.Connect.
// opts change its configuration (e.g. SyncAlways).
func RunServer(tb testing.TB, opts ...func(*bus.EmbeddedConfig)) *bus.Embedded {
	tb.Helper()
	log := Logger(tb)
	dir := tb.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	cfg := bus.EmbeddedConfig{StoreDir: dir, Name: "natstest", Open: true, Logger: log}
	for _, o := range opts {
		o(&cfg)
	}
	e, err := bus.StartEmbedded(ctx, cfg)
	if err != nil {
		tb.Fatalf("natstest: %v", err)
	}
	tb.Cleanup(e.Shutdown)
	return e
}

// SyncAlways is a RunServer option: fsync every write before
// acknowledging it, as the deploy's NATS does (sync_interval: always).
func SyncAlways(cfg *bus.EmbeddedConfig) { cfg.SyncAlways = true }

// Cluster is an in-process JetStream cluster. Node i keeps its name, ports
// and store across Stop and Restart, so it rejoins as the same raft peer.
// Not safe for concurrent use.
type Cluster struct {
	tb    testing.TB
	cfgs  []bus.EmbeddedConfig
	nodes []*bus.Embedded // nil while stopped
}

// RunCluster starts an n-node JetStream cluster on loopback and waits until
// it has a meta leader that sees all n peers. opts change every node's
// configuration (e.g. the partition mappings, which every node needs).
func RunCluster(tb testing.TB, n int, opts ...func(*bus.EmbeddedConfig)) *Cluster {
	tb.Helper()
	if n < 1 {
		tb.Fatalf("natstest: cluster of %d nodes", n)
	}
	log := Logger(tb)
	// Fixed ports, chosen up front, let a stopped node come back where the
	// others' routes and the clients' URL lists expect it.
	ports := freePorts(tb, 2*n)
	routes := make([]string, n)
	for i := range n {
		routes[i] = fmt.Sprintf("nats-route://127.0.0.1:%d", ports[n+i])
	}
	c := &Cluster{tb: tb, cfgs: make([]bus.EmbeddedConfig, n), nodes: make([]*bus.Embedded, n)}
	for i := range n {
		name := fmt.Sprintf("n%d", i)
		c.cfgs[i] = bus.EmbeddedConfig{
			StoreDir: tb.TempDir(),
			Name:     name,
			Port:     ports[i],
			Cluster:  &bus.ClusterConfig{Name: "natstest", Port: ports[n+i], Routes: routes},
			Open:     true,
			Logger:   log.With().Str("server", name).Logger(),
		}
		for _, o := range opts {
			o(&c.cfgs[i])
		}
	}
	// Registered after the TempDirs so it runs before they are removed.
	tb.Cleanup(c.shutdown)
	for i := range n {
		c.start(i)
	}
	c.waitFor("a meta leader seeing all peers", func() bool {
		l := c.metaLeader()
		return l >= 0 && len(c.nodes[l].Server().JetStreamClusterPeers()) == n
	})
	return c
}

func freePorts(tb testing.TB, n int) []int {
	tb.Helper()
	ports := make([]int, n)
	// Hold all listeners until every port is known so none repeats.
	for i := range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatalf("natstest: free port: %v", err)
		}
		defer l.Close()
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports
}

func (c *Cluster) start(i int) {
	c.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	e, err := bus.StartEmbedded(ctx, c.cfgs[i])
	if err != nil {
		c.tb.Fatalf("natstest: node %d: %v", i, err)
	}
	c.nodes[i] = e
}

func (c *Cluster) shutdown() {
	var wg sync.WaitGroup
	for _, e := range c.nodes {
		if e != nil {
			wg.Go(e.Shutdown)
		}
	}
	wg.Wait()
}

// Len is the number of nodes, running or not.
func (c *Cluster) Len() int { return len(c.cfgs) }

// URL is node i's client URL; valid while it is stopped too.
func (c *Cluster) URL(i int) string {
	return fmt.Sprintf("nats://127.0.0.1:%d", c.cfgs[i].Port)
}

// URLs lists every node's client URL, for a client that fails over.
func (c *Cluster) URLs() []string {
	urls := make([]string, len(c.cfgs))
	for i := range c.cfgs {
		urls[i] = c.URL(i)
	}
	return urls
}

// Server is node i's server, or nil while it is stopped.
func (c *Cluster) Server(i int) *server.Server {
	if c.nodes[i] == nil {
		return nil
	}
	return c.nodes[i].Server()
}

// Stop shuts node i down and waits until it has stopped. Its leaderships
// are handed over on the way out, as in a rolling restart.
func (c *Cluster) Stop(i int) {
	c.tb.Helper()
	if c.nodes[i] == nil {
		c.tb.Fatalf("natstest: node %d is already stopped", i)
	}
	c.nodes[i].Shutdown()
	c.nodes[i] = nil
}

// Restart brings node i back on its ports and store and waits until it has
// caught up with the cluster's metadata (streams may still be catching up:
// see WaitForStreamCurrent).
func (c *Cluster) Restart(i int) {
	c.tb.Helper()
	if c.nodes[i] != nil {
		c.tb.Fatalf("natstest: node %d is running", i)
	}
	c.start(i)
	c.waitFor(fmt.Sprintf("node %d to catch up with the meta leader", i), func() bool {
		return c.metaLeader() >= 0 && c.nodes[i].Server().JetStreamIsCurrent()
	})
}

// StreamLeader is the index of the node leading stream, or -1 if none does
// right now.
func (c *Cluster) StreamLeader(stream string) int {
	for i, e := range c.nodes {
		if e != nil && e.Server().JetStreamIsStreamLeader(account, stream) {
			return i
		}
	}
	return -1
}

// WaitForStreamLeader waits until some node leads stream and returns it.
func (c *Cluster) WaitForStreamLeader(stream string) int {
	c.tb.Helper()
	leader := -1
	c.waitFor(fmt.Sprintf("a leader for stream %q", stream), func() bool {
		leader = c.StreamLeader(stream)
		return leader >= 0
	})
	return leader
}

// WaitForStreamCurrent waits until node i's replica of stream has caught up
// with its leader.
func (c *Cluster) WaitForStreamCurrent(i int, stream string) {
	c.tb.Helper()
	c.waitFor(fmt.Sprintf("node %d to be current on stream %q", i, stream), func() bool {
		s := c.Server(i)
		return s != nil && s.JetStreamIsStreamCurrent(account, stream)
	})
}

// StreamState is node i's local view of stream (its own replica, not the
// leader's), and false if node i is stopped or holds no replica.
func (c *Cluster) StreamState(i int, stream string) (server.StreamState, bool) {
	s := c.Server(i)
	if s == nil {
		return server.StreamState{}, false
	}
	jsz, err := s.Jsz(&server.JSzOptions{Account: account, Streams: true})
	if err != nil {
		return server.StreamState{}, false
	}
	for _, a := range jsz.AccountDetails {
		for _, sd := range a.Streams {
			if sd.Name == stream {
				return sd.State, true
			}
		}
	}
	return server.StreamState{}, false
}

func (c *Cluster) metaLeader() int {
	for i, e := range c.nodes {
		if e != nil && e.Server().JetStreamIsLeader() {
			return i
		}
	}
	return -1
}

func (c *Cluster) waitFor(what string, cond func() bool) {
	c.tb.Helper()
	deadline := time.Now().Add(Timeout)
	for !cond() {
		if time.Now().After(deadline) {
			c.tb.Fatalf("natstest: timed out after %v waiting for %s", Timeout, what)
		}
		time.Sleep(25 * time.Millisecond)
	}
}
