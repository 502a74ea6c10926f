package natstest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/bus"
	"github.com/nats-io/nats.go/jetstream"
)

func connect(t *testing.T, cfg bus.Config) *bus.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), Timeout)
	defer cancel()
	if cfg.ReconnectWait == 0 {
		cfg.ReconnectWait, cfg.MaxReconnectWait = 20*time.Millisecond, 200*time.Millisecond
	}
	c, err := bus.Connect(ctx, cfg, Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func TestRunServerPublishConsume(t *testing.T) {
	start := time.Now()
	srv := RunServer(t)
	c := connect(t, bus.Config{URLs: []string{srv.ClientURL()}})
	ctx, cancel := context.WithTimeout(t.Context(), Timeout)
	defer cancel()

	s, err := bus.EnsureStream(ctx, c.JS, bus.StreamSpec{Name: "EVENTS", Subjects: []string{"events.>"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.JS.Publish(ctx, "events.pod", []byte("hello"), jetstream.WithMsgID("1")); err != nil {
		t.Fatal(err)
	}
	cons, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "smoke", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Data()) != "hello" {
		t.Fatalf("got %q, want hello", m.Data())
	}
	if err := m.DoubleAck(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("took %v", time.Since(start))
}

// TestClusterStreamLeaderFailover is the foundation's acceptance test: an
// R3 stream loses its leader mid-stream and neither loses nor duplicates a
// message, and the old leader catches up when it returns.
func TestClusterStreamLeaderFailover(t *testing.T) {
	const (
		stream = "EVENTS"
		n      = 100 // messages per phase
	)
	begin := time.Now()
	phase := func(what string) {
		t.Logf("%-28s at %v", what, time.Since(begin).Round(time.Millisecond))
	}
	c := RunCluster(t, 3)
	phase("cluster up")

	ctx, cancel := context.WithTimeout(t.Context(), 2*Timeout)
	defer cancel()
	admin := connect(t, bus.Config{URLs: c.URLs(), Name: "admin"})
	s, err := bus.EnsureStream(ctx, admin.JS, bus.StreamSpec{
		Name:       stream,
		Subjects:   []string{"events.>"},
		Replicas:   3,
		Duplicates: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	cons, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "bot", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	leader := c.WaitForStreamLeader(stream)
	phase(fmt.Sprintf("R3 stream led by node %d", leader))

	// The publisher starts on the leader so that stopping it forces the
	// client over to another node (found through the cluster's INFO).
	pub := connect(t, bus.Config{URLs: []string{c.URL(leader)}, Name: "publisher"})
	reconnected := make(chan struct{}, 1)
	pub.OnReconnect(func() {
		select {
		case reconnected <- struct{}{}:
		default:
		}
	})
	for i := range n {
		publishNew(ctx, t, pub.JS, i)
	}
	phase(fmt.Sprintf("%d published", n))

	c.Stop(leader)
	phase("leader stopped")
	for i := n; i < 2*n; i++ {
		publishNew(ctx, t, pub.JS, i)
	}
	phase(fmt.Sprintf("%d more published", n))
	select {
	case <-reconnected:
	case <-ctx.Done():
		t.Fatal("publisher never reconnected")
	}
	if newLeader := c.WaitForStreamLeader(stream); newLeader == leader {
		t.Fatalf("stream still led by stopped node %d", leader)
	}
	// Retried publishes (lost acks) carry the same ID; the new leader must
	// recognise IDs stored under the old one.
	for i := n - 10; i < n; i++ {
		if dup, _ := publish(ctx, t, pub.JS, i); !dup {
			t.Fatalf("re-publish of message %d not de-duplicated", i)
		}
	}

	seen := make(map[int]bool, 2*n)
	for len(seen) < 2*n {
		batch, err := cons.Fetch(2*n, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			if ctx.Err() != nil {
				t.Fatalf("consumed %d of %d: %v", len(seen), 2*n, err)
			}
			time.Sleep(50 * time.Millisecond) // consumer leader still moving
			continue
		}
		for m := range batch.Messages() {
			i, _ := strconv.Atoi(string(m.Data()))
			if seen[i] {
				t.Fatalf("message %d delivered twice", i)
			}
			seen[i] = true
			if err := m.DoubleAck(ctx); err != nil {
				t.Fatalf("ack %d: %v", i, err)
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d before the deadline", len(seen), 2*n)
		}
	}
	for i := range 2 * n {
		if !seen[i] {
			t.Fatalf("message %d lost", i)
		}
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2*n {
		t.Fatalf("stream holds %d messages, want %d", info.State.Msgs, 2*n)
	}
	phase(fmt.Sprintf("all %d consumed once", 2*n))

	c.Restart(leader)
	c.WaitForStreamCurrent(leader, stream)
	c.waitFor(fmt.Sprintf("node %d to hold all %d messages", leader, 2*n), func() bool {
		st, ok := c.StreamState(leader, stream)
		return ok && st.Msgs == 2*n && st.LastSeq == 2*n
	})
	phase("old leader caught up")
}

// publishNew publishes message i for the first time. A duplicate is only
// acceptable after a retry: the server stored an attempt whose ack was lost.
func publishNew(ctx context.Context, t *testing.T, js jetstream.JetStream, i int) {
	t.Helper()
	if dup, attempts := publish(ctx, t, js, i); dup && attempts == 1 {
		t.Fatalf("first publish of message %d reported as duplicate", i)
	}
}

// publish sends message i with its index as Nats-Msg-Id, retrying through
// a leader election, and reports whether the server saw a duplicate.
func publish(ctx context.Context, t *testing.T, js jetstream.JetStream, i int) (dup bool, attempts int) {
	t.Helper()
	data := []byte(strconv.Itoa(i))
	for {
		attempts++
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		ack, err := js.Publish(pctx, "events.test", data, jetstream.WithMsgID("msg-"+string(data)))
		cancel()
		if err == nil {
			return ack.Duplicate, attempts
		}
		if ctx.Err() != nil {
			t.Fatalf("publish %d: %v", i, errors.Join(err, ctx.Err()))
		}
		time.Sleep(50 * time.Millisecond) // no leader yet: try again shortly
	}
}
