package digest_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/bot/digest"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/noproxy"
)

var (
	t0      = time.Date(2026, 12, 1, 7, 0, 0, 0, time.UTC)
	keyGood = diagnose.Key{Source: "mgmt-1", Cluster: event.ClusterRef{Namespace: "clusters", Name: "good"}}
	keyBad  = diagnose.Key{Source: "mgmt-1", Cluster: event.ClusterRef{Namespace: "clusters", Name: "bad"}}
)

func hc(noProxy string) event.HostedClusterState {
	return event.HostedClusterState{
		Platform:       "KubeVirt",
		Proxy:          event.ProxySpec{HTTPProxy: "http://proxy.corp.example:3128", HTTPSProxy: "http://proxy.corp.example:3128", NoProxy: noProxy},
		ServiceNetwork: []string{"172.31.0.0/16"}, ClusterNetwork: []string{"10.132.0.0/14"},
	}
}

// goCurlRequests are families that honour CIDR entries, for which
// compliantNoProxy has no gap (urllib, a default family, ignores CIDRs).
var goCurlRequests = []noproxy.Client{noproxy.Go, noproxy.Curl, noproxy.Python}

const compliantNoProxy = "kubernetes,.svc,.cluster.local,localhost,127.0.0.1,172.31.0.0/16,10.132.0.0/14"

func codes(r digest.ClusterReport) map[string]bool {
	out := map[string]bool{}
	for _, f := range r.Findings {
		out[f.Code] = true
	}
	return out
}

func report(t *testing.T, d digest.Digest, k diagnose.Key) digest.ClusterReport {
	t.Helper()
	for _, s := range d.Sources {
		for _, c := range s.Clusters {
			if c.Key == k {
				return c
			}
		}
	}
	t.Fatalf("no report for %s", k)
	return digest.ClusterReport{}
}

// The trend compares finding IDs: a finding that appears is new, one that
// went away on a cluster still known is fixed; a vanished cluster's
// findings are not counted as fixed.
func TestBuildTrend(t *testing.T) {
	gone := diagnose.Key{Source: "mgmt-1", Cluster: event.ClusterRef{Namespace: "clusters", Name: "gone"}}
	first := digest.Build(t0, digest.Input{Clients: goCurlRequests, Clusters: []digest.Cluster{
		{Key: keyGood, HostedCluster: hc(compliantNoProxy)},
		{Key: keyBad, HostedCluster: hc(".corp.example,kubernetes,localhost,127.0.0.1")},
		{Key: gone, HostedCluster: hc(".corp.example")},
	}})
	if !first.First || first.New != 0 || first.Fixed != 0 {
		t.Fatalf("first digest trend: first=%v new=%d fixed=%d", first.First, first.New, first.Fixed)
	}
	if !report(t, first, keyGood).Compliant() || len(report(t, first, keyGood).Findings) != 0 || report(t, first, gone).Compliant() {
		t.Fatalf("compliance wrong: %+v", first.Sources)
	}
	if c := codes(report(t, first, keyBad)); !c[noproxy.CodeMissingServiceCIDR] || c[noproxy.CodeMissingKubernetes] || c[noproxy.CodeMissingLocalhost] {
		t.Fatalf("bad cluster codes %v", c)
	}
	snap := first.Snapshot()

	// bad: service CIDR added (fixed), localhost removed (new).
	second := digest.Build(t0.Add(24*time.Hour), digest.Input{Clients: goCurlRequests, Previous: &snap, Clusters: []digest.Cluster{
		{Key: keyGood, HostedCluster: hc(compliantNoProxy)},
		{Key: keyBad, HostedCluster: hc(".corp.example,kubernetes,172.31.0.0/16")},
	}})
	bad := report(t, second, keyBad)
	var newCodes []string
	for _, f := range bad.Findings {
		if f.New {
			newCodes = append(newCodes, f.Code)
		}
	}
	if second.First || !second.Since.Equal(t0) {
		t.Errorf("second digest: first=%v since=%v", second.First, second.Since)
	}
	if !containsAll(newCodes, noproxy.CodeMissingLocalhost) || second.New != len(newCodes) {
		t.Errorf("new findings %v (count %d), want missing-localhost among them", newCodes, second.New)
	}
	if !containsPrefix(bad.Fixed, noproxy.CodeMissingServiceCIDR) {
		t.Errorf("fixed %v, want missing-service-cidr", bad.Fixed)
	}
	if second.Fixed != len(bad.Fixed) {
		t.Errorf("fixed count %d, want %d (the gone cluster's findings are not fixed)", second.Fixed, len(bad.Fixed))
	}
	// Same state again: no trend.
	snap2 := second.Snapshot()
	third := digest.Build(t0.Add(48*time.Hour), digest.Input{Clients: goCurlRequests, Previous: &snap2, Clusters: []digest.Cluster{
		{Key: keyGood, HostedCluster: hc(compliantNoProxy)},
		{Key: keyBad, HostedCluster: hc(".corp.example,kubernetes,172.31.0.0/16")},
	}})
	if third.New != 0 || third.Fixed != 0 {
		t.Errorf("unchanged state: new %d fixed %d", third.New, third.Fixed)
	}
}

