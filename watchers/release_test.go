package watchers_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/internal/scenario"
)

// releaseNoProxy is accepted by HyperShift's recent rule only: Go's
// NO_PROXY matching exempts the API host api.<name>.hcp.example under the
// suffix entry, but the 4.14–4.22 substring search finds neither that
// host, 172.20.0.1, "kubernetes" nor a network in it.
const releaseNoProxy = ".hcp.example,192.168.201.0/24"

// TestAgentPublishesReleaseAndBotPicksRule: the agent reads the release
// from a HostedCluster's status.version on a real API server (the newest
// Completed history entry beats desired, a Partial entry is skipped, and a
// change of release is a new fact), and the bot's diagnosis picks
// HyperShift's rule from it. With a noProxy only the recent rule accepts
// and a NotReady node: no status.version is judged under both rules and
// says the release is unknown (tunnel); 4.19, mid-rollout to 4.23, tunnels
// under the 4.14–4.22 rule; 4.23 Completed bypasses, so no tunnel diagnosis.
func TestAgentPublishesReleaseAndBotPicksRule(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	s := newStream(t)
	ns := env.Namespace(t)
	spec := scenario.BehindProxy(ns, "example")
	spec.NoProxy = releaseNoProxy
	hosted := env.HostedCluster(t, spec)
	cluster := ns + "/example"
	nodes, err := scenario.Nodes(ctx, hosted.Kube, "example-np", 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := scenario.SetNodeReady(ctx, hosted.Kube, nodes[0], corev1.ConditionFalse, "KubeletNotReady", "container runtime network not ready"); err != nil {
		t.Fatal(err)
	}
	startReplica(t, s, "agent-a", "mgmt-"+ns)
	s.waitFor(t, nodes[0]+" NotReady", 1, nodeState(cluster, nodes[0], event.ConditionFalse))

	release := func(version string) func(event.Event, event.Payload) bool {
		return func(e event.Event, p event.Payload) bool {
			hc, ok := p.(event.HostedClusterState)
			return ok && e.Cluster != nil && e.Cluster.String() == cluster && hc.Version == version
		}
	}
	// diagnoses runs the bot's model over everything published so far.
	diagnoses := func() (tunnel diagnose.Diagnosis, tunnelled bool, notReady diagnose.Diagnosis) {
		t.Helper()
		s.mu.Lock()
		events := append([]event.Event(nil), s.events...)
		s.mu.Unlock()
		m := diagnose.NewModel()
		for _, e := range events {
			if _, err := m.Apply(e); err != nil {
				t.Fatalf("apply %s: %v", e.ID, err)
			}
		}
		var c *diagnose.Cluster
		for _, k := range m.Keys() {
			if k.Cluster.String() == cluster {
				c = m.Cluster(k)
			}
		}
		if c == nil {
			t.Fatalf("the bot knows no %s", cluster)
		}
		for _, d := range diagnose.Diagnose(c, time.Now()) {
			switch d.Rule {
			case diagnose.RuleProxyTunnel:
				tunnel, tunnelled = d, true
			case diagnose.RuleNodesNotReady:
				notReady = d
			}
		}
		return tunnel, tunnelled, notReady
	}

	// rollout writes status.version with desired 4.23.0 and history
	// [4.23.0 in state, Completed 4.19.7], then waits for the agent to
	// publish want.
	rollout := func(want, state string) {
		t.Helper()
		if err := scenario.SetVersion(ctx, env.Dynamic, ns, "example", "4.23.0",
			scenario.Rollout{Version: "4.23.0", State: state},
			scenario.Rollout{Version: "4.19.7", State: hypershift.UpdateStateCompleted}); err != nil {
			t.Fatal(err)
		}
		s.waitFor(t, "release "+want+" published", 1, release(want))
	}

	// No status.version yet: the release is unknown, both rules apply, and
	// the 4.14–4.22 one tunnels.
	s.waitFor(t, "HostedCluster state without a release", 1, release(""))
	d, fired, _ := diagnoses()
	if !fired || !strings.Contains(d.RootCause, "The HyperShift release is unknown, so both rules were applied") {
		t.Fatalf("no status.version: proxy-tunnel fired = %v, root cause:\n%s", fired, d.RootCause)
	}

	// Rolling out 4.23 from 4.19: the Partial 4.23 entry and desired are
	// not what runs; the Completed 4.19 is, under the 4.14–4.22 rule.
	rollout("4.19.7", hypershift.UpdateStatePartial)
	if got := s.matching(release("4.23.0")); len(got) != 0 {
		t.Fatalf("published the Partial or desired release: %+v", got)
	}
	d, fired, _ = diagnoses()
	if !fired || !strings.Contains(d.RootCause, "HyperShift 4.19.7 applies the 4.14–4.22 rule") {
		t.Fatalf("4.19: proxy-tunnel fired = %v, root cause:\n%s", fired, d.RootCause)
	}

	// The 4.23 rollout completes: a new fact, and the recent rule bypasses.
	rollout("4.23.0", hypershift.UpdateStateCompleted)
	d, fired, nr := diagnoses()
	if fired {
		t.Fatalf("4.23: proxy-tunnel fired:\n%s", d.RootCause)
	}
	if !strings.Contains(nr.RootCause, "HyperShift 4.23.0 applies the recent rule") || !strings.Contains(nr.RootCause, "bypasses the proxy") {
		t.Errorf("4.23: the NotReady diagnosis does not name the release and rule:\n%s", nr.RootCause)
	}
}
