package chatops

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/bot/blockkit"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
	"github.com/nats-io/nats.go/jetstream"
)

func TestMemoryReplayGuard(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1_700_000_000, 0)
	g := NewMemoryReplayGuard(0, 3)
	g.now = func() time.Time { return now }
	first := func(k string) bool {
		t.Helper()
		ok, err := g.FirstSeen(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !first("a") || first("a") {
		t.Fatal("a: want first, then seen")
	}
	now = now.Add(ReplayWindow - time.Second)
	if first("a") {
		t.Error("a forgotten inside the window")
	}
	now = now.Add(2 * time.Second)
	if !first("a") {
		t.Error("a remembered past the window")
	}
	// Cap of 3: the oldest goes first.
	for _, k := range []string{"b", "c", "d"} {
		if !first(k) {
			t.Errorf("%s not first", k)
		}
	}
	if !first("a") {
		t.Error("a survived beyond the cap")
	}
	if first("d") {
		t.Error("d, the newest, was dropped")
	}
	if len(g.set.items) > 3 {
		t.Errorf("%d keys kept", len(g.set.items))
	}
}

func TestMemoryReplayGuardConcurrent(t *testing.T) {
	g := NewMemoryReplayGuard(0, 0)
	var firsts atomic.Int32
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			if ok, _ := g.FirstSeen(context.Background(), "k"); ok {
				firsts.Add(1)
			}
		})
	}
	wg.Wait()
	if firsts.Load() != 1 {
		t.Errorf("%d firsts", firsts.Load())
	}
}

func TestTTLMapPrunesOrder(t *testing.T) {
	m := newTTLMap[int](time.Minute, 1000)
	now := time.Unix(0, 0)
	for i := range 500 {
		m.put(strconv.Itoa(i), i, now)
	}
	now = now.Add(2 * time.Minute)
	m.put("x", 1, now)
	if len(m.items) != 1 || len(m.order) != 1 {
		t.Errorf("items %d order %d after expiry", len(m.items), len(m.order))
	}
}

func connectJS(t *testing.T) jetstream.JetStream {
	t.Helper()
	srv := natstest.RunServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), natstest.Timeout)
	defer cancel()
	conn, err := bus.Connect(ctx, bus.Config{URLs: []string{srv.ClientURL()}, Name: "chatops-test"}, natstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	return conn.JS
}

func TestKVReplayGuard(t *testing.T) {
	js := connectJS(t)
	ctx, cancel := context.WithTimeout(context.Background(), natstest.Timeout)
	defer cancel()

	short, err := bus.EnsureKV(ctx, js, bus.KVSpec{Bucket: "short", TTL: 6 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewKVReplayGuard(ctx, short); !errors.Is(err, ErrReplayBucketTTL) {
		t.Errorf("6m bucket: %v, want ErrReplayBucketTTL", err)
	}
	forever, err := bus.EnsureKV(ctx, js, bus.KVSpec{Bucket: "forever"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewKVReplayGuard(ctx, forever); !errors.Is(err, ErrReplayBucketTTL) {
		t.Errorf("TTL-less bucket: %v, want ErrReplayBucketTTL", err)
	}

	kv, err := EnsureReplayBucket(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	g, err := NewKVReplayGuard(ctx, kv)
	if err != nil {
		t.Fatal(err)
	}
	key := replayKey("1700000000", []byte("sig"))
	var firsts atomic.Int32
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			ok, err := g.FirstSeen(ctx, key)
			if err != nil {
				t.Error(err)
			}
			if ok {
				firsts.Add(1)
			}
		})
	}
	wg.Wait()
	if firsts.Load() != 1 {
		t.Errorf("%d replicas saw the key first", firsts.Load())
	}
}

// TestReplayAcrossReplicas runs two bot replicas sharing the NATS KV
// guard: a request replayed to the other replica is refused.
func TestReplayAcrossReplicas(t *testing.T) {
	js := connectJS(t)
	ctx, cancel := context.WithTimeout(context.Background(), natstest.Timeout)
	defer cancel()
	kv, err := EnsureReplayBucket(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	guard := func() ReplayGuard {
		// Each replica has its own guard value on its own view of the bucket.
		kvr, err := js.KeyValue(ctx, kv.Bucket())
		if err != nil {
			t.Fatal(err)
		}
		g, err := NewKVReplayGuard(ctx, kvr)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	rec := slackrec.New(t)
	a := newEnv(t, rec, nil, WithReplayGuard(guard()))
	b := newEnv(t, rec, nil, WithReplayGuard(guard()))

	again := replayable(t, a.command("approve act-7f3k9q", time.Now()))
	if r := do(t, again()); r.status != http.StatusOK {
		t.Fatalf("replica a: %d %q", r.status, r.body)
	}
	if r := do(t, retarget(again(), b.http.URL)); r.status != http.StatusUnauthorized {
		t.Errorf("replay to replica b: %d %q", r.status, r.body)
	}
	if r := do(t, again()); r.status != http.StatusUnauthorized {
		t.Errorf("replay to replica a: %d", r.status)
	}
	if a.h.called() != 1 || b.h.called() != 0 || b.rejected(reasonReplay) != 1 || a.rejected(reasonReplay) != 1 {
		t.Errorf("calls a=%d b=%d, replays a=%v b=%v", a.h.called(), b.h.called(), a.rejected(reasonReplay), b.rejected(reasonReplay))
	}

	// The same press raced to both replicas at once: exactly one wins.
	for i := range 5 {
		press := replayable(t, a.press(blockkit.ActionApprove, "act-race"+strconv.Itoa(i), time.Now()))
		var ok atomic.Int32
		var wg sync.WaitGroup
		for j := range 4 {
			wg.Go(func() {
				req := press()
				if j%2 == 1 {
					req = retarget(req, b.http.URL)
				}
				switch r := do(t, req); r.status {
				case http.StatusOK:
					ok.Add(1)
				case http.StatusUnauthorized:
				default:
					t.Errorf("status %d", r.status)
				}
			})
		}
		wg.Wait()
		if ok.Load() != 1 {
			t.Errorf("press %d accepted %d times", i, ok.Load())
		}
	}
	rec.WaitFor(t, 5*time.Second, func(*slackrec.Recorder) bool {
		return len(a.h.actions())+len(b.h.actions()) == 5
	})
}
