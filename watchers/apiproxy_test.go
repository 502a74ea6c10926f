package watchers_test

import (
	"context"
	"testing"

	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/scenario"
)

// A rollout reaching a worker: the kubelet renders its kube-apiserver-proxy
// static pod again, so the mirror pod is deleted and created under the same
// name, now running haproxy. The agent publishes the switch (tunnel →
// haproxy), not only the tunnel: a healthy pod seen for the first time is
// no news, but this one is the end of a problem.
func TestAPIProxyRerenderedPublishesHAProxy(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	s := newStream(t)
	ns := env.Namespace(t)
	hosted := env.HostedCluster(t, scenario.BehindProxy(ns, "rerender"))
	cluster := ns + "/rerender"
	nodes, err := scenario.Nodes(ctx, hosted.Kube, "rerender-np", 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := scenario.KubeAPIServerProxy(ctx, hosted.Kube, nodes[0], scenario.ModeTunnel); err != nil {
		t.Fatal(err)
	}
	startReplica(t, s, "agent-a", "mgmt-"+ns)
	mode := func(m event.ProxyMode) func(event.Event, event.Payload) bool {
		return func(e event.Event, p event.Payload) bool {
			kp, ok := p.(event.KubeAPIServerProxy)
			return ok && e.Cluster != nil && e.Cluster.String() == cluster && kp.Node == nodes[0] && kp.Mode == m
		}
	}
	s.waitFor(t, "the tunnel-mode kube-apiserver-proxy", 1, mode(event.ProxyModeTunnel))
	if err := scenario.RerenderKubeAPIServerProxy(ctx, hosted.Kube, nodes[0], scenario.ModeHAProxy); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "the re-rendered kube-apiserver-proxy in haproxy mode", 1, mode(event.ProxyModeHAProxy))
}
