package partition_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/partition"
)

// sources are management cluster names as agents are named: plain
// labels and dotted subdomains (escaped '~' in subjects, which the
// server hashes as written).
func sources(n int) []string {
	out := make([]string, 0, n)
	for i := range n {
		switch i % 3 {
		case 0:
			out = append(out, fmt.Sprintf("mgmt-%d", i))
		case 1:
			out = append(out, fmt.Sprintf("mgmt%d.corp.example", i))
		default:
			out = append(out, fmt.Sprintf("eu-west-%d-hcp", i))
		}
	}
	return out
}

// tagsFromServer publishes one event subject per source on a real
// nats-server carrying set's mappings and returns the tag the server
// wrote on each, by source.
func tagsFromServer(t *testing.T, set partition.Set, srcs []string) map[string]event.Tag {
	t.Helper()
	srv := natstest.RunServer(t, func(c *bus.EmbeddedConfig) { c.Mappings = set.Mappings() })
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	got := make(chan string, len(srcs))
	sub, err := nc.Subscribe(event.EventsStreamSubjects, func(m *nats.Msg) { got <- m.Subject })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	for _, src := range srcs {
		subj, err := event.Subject(event.Event{Source: src, Cluster: &event.ClusterRef{Namespace: "clusters", Name: "a.b"}, Type: event.TypeNode})
		if err != nil {
			t.Fatal(err)
		}
		if err := nc.Publish(subj, nil); err != nil {
			t.Fatal(err)
		}
	}
	out := map[string]event.Tag{}
	deadline := time.After(natstest.Timeout)
	for len(out) < len(srcs) {
		select {
		case s := <-got:
			p, err := event.ParseSubject(s)
			if err != nil {
				t.Fatalf("the server stored %q: %v", s, err)
			}
			out[p.Source] = p.Tag
		case <-deadline:
			t.Fatalf("%d of %d events delivered", len(out), len(srcs))
		}
	}
	return out
}

// TestOfIsTheServersPartition: for 240 sources and P in {2, 3, 4}, the
// group Of gives is the one nats-server's partition(P,1) mapping tags the
// event with (server/subject_transform.go, getHashPartition), and every
// group gets some sources.
func TestOfIsTheServersPartition(t *testing.T) {
	srcs := sources(240)
	for _, p := range []int{2, 3, 4} {
		t.Run(fmt.Sprint(p), func(t *testing.T) {
			set := partition.Set{Count: p}
			tags := tagsFromServer(t, set, srcs)
			per := make([]int, p)
			for _, src := range srcs {
				want := event.Tag{Count: p, Index: set.Of(src)}
				if tags[src] != want {
					t.Errorf("source %s: server tagged %+v, Of says %+v", src, tags[src], want)
				}
				if tok, _ := event.SourceToken(src); set.OfToken(tok) != set.Of(src) {
					t.Errorf("source %s: OfToken %d, Of %d", src, set.OfToken(tok), set.Of(src))
				}
				per[set.Of(src)]++
			}
			for k, n := range per {
				if n == 0 {
					t.Errorf("group %d of %d holds no source of %d", k, p, len(srcs))
				}
			}
		})
	}
}

// TestStaticMapOnTheServer: with a static map the server tags each listed
// source with its group, whatever the hash says, and leaves the others
// untagged (no catch-all beside literal mappings: Mappings); Of places
// those by the hash.
func TestStaticMapOnTheServer(t *testing.T) {
	srcs := sources(30)
	set := partition.Set{Count: 3, Static: map[string]int{}}
	for i, src := range srcs[:20] {
		// Against the hash where it can: (hash + 1) mod 3.
		set.Static[src] = (partition.Set{Count: 3}.Of(src) + 1 + i%2) % 3
	}
	if err := set.Check(); err != nil {
		t.Fatal(err)
	}
	tags := tagsFromServer(t, set, srcs)
	for i, src := range srcs {
		tag, tagged := set.Tag(src)
		if tags[src] != tag {
			t.Errorf("source %s: server tagged %+v, want %+v (tagged %v)", src, tags[src], tag, tagged)
		}
		if i < 20 && (!tagged || tag.Index != set.Static[src] || set.Of(src) != set.Static[src]) {
			t.Errorf("source %s: listed in group %d; Tag %+v, Of %d", src, set.Static[src], tag, set.Of(src))
		}
		if i >= 20 && (tagged || set.Of(src) != (partition.Set{Count: 3}).Of(src)) {
			t.Errorf("source %s: not listed: Tag %+v (tagged %v), Of %d, want the hash", src, tag, tagged, set.Of(src))
		}
	}
}

func TestNames(t *testing.T) {
	for _, tc := range []struct {
		id         partition.ID
		name, base string
	}{
		{partition.ID{Index: 0, Count: 1}, "", "bot"},
		{partition.ID{Index: 0, Count: 0}, "", "bot"},
		{partition.ID{Index: 0, Count: 2}, "p2-0", "bot-p2-0"},
		{partition.ID{Index: 3, Count: 4}, "p4-3", "bot-p4-3"},
	} {
		if got := tc.id.Name(); got != tc.name {
			t.Errorf("%+v.Name() = %q, want %q", tc.id, got, tc.name)
		}
		if got := tc.id.Suffix("bot"); got != tc.base {
			t.Errorf("%+v.Suffix(bot) = %q, want %q", tc.id, got, tc.base)
		}
	}
	one := partition.Set{}
	if one.Of("anything") != 0 || one.Mappings() != nil || one.NATSConf() != "" || one.CheckpointName("bot", one.ID(0)) != "bot" {
		t.Errorf("one group changes something: %+v", one)
	}
	a := partition.Set{Count: 2, Static: map[string]int{"a": 0, "b": 1}}
	b := partition.Set{Count: 2, Static: map[string]int{"a": 1, "b": 1}}
	if a.CheckpointName("bot", a.ID(1)) == b.CheckpointName("bot", b.ID(1)) || !strings.HasPrefix(a.CheckpointName("bot", a.ID(1)), "bot-p2-1-") {
		t.Errorf("checkpoint names of two layouts: %q, %q", a.CheckpointName("bot", a.ID(1)), b.CheckpointName("bot", b.ID(1)))
	}
	if (partition.Set{Count: 2}).CheckpointName("bot", partition.ID{Index: 1, Count: 2}) != "bot-p2-1" {
		t.Error("hash layout: checkpoint name is not bot-p2-1")
	}
}

func TestCheck(t *testing.T) {
	for _, bad := range []partition.Set{
		{Count: -1},
		{Count: 1, Static: map[string]int{"a": 0}},
		{Count: 2, Static: map[string]int{"a": 2}},
		{Count: 2, Static: map[string]int{"a": -1}},
		{Count: 2, Static: map[string]int{"": 0}},
	} {
		if bad.Check() == nil {
			t.Errorf("Check(%+v) = nil", bad)
		}
	}
	for _, bad := range []partition.ID{{Index: 2, Count: 2}, {Index: -1, Count: 3}, {Index: 1, Count: 1}} {
		if bad.Check() == nil {
			t.Errorf("Check(%+v) = nil", bad)
		}
	}
}
