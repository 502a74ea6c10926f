package scenario

import (
	"fmt"
	"time"

	"github.com/hcpbot/hcpbot/event"
)

// BurstProxy is the corporate proxy every cluster of a Burst sends its
// traffic through, as a fleet's clusters often share one. It is data:
// nothing dials it.
const BurstProxy = "http://proxy.corp.example:3128"

// burstCrash is the operator a Burst cluster has crashlooping: a
// different one per cluster, with the last log line of its own failure.
type burstCrash struct{ namespace, pod, container, message string }

var burstCrashes = []burstCrash{
	{"openshift-ingress-operator", "ingress-operator-7d9c8b6f5-k2lqx", "ingress-operator",
		`failed to create ingress controller "default": admission webhook denied the request`},
	{"openshift-dns-operator", "dns-operator-5b8f9d7c6-p4mzt", "dns-operator",
		"failed to ensure default dns: clusterIP 172.31.0.10 is already allocated"},
	{"openshift-image-registry", "cluster-image-registry-operator-6c7f8d9b5-w8n2r", "cluster-image-registry-operator",
		"unable to sync storage configuration: bucket name is required"},
}

// Burst returns, for each of n hosted clusters, the events its agent
// publishes when the cluster fails at at: unrelated failures that only
// happen at the same time. Cluster i is "clusters/hc-<i>" on a management
// cluster of its own, "<prefix>-<i>", behind BurstProxy with a noProxy
// that bypasses its networks and its API server; even clusters lose nodes
// (i/2+1 of 3 NotReady, the container runtime down), odd ones have an
// operator crashlooping, a different one each. Nothing is common to them
// but the fleet's proxy, which a storm would name if enough of them
// failed together.
func Burst(prefix string, n int, at time.Time) ([][]event.Event, error) {
	out := make([][]event.Event, n)
	for i := range n {
		source, name := fmt.Sprintf("%s-%d", prefix, i), fmt.Sprintf("hc-%d", i)
		ref := event.ClusterRef{Namespace: "clusters", Name: name}
		hc := event.HostedClusterState{
			Platform: "KubeVirt", InfraID: name + "-b4r5t", Version: "4.18.12",
			Proxy: event.ProxySpec{HTTPProxy: BurstProxy, HTTPSProxy: BurstProxy,
				NoProxy: ".cluster.local,.svc,localhost,127.0.0.1,kubernetes,10.132.0.0/14,172.31.0.0/16,192.168.126.0/24"},
			NetworkType: "OVNKubernetes", ClusterNetwork: []string{"10.132.0.0/14"}, ServiceNetwork: []string{"172.31.0.0/16"},
			MachineNetwork:       []string{"192.168.126.0/24"},
			ControlPlaneEndpoint: &event.Endpoint{Host: "192.168.126.50", Port: int32(31000 + i)},
		}
		e, err := event.New(source, &ref, event.ObjectRef{Kind: "HostedCluster", Namespace: ref.Namespace, Name: name, UID: "uid-" + source + "-" + name}, hc, "rv:1", at)
		if err != nil {
			return nil, fmt.Errorf("burst cluster %d: %w", i, err)
		}
		evs := []event.Event{e}
		if i%2 == 0 {
			for node := range 3 {
				e, err := NodeReady(source, ref.Namespace, name, node, node > i/2, at)
				if err != nil {
					return nil, fmt.Errorf("burst cluster %d: %w", i, err)
				}
				evs = append(evs, e)
			}
		} else {
			c := burstCrashes[(i/2)%len(burstCrashes)]
			p := event.PodCrashLoop{Namespace: c.namespace, Pod: c.pod, Container: c.container, RestartCount: 5,
				WaitingReason: "CrashLoopBackOff", LastTerminationMessage: c.message, ExitCode: 1, FinishedAt: at}
			e, err := event.New(source, &ref, event.ObjectRef{Kind: "Pod", Namespace: c.namespace, Name: c.pod, UID: "uid-" + source + "-" + c.pod, Hosted: true},
				p, "crashloop:"+c.container+":5", at)
			if err != nil {
				return nil, fmt.Errorf("burst cluster %d: %w", i, err)
			}
			evs = append(evs, e)
		}
		out[i] = evs
	}
	return out, nil
}
