package bot

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/bot/notify"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
)

// A follower lets go of the pending resolutions nothing will send, asking
// the Slack notifier's store on the embedded NATS (the one the leader
// writes): the leader A posts incident I0 and its resolution, posts I1
// and dies; I1 resolves while only the follower F runs, and I2 opens and
// resolves unposted. Each is then replaced by its cluster's next incident.
// F's sweep releases I0 (its message shows the resolution, its reply is
// posted) and I2 once it is older than pendingSettle (nobody was told it
// opened), and keeps I1. When F takes over, I1's message is resolved
// exactly once, and nothing more is said about I0 and I2.
func TestFollowerSweepKeepsOnlyOwedResolutions(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := natstest.Logger(t)
	srv := natstest.RunServer(t)
	conn, err := bus.Connect(ctx, bus.Config{URLs: []string{srv.ClientURL()}}, log)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rec := slackrec.New(t)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	notifier := func() *notify.Slack {
		store, err := notify.NewKVStore(ctx, conn.JS, notify.KVConfig{})
		if err != nil {
			t.Fatal(err)
		}
		n, err := notify.NewSlack(notify.SlackConfig{Client: notify.NewSlackClient("xoxb-test", rec.APIURL(), nil), Store: store, Log: log})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { _ = n.Run(ctx) })
		return n
	}
	var clock atomic.Int64
	clock.Store(t0.UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	var fLeads atomic.Bool
	nA, nF := notifier(), notifier()
	a := New(Config{Channel: "C1", Now: now}, nil, nA, nil, log)
	f := New(Config{Channel: "C1", Now: now, Leader: fLeads.Load}, nil, nF, nil, log)

	seeded := map[int]bool{}
	feed := func(events []event.Event, bots ...*Bot) {
		t.Helper()
		for _, e := range events {
			for _, b := range bots {
				handleEvent(t, b, e)
			}
		}
	}
	// until flushes b until ok holds, for 30 s at most.
	until := func(what string, b *Bot, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !ok(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 30 s; Slack calls: %d", what, len(rec.Calls()))
			}
			b.flush(ctx)
		}
	}
	key := func(c string) diagnose.Key {
		return diagnose.Key{Source: "mgmt-p", Cluster: event.ClusterRef{Namespace: "ns", Name: c}}
	}
	// delivered: what send hands over for inc's resolution is in the store.
	delivered := func(inc *Incident) bool {
		var ids []string
		for _, r := range incidentReplies(inc, false, "", evidenceSet(inc)) {
			ids = append(ids, r.ID)
		}
		ok, err := nF.Delivered(ctx, inc.Key, digest(Render(inc, inc.Opened)), ids)
		return err == nil && ok
	}
	posted := func(inc *Incident) func() bool {
		return func() bool {
			r, err := nF.HasRoot(ctx, inc.Key)
			return err == nil && r && inc.n.rooted
		}
	}

	// I0: posted and resolved by A.
	e0 := flapEvents(t, seeded, 0, 0)
	feed(e0[:len(e0)-1], a, f)
	i0 := a.incidents[key("hc-0")]
	until("I0 posted", a, posted(i0))
	feed(e0[len(e0)-1:], a, f)
	until("I0 resolved in Slack", a, func() bool { return !i0.Open() && delivered(i0) })
	// I1: posted by A, which dies; resolved while F alone runs.
	e1 := flapEvents(t, seeded, 1, 0)
	feed(e1[:len(e1)-1], a, f)
	i1 := a.incidents[key("hc-1")]
	until("I1 posted", a, posted(i1))
	feed(e1[len(e1)-1:], f)
	// I2: never posted.
	feed(flapEvents(t, seeded, 2, 5), f)
	// The next incident of each cluster replaces them on F.
	for c, cycle := range []int{1, 1, 6} {
		e := flapEvents(t, seeded, c, cycle)
		feed(e[:len(e)-1], f)
	}
	pendingKeys := func() []string {
		f.mu.Lock()
		defer f.mu.Unlock()
		var out []string
		for _, p := range f.pending {
			out = append(out, p.Cluster.Cluster.Name)
		}
		return out
	}
	if got := strings.Join(pendingKeys(), ","); got != "hc-0,hc-1,hc-2" {
		t.Fatalf("F's pending before its sweep: %s, want hc-0,hc-1,hc-2", got)
	}

	// I2 resolved 4 minutes ago: too recent to let go unrooted.
	clock.Store(t0.Add(5*time.Hour + 5*time.Minute).UnixNano())
	f.flush(ctx)
	if got := strings.Join(pendingKeys(), ","); got != "hc-1,hc-2" {
		t.Fatalf("F's pending after its sweep: %s, want hc-1,hc-2 (I0's resolution was sent, I2 resolved within pendingSettle)", got)
	}
	clock.Store(t0.Add(7 * time.Hour).UnixNano())
	f.flush(ctx)
	if got := strings.Join(pendingKeys(), ","); got != "hc-1" {
		t.Fatalf("F's pending an hour later: %s, want hc-1 (only I1's resolution is owed)", got)
	}

	// F takes over and resolves I1's message.
	fLeads.Store(true)
	var i1f *Incident
	f.mu.Lock()
	i1f = f.pending[0]
	f.mu.Unlock()
	until("I1 resolved in Slack", f, func() bool { return len(pendingKeys()) == 0 && delivered(i1f) })
	resolved := map[string]int{}
	for _, c := range rec.Calls() {
		if text := c.Form.Get("text"); strings.Contains(text, "RESOLVED") {
			for _, hc := range []string{"hc-0", "hc-1", "hc-2"} {
				if strings.Contains(text, "ns/"+hc+" ") {
					resolved[hc]++
				}
			}
		}
	}
	if resolved["hc-0"] != 1 || resolved["hc-1"] != 1 || resolved["hc-2"] != 0 {
		t.Fatalf("resolved renderings sent per cluster: %v, want hc-0 and hc-1 once, hc-2 never", resolved)
	}
}
