package fleet_test

import (
	"context"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/bot/command"
	"github.com/hcpbot/hcpbot/bot/fleet"
)

// BenchmarkFleetAnswers2000 measures the answers of a fleet of 2 groups
// holding 2,000 failing hosted clusters (scenario.Burst: 1,000 each, each
// with an open incident): the size of each fleet-wide answer of one group
// (gob, and gzip as it travels, against the server's max_payload), and
// how long a command through group 0 takes (group 1 over NATS, group 0
// in-process).
//
//	go test -v -run '^$' -bench FleetAnswers2000 -benchtime 5x ./bot/fleet/
//
// (-v prints the sizes). "status, one group alone" is the same command on
// group 1's own bot, without the fleet, for comparison.
func BenchmarkFleetAnswers2000(b *testing.B) {
	f := newFixture(b, 2000)
	maxPayload := f.conns[0].NC.MaxPayload()
	for _, op := range []string{fleet.OpClusters, fleet.OpStatus, fleet.OpIncidents, fleet.OpStates} {
		raw, wire, err := fleet.Sizes(f.bots[1], op)
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("%-9s answer of one group (1,000 clusters): gob %7.1f KB, gzip %6.1f KB = %d chunk(s) of max_payload %d KB",
			op, float64(raw)/1e3, float64(wire)/1e3, 1+wire/int(maxPayload-1024), maxPayload>>10)
	}
	h0 := &command.Handler{Bot: f.client(0, 30*time.Second)}
	c := f.client(0, 30*time.Second)
	for _, m := range []struct {
		name string
		run  func()
	}{
		{"status", func() { ask(h0, chatops.Status{}) }},
		{"status, one group alone", func() { ask(&command.Handler{Bot: f.bots[1]}, chatops.Status{}) }},
		{"incidents", func() { ask(h0, chatops.Incidents{}) }},
		{"diagnose (group 1)", func() { ask(h0, diagnoseCmd(1)) }},
		{"digest states", func() { c.GatherStates(context.Background()) }},
	} {
		b.Run(m.name, func(b *testing.B) {
			for b.Loop() {
				m.run()
			}
		})
	}
}
