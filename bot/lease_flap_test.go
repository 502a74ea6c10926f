package bot

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/event"
)

// A leader's resolution of a replaced incident (Bot.pending) is handed to
// the notifier, which drops it if the lease is lost before Slack's pace
// lets it out (notify: Message.LeaderOnly). The lease is taken back at
// once (a flap: nobody else led): the takeover must render that
// resolution again, else the incident's message says "open" for good
// while its thread says "Resolved" (replies are not leader-only).
func TestFlapResendsPendingResolution(t *testing.T) {
	var lead atomic.Bool
	lead.Store(true)
	out := &rootRecorder{roots: map[string]bool{}}
	b, _ := flapBot(t, &lead, out)
	seeded := map[int]bool{}
	first := flapEvents(t, seeded, 0, 0) // HostedCluster, Unknown, Ready
	for _, e := range first[:2] {
		handleEvent(t, b, e)
	}
	b.flush(context.Background())
	k := diagnose.Key{Source: "mgmt-p", Cluster: event.ClusterRef{Namespace: "ns", Name: "hc-0"}}
	a := b.incidents[k]
	if a == nil || !a.n.rooted {
		t.Fatalf("incident A = %+v, want posted open", a)
	}
	out.roots[a.Key] = true
	// A resolves and the next flap replaces it before the flush: its
	// resolution waits as pending, and the flush sends it.
	handleEvent(t, b, first[2])
	handleEvent(t, b, flapEvents(t, seeded, 0, 1)[0])
	if len(b.pending) != 1 {
		t.Fatalf("%d pending, want A's resolution", len(b.pending))
	}
	b.flush(context.Background())
	resolved := func() int {
		n := 0
		for _, m := range out.msgs {
			if m.Key == a.Key && strings.Contains(m.Text, "RESOLVED") {
				n++
			}
		}
		return n
	}
	if n := resolved(); n != 1 {
		t.Fatalf("A's resolution sent %d times, want 1", n)
	}

	// The lease flaps; the notifier dropped the queued resolution.
	b.LeaderChanged(false)
	b.LeaderChanged(true)
	b.flush(context.Background())
	if n := resolved(); n != 2 {
		t.Errorf("A's resolution sent %d times, want 2: after the flap the notifier may have dropped it, and nothing renders it again", n)
	}
}
