package bot

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/scenario"
)

// An incident is born looked up (no message to look for) only when the
// event that opens it was stored from liveFrom on; one opened by an
// earlier event, which a replica lagging behind the old leader applies
// after it took the lead, is looked up as before.
func TestLiveFromMarksOnlyLaterIncidents(t *testing.T) {
	b, _ := stageBot(t, Config{GroupWait: time.Second})
	b.liveFrom = 100
	apply := func(name string, seq uint64) *Incident {
		t.Helper()
		events, err := scenario.NodeFleet("mgmt-1", "clusters", name, 3, t0, 1)
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range events {
			p, err := e.DecodePayload()
			b.apply(e, p, err, seq+uint64(i))
		}
		inc := b.incidents[diagnose.Key{Source: "mgmt-1", Cluster: event.ClusterRef{Namespace: "clusters", Name: name}}]
		if inc == nil {
			t.Fatalf("no incident for %s", name)
		}
		return inc
	}
	if inc := apply("stored-before", 50); inc.n.checked {
		t.Error("an incident opened by an event stored before the lead was taken is not looked up")
	}
	if inc := apply("stored-after", 100); !inc.n.checked {
		t.Error("an incident opened by an event stored after the lead was taken is looked up")
	}
	b.liveFrom = 0
	if inc := apply("not-leading", 500); inc.n.checked {
		t.Error("an incident opened while not leading is not looked up")
	}
}

// What a leader knew of its incidents' messages while it led holds only
// while it leads: once the lease is lost, another replica may post any of
// them. An incident born looked up (opened by an event stored after
// liveFrom) and still in its group wait when the lease was lost is posted
// by the next leader; if its cluster then heals and breaks again while
// this replica follows, its resolution must wait as pending, or the
// message stays open when this replica leads again. The lease may be lost
// and taken back before a flush sees it (the flush was busy with
// look-ups): bus.Lease reports the loss (LeaderChanged(false)) first.
func TestLiveCheckedForgottenWhenTheLeaseIsLost(t *testing.T) {
	for _, seen := range []bool{true, false} {
		name := "loss seen by a flush"
		if !seen {
			name = "lost and taken back between two flushes"
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			var lead atomic.Bool
			lead.Store(true)
			out := &rootRecorder{roots: map[string]bool{}}
			b := New(Config{Channel: "C1", Now: func() time.Time { return t0 }, Leader: lead.Load, GroupWait: time.Hour}, nil, out, nil, zerolog.Nop())
			b.caughtUp = true
			b.flush(ctx)
			b.liveFrom = 100 // what liveSince reads from a stream (stageBot has none)
			seq := uint64(100)
			apply := func(events ...event.Event) {
				t.Helper()
				for _, e := range events {
					data, err := event.Encode(e)
					if err != nil {
						t.Fatal(err)
					}
					e, p, err := event.DecodeAll(data)
					b.apply(e, p, err, seq)
					seq++
				}
			}
			seeded := map[int]bool{}
			first := flapEvents(t, seeded, 0, 0) // the HostedCluster, Unknown, Ready
			apply(first[:2]...)
			var x *Incident
			for _, inc := range b.incidents {
				x = inc
			}
			if x == nil || !x.n.checked {
				t.Fatal("the incident opened while leading is not born looked up")
			}

			// The lease is lost; the next leader posts x.
			lead.Store(false)
			b.LeaderChanged(false)
			if seen {
				b.flush(ctx)
			} else {
				lead.Store(true)
				b.LeaderChanged(true)
			}
			out.roots[x.Key] = true
			// x heals and its cluster breaks again: x is replaced.
			apply(first[2:]...)
			apply(flapEvents(t, seeded, 0, 1)[:1]...)

			lead.Store(true)
			b.LeaderChanged(true)
			b.flush(ctx)
			for _, m := range out.msgs {
				if m.Key == x.Key {
					return
				}
			}
			t.Fatalf("the resolution of %s, posted by the other leader, was not sent: its message stays open", x.Key)
		})
	}
}

// A checkpoint is written by the leader, whose incidents may be born
// looked up (liveFrom) and wait out their group wait unposted. Restored
// after a crash, the replica follows until the old lease expires, and
// meanwhile replays what came after the checkpoint: the old leader posted
// such an incident, its cluster healed and broke again. Its resolution
// must wait as pending for the takeover's look-up; what the old leader
// knew of messages is not the restored replica's.
func TestRestoredIncidentsAreNotLookedUp(t *testing.T) {
	ctx := context.Background()
	var lead atomic.Bool
	lead.Store(true)
	cfg := Config{Channel: "C1", Now: func() time.Time { return t0 }, Leader: lead.Load, GroupWait: time.Hour}
	old := New(cfg, nil, &recorder{}, nil, zerolog.Nop())
	old.caughtUp = true
	old.flush(ctx)
	old.liveFrom = 100
	seeded := map[int]bool{}
	first := flapEvents(t, seeded, 0, 0) // the HostedCluster, Unknown, Ready
	seq := uint64(100)
	applyTo := func(b *Bot, events ...event.Event) {
		t.Helper()
		for _, e := range events {
			data, err := event.Encode(e)
			if err != nil {
				t.Fatal(err)
			}
			e, p, err := event.DecodeAll(data)
			b.apply(e, p, err, seq)
			seq++
		}
	}
	applyTo(old, first[:2]...)
	var buf bytes.Buffer
	old.mu.Lock()
	snap := old.snapshot()
	old.mu.Unlock()
	if err := snap.encode(&buf); err != nil {
		t.Fatal(err)
	}
	var x *Incident
	for _, inc := range old.incidents {
		x = inc
	}
	if x == nil || !x.n.checked {
		t.Fatal("the incident opened while leading is not born looked up")
	}

	// The old leader posts x and dies; the replica restored from its
	// checkpoint follows while its lease runs out.
	out := &rootRecorder{roots: map[string]bool{x.Key: true}}
	lead.Store(false)
	b := New(cfg, nil, out, nil, zerolog.Nop())
	r, err := decodeState(buf.Bytes(), nil)
	if err != nil {
		t.Fatal(err)
	}
	b.adopt(r)
	b.caughtUp = true
	b.flush(ctx)
	applyTo(b, first[2:]...)
	applyTo(b, flapEvents(t, seeded, 0, 1)[:1]...)

	lead.Store(true)
	b.flush(ctx)
	for _, m := range out.msgs {
		if m.Key == x.Key {
			return
		}
	}
	t.Fatalf("the resolution of %s, posted by the old leader, was not sent: its message stays open", x.Key)
}
