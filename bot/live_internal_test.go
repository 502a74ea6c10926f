package bot

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/bot/notify"
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

// liveFlap is a leader whose liveFrom is 100 (what liveSince reads from
// a stream; these bots have none) fed one cluster's node flaps with
// stream sequences from 100 on; x is the incident of the first flap,
// opened while leading and still in its group wait.
type liveFlap struct {
	lead   atomic.Bool
	cfg    Config
	leader *Bot
	seq    uint64
	seeded map[int]bool
	flaps  [2][]event.Event // the HostedCluster, Unknown, Ready; then Unknown, Ready
	x      *Incident
}

func newLiveFlap(t *testing.T, out notify.Notifier) *liveFlap {
	t.Helper()
	l := &liveFlap{seq: 100, seeded: map[int]bool{}}
	l.lead.Store(true)
	l.cfg = Config{Channel: "C1", Now: func() time.Time { return t0 }, Leader: l.lead.Load, GroupWait: time.Hour}
	l.leader = New(l.cfg, nil, out, nil, zerolog.Nop())
	l.leader.caughtUp = true
	l.leader.flush(context.Background())
	l.leader.liveFrom = 100
	l.flaps = [2][]event.Event{flapEvents(t, l.seeded, 0, 0), flapEvents(t, l.seeded, 0, 1)}
	l.apply(t, l.leader, l.flaps[0][:2]...)
	for _, inc := range l.leader.incidents {
		l.x = inc
	}
	if l.x == nil || !l.x.n.checked {
		t.Fatal("the incident opened while leading is not born looked up")
	}
	return l
}

// apply hands b events with the next stream sequences.
func (l *liveFlap) apply(t *testing.T, b *Bot, events ...event.Event) {
	t.Helper()
	for _, e := range events {
		data, err := event.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		e, p, err := event.DecodeAll(data)
		b.apply(e, p, err, l.seq)
		l.seq++
	}
}

// replaceX heals x's cluster and breaks it again, then b leads and
// flushes: x's resolution is to reach the message another replica posted.
func (l *liveFlap) replaceX(t *testing.T, b *Bot, out *rootRecorder) {
	t.Helper()
	l.apply(t, b, l.flaps[0][2:]...)
	l.apply(t, b, l.flaps[1][:1]...)
	l.lead.Store(true)
	b.LeaderChanged(true)
	b.flush(context.Background())
	for _, m := range out.msgs {
		if m.Key == l.x.Key {
			return
		}
	}
	t.Fatalf("the resolution of %s, posted by another replica, was not sent: its message stays open", l.x.Key)
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
			out := &rootRecorder{roots: map[string]bool{}}
			l := newLiveFlap(t, out)
			// The lease is lost; the next leader posts x.
			l.lead.Store(false)
			l.leader.LeaderChanged(false)
			if seen {
				l.leader.flush(context.Background())
			} else {
				l.lead.Store(true)
				l.leader.LeaderChanged(true)
			}
			out.roots[l.x.Key] = true
			l.replaceX(t, l.leader, out)
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
	l := newLiveFlap(t, &recorder{})
	var buf bytes.Buffer
	l.leader.mu.Lock()
	snap := l.leader.snapshot()
	l.leader.mu.Unlock()
	if err := snap.encode(&buf); err != nil {
		t.Fatal(err)
	}

	// The old leader posts x and dies; the replica restored from its
	// checkpoint follows while its lease runs out.
	out := &rootRecorder{roots: map[string]bool{l.x.Key: true}}
	l.lead.Store(false)
	b := New(l.cfg, nil, out, nil, zerolog.Nop())
	r, err := decodeState(buf.Bytes(), nil)
	if err != nil {
		t.Fatal(err)
	}
	b.adopt(r)
	b.caughtUp = true
	b.flush(context.Background())
	l.replaceX(t, b, out)
}

// losingLookups is a store whose look-ups take so long that the lease
// is lost meanwhile (lose runs during the first).
type losingLookups struct {
	recorder
	lose func()
}

func (l *losingLookups) HasRoot(context.Context, string) (bool, error) {
	if l.lose != nil {
		l.lose()
		l.lose = nil
	}
	return false, nil
}

// A flush's look-ups are network calls (up to 5 s each); the lease may
// run out during them, and the next leader, taking over, posts what it
// does not find and needs no look-up for what is opened from then on
// (liveSince). The flush that looked up sends nothing once they are
// over if the lease was lost meanwhile, even if taken back since: it was
// not the one sender throughout; the next flush takes over again.
func TestNoSendAfterTheLeaseIsLostDuringLookups(t *testing.T) {
	for _, back := range []bool{false, true} {
		t.Run(fmt.Sprintf("taken back %v", back), func(t *testing.T) {
			var lead atomic.Bool
			lead.Store(true)
			out := &losingLookups{}
			b := New(Config{Channel: "C1", Now: func() time.Time { return t0 }, Leader: lead.Load}, nil, out, nil, zerolog.Nop())
			b.caughtUp = true
			inc := incident("a", t0.Add(-time.Minute))
			b.incidents[inc.Cluster] = inc
			out.lose = func() {
				lead.Store(false)
				b.LeaderChanged(false)
				if back {
					lead.Store(true)
					b.LeaderChanged(true)
				}
			}
			b.flush(context.Background())
			if len(out.msgs) > 0 {
				t.Fatalf("a flush sent %d messages after its lease was lost during its look-ups", len(out.msgs))
			}
			if !back {
				return
			}
			b.flush(context.Background())
			if len(out.msgs) != 1 || !inc.n.checked {
				t.Fatalf("the next flush, leading again, sent %d messages (looked up: %v)", len(out.msgs), inc.n.checked)
			}
		})
	}
}

// The same loss, seen by a storm: incidents born looked up, posted one by
// one by the leader of the meantime, keep their own messages up to date
// when this replica, which took the lease back before a flush looked,
// folds them into a storm (a member posted before its storm formed);
// taken for unposted, the storm would speak for them and their messages
// stay as the other leader left them.
func TestLiveIncidentsPostedMeanwhileKeepTheirMessages(t *testing.T) {
	var lead atomic.Bool
	lead.Store(true)
	out := &rootRecorder{roots: map[string]bool{}}
	b := New(Config{Channel: "C1", Now: func() time.Time { return t0 }, Leader: lead.Load, StormThreshold: 3}, nil, out, nil, zerolog.Nop())
	b.caughtUp = true
	b.flush(context.Background())
	for _, inc := range members(3, t0.Add(-time.Minute), func(inc *Incident) { inc.n.checked = true }) {
		b.incidents[inc.Cluster] = inc
		out.roots[inc.Key] = true
	}
	lead.Store(false)
	b.LeaderChanged(false)
	lead.Store(true)
	b.LeaderChanged(true)
	b.flush(context.Background())
	sent := map[string]bool{}
	for _, m := range out.msgs {
		sent[m.Key] = true
	}
	for _, inc := range b.incidents {
		if !sent[inc.Key] {
			t.Errorf("%s, posted by the other leader, was not updated (storm %q): its message stays as it was", inc.Cluster.Cluster.Name, inc.Storm)
		}
	}
}
