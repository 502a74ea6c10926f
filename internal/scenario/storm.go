package scenario

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hcpbot/hcpbot/event"
)

// StormProxy is the proxy every cluster of a Storm sends its traffic
// through. It is data: nothing dials it.
const StormProxy = "http://proxy.storm.example:3128"

// Storm returns the events agents publish when clusters hosted clusters
// behind the same proxy, each with a noProxy that tunnels API traffic,
// lose nodes nodes each and their service-ca-operator crashloops (seed 000
// at scale). Storms do not fit on real API servers, so they are built from
// the event contract; cluster i is "<namespace>/hc-<i>" on management
// cluster source, and every fact is observed at start plus a few
// milliseconds.
func Storm(source, namespace string, clusters, nodes int, start time.Time, opts ...StormOption) ([]event.Event, error) {
	var o stormOptions
	for _, opt := range opts {
		opt(&o)
	}
	var out []event.Event
	add := func(cluster event.ClusterRef, obj event.ObjectRef, p event.Payload, key string, at time.Time) error {
		e, err := event.New(source, &cluster, obj, p, key, at)
		if err != nil {
			return fmt.Errorf("storm event %s %s: %w", p.EventType(), obj.Name, err)
		}
		out = append(out, e)
		return nil
	}
	for i := range clusters {
		ref := event.ClusterRef{Namespace: namespace, Name: fmt.Sprintf("hc-%d", i)}
		at := start.Add(time.Duration(i) * time.Millisecond)
		hc := StormHostedCluster(i)
		if o.labels != nil {
			hc.Labels = o.labels(i)
		}
		if err := add(ref, event.ObjectRef{Kind: "HostedCluster", Namespace: namespace, Name: ref.Name, UID: "uid-" + ref.Name}, hc, "rv:1", at); err != nil {
			return nil, err
		}
		for n := range nodes {
			name := fmt.Sprintf("%s-np-%d", ref.Name, n)
			ltt := at.Add(time.Duration(n) * time.Microsecond)
			p := event.NodeReadiness{Node: name, Ready: event.ConditionUnknown, Reason: "NodeStatusUnknown",
				Message: "Kubelet stopped posting node status.", LastTransitionTime: ltt, ProviderID: "kubevirt://" + name}
			if err := add(ref, event.ObjectRef{Kind: "Node", Name: name, UID: "uid-" + name, Hosted: true}, p,
				event.TransitionAt("Ready=Unknown", ltt), ltt); err != nil {
				return nil, err
			}
		}
		crash := event.PodCrashLoop{Namespace: stormOperatorNS, Pod: stormOperatorPod, Container: "service-ca-operator", RestartCount: 7,
			WaitingReason: "CrashLoopBackOff", LastTerminationMessage: SeedConnectivityMessage, ExitCode: 255, FinishedAt: at}
		if err := add(ref, stormOperatorRef(ref), crash, "crashloop:service-ca-operator:7", at.Add(time.Millisecond)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// StormHostedCluster is the HostedClusterState of cluster i of a Storm:
// KubeVirt behind StormProxy with the seed 000 noProxy.
func StormHostedCluster(i int) event.HostedClusterState {
	return event.HostedClusterState{
		Platform: "KubeVirt", InfraID: fmt.Sprintf("hc-%d-x7k2p", i), Version: "4.18.12",
		Proxy:       event.ProxySpec{HTTPProxy: StormProxy, HTTPSProxy: StormProxy, NoProxy: SeedNoProxy, TrustedCA: "user-ca-bundle"},
		NetworkType: "OVNKubernetes", ClusterNetwork: []string{"10.132.0.0/14"}, ServiceNetwork: []string{"172.31.0.0/16"},
		ControlPlaneEndpoint: &event.Endpoint{Host: "192.168.126.50", Port: int32(30000 + i%2000)},
	}
}

// The service-ca-operator pod every Storm cluster has crashlooping.
const (
	stormOperatorNS  = "openshift-service-ca-operator"
	stormOperatorPod = "service-ca-operator-6d5f7b9c4-x2x9z"
)

func stormOperatorRef(ref event.ClusterRef) event.ObjectRef {
	return event.ObjectRef{Kind: "Pod", Namespace: stormOperatorNS, Name: stormOperatorPod, UID: "uid-sca-" + ref.Name, Hosted: true}
}

// StormOperatorRecovered is the service-ca-operator of a Storm cluster
// running and ready again at at.
func StormOperatorRecovered(source string, ref event.ClusterRef, at time.Time) (event.Event, error) {
	return event.New(source, &ref, stormOperatorRef(ref),
		event.PodCrashLoop{Namespace: stormOperatorNS, Pod: stormOperatorPod, Container: "service-ca-operator", Cleared: true}, "running", at)
}

// APIServerProxy is the kube-apiserver-proxy static pod of node n of a
// Storm (or NodeFleet) cluster as the agent reports it: rendered with the
// kubernetes-default-proxy container (tunnel) or plain haproxy (direct).
func APIServerProxy(source string, ref event.ClusterRef, n int, mode event.ProxyMode, at time.Time) (event.Event, error) {
	node := fmt.Sprintf("%s-np-%d", ref.Name, n)
	pod := "kube-apiserver-proxy-" + node
	return event.New(source, &ref, event.ObjectRef{Kind: "Pod", Namespace: "kube-system", Name: pod, UID: "uid-" + pod + "-" + string(mode), Hosted: true},
		event.KubeAPIServerProxy{Pod: pod, Node: node, Mode: mode}, "rv:"+string(mode), at)
}

// StormOption changes the clusters of a Storm.
type StormOption func(*stormOptions)

type stormOptions struct{ labels func(i int) map[string]string }

// StormLabels gives cluster i the HostedCluster labels of f(i).
func StormLabels(f func(i int) map[string]string) StormOption {
	return func(o *stormOptions) { o.labels = f }
}

// Publish sends events to JetStream the way the agent does (subject from
// the contract, message ID for de-duplication), asynchronously with at
// most 1,000 in flight, and waits for every acknowledgement.
func Publish(ctx context.Context, js jetstream.Publisher, events []event.Event) error {
	var acks []jetstream.PubAckFuture
	wait := func() error {
		for _, f := range acks {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				return fmt.Errorf("publish: %w", err)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		acks = acks[:0]
		return nil
	}
	for _, e := range events {
		subject, err := event.Subject(e)
		if err != nil {
			return err
		}
		data, err := event.Encode(e)
		if err != nil {
			return err
		}
		f, err := js.PublishMsgAsync(&nats.Msg{Subject: subject, Data: data, Header: nats.Header{jetstream.MsgIDHeader: []string{e.ID}}})
		if err != nil {
			return fmt.Errorf("publish %s: %w", e.ID, err)
		}
		if acks = append(acks, f); len(acks) == 1000 {
			if err := wait(); err != nil {
				return err
			}
		}
	}
	return wait()
}

// NodeFleet returns the facts of hosted cluster "<namespace>/<name>" of
// source with nodes nodes, all observed at at: its HostedCluster (no
// proxy), and every node Ready except those listed in notReady. Node i is
// "<name>-np-<i>".
func NodeFleet(source, namespace, name string, nodes int, at time.Time, notReady ...int) ([]event.Event, error) {
	ref := event.ClusterRef{Namespace: namespace, Name: name}
	hc, err := event.New(source, &ref, event.ObjectRef{Kind: "HostedCluster", Namespace: namespace, Name: name, UID: "uid-" + name},
		event.HostedClusterState{Platform: "KubeVirt", Version: "4.18.12", ServiceNetwork: []string{"172.31.0.0/16"}}, "rv:1", at)
	if err != nil {
		return nil, err
	}
	out := []event.Event{hc}
	for n := range nodes {
		e, err := NodeReady(source, namespace, name, n, !slices.Contains(notReady, n), at)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// NodeReady is node n of a NodeFleet cluster turning Ready (or NotReady,
// the container runtime down) at at.
func NodeReady(source, namespace, name string, n int, ready bool, at time.Time) (event.Event, error) {
	ref := event.ClusterRef{Namespace: namespace, Name: name}
	node := fmt.Sprintf("%s-np-%d", name, n)
	p := event.NodeReadiness{Node: node, Ready: event.ConditionTrue, Reason: "KubeletReady", LastTransitionTime: at}
	if !ready {
		p.Ready, p.Reason, p.Message = event.ConditionFalse, "KubeletNotReady", "container runtime is down"
	}
	return event.New(source, &ref, event.ObjectRef{Kind: "Node", Name: node, UID: "uid-" + node, Hosted: true},
		p, event.TransitionAt("Ready="+string(p.Ready), at), at)
}
