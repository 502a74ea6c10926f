package bot

import (
	"testing"
	"time"

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
