package bot_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/hcpbot/hcpbot/bot"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
	"github.com/hcpbot/hcpbot/watchers"
)

// rootsAbout returns the root messages naming cluster.
func rootsAbout(r *slackrec.Recorder, cluster string) []slackrec.Message {
	var out []slackrec.Message
	for _, m := range r.Messages(channel) {
		if m.ThreadTS == "" && strings.Contains(m.Text, cluster) {
			out = append(out, m)
		}
	}
	return out
}

// A 2,000-node hosted cluster on a real API server: one NotReady node is
// posted as "1 of 2,000 nodes NotReady" and graded a warning by its
// fraction; 500 NotReady of 2,000 update the same message to "500 of
// 2,000 nodes NotReady", critical.
func TestTrueNodeTotal2000(t *testing.T) {
	env.Need(t)
	if testing.Short() {
		t.Skip("creates 2,000 Nodes")
	}
	ctx := context.Background()
	ns := env.Namespace(t)
	hosted := env.HostedCluster(t, scenario.Healthy(ns, "big"))
	t0 := time.Now()
	nodes, err := scenario.CreateNodes(ctx, hosted.Kube, "big-np", 2000, corev1.ConditionTrue)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("2,000 kubelet-shaped Nodes created in %s", time.Since(t0).Round(time.Millisecond))
	source := "mgmt-" + ns
	p := startPipeline(t, source)
	key := diagnose.Key{Source: source, Cluster: event.ClusterRef{Namespace: ns, Name: "big"}}
	testenv.Eventually(t, 90*time.Second, "the bot counts 2,000 Ready nodes", func() bool {
		n, _ := p.bot.Nodes(key)
		return n.Summary && n.Total == 2000 && n.Ready == 2000
	})
	ours := ns + "/big"

	if err := scenario.PostKubeletStatus(ctx, hosted.Kube, nodes[:1], corev1.ConditionFalse); err != nil {
		t.Fatal(err)
	}
	var root slackrec.Message
	p.slack.WaitFor(t, 60*time.Second, func(r *slackrec.Recorder) bool {
		ms := rootsAbout(r, ours)
		if len(ms) == 1 {
			root = ms[0]
		}
		return len(ms) == 1
	})
	if !strings.Contains(root.Text, "1 of 2,000 nodes NotReady") || !strings.Contains(root.Text, "WARNING") {
		t.Fatalf("first NotReady node of 2,000 posted as %q, want a WARNING saying \"1 of 2,000 nodes NotReady\"", root.Text)
	}
	if !strings.Contains(string(root.Blocks), "1 of 2,000 nodes (0.05%)") {
		t.Errorf("the message does not explain its grade:\n%s", root.Blocks)
	}

	// A node storm: 500 of 2,000 NotReady.
	t1 := time.Now()
	if err := scenario.PostKubeletStatus(ctx, hosted.Kube, nodes[1:500], corev1.ConditionFalse); err != nil {
		t.Fatal(err)
	}
	p.slack.WaitFor(t, 90*time.Second, func(r *slackrec.Recorder) bool {
		m, ok := r.Message(channel, root.TS)
		return ok && strings.Contains(m.Text, "500 of 2,000 nodes NotReady") && strings.Contains(m.Text, "CRITICAL")
	})
	t.Logf("500 of 2,000 NotReady reached Slack %s after the first status write", time.Since(t1).Round(time.Millisecond))
	if n := len(rootsAbout(p.slack, ours)); n != 1 {
		t.Errorf("%d root messages about the cluster, want 1 (updated, not re-posted)", n)
	}
	if n, _ := p.bot.Nodes(key); n.Total != 2000 {
		t.Errorf("node count %+v, want total 2000", n)
	}
	if v := p.slack.Violations(); v != 0 {
		t.Errorf("%d rate-limit violations", v)
	}
}

