package bot_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/hcpbot/hcpbot/bot"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
)

// Seed 000 on real API servers through the real agent, fixed, then a slow
// rollout as HyperShift does it: the kube-apiserver-proxy static pods are
// rendered again one by one (tunnel → haproxy), then the nodes come back,
// then the operator. The Slack recorder shows the root-cause headline in
// every rendering after the fix, each step within the group interval, and
// never "no proxy cause"; the resolved message names the root cause, the
// fix, its approver and the durations, and its thread has the timeline.
func TestSeed000SlowRolloutLive(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	spec := scenario.BehindProxy(ns, "slow")
	hosted := env.HostedCluster(t, spec)
	nodes, err := scenario.Nodes(ctx, hosted.Kube, "slow-np", 3)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if err := scenario.KubeAPIServerProxy(ctx, hosted.Kube, n, scenario.ModeTunnel); err != nil {
			t.Fatal(err)
		}
	}
	pod, err := scenario.ServiceCAOperator(ctx, hosted.Kube, nodes[0])
	if err != nil {
		t.Fatal(err)
	}
	source := "mgmt-" + ns
	p := startPipeline(t, source, func(c *bot.Config) { c.ResolveTimeout = 2 * time.Second })
	if err := scenario.CrashLoop(ctx, hosted.Kube, pod.Namespace, pod.Name, 4, scenario.SeedConnectivityMessage); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if err := scenario.SetNodeReady(ctx, hosted.Kube, n, corev1.ConditionFalse, "KubeletNotReady", "container runtime network not ready"); err != nil {
			t.Fatal(err)
		}
	}
	var root slackrec.Message
	p.slack.WaitFor(t, 60*time.Second, func(r *slackrec.Recorder) bool {
		for _, m := range r.Messages(channel) {
			if m.ThreadTS == "" && strings.Contains(m.Text, ns+"/slow") && strings.Contains(m.Text, "tunnelled through the HTTPS proxy") &&
				strings.Contains(string(m.Blocks), "3 of 3 nodes are NotReady") {
				root = m
				return true
			}
		}
		return false
	})
	k := diagnose.Key{Source: source, Cluster: event.ClusterRef{Namespace: ns, Name: "slow"}}
	var cause diagnose.Diagnosis
	for _, inc := range p.bot.Incidents() {
		if inc.Cluster == k && inc.Open() {
			cause = inc.Diagnoses[0]
		}
	}
	if cause.Fix == nil {
		t.Fatalf("seed incident without a fix: %+v", cause)
	}

	// The fix, as command.FollowFixes hands it over once the agent ran it.
	fixed := time.Now()
	p.bot.RecordRemediation(bot.Remediation{ID: "fix-slowrollout", Cluster: k, Kind: "noproxy-patch", Diff: cause.Fix.Diff,
		Cause:       bot.Cause{Rule: cause.Rule, Title: cause.Title, RootCause: cause.Short()},
		RequestedBy: "U0ALICE", ApprovedBy: "U0BOB", ProposedAt: fixed.Add(-time.Minute), ApprovedAt: fixed, ExecutedAt: fixed})
	if err := scenario.SetNoProxy(ctx, env.Dynamic, ns, "slow", cause.Fix.After); err != nil {
		t.Fatal(err)
	}
	// Each step shows within a few group intervals (1 s here).
	step := func(what, want string) {
		t.Helper()
		p.slack.WaitFor(t, 30*time.Second, func(r *slackrec.Recorder) bool {
			m, ok := r.Message(channel, root.TS)
			return ok && strings.Contains(m.Text, "FIX APPLIED, ROLLING OUT") && strings.Contains(string(m.Blocks), want)
		})
		t.Logf("%s: shown", what)
	}
	step("the fix", "kube-apiserver-proxy direct 0 of 3")
	for i, n := range nodes {
		if err := scenario.RerenderKubeAPIServerProxy(ctx, hosted.Kube, n, scenario.ModeHAProxy); err != nil {
			t.Fatal(err)
		}
		step("proxy pod "+n, fmt.Sprintf("kube-apiserver-proxy direct %d of 3", i+1))
	}
	for i, n := range nodes {
		if err := scenario.SetNodeReady(ctx, hosted.Kube, n, corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"); err != nil {
			t.Fatal(err)
		}
		step("node "+n, fmt.Sprintf("nodes Ready %d of 3", i+1))
	}
	if err := scenario.Recover(ctx, hosted.Kube, pod.Namespace, pod.Name); err != nil {
		t.Fatal(err)
	}
	var resolved slackrec.Message
	p.slack.WaitFor(t, 30*time.Second, func(r *slackrec.Recorder) bool {
		m, ok := r.Message(channel, root.TS)
		resolved = m
		return ok && strings.Contains(m.Text, "RESOLVED")
	})
	blocks := string(resolved.Blocks)
	for _, want := range []string{cause.Title, "fix-slowrollout", "U0BOB", "U0ALICE", "Time to fix", "Time to heal"} {
		if !strings.Contains(resolved.Text+blocks, want) {
			t.Errorf("resolved message lacks %q:\n%s\n%s", want, resolved.Text, blocks)
		}
	}
	p.slack.WaitFor(t, 30*time.Second, func(r *slackrec.Recorder) bool {
		for _, m := range r.Thread(channel, root.TS) {
			if strings.Contains(m.Text, "Timeline of") && strings.Contains(m.Text, "direct 3 of 3") && strings.Contains(m.Text, "resolved") {
				return true
			}
		}
		return false
	})

	// Every rendering after the fix kept the root cause as its headline.
	updates := 0
	for _, c := range p.slack.CallsTo("chat.update") {
		if c.Form.Get("ts") != root.TS || c.Time.Before(fixed) {
			continue
		}
		updates++
		text := c.Form.Get("text")
		if !strings.Contains(text, cause.Title) {
			t.Errorf("an update after the fix has headline %q, want the root cause %q", text, cause.Title)
		}
		if all := strings.ToLower(text + c.Form.Get("blocks")); strings.Contains(all, "no proxy cause") || strings.Contains(all, "without a proxy cause") {
			t.Errorf("an update after the fix says there is no proxy cause: %q", text)
		}
	}
	if updates < 7 {
		t.Errorf("%d updates after the fix, want one per step (7) at least", updates)
	}
	if v := p.slack.Violations(); v != 0 {
		t.Errorf("%d rate-limit violations", v)
	}
}
