package bus_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/testenv/chaosreport"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/watchers"
)

// resumeBound is how soon after the stream leader is gone the agent's
// publisher must have an event acknowledged again. Elections take a few
// seconds; the bound is generous for a loaded 2-core machine.
const resumeBound = 30 * time.Second

// ackTap is the real JetStream client with its publish acknowledgements
// observed: which event ids were acknowledged, when, and how often an
// attempt failed. Nothing is faked; every call goes to the cluster.
type ackTap struct {
	jetstream.JetStream

	mu     sync.Mutex
	acked  []string
	at     []time.Time
	errs   int
	dups   int
	errsAt []time.Time
}

func (a *ackTap) PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	ack, err := a.JetStream.PublishMsg(ctx, m, opts...)
	a.record(m, ack, err)
	return ack, err
}

func (a *ackTap) record(m *nats.Msg, ack *jetstream.PubAck, err error) {
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	if err != nil {
		a.errs++
		a.errsAt = append(a.errsAt, now)
		return
	}
	e, derr := event.Decode(m.Data)
	if derr != nil {
		return
	}
	if ack.Duplicate {
		a.dups++
	}
	a.acked = append(a.acked, e.ID)
	a.at = append(a.at, now)
}

// PublishMsgAsync taps the acknowledgement of an asynchronous publish:
// the future handed back relays the real one's outcome after recording it.
func (a *ackTap) PublishMsgAsync(m *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	f, err := a.JetStream.PublishMsgAsync(m, opts...)
	if err != nil {
		a.record(m, nil, err)
		return f, err
	}
	t := &tapFuture{PubAckFuture: f, ok: make(chan *jetstream.PubAck, 1), err: make(chan error, 1)}
	go func() {
		select {
		case ack := <-f.Ok():
			a.record(m, ack, nil)
			t.ok <- ack
		case err := <-f.Err():
			a.record(m, nil, err)
			t.err <- err
		}
	}()
	return t, nil
}

type tapFuture struct {
	jetstream.PubAckFuture
	ok  chan *jetstream.PubAck
	err chan error
}

func (t *tapFuture) Ok() <-chan *jetstream.PubAck { return t.ok }
func (t *tapFuture) Err() <-chan error            { return t.err }

func (a *ackTap) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.acked)
}

// stallAround is the longest pause between consecutive acknowledgements
// that ended in [from, to]: how long publishing stood still around a fault.
func (a *ackTap) stallAround(from, to time.Time) time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	var longest time.Duration
	for i := 1; i < len(a.at); i++ {
		if a.at[i].Before(from) || a.at[i].After(to) {
			continue
		}
		longest = max(longest, a.at[i].Sub(a.at[i-1]))
	}
	return longest
}

// firstAckAfter is when the first acknowledgement after t came, if any.
func (a *ackTap) firstAckAfter(t time.Time) (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, at := range a.at {
		if at.After(t) {
			return at, true
		}
	}
	return time.Time{}, false
}

