package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
)

// proxiedManagement is a kubeconfig of the management API server that
// reaches it through a tcpProxy the test can cut.
func proxiedManagement(t *testing.T) (*tcpProxy, string) {
	t.Helper()
	data, err := env.CP.Management.Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	kc, err := clientcmd.Load(data)
	if err != nil {
		t.Fatal(err)
	}
	var proxy *tcpProxy
	for _, c := range kc.Clusters {
		host := strings.TrimPrefix(c.Server, "https://")
		if proxy == nil {
			proxy = startTCPProxy(t, host)
		}
		// Same address family and IP: the serving certificate still
		// matches.
		c.Server = "https://" + proxy.Addr()
	}
	p := filepath.Join(t.TempDir(), "kubeconfig-proxied")
	if err := clientcmd.WriteToFile(*kc, p); err != nil {
		t.Fatal(err)
	}
	return proxy, p
}

// agent.leaderElection.renewDeadline: the leader of `hcpbot agent
// --config`, cut off from the management API server, keeps leading for
// renewDeadline and then steps down — hcpbot_agent_leader goes 0 no
// sooner than 16 s after the cut (the default 10 s would step down 10–12
// s after it, retryPeriod 2 s included), and before the 30 s lease could
// pass to another replica. Both ways a network fails: connections
// refused, and packets silently dropped (requests hang). Once the API
// server is back it leads again.
func TestAgentStepsDownAfterRenewDeadline(t *testing.T) {
	env.Need(t)
	const renewDeadline, leaseDuration = 16 * time.Second, 30 * time.Second
	for _, tc := range []struct {
		name string
		fail func(*tcpProxy)
	}{
		{"refused", (*tcpProxy).Cut},
		{"dropped", (*tcpProxy).Pause},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := env.Namespace(t)
			srv := natstest.RunServer(t)
			botEventsStream(t, srv.ClientURL())
			proxy, kubeconfig := proxiedManagement(t)
			addr := freeAddr(t)
			file := configFile(t, fmt.Sprintf(`nats:
  urls: [%q]
agent:
  source: mgmt-renew
  kubeconfig: %s
  listen: %q
  leaderElection:
    namespace: %s
    leaseName: renew-lease
    leaseDuration: %s
    renewDeadline: %s
    retryPeriod: 2s
log:
  format: json
`, srv.ClientURL(), kubeconfig, addr, ns, leaseDuration, renewDeadline))
			logs := startAgentCmd(t, "--config", file, "--identity", "renew-agent")
			leader := func(v string) func() bool {
				return func() bool {
					_, body := get("http://" + addr + "/metrics")
					return strings.Contains(body, "\nhcpbot_agent_leader "+v)
				}
			}
			testenv.Eventually(t, 60*time.Second, "the agent leading", leader("1"))

			cut := time.Now()
			tc.fail(proxy)
			testenv.Eventually(t, leaseDuration+60*time.Second, "the agent stepping down", leader("0"))
			d := time.Since(cut)
			t.Logf("stepped down %s after the API server was cut off (%s; renewDeadline %s, retryPeriod 2s, leaseDuration %s)",
				d.Round(10*time.Millisecond), tc.name, renewDeadline, leaseDuration)
			// A renewal that started before the cut ended before it: the
			// first failing one starts after the cut, and is given
			// renewDeadline.
			if d < renewDeadline-500*time.Millisecond {
				t.Errorf("stepped down %s after the cut, before renewDeadline %s", d, renewDeadline)
			}
			if d >= leaseDuration {
				t.Errorf("stepped down %s after the cut: still leading when the lease (%s) may have passed to another replica", d, leaseDuration)
			}
			if !strings.Contains(logs.String(), `"stopped leading: the agent lease is lost or being released"`) {
				t.Errorf("no step-down in the logs:\n%s", tail(logs.String(), 4000))
			}

			proxy.Resume()
			testenv.Eventually(t, 90*time.Second, "the agent leading again once the API server is back", leader("1"))
		})
	}
}

