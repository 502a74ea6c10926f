package storm

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/event"
)

var t0 = time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)

func members(n int, step time.Duration, causes ...Cause) []Member {
	out := make([]Member, n)
	for i := range out {
		at := t0.Add(time.Duration(i) * step)
		out[i] = Member{Key: fmt.Sprintf("inc-%03d", i), Opened: at, Causes: causes, Seen: at}
	}
	return out
}

var (
	change = Cause{Kind: ProxyChange, Value: "HostedCluster|removed|kubernetes"}
	proxyA = Cause{Kind: ProxyEndpoint, Value: "http://a:3128"}
	proxyB = Cause{Kind: ProxyEndpoint, Value: "http://b:3128"}
	mgmt   = Cause{Kind: Management, Value: "mgmt-a"}
)

func TestFind(t *testing.T) {
	for _, tc := range []struct {
		name      string
		in        []Member
		threshold int
		want      []string // "cause-kind:n" per storm
		rest      int
	}{
		{"below threshold", members(4, time.Millisecond, proxyA, mgmt), 5, nil, 4},
		{"at threshold", members(5, time.Millisecond, proxyA, mgmt), 5, []string{"proxy-endpoint:5"}, 0},
		{"most specific cause wins", members(30, time.Millisecond, change, proxyA, mgmt), 5, []string{"proxy-change:30"}, 0},
		{"spread beyond the window", members(10, 10*time.Second, proxyA, mgmt), 4, []string{"proxy-endpoint:4", "proxy-endpoint:4"}, 2},
		{"two proxies, one management cluster", append(members(6, time.Millisecond, proxyA, mgmt),
			rename(members(3, time.Millisecond, proxyB, mgmt), "b")...), 5, []string{"proxy-endpoint:6"}, 3},
		{"leftovers pooled by management cluster", append(rename(members(3, time.Millisecond, proxyA, mgmt), "a"),
			rename(members(3, time.Millisecond, proxyB, mgmt), "b")...), 5, []string{"management-cluster:6"}, 0},
		{"threshold under 2 means 2", members(2, time.Millisecond, mgmt), 0, []string{"management-cluster:2"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			storms, rest := Find(tc.in, tc.threshold, 30*time.Second)
			var got []string
			for _, g := range storms {
				got = append(got, fmt.Sprintf("%s:%d", g.Cause.Kind, len(g.Members)))
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") || len(rest) != tc.rest {
				t.Errorf("Find = %v, rest %d; want %v, rest %d", got, len(rest), tc.want, tc.rest)
			}
		})
	}
}

func rename(ms []Member, prefix string) []Member {
	for i := range ms {
		ms[i].Key = prefix + ms[i].Key
	}
	return ms
}

// The same members in any order give the same storms and keys: a
// restarted bot finds the same message.
func TestFindIsDeterministic(t *testing.T) {
	in := members(25, time.Millisecond, proxyA, mgmt)
	a, _ := Find(in, 5, 30*time.Second)
	rev := make([]Member, len(in))
	for i, m := range in {
		rev[len(in)-1-i] = m
	}
	b, _ := Find(rev, 5, 30*time.Second)
	if len(a) != 1 || len(b) != 1 || a[0].Key() != b[0].Key() || a[0].Members[0].Key != "inc-000" {
		t.Fatalf("storms differ: %+v vs %+v", a, b)
	}
}

func TestJoins(t *testing.T) {
	last := t0
	if !Joins(proxyA, last, []Cause{proxyA, mgmt}, t0.Add(10*time.Second), 30*time.Second) {
		t.Error("same cause within the window should join")
	}
	if Joins(proxyA, last, []Cause{proxyA}, t0.Add(31*time.Second), 30*time.Second) {
		t.Error("beyond the window should not join")
	}
	if Joins(proxyA, last, []Cause{proxyB, mgmt}, t0, 30*time.Second) {
		t.Error("another proxy should not join")
	}
}