// chaosEvent is the i-th distinct fact of a storm, as the agent builds them.
func chaosEvent(t *testing.T, i int) event.Event {
	t.Helper()
	// chaosNodes nodes, each flapping once a second: several events per
	// object, so that their order can be checked.
	ltt := time.Date(2026, 7, 22, 7, 59, 0, 0, time.UTC).Add(time.Duration(i/chaosNodes) * time.Second)
	node := fmt.Sprintf("example-worker-%05d", i%chaosNodes)
	status := []event.ConditionStatus{event.ConditionFalse, event.ConditionTrue}[(i/chaosNodes)%2]
	p := event.NodeReadiness{Node: node, Ready: status, Reason: "KubeletNotReady", LastTransitionTime: ltt}
	obj := event.ObjectRef{Kind: "Node", Name: node, UID: fmt.Sprintf("uid-%05d", i%chaosNodes), Hosted: true}
	e, err := event.New("mgmt-chaos", &event.ClusterRef{Namespace: "clusters", Name: "example"}, obj, p,
		event.TransitionAt("Ready="+string(status), ltt), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return e
}

const chaosNodes = 16

func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Fault 2 (issue 9): a 3-node JetStream cluster, the events stream at R3,
// the agent's JetStreamPublisher publishing a steady stream of events. The
// stream leader's server is shut down mid-publish (nats-server steps its
// raft groups down on the way out; a SIGKILL of a process cannot be had
// in-process), later brought back while publishing goes on. Nothing
// acknowledged is lost or duplicated, the stream holds the events of each
// object in publish order, publishing resumes within resumeBound, and the returning
// node catches up with every event. HCPBOT_CHAOS_LONG=1 publishes more and
// runs three kill/return cycles.
func TestChaosNATSLeaderLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node NATS cluster")
	}
	total := chaosreport.Pick(400, 6000)
	cycles := chaosreport.Pick(1, 3)
	const interval = 4 * time.Millisecond // 250 events/s offered
	log := natstest.Logger(t)
	c := natstest.RunCluster(t, 3)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	// Recorded however the test ends: a failed case shows in the report.
	figures := map[string]any{"published": total, "cycles": cycles, "resume_bound_s": resumeBound}
	defer func() { chaosreport.Log(t, "nats-leader-loss", figures) }()

	ctl, err := bus.Connect(ctx, bus.Config{URLs: c.URLs(), Name: "chaos-control", ReconnectWait: 50 * time.Millisecond, MaxReconnectWait: 500 * time.Millisecond}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ctl.Close)
	stream, err := bus.EnsureStream(ctx, ctl.JS, bus.EventsStream(time.Hour, 15*time.Minute, bus.WithReplicas(3)))
	if err != nil {
		t.Fatal(err)
	}
	leaderOf := func() int {
		info, err := stream.Info(ctx)
		if err != nil || info.Cluster == nil {
			return -1
		}
		for i := range c.Len() {
			if info.Cluster.Leader == fmt.Sprintf("n%d", i) {
				return i
			}
		}
		return -1
	}
	first := c.WaitForStreamLeader(event.StreamName)

	// The agent's connection starts on the leader, so that losing it costs
	// the client a reconnect as well as the stream an election; it learns
	// the other servers from the cluster, as a real agent given one URL does.
	conn, err := bus.Connect(ctx, bus.Config{URLs: []string{c.URL(first)}, Name: "chaos-agent", ReconnectWait: 50 * time.Millisecond, MaxReconnectWait: 500 * time.Millisecond}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	tap := &ackTap{JetStream: conn.JS}
	reg := prometheus.NewRegistry()
	pub := watchers.NewJetStreamPublisher(tap, 1000, watchers.NewMetrics(reg), log)
	pctx, stopPub := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { pub.Run(pctx) })
	t.Cleanup(func() { stopPub(); wg.Wait() })

	ids := make([]string, total)
	for i := range total {
		ids[i] = chaosEvent(t, i).ID
	}
	offered := make(chan struct{})
	wg.Go(func() {
		defer close(offered)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for i := range total {
			if err := pub.PublishWait(pctx, chaosEvent(t, i)); err != nil {
				return
			}
			select {
			case <-tick.C:
			case <-pctx.Done():
				return
			}
		}
	})

	type cycle struct {
		killed          int
		onClient        bool
		firstAck, stall time.Duration
		catchup         time.Duration
		newLeader       int
		ackedAtKill     int
		ackedAtReturn   int
	}
	var done []cycle
	var maxResume time.Duration
	start := time.Now()
	for k := range cycles {
		// Kill at 1/4, 1/2, 3/4 of the events, bring back halfway to the next.
		killAt := total * (2*k + 1) / (2*cycles + 2)
		backAt := total * (2*k + 2) / (2*cycles + 2)
		waitUntil(t, time.Minute, fmt.Sprintf("%d events acknowledged", killAt), func() bool { return tap.count() >= killAt })
		leader := leaderOf()
		if leader < 0 {
			t.Fatal("StreamInfo names no leader")
		}
		if l := c.StreamLeader(event.StreamName); l != leader {
			t.Logf("StreamInfo says leader n%d, the servers say n%d", leader, l)
		}
		cy := cycle{killed: leader, onClient: conn.NC.ConnectedServerName() == fmt.Sprintf("n%d", leader), ackedAtKill: tap.count()}
		killed := time.Now()
		c.Stop(leader)
		waitUntil(t, resumeBound, fmt.Sprintf("an acknowledgement after n%d stopped", leader), func() bool {
			_, ok := tap.firstAckAfter(killed)
			return ok
		})
		at, _ := tap.firstAckAfter(killed)
		cy.firstAck = at.Sub(killed)
		cy.newLeader = c.WaitForStreamLeader(event.StreamName)

		waitUntil(t, time.Minute, fmt.Sprintf("%d events acknowledged", backAt), func() bool { return tap.count() >= backAt })
		cy.ackedAtReturn = tap.count()
		// Publishing has been flowing for a while by now: the longest
		// pause since the kill is the interruption the fault caused.
		cy.stall = tap.stallAround(killed, time.Now())
		maxResume = max(maxResume, cy.stall)
		back := time.Now()
		c.Restart(leader)
		c.WaitForStreamCurrent(leader, event.StreamName)
		cy.catchup = time.Since(back)
		done = append(done, cy)
		figures[fmt.Sprintf("c%d_stall_s", k+1)] = cy.stall
		figures[fmt.Sprintf("c%d_first_ack_s", k+1)] = cy.firstAck
		figures[fmt.Sprintf("c%d_catchup_s", k+1)] = cy.catchup
		figures[fmt.Sprintf("c%d_agent_on_killed", k+1)] = cy.onClient
		figures["stall_max_s"] = maxResume
		t.Logf("cycle %d: stopped n%d (agent connected to it: %v) after %d acks; first ack %v later, publishing stood still for at most %v; new leader n%d; n%d back after %d acks, current in %v",
			k+1, cy.killed, cy.onClient, cy.ackedAtKill, cy.firstAck.Round(time.Millisecond), cy.stall.Round(time.Millisecond), cy.newLeader, cy.killed, cy.ackedAtReturn, cy.catchup.Round(time.Millisecond))
	}
	<-offered
	waitUntil(t, 2*time.Minute, "every event acknowledged", func() bool { return tap.count() >= total })
	took := time.Since(start)

	// Every replica, the returned ones included, holds every event.
	for i := range c.Len() {
		c.WaitForStreamCurrent(i, event.StreamName)
	}
	waitUntil(t, time.Minute, "every replica holding every event", func() bool {
		for i := range c.Len() {
			if st, ok := c.StreamState(i, event.StreamName); !ok || st.Msgs != uint64(total) {
				return false
			}
		}
		return true
	})

	// Consume everything from a fresh connection, as the bot would.
	reader, err := bus.Connect(ctx, bus.Config{URLs: c.URLs(), Name: "chaos-reader"}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reader.Close)
	// Right after the last election the JetStream API may still answer
	// "no responders" for a moment: a failed read starts over.
	var got []string
	readErrs := 0
	waitUntil(t, time.Minute, "the stream read back", func() bool {
		ids, err := readStream(ctx, reader.JS, total)
		if err != nil {
			readErrs++
			t.Logf("reading the stream: %v; starting over", err)
			return false
		}
		got = ids
		return true
	})
	tap.mu.Lock()
	acked := append([]string(nil), tap.acked...)
	errs, dups := tap.errs, tap.dups
	tap.mu.Unlock()
	inStream := map[string]int{}
	for _, id := range got {
		inStream[id]++
	}
	// The facts of one object keep their publish order; different objects
	// may interleave differently around a failed publish (the publisher
	// keeps a window of events in flight).
	published := make(map[string]int, len(ids))
	for i, id := range ids {
		published[id] = i
	}
	reorders := 0
	last := map[int]int{} // node → publish index of its last event read
	for _, id := range got {
		i, ok := published[id]
		if !ok {
			continue
		}
		if prev, seen := last[i%chaosNodes]; seen && i < prev {
			reorders++
		}
		last[i%chaosNodes] = i
	}
	lost, twice := 0, 0
	for _, id := range acked {
		if inStream[id] == 0 {
			lost++
		}
	}
	for _, n := range inStream {
		if n > 1 {
			twice += n - 1
		}
	}
	maps.Copy(figures, map[string]any{
		"acknowledged":     len(acked),
		"received":         len(got),
		"lost":             lost,
		"duplicates":       twice,
		"dup_acks":         dups,
		"failed_attempts":  errs,
		"read_retries":     readErrs,
		"stall_max_s":      maxResume,
		"took_s":           took,
		"in_publish_order": slices.Equal(got, ids),
		"object_reorders":  reorders,
	})

	if lost != 0 || twice != 0 {
		t.Errorf("%d acknowledged events lost, %d stored twice", lost, twice)
	}
	if len(got) != total {
		t.Errorf("stream holds %d events, want %d", len(got), total)
	}
	if reorders != 0 {
		t.Errorf("%d events stored before an older event of the same object", reorders)
	}
	if maxResume > resumeBound {
		t.Errorf("publishing stood still for %v, bound %v", maxResume, resumeBound)
	}
}

// readStream reads the ids of every event in the events stream, in stream
// order, with an ordered consumer (as the bot's reader does).
func readStream(ctx context.Context, js jetstream.JetStream, want int) ([]string, error) {
	cons, err := js.OrderedConsumer(ctx, event.StreamName, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, err
	}
	var got []string
	for len(got) < want {
		batch, err := cons.Fetch(500, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, err
		}
		n := 0
		for m := range batch.Messages() {
			e, err := event.Decode(m.Data())
			if err != nil {
				return nil, fmt.Errorf("undecodable event: %w", err)
			}
			got = append(got, e.ID)
			n++
		}
		if err := batch.Error(); err != nil {
			return nil, err
		}
		if n == 0 {
			break
		}
	}
	return got, nil
}