// agent.bufferEvents: NATS unreachable (the connection between the agent
// and NATS silently holds every byte, so the client neither fails nor
// reconnects) while more events than the 3-event buffer arrive: the
// agent drops them, counting hcpbot_agent_publish_errors_total
// {kind="buffer_full"}; once NATS answers again it resyncs, and every
// fact it dropped is restated in the events stream (without the resync
// the dropped NotReady facts never reach it; the default 10000 would
// drop nothing).
func TestAgentBufferEventsFullThenRestated(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	spec := scenario.Healthy(ns, "buffer")
	hosted := env.HostedCluster(t, spec)
	nodes, err := scenario.Nodes(ctx, hosted.Kube, "bf", 12)
	if err != nil {
		t.Fatal(err)
	}
	srv := natstest.RunServer(t)
	bot, _ := botEventsStream(t, srv.ClientURL())
	proxy := startTCPProxy(t, strings.TrimPrefix(srv.ClientURL(), "nats://"))
	addr := freeAddr(t)
	const buffer = 3
	file := configFile(t, fmt.Sprintf(`nats:
  urls: ["nats://%s"]
agent:
  source: mgmt-buffer
  kubeconfig: %s
  listen: %q
  leaderElection:
    enabled: false
  bufferEvents: %d
log:
  format: json
`, proxy.Addr(), managementKubeconfig(t), addr, buffer))
	logs := startAgentCmd(t, "--config", file, "--identity", "buffer-agent")
	series := `hcpbot_agent_hosted_cluster_synced{cluster="` + ns + "/" + spec.Name + `"}`
	metrics := func() string { _, body := get("http://" + addr + "/metrics"); return body }
	testenv.Eventually(t, 60*time.Second, "ready, the hosted cluster synced and the first snapshot out", func() bool {
		code, _ := get("http://" + addr + "/readyz")
		return code == 200 && metricAtLeast(metrics(), series, 1) && strings.Contains(logs.String(), "snapshot published")
	})
	snapshots := strings.Count(logs.String(), "snapshot published")
	retries := func() float64 { return metricSum(metrics(), "hcpbot_agent_publish_errors_total", `kind="nats"`) }
	before := retries()

	proxy.Pause()
	notReady := func(name string) {
		t.Helper()
		if err := scenario.SetNodeReady(ctx, hosted.Kube, name, corev1.ConditionFalse, "KubeletNotReady", "while NATS is unreachable"); err != nil {
			t.Fatal(err)
		}
	}
	// One event first: the publisher sends it and, its ack never coming,
	// retries it; while it does, nothing leaves the buffer.
	notReady(nodes[0])
	testenv.Eventually(t, 60*time.Second, "the publisher retrying", func() bool { return retries() > before })
	for _, n := range nodes[1:] {
		notReady(n)
	}
	// 11 node events (and summaries) for 3 places: at least 8 dropped.
	dropped := float64(len(nodes) - 1 - buffer)
	testenv.Eventually(t, 60*time.Second, "the buffer full", func() bool {
		return metricAtLeast(metrics(), `hcpbot_agent_publish_errors_total{kind="buffer_full"}`, dropped)
	})
	t.Logf("buffer_full after the cut: %s", metricLine(metrics(), `hcpbot_agent_publish_errors_total{kind="buffer_full"}`))

	proxy.Resume()
	cluster := event.ClusterRef{Namespace: ns, Name: spec.Name}
	testenv.Eventually(t, 90*time.Second, "every node's NotReady in the stream", func() bool {
		events, _ := streamEvents(t, ctx, bot.JS)
		seen := map[string]bool{}
		for _, e := range events {
			p, err := e.DecodePayload()
			if err != nil || e.Cluster == nil || *e.Cluster != cluster {
				continue
			}
			if n, ok := p.(event.NodeReadiness); ok && n.Ready == event.ConditionFalse {
				seen[n.Node] = true
			}
		}
		for _, n := range nodes {
			if !seen[n] {
				return false
			}
		}
		return true
	})
	if !strings.Contains(logs.String(), "events were dropped while NATS was unreachable; resyncing") {
		t.Errorf("no resync for the dropped events in the logs:\n%s", tail(logs.String(), 4000))
	}
	if n := strings.Count(logs.String(), "snapshot published"); n <= snapshots {
		t.Errorf("%d snapshots, as many as before the cut: nothing restated", n)
	}
	if strings.Contains(logs.String(), "reconnected to NATS") {
		// The restatement above may then be the reconnect's, not the
		// dropped events'.
		t.Logf("the NATS client reconnected during the pause")
	}
}

// metricLine is the exposed sample of series, for logs.
func metricLine(body, series string) string {
	for line := range strings.SplitSeq(body, "\n") {
		if strings.HasPrefix(line, series+" ") {
			return line
		}
	}
	return series + " (absent)"
}