// Actions are those executed after the previous digest, placed under
// their cluster; others are kept apart.
func TestBuildActions(t *testing.T) {
	prev := digest.Snapshot{At: t0}
	d := digest.Build(t0.Add(time.Hour), digest.Input{Previous: &prev,
		Clusters: []digest.Cluster{{Key: keyBad, HostedCluster: hc(".corp.example")}},
		Actions: []audit.Record{
			{Time: t0.Add(-time.Minute), Kind: audit.KindExecuted, Cluster: "clusters/bad", Summary: "before"},
			{Time: t0.Add(time.Minute), Kind: audit.KindProposed, Cluster: "clusters/bad", Summary: "proposed only"},
			{Time: t0.Add(2 * time.Minute), Kind: audit.KindExecuted, Cluster: "clusters/bad", Source: "mgmt-1", Actor: "U0ADMIN1", Summary: "fix noproxy <now>"},
			{Time: t0.Add(3 * time.Minute), Kind: audit.KindFailed, Cluster: "other/x", Summary: "elsewhere"},
		}})
	bad := report(t, d, keyBad)
	if len(bad.Actions) != 1 || bad.Actions[0].Summary != "fix noproxy <now>" {
		t.Errorf("cluster actions %+v", bad.Actions)
	}
	if len(d.OtherActions) != 1 || d.OtherActions[0].Summary != "elsewhere" {
		t.Errorf("other actions %+v", d.OtherActions)
	}
	_, replies := digest.Render(d, "daily", digest.Compact)
	if len(replies) != 1 || !strings.Contains(replies[0].Blocks[0].(*slack.SectionBlock).Text.Text, "Action 2026-12-01T07:02:00Z executed by <@U0ADMIN1>: fix noproxy &lt;now&gt;") {
		t.Errorf("compact reply: %+v", replies)
	}
}

// Compact rendering stays within Slack's limits with hundreds of findings.
func TestRenderCompactBounded(t *testing.T) {
	var np []string
	for i := range 400 {
		np = append(np, "*.example"+strings.Repeat("x", i%7)+".com", "10.0.0.0/33")
	}
	d := digest.Build(t0, digest.Input{Clusters: []digest.Cluster{{Key: keyBad, HostedCluster: hc(strings.Join(np, ","))}}})
	root, replies := digest.Render(d, "daily", digest.Compact)
	if len(root.Blocks) == 0 || len(replies) != 1 {
		t.Fatalf("root %d blocks, %d replies", len(root.Blocks), len(replies))
	}
	if n := len(replies[0].Blocks); n > 4 {
		t.Errorf("reply has %d blocks, want at most 4 (3 sections and a note)", n)
	}
	// Full keeps everything: more than the compact reply carries.
	_, fullReplies := digest.Render(d, "daily", digest.Full)
	if len(fullReplies) != 1 || len(fullReplies[0].Blocks) <= len(replies[0].Blocks) {
		t.Errorf("full rendering has %d replies, not longer than compact", len(fullReplies))
	}
}

