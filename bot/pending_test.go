package bot

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/scenario"
)

// rootRecorder is a recorder whose store says which keys have a message
// (notify.RootChecker): those the previous leader posted.
type rootRecorder struct {
	recorder
	roots map[string]bool
}

func (r *rootRecorder) HasRoot(_ context.Context, key string) (bool, error) { return r.roots[key], nil }

// flapBot is a follower (Leader false until lead is set) fed node flaps:
// each opens an incident on its cluster and resolves it a minute later,
// and the next flap replaces it.
func flapBot(t *testing.T, lead *atomic.Bool, out *rootRecorder) (*Bot, func(cluster, cycle int)) {
	t.Helper()
	cfg := Config{Channel: "C1", Now: func() time.Time { return t0 }, Leader: lead.Load}
	b := New(cfg, nil, out, nil, zerolog.Nop())
	seeded := map[int]bool{}
	return b, func(c, cycle int) {
		t.Helper()
		for _, e := range flapEvents(t, seeded, c, cycle) {
			handleEvent(t, b, e)
		}
	}
}

// handleEvent hands b one event as the stream carries it.
func handleEvent(t *testing.T, b *Bot, e event.Event) {
	t.Helper()
	data, err := event.Encode(e)
	if err != nil {
		t.Fatal(err)
	}
	b.Handle(context.Background(), data)
}

// flapEvents are cluster c's node flap of cycle: its HostedCluster the
// first time (seeded records it), the node Unknown (an incident opens),
// then Ready a minute later (it resolves).
func flapEvents(t *testing.T, seeded map[int]bool, c, cycle int) []event.Event {
	t.Helper()
	at := t0.Add(time.Duration(cycle) * time.Hour).Add(time.Duration(c) * time.Second)
	var out []event.Event
	if !seeded[c] {
		seeded[c] = true
		events, err := scenario.Storm("mgmt-p", "ns", c+1, 0, at.Add(-time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, events[c*2]) // the HostedCluster alone
	}
	ref := event.ClusterRef{Namespace: "ns", Name: fmt.Sprintf("hc-%d", c)}
	node := event.ObjectRef{Kind: "Node", Name: ref.Name + "-n", UID: "uid-" + ref.Name + "-n", Hosted: true}
	for i, st := range []event.ConditionStatus{event.ConditionUnknown, event.ConditionTrue} {
		ltt := at.Add(time.Duration(i) * time.Minute)
		p := event.NodeReadiness{Node: node.Name, Ready: st, Reason: "NodeStatusUnknown", LastTransitionTime: ltt}
		e, err := event.New("mgmt-p", &ref, node, p, event.TransitionAt("Ready="+string(st), ltt), ltt)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	return out
}

// A follower fed 500 replace cycles on each of 3 clusters over 500 hours
// keeps the pending resolutions of the last PendingHorizon (72 h) only,
// each compacted to what its resolved rendering needs.
func TestFollowerPendingBounded(t *testing.T) {
	var lead atomic.Bool
	b, flap := flapBot(t, &lead, &rootRecorder{})
	const clusters, cycles = 3, 500
	for cycle := range cycles {
		for c := range clusters {
			flap(c, cycle)
		}
	}
	b.flush(context.Background()) // a follower's flush: the gate
	perHorizon := clusters * (int(b.cfg.PendingHorizon/time.Hour) + 1)
	if n := len(b.pending); n == 0 || n > 2*perHorizon {
		t.Fatalf("a follower fed %d replaced incidents keeps %d pending, want 1..%d (the last 72 h, scanned when doubled)", clusters*cycles, n, 2*perHorizon)
	}
	for _, p := range b.pending {
		if len(p.Diagnoses) != 1 || p.Diagnoses[0].Title == "" || len(p.Diagnoses[0].Evidence) > 0 || p.n.state != "" {
			t.Fatalf("pending %s not compacted: %d diagnoses, %+v", p.Key, len(p.Diagnoses), p.Diagnoses)
		}
	}
}

// The old leader posted incident A and died before resolving it; A was
// resolved and replaced (and compacted) while this replica followed. When
// it takes over, A's message is updated to exactly the resolved rendering
// the full incident had.
func TestTakeOverResolvesCompactedPending(t *testing.T) {
	var lead atomic.Bool
	out := &rootRecorder{roots: map[string]bool{}}
	b, flap := flapBot(t, &lead, out)
	flap(0, 0)
	k := diagnose.Key{Source: "mgmt-p", Cluster: event.ClusterRef{Namespace: "ns", Name: "hc-0"}}
	a := b.incidents[k]
	if a == nil || a.Open() {
		t.Fatalf("incident A = %+v, want resolved", a)
	}
	want, _ := Render(a, t0)
	if !strings.Contains(want, "RESOLVED") || strings.Contains(want, "— resolved (") {
		t.Fatalf("A renders %q, want its title", want)
	}
	out.roots[a.Key] = true
	for cycle := 1; cycle < 20; cycle++ {
		flap(0, cycle)
	}
	lead.Store(true)
	b.flush(context.Background())
	var got []string
	for _, m := range out.msgs {
		if m.Key == a.Key {
			got = append(got, m.Text)
		}
	}
	if len(got) != 1 || got[0] != want {
		t.Fatalf("A's message got %q, want once %q", got, want)
	}
	if len(b.pending) != 0 {
		t.Errorf("%d pending after the leader's flush", len(b.pending))
	}
}
