package watchers_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/watchers"
)

// runAgent runs one agent (no leader election) until the test ends.
func runAgent(t *testing.T, s *stream, cfg watchers.Config) *watchers.Agent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	log := natstest.Logger(t)
	m := watchers.NewMetrics(prometheus.NewRegistry())
	pub := watchers.NewJetStreamPublisher(s.js, 1000, m, log)
	agent := newAgent(t, ctx, cfg, env.Kube, env.Dynamic, pub, m, log)
	done := make(chan struct{}, 2)
	go func() { pub.Run(ctx); done <- struct{}{} }()
	go func() {
		if err := agent.Run(ctx); err != nil && ctx.Err() == nil {
			t.Errorf("agent: %v", err)
		}
		done <- struct{}{}
	}()
	t.Cleanup(func() { cancel(); <-done; <-done })
	return agent
}

// freshCopies counts the distinct IDs under which the HostedCluster fact
// of cluster was restated (each fresh restatement is a new copy).
func freshCopies(s *stream, cluster string) int {
	ids := map[string]bool{}
	for _, e := range s.matching(isType[event.HostedClusterState](cluster)) {
		if e.IsSnapshot() {
			ids[e.ID] = true
		}
	}
	return len(ids)
}

// A flood of restatement requests (a bot restarting in a loop) costs at
// most one restatement per RestateMinGap, and each restatement puts the
// cluster's facts on the stream again under fresh IDs.
func TestRestateRequestsAreRateBounded(t *testing.T) {
	env.Need(t)
	s := newStream(t)
	ns := env.Namespace(t)
	env.HostedCluster(t, scenario.BehindProxy(ns, "flood"))
	cluster := ns + "/flood"
	const gap = time.Second
	agent := runAgent(t, s, watchers.Config{Source: "mgmt-flood", Identity: "flood-0", SnapshotWait: 10 * time.Second,
		RestateInterval: time.Hour, RestateMinGap: gap})
	// The start snapshot: the fact under its own ID.
	s.waitFor(t, "the start snapshot", 1, isType[event.HostedClusterState](cluster))
	base := freshCopies(s, cluster)

	const flood = 3 * time.Second
	start := time.Now()
	requests := 0
	for time.Since(start) < flood {
		agent.Restate()
		requests++
		time.Sleep(2 * time.Millisecond)
	}
	// The request folded at the end of the flood runs one gap later.
	testenv.Eventually(t, 30*time.Second, "a restatement after the flood", func() bool { return freshCopies(s, cluster)-base >= 2 })
	time.Sleep(2 * gap) // nothing else may come
	n := freshCopies(s, cluster) - base
	if limit := int(flood/gap) + 2; n > limit {
		t.Errorf("%d requests in %v made %d restatements, want at most %d (one per %v)", requests, flood, n, limit, gap)
	}
	t.Logf("%d requests in %v: %d restatements", requests, flood, n)
}

// Without any request, the leader restates every RestateInterval, each
// time with fresh IDs.
func TestRestatePeriodically(t *testing.T) {
	env.Need(t)
	s := newStream(t)
	ns := env.Namespace(t)
	env.HostedCluster(t, scenario.BehindProxy(ns, "periodic"))
	cluster := ns + "/periodic"
	runAgent(t, s, watchers.Config{Source: "mgmt-periodic", Identity: "periodic-0", SnapshotWait: 10 * time.Second,
		RestateInterval: 500 * time.Millisecond})
	testenv.Eventually(t, 30*time.Second, "three periodic restatements", func() bool { return freshCopies(s, cluster) >= 3 })
}

// The interval follows the stream's max age: a sixth of it, never below
// a minute.
func TestRestateInterval(t *testing.T) {
	for maxAge, want := range map[time.Duration]time.Duration{
		0:                  watchers.DefaultRestateInterval,
		72 * time.Hour:     12 * time.Hour,
		time.Hour:          10 * time.Minute,
		2 * time.Second:    time.Minute,
		24 * time.Hour * 7: 28 * time.Hour,
	} {
		if got := watchers.RestateInterval(maxAge); got != want {
			t.Errorf("RestateInterval(%v) = %v, want %v", maxAge, got, want)
		}
	}
}