// One tick, many firings: two replicas racing, and a restarted replica
// (a new Runner on the same bucket) — exactly one posts. On-demand digests
// take their own keys and do not move the baseline.
func TestTickLock(t *testing.T) {
	ctx := context.Background()
	srv := natstest.RunServer(t)
	log := natstest.Logger(t)
	ds := digests(t, "  - {name: daily, schedule: '0 0 8 * * *', timezone: Europe/Berlin, channel: C0DIGEST01}\n")
	src := states{{Key: keyBad, Known: true, HostedCluster: hc(".corp.example")}}

	newRunner := func(out *recorder) *digest.Runner {
		conn, err := bus.Connect(ctx, bus.Config{URLs: []string{srv.ClientURL()}}, log)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(conn.Close)
		r, err := digest.NewRunner(ctx, conn.JS, digest.Config{Digests: ds, Bot: src, Out: out, Now: func() time.Time { return t0 }, Log: log})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	outs := []*recorder{{}, {}}
	runners := []*digest.Runner{newRunner(outs[0]), newRunner(outs[1])}
	tick := ds[0].Next(t0)
	if want := time.Date(2026, 12, 2, 8, 0, 0, 0, time.FixedZone("CET", 3600)); !tick.Equal(want) {
		t.Fatalf("next tick %v, want %v (the next 08:00 in Berlin; t0 is 08:00 CET itself)", tick, want)
	}
	fireOnce(ctx, t, ds[0], tick, runners...)
	restarted := newRunner(&recorder{})
	if ok, err := restarted.Fire(ctx, ds[0], tick); ok || err != nil {
		t.Errorf("restarted replica posted the same tick again (ok=%v err=%v)", ok, err)
	}
	m0, _ := outs[0].counts()
	m1, _ := outs[1].counts()
	if m0+m1 != 1 {
		t.Errorf("%d summaries, want 1", m0+m1)
	}
	// The next tick is a new key.
	if ok, err := restarted.Fire(ctx, ds[0], ds[0].Next(tick)); !ok || err != nil {
		t.Errorf("next tick not posted (ok=%v err=%v)", ok, err)
	}
	// On demand: its key is the instant of the request, apart from the
	// scheduled ticks.
	out := &recorder{}
	r := newRunner(out)
	for range 2 {
		if _, err := r.DigestNow(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The test clock stands still, so both requests fall on one instant
	// and the second finds the key taken: one post.
	if m, _ := out.counts(); m != 1 {
		t.Errorf("on-demand summaries at one instant: %d, want 1", m)
	}
}

func containsAll(ss []string, want ...string) bool {
	for _, w := range want {
		found := false
		for _, s := range ss {
			found = found || s == w
		}
		if !found {
			return false
		}
	}
	return true
}

func containsPrefix(ss []string, prefix string) bool {
	for _, s := range ss {
		if strings.HasPrefix(s, prefix) {
			return true
		}
	}
	return false
}

// Run fires at the schedule's ticks: two replicas running a per-second
// schedule post each tick exactly once between them.
func TestRunOncePerTick(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	srv := natstest.RunServer(t)
	log := natstest.Logger(t)
	ds := digests(t, "  - {name: often, schedule: '* * * * * *', timezone: Asia/Kolkata, channel: C0DIGEST01}\n")
	src := states{{Key: keyBad, Known: true, HostedCluster: hc(".corp.example")}}
	outs := []*recorder{{}, {}}
	var wg sync.WaitGroup
	for _, out := range outs {
		conn, err := bus.Connect(ctx, bus.Config{URLs: []string{srv.ClientURL()}}, log)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(conn.Close)
		r, err := digest.NewRunner(ctx, conn.JS, digest.Config{Digests: ds, Bot: src, Out: out, Log: log})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { _ = r.Run(ctx) })
	}
	time.Sleep(3500 * time.Millisecond)
	cancel()
	wg.Wait()
	keys := map[string]int{}
	for _, out := range outs {
		for _, m := range out.messages {
			keys[m.Key]++
		}
	}
	if len(keys) < 2 {
		t.Fatalf("%d ticks posted in 3.5s, want at least 2", len(keys))
	}
	for k, n := range keys {
		if n != 1 {
			t.Errorf("tick %s posted %d times", k, n)
		}
	}
}