func TestCausesOf(t *testing.T) {
	k := diagnose.Key{Source: "mgmt-a", Cluster: event.ClusterRef{Namespace: "clusters", Name: "x"}}
	hc := event.HostedClusterState{Proxy: event.ProxySpec{HTTPSProxy: "http://user:s3cret@proxy.corp:3128"}}
	diags := []diagnose.Diagnosis{{Trigger: &diagnose.ProxyChangeRef{Target: "HostedCluster/clusters/x", Removed: []string{"kubernetes", "172.31.0.0/16"}}}}
	got := CausesOf(k, hc, true, diags)
	if len(got) != 3 || got[0].Kind != ProxyChange || got[1].Kind != ProxyEndpoint || got[2].Kind != Management {
		t.Fatalf("CausesOf = %+v", got)
	}
	if got[0].Value != "HostedCluster|removed|172.31.0.0/16,kubernetes" {
		t.Errorf("change value %q", got[0].Value)
	}
	for _, c := range got {
		if strings.Contains(c.Value+c.Text, "s3cret") || strings.Contains(c.Value+c.Text, "user") {
			t.Errorf("credentials in cause %+v", c)
		}
	}
	if got[1].Value != "http://proxy.corp:3128" {
		t.Errorf("endpoint %q", got[1].Value)
	}
	// A proxy set where there was none is a change too.
	set := []diagnose.Diagnosis{{Trigger: &diagnose.ProxyChangeRef{Target: "Proxy/cluster", NewHTTPSProxy: "http://proxy.corp:3128"}}}
	if c := CausesOf(k, hc, true, set); c[0].Kind != ProxyChange || !strings.Contains(c[0].Text, "without the API server bypass") {
		t.Errorf("proxy set: %+v", c[0])
	}
	// Without HostedCluster state only the management cluster is known.
	if c := CausesOf(k, event.HostedClusterState{}, false, nil); len(c) != 1 || c[0].Kind != Management {
		t.Errorf("unknown HC: %+v", c)
	}
}

// Brewing holds an incident only while a storm can still form around it
// (the members sharing one of its causes reach the threshold at their
// pace within the window) and is growing (its newest member seen less
// than quiet ago); the hold ends quiet after the newest member.
func TestBrewing(t *testing.T) {
	const quiet = 5 * time.Second
	window := 30 * time.Second
	seenAt := func(ms []Member, at time.Time) []Member {
		for i := range ms {
			ms[i].Seen = at.Add(time.Duration(i) * time.Millisecond)
		}
		return ms
	}
	for _, tc := range []struct {
		name      string
		members   []Member
		threshold int
		quiet     time.Duration
		want      time.Time // zero: not brewing
	}{
		{"enough share a cause", members(3, time.Second, proxyA, mgmt), 3, quiet, t0.Add(2*time.Second + quiet)},
		{"a burst that could grow into a storm", members(6, 100*time.Millisecond, mgmt), 20, quiet, t0.Add(500*time.Millisecond + quiet)},
		{"alone", members(1, time.Second, proxyA, mgmt), 3, quiet, time.Time{}},
		{"another cause", members(3, time.Second, proxyB), 3, quiet, time.Time{}},
		{"beyond the window", members(3, 20*time.Second, proxyA), 3, quiet, time.Time{}},
		{"either side of the incident", rename(members(3, -10*time.Second, proxyA), "b"), 3, quiet, t0.Add(quiet)},
		// 4 incidents 5 s apart: 16 more at that pace need 80 s, and
		// 15 s of the window are left.
		{"a trickle too slow for the threshold", members(4, 5*time.Second, mgmt), 20, quiet, time.Time{}},
		// The same pace reaches a threshold of 6 in time.
		{"a trickle fast enough for a small threshold", members(4, 5*time.Second, mgmt), 6, quiet, t0.Add(15*time.Second + quiet)},
		{"seen long ago: no longer growing", seenAt(members(6, 10*time.Millisecond, mgmt), t0.Add(-time.Minute)), 20, quiet,
			t0.Add(-time.Minute + 5*time.Millisecond + quiet)},
		{"group wait 0 holds nothing", members(6, 10*time.Millisecond, mgmt), 20, 0, time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Brewing([]Cause{proxyA, mgmt}, t0, tc.members, tc.threshold, window, tc.quiet); !got.Equal(tc.want) {
				t.Errorf("Brewing = %v, want %v", got, tc.want)
			}
		})
	}
}