// Nodes registered without status (the kubelet posts it in a second write)
// are joining, with the default 10 min grace: given their status 30 s
// later they cause no incident, and the bot counted them as joining
// meanwhile.
func TestNodesWithoutStatusJoinQuietly(t *testing.T) {
	env.Need(t)
	if testing.Short() {
		t.Skip("waits 30 s")
	}
	ctx := context.Background()
	ns := env.Namespace(t)
	hosted := env.HostedCluster(t, scenario.Healthy(ns, "grow"))
	if _, err := scenario.CreateNodes(ctx, hosted.Kube, "grow-old", 8, corev1.ConditionTrue); err != nil {
		t.Fatal(err)
	}
	source := "mgmt-" + ns
	p := startPipeline(t, source) // the agent's default grace: 10 min
	key := diagnose.Key{Source: source, Cluster: event.ClusterRef{Namespace: ns, Name: "grow"}}
	testenv.Eventually(t, 60*time.Second, "the bot counts 8 Ready nodes", func() bool {
		n, _ := p.bot.Nodes(key)
		return n.Total == 8 && n.Ready == 8
	})
	created := time.Now()
	fresh, err := scenario.CreateNodes(ctx, hosted.Kube, "grow-new", 8, "")
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the bot counts 8 joining nodes", func() bool {
		n, _ := p.bot.Nodes(key)
		return n.Total == 16 && n.Joining == 8 && n.NotJoining == 0
	})
	for time.Since(created) < 30*time.Second {
		time.Sleep(time.Second) // the kubelets take their time: nothing may happen meanwhile
		if ds, _ := p.bot.Diagnose(key); len(ds) != 0 {
			t.Fatalf("joining nodes diagnosed: %+v", ds)
		}
	}
	if err := scenario.PostKubeletStatus(ctx, hosted.Kube, fresh, corev1.ConditionTrue); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the bot counts 16 Ready nodes", func() bool {
		n, _ := p.bot.Nodes(key)
		return n.Total == 16 && n.Ready == 16
	})
	// Past the group wait: an incident would have been posted by now.
	time.Sleep(2 * testConfig().GroupWait)
	if ms := rootsAbout(p.slack, ns+"/grow"); len(ms) != 0 {
		t.Errorf("%d messages about nodes that were only joining: %q", len(ms), ms[0].Text)
	}
	for _, inc := range p.bot.Incidents() {
		if inc.Cluster == key {
			t.Errorf("incident %s about joining nodes", inc.Key)
		}
	}
}

// A storm message adds up its members' real node counts.
func TestRenderStormSumsNodes(t *testing.T) {
	opened := time.Date(2026, 7, 22, 10, 0, 0, 0, time.UTC)
	s := &bot.Storm{Key: "storm-1", Opened: opened}
	for i, n := range []diagnose.NodeImpact{{Affected: 500, Total: 2000}, {Affected: 1000, Total: 1000}, {Affected: 3, Total: 10}} {
		s.Members = append(s.Members, &bot.Incident{
			Key: fmt.Sprintf("inc-%d", i), Cluster: diagnose.Key{Source: "mgmt", Cluster: event.ClusterRef{Namespace: "clusters", Name: fmt.Sprintf("c%d", i)}},
			Opened: opened, Diagnoses: []diagnose.Diagnosis{{Rule: diagnose.RuleNodesNotReady, Severity: diagnose.SeverityCritical, Title: "x", Nodes: &n}},
		})
	}
	_, blocks := bot.RenderStorm(s, opened.Add(time.Minute))
	raw, err := json.Marshal(blocks)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), "1,503 of 3,010 nodes of these clusters are NotReady or not joining") {
		t.Errorf("storm message lacks the node total:\n%s", raw)
	}
}

// Seed 000's first symptom: behind a tunnelling proxy, new workers never
// post status. Once the join grace (short here; TestNodesWithoutStatusJoinQuietly
// shows the default) is over they are "not joining", and the proxy-tunnel
// incident names them with the cluster's real total.
func TestSeedNodesNotJoining(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	hosted := env.HostedCluster(t, scenario.BehindProxy(ns, "stuck"))
	if _, err := scenario.CreateNodes(ctx, hosted.Kube, "stuck-old", 7, corev1.ConditionTrue); err != nil {
		t.Fatal(err)
	}
	p := startPipeline(t, "mgmt-"+ns, func(c *watchers.Config) { c.NodeJoinGrace = 10 * time.Second })
	if _, err := scenario.CreateNodes(ctx, hosted.Kube, "stuck-new", 3, ""); err != nil {
		t.Fatal(err)
	}
	p.slack.WaitFor(t, 60*time.Second, func(r *slackrec.Recorder) bool {
		for _, m := range rootsAbout(r, ns+"/stuck") {
			if strings.Contains(m.Text, "tunnelled through the HTTPS proxy") && strings.Contains(string(m.Blocks), "3 of 10 nodes are not joining") && !strings.Contains(string(m.Blocks), "stuck-old") {
				return true
			}
		}
		return false
	})
}
