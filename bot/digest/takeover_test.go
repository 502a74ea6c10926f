package digest_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/bot/digest"
	"github.com/hcpbot/hcpbot/bot/notify"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
)

// dying is the notifier of a replica that dies right after taking a tick:
// its first Upsert reports the take and then hangs until the replica's
// context ends, so nothing of the digest reaches Slack.
type dying struct{ upserted chan struct{} }

func (d dying) Upsert(ctx context.Context, _ notify.Message) error {
	close(d.upserted)
	<-ctx.Done()
	return ctx.Err()
}
func (dying) Reply(ctx context.Context, _ notify.Reply) error { return ctx.Err() }
func (dying) Run(ctx context.Context) error                   { <-ctx.Done(); return nil }

// rootOnly is the notifier of a replica that dies half-way through a
// post: the root goes out through its real notifier, its first Reply
// reports that and hangs until the replica's context ends.
type rootOnly struct {
	notify.Notifier
	replying chan struct{}
	once     *sync.Once
}

func (r rootOnly) Reply(ctx context.Context, _ notify.Reply) error {
	r.once.Do(func() { close(r.replying) })
	<-ctx.Done()
	return ctx.Err()
}

// At least once, posted once: replica A takes a tick and dies before
// posting; replica B, firing the same tick, takes it over once A's lease
// has passed and posts it: one root in Slack, with its thread. A replica
// restarted afterwards finds the tick posted. A replica that dies after
// its root reached Slack, before the thread: the takeover completes the
// same message (the notifier keys are the tick's), no second root. And the
// normal path: two replicas with real Slack notifiers racing for a tick
// post one root.
func TestTickTakeover(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	srv := natstest.RunServer(t)
	log := natstest.Logger(t)
	rec := slackrec.New(t)
	const lost, partial, raced = "C0TAKEOVER", "C0PARTIAL1", "C0RACE0001"
	ds := digests(t, "  - {name: lost, schedule: '0 0 8 * * *', timezone: Europe/Berlin, channel: "+lost+"}\n"+
		"  - {name: raced, schedule: '0 0 9 * * *', timezone: Europe/Berlin, channel: "+raced+"}\n"+
		"  - {name: partial, schedule: '0 0 10 * * *', timezone: Europe/Berlin, channel: "+partial+"}\n")
	src := states{{Key: keyBad, Known: true, HostedCluster: hc(".corp.example")}}
	const lease = time.Second
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })

	newRunner := func(out notify.Notifier) *digest.Runner {
		t.Helper()
		conn, err := bus.Connect(ctx, bus.Config{URLs: []string{srv.ClientURL()}}, log)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(conn.Close)
		r, err := digest.NewRunner(ctx, conn.JS, digest.Config{Digests: ds, Bot: src, Out: out, TickLease: lease,
			Now: func() time.Time { return t0 }, Log: log})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// slackNotifier delivers to the recorder until ctx ends. A short claim
	// lease: should a dying replica leave a root claim without its ts, the
	// takeover finds the post within the test's deadlines.
	slackNotifier := func(ctx context.Context) notify.Notifier {
		t.Helper()
		conn, err := bus.Connect(ctx, bus.Config{URLs: []string{srv.ClientURL()}}, log)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(conn.Close)
		store, err := notify.NewKVStore(ctx, conn.JS, notify.KVConfig{})
		if err != nil {
			t.Fatal(err)
		}
		n, err := notify.NewSlack(notify.SlackConfig{Client: notify.NewSlackClient("xoxb-test", rec.APIURL(), nil), Store: store, Log: log,
			ClaimLease: 3 * time.Second, ClaimPoll: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { _ = n.Run(ctx) })
		return n
	}
	slackRunner := func() *digest.Runner { t.Helper(); return newRunner(slackNotifier(ctx)) }
	// replies counts the thread replies under root ts (Thread starts with
	// the root itself).
	replies := func(channel, ts string) int { return max(len(rec.Thread(channel, ts))-1, 0) }
	roots := func(channel string) []slackrec.Message {
		var out []slackrec.Message
		for _, m := range rec.Messages(channel) {
			if m.ThreadTS == "" {
				out = append(out, m)
			}
		}
		return out
	}

	// A takes the tick and dies before anything is posted.
	tick := ds[0].Next(t0)
	dead := dying{upserted: make(chan struct{})}
	a := newRunner(dead)
	aCtx, aDies := context.WithCancel(ctx)
	aDone := make(chan error, 1)
	takenBy := time.Now()
	go func() {
		ok, err := a.Fire(aCtx, ds[0], tick)
		if !ok {
			t.Error("replica A did not take the free tick")
		}
		aDone <- err
	}()
	b := slackRunner()
	select {
	case <-dead.upserted:
	case <-time.After(30 * time.Second):
		t.Fatal("replica A never got to post")
	}
	aDies()
	select {
	case err := <-aDone:
		if err == nil {
			t.Error("replica A's post succeeded though it died")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("replica A's Fire did not return after its context ended")
	}
	// B fires the same tick: it waits out A's lease, then takes over.
	ok, err := b.Fire(ctx, ds[0], tick)
	if !ok || err != nil {
		t.Fatalf("replica B did not post the abandoned tick (ok=%v err=%v)", ok, err)
	}
	if held := time.Since(takenBy); held < lease {
		t.Errorf("B took the tick over after %v, before A's lease of %v", held, lease)
	}
	rec.WaitFor(t, 30*time.Second, func(*slackrec.Recorder) bool {
		rs := roots(lost)
		return len(rs) == 1 && replies(lost, rs[0].TS) > 0
	})
	// Posted is final: a replica restarted now does not post it again.
	if ok, err := newRunner(&recorder{}).Fire(ctx, ds[0], tick); ok || err != nil {
		t.Errorf("restarted replica posted the taken-over tick again (ok=%v err=%v)", ok, err)
	}

	// A second replica dies after its root reached Slack, before the
	// thread; B completes the post under the same root.
	tick = ds[2].Next(t0)
	dCtx, dDies := context.WithCancel(ctx)
	half := rootOnly{Notifier: slackNotifier(dCtx), replying: make(chan struct{}), once: &sync.Once{}}
	d := newRunner(half)
	dDone := make(chan struct{})
	go func() {
		defer close(dDone)
		if ok, err := d.Fire(dCtx, ds[2], tick); !ok || err == nil {
			t.Errorf("half-dead replica: ok=%v err=%v, want the tick taken and the post failed", ok, err)
		}
	}()
	select {
	case <-half.replying:
	case <-time.After(30 * time.Second):
		t.Fatal("the half-dead replica never got to its replies")
	}
	rec.WaitFor(t, 30*time.Second, func(*slackrec.Recorder) bool { return len(roots(partial)) == 1 })
	first := roots(partial)[0]
	if n := replies(partial, first.TS); n != 0 {
		t.Fatalf("the half-dead replica posted %d replies", n)
	}
	dDies()
	<-dDone
	if ok, err := b.Fire(ctx, ds[2], tick); !ok || err != nil {
		t.Fatalf("replica B did not complete the half-posted tick (ok=%v err=%v)", ok, err)
	}
	rec.WaitFor(t, 60*time.Second, func(*slackrec.Recorder) bool { return replies(partial, first.TS) > 0 })

	// Normal path: two replicas with Slack notifiers race for a tick.
	c := slackRunner()
	tick = ds[1].Next(t0)
	fireOnce(ctx, t, ds[1], tick, b, c)
	rec.WaitFor(t, 30*time.Second, func(*slackrec.Recorder) bool {
		rs := roots(raced)
		return len(rs) >= 1 && replies(raced, rs[0].TS) > 0
	})
	// Both ticks were marked posted, so nobody posts either again; the
	// notifiers have nothing left in flight that could add a root.
	rec.WaitFor(t, 30*time.Second, func(r *slackrec.Recorder) bool { return r.InFlight() == 0 })
	for _, ch := range []string{lost, partial, raced} {
		if n := len(roots(ch)); n != 1 {
			t.Errorf("%d digest roots in %s, want 1", n, ch)
		}
	}
}
