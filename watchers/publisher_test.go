package watchers_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/testenv"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/internal/testenv/syncbuf"
	"github.com/hcpbot/hcpbot/watchers"
)

// stuckPublisher is a running publisher on an embedded NATS whose events
// stream is deleted after a first event was delivered, with held events
// published behind it.
type stuckPublisher struct {
	conn *bus.Conn
	pub  *watchers.JetStreamPublisher
	reg  *prometheus.Registry
	logs *syncbuf.Buffer
	held int
}

func startStuckPublisher(t *testing.T, ensure bool) *stuckPublisher {
	t.Helper()
	ctx := context.Background()
	srv := natstest.RunServer(t)
	conn, err := bus.Connect(ctx, bus.Config{URLs: []string{srv.ClientURL()}}, natstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	spec := bus.EventsStream(0, 0)
	if _, err := bus.EnsureStream(ctx, conn.JS, spec); err != nil {
		t.Fatal(err)
	}
	sp := &stuckPublisher{conn: conn, reg: prometheus.NewRegistry(), logs: &syncbuf.Buffer{}, held: 5}
	sp.pub = watchers.NewJetStreamPublisher(conn.JS, 100, watchers.NewMetrics(sp.reg), zerolog.New(sp.logs))
	if ensure {
		sp.pub.OnStreamMissing(func(ctx context.Context) error { _, err := bus.EnsureStream(ctx, conn.JS, spec); return err })
	}
	pctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { sp.pub.Run(pctx) })
	t.Cleanup(func() { stop(); wg.Wait() })

	if err := sp.pub.Publish(ctx, publisherEvent(t, 0)); err != nil {
		t.Fatal(err)
	}
	// Acknowledged, not only stored: an ack still on its way when the
	// stream goes (a busy machine) would make the first event a held one.
	testenv.Eventually(t, natstest.Timeout, "the first event stored and acknowledged", func() bool {
		return sp.stored(t) == 1 && counterOf(t, sp.reg, "hcpbot_agent_events_published_total", "") == 1
	})
	if err := conn.JS.DeleteStream(ctx, event.StreamName); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= sp.held; i++ {
		if err := sp.pub.Publish(ctx, publisherEvent(t, i)); err != nil {
			t.Fatal(err)
		}
	}
	return sp
}

// stored is the number of messages in the events stream (0 without one).
func (sp *stuckPublisher) stored(t *testing.T) uint64 {
	t.Helper()
	s, err := sp.conn.JS.Stream(context.Background(), event.StreamName)
	if err != nil {
		return 0
	}
	info, err := s.Info(context.Background())
	if err != nil {
		return 0
	}
	return info.State.Msgs
}

func (sp *stuckPublisher) errors(t *testing.T, kind string) float64 {
	t.Helper()
	return counterOf(t, sp.reg, metricPublishErrors, kind)
}

// surfaces waits until the problem fails readiness and has been logged,
// then (more) lets two more attempts fail: still one log line.
func (sp *stuckPublisher) surfaces(t *testing.T, more bool) {
	t.Helper()
	var problem error
	testenv.Eventually(t, 3*watchers.ProblemAfter, "the publisher to report the missing stream", func() bool {
		problem = sp.pub.Problem()
		return problem != nil
	})
	if !strings.Contains(problem.Error(), "no_stream") || !strings.Contains(problem.Error(), fmt.Sprintf("%d events held", sp.held)) {
		t.Errorf("Problem() = %v, want the kind and the events held", problem)
	}
	t.Logf("readiness: %v", problem)
	testenv.Eventually(t, natstest.Timeout, "the episode's log line", func() bool { return strings.Contains(sp.logs.String(), "NATS refuses the agent's events") })
	if more {
		n := sp.errors(t, "no_stream")
		testenv.Eventually(t, natstest.Timeout, "two more refused attempts", func() bool { return sp.errors(t, "no_stream") >= n+2 })
	}
	if got := strings.Count(sp.logs.String(), "NATS refuses the agent's events"); got != 1 {
		t.Errorf("%d log lines for one episode, want 1:\n%s", got, sp.logs.String())
	}
	// An attempt may time out before the refusal is seen (a busy machine):
	// that warning is right. Once the problem is known, retries are quiet.
	logs := sp.logs.String()
	if _, after, _ := strings.Cut(logs, "NATS refuses the agent's events"); strings.Contains(after, "publish failed; retrying") {
		t.Errorf("per-retry warnings for a known problem:\n%s", logs)
	}
}

// recovers waits until readiness is back and every held event is stored.
func (sp *stuckPublisher) recovers(t *testing.T) {
	t.Helper()
	testenv.Eventually(t, natstest.Timeout, "readiness back and the held events stored", func() bool {
		return sp.pub.Problem() == nil && sp.stored(t) == uint64(sp.held)
	})
	testenv.Eventually(t, natstest.Timeout, "the recovery's log line", func() bool { return strings.Contains(sp.logs.String(), "NATS takes the agent's events again") })
	if got := strings.Count(sp.logs.String(), "NATS takes the agent's events again"); got != 1 {
		t.Errorf("%d recovery lines, want 1:\n%s", got, sp.logs.String())
	}
}

// The events stream is deleted under a running publisher (external NATS:
// the agent may not create it): readiness fails with the reason, the
// refusals count as no_stream, one line is logged; once the stream is
// back (the bot re-creates it), readiness recovers and the held events
// arrive.
func TestPublisherStreamDeletedSurfacesAndRecovers(t *testing.T) {
	sp := startStuckPublisher(t, false)
	sp.surfaces(t, true)
	if strings.Contains(sp.logs.String(), "re-created") {
		t.Error("the publisher re-created the stream without OnStreamMissing")
	}
	if _, err := bus.EnsureStream(context.Background(), sp.conn.JS, bus.EventsStream(0, 0)); err != nil {
		t.Fatal(err)
	}
	sp.recovers(t)
}

// With OnStreamMissing (the agent's own embedded server), the publisher
// re-creates the deleted stream itself and the held events arrive.
func TestPublisherStreamDeletedReensured(t *testing.T) {
	sp := startStuckPublisher(t, true)
	sp.surfaces(t, false)
	sp.recovers(t)
	if !strings.Contains(sp.logs.String(), "re-created the events stream") {
		t.Errorf("no re-creation logged:\n%s", sp.logs.String())
	}
}

func publisherEvent(t *testing.T, i int) event.Event {
	t.Helper()
	ltt := time.Date(2026, 7, 22, 7, 59, 0, 0, time.UTC).Add(time.Duration(i) * time.Second)
	node := fmt.Sprintf("stuck-worker-%02d", i)
	p := event.NodeReadiness{Node: node, Ready: event.ConditionFalse, Reason: "KubeletNotReady", LastTransitionTime: ltt}
	obj := event.ObjectRef{Kind: "Node", Name: node, UID: "uid-" + node, Hosted: true}
	e, err := event.New("mgmt-stuck", &event.ClusterRef{Namespace: "clusters", Name: "example"}, obj, p,
		event.TransitionAt("Ready=False", ltt), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return e
}
