package bench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hcpbot/hcpbot/event"
)

// fleet is a synthetic fleet of sources management clusters, each hosting
// clusters hosted clusters of nodes nodes (KubeVirt workers). B6 and B7
// build its events from the event contract, in the shape the agent
// publishes them (watchers/facts.go, watchers/nodesummary.go,
// watchers/snapshot.go): the agent's fact builders are internal to package
// watchers and need an API server per hosted cluster, and thousands of
// those do not fit on one machine.
type fleet struct {
	sources, clusters, nodes int
}

// hosted is the number of hosted clusters of the fleet.
func (f fleet) hosted() int { return f.sources * f.clusters }

func (f fleet) String() string { return fmt.Sprintf("%dx%dx%d", f.sources, f.clusters, f.nodes) }

// fleetFromEnv reads a fleet "sources x clusters x nodes" (e.g. 20x100x24)
// from the environment variable name, or returns def.
func fleetFromEnv(name string, def fleet) (fleet, error) {
	v := os.Getenv(name)
	if v == "" {
		return def, nil
	}
	parts := strings.Split(strings.ToLower(v), "x")
	if len(parts) != 3 {
		return fleet{}, fmt.Errorf("%s=%q: want sources x clusters x nodes, e.g. 20x100x24", name, v)
	}
	var n [3]int
	for i, p := range parts {
		x, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || x < 1 {
			return fleet{}, fmt.Errorf("%s=%q: %q is not a positive number", name, v, p)
		}
		n[i] = x
	}
	return fleet{sources: n[0], clusters: n[1], nodes: n[2]}, nil
}

const fleetNS = "clusters"

func fleetSource(s int) string { return fmt.Sprintf("mgmt-%02d", s) }

func fleetRef(c int) event.ClusterRef {
	return event.ClusterRef{Namespace: fleetNS, Name: fmt.Sprintf("hc-%d", c)}
}

func fleetNodeName(c, n int) string { return fmt.Sprintf("hc-%d-np-%d", c, n) }

// fleetNoProxy is a noProxy HyperShift bypasses the proxy with (it holds
// the service network), so the fleet's proxies are healthy.
const fleetNoProxy = ".corp.example,192.168.201.0/24,172.31.0.0/16,10.132.0.0/14"

// fleetGen builds the fleet's events. resourceVersions grow like etcd
// revisions, one per write.
type fleetGen struct {
	f  fleet
	rv uint64
}

func (g *fleetGen) nextRV() string { g.rv++; return strconv.FormatUint(g.rv, 10) }

// hostedCluster is cluster c of source s, as hostedClusterFact states it.
func (g *fleetGen) hostedCluster(s, c int, noProxy string, at time.Time, opts ...event.Option) (event.Event, error) {
	ref := fleetRef(c)
	proxy := fmt.Sprintf("http://proxy-%02d.corp.example:3128", s)
	p := event.HostedClusterState{
		Platform: "KubeVirt", InfraID: ref.Name + "-x7k2p", Version: "4.18.12",
		Proxy:       event.ProxySpec{HTTPProxy: proxy, HTTPSProxy: proxy, NoProxy: noProxy, TrustedCA: "user-ca-bundle"},
		NetworkType: "OVNKubernetes", ClusterNetwork: []string{"10.132.0.0/14"}, ServiceNetwork: []string{"172.31.0.0/16"},
		ControlPlaneEndpoint: &event.Endpoint{Host: "192.168.126.50", Port: int32(30000 + c%2000)},
		KubeconfigSecret:     ref.Name + "-admin-kubeconfig",
		Conditions: []event.Condition{
			{Type: "Available", Status: event.ConditionTrue, Reason: "AsExpected", Message: "The hosted control plane is available"},
			{Type: "Degraded", Status: event.ConditionFalse, Reason: "AsExpected"},
		},
	}
	rv := g.nextRV()
	return event.New(fleetSource(s), &ref, event.ObjectRef{Kind: "HostedCluster", Namespace: fleetNS, Name: ref.Name, UID: fmt.Sprintf("uid-%d-%s", s, ref.Name), ResourceVersion: rv},
		p, "rv:"+rv, at, opts...)
}

// proxyChange is the noProxy edit of cluster c, as proxyChangeFact states it.
func (g *fleetGen) proxyChange(s, c int, oldNoProxy, newNoProxy string, at time.Time) (event.Event, error) {
	ref := fleetRef(c)
	proxy := fmt.Sprintf("http://proxy-%02d.corp.example:3128", s)
	spec := func(np string) event.ProxySpec {
		return event.ProxySpec{HTTPProxy: proxy, HTTPSProxy: proxy, NoProxy: np, TrustedCA: "user-ca-bundle"}
	}
	rv := g.nextRV()
	return event.New(fleetSource(s), &ref, event.ObjectRef{Kind: "HostedCluster", Namespace: fleetNS, Name: ref.Name, UID: fmt.Sprintf("uid-%d-%s", s, ref.Name), ResourceVersion: rv},
		event.ProxyChange{Target: event.ProxyTargetHostedCluster, Old: spec(oldNoProxy), New: spec(newNoProxy)}, "rv:"+rv, at)
}

// node is node n of cluster c turning Ready or NotReady at at, as nodeFact
// states it.
func (g *fleetGen) node(s, c, n int, ready bool, at time.Time, opts ...event.Option) (event.Event, error) {
	ref := fleetRef(c)
	name := fleetNodeName(c, n)
	p := event.NodeReadiness{Node: name, Ready: event.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status",
		LastTransitionTime: at, ProviderID: "kubevirt://" + name, InternalIP: fmt.Sprintf("10.132.%d.%d", c%250, n+2)}
	if !ready {
		p.Ready, p.Reason, p.Message = event.ConditionUnknown, "NodeStatusUnknown", "Kubelet stopped posting node status."
	}
	return event.New(fleetSource(s), &ref, event.ObjectRef{Kind: "Node", Name: name, UID: fmt.Sprintf("uid-%d-%s", s, name), ResourceVersion: g.nextRV(), Hosted: true},
		p, event.TransitionAt("Ready="+string(p.Ready), at), at, opts...)
}

// summary is cluster c's node summary with notReady nodes Unknown, as
// nodeSummaryFact states it (its key holds the counts and the highest
// resourceVersion counted).
func (g *fleetGen) summary(s, c, notReady int, at time.Time, opts ...event.Option) (event.Event, error) {
	ref := fleetRef(c)
	p := event.NodeSummary{Total: g.f.nodes, Ready: g.f.nodes - notReady, Unknown: notReady, JoinGrace: 10 * time.Minute}
	state := fmt.Sprintf("total=%d ready=%d notready=%d unknown=%d joining=%d notjoining=%d", p.Total, p.Ready, p.NotReady, p.Unknown, p.Joining, p.NotJoining)
	return event.New(fleetSource(s), &ref, event.ObjectRef{Kind: "HostedCluster", Namespace: fleetNS, Name: ref.Name},
		p, "nodes:"+state+"@rv:"+g.nextRV(), at, opts...)
}

// crashLoop is the service-ca-operator of cluster c crashing for the
// restarts-th time (cleared: running again), as crashLoopFact and
// clearedFact state it.
func (g *fleetGen) crashLoop(s, c int, restarts int32, cleared bool, at time.Time) (event.Event, error) {
	ref := fleetRef(c)
	pod := "service-ca-operator-6d5f7b9c4-x2x9z"
	p := event.PodCrashLoop{Namespace: "openshift-service-ca-operator", Pod: pod, Container: "service-ca-operator", RestartCount: restarts,
		WaitingReason: "CrashLoopBackOff", LastTerminationMessage: "F1203 10:00:00.000000       1 main.go:42] failed to load serving certificate: secret not found",
		ExitCode: 255, FinishedAt: at}
	key := fmt.Sprintf("crashloop:service-ca-operator:%d", restarts)
	if cleared {
		p.WaitingReason, p.Cleared = "", true
		key = fmt.Sprintf("cleared:uid-sca-%s:%d", ref.Name, restarts)
	}
	return event.New(fleetSource(s), &ref, event.ObjectRef{Kind: "Pod", Namespace: p.Namespace, Name: pod, UID: "uid-sca-" + ref.Name, ResourceVersion: g.nextRV(), Hosted: true},
		p, key, at)
}

// snapshot is what source s's agent publishes when it restates its state
// (watchers/snapshot.go): every HostedCluster (always a problem fact),
// every hosted cluster's problems (notReady of its nodes, 0..notReady-1)
// and node summary, then a SnapshotDone per scope. fresh restatements get
// IDs of their own run (periodic, requested); a start-up one does not.
func (g *fleetGen) snapshot(s int, notReady int, noProxy func(c int) string, at time.Time, fresh bool, emit func(event.Event) error) error {
	source := fleetSource(s)
	run := fmt.Sprintf("%s-agent-0-%d", source, at.UnixNano())
	opt := event.WithSnapshot(run)
	if fresh {
		opt = event.WithRestatement(run)
	}
	var hcs []event.ObjectRef
	for c := range g.f.clusters {
		e, err := g.hostedCluster(s, c, noProxy(c), at, opt)
		if err != nil {
			return err
		}
		hcs = append(hcs, e.Object)
		if err := emit(e); err != nil {
			return err
		}
	}
	type scope struct {
		ref      event.ClusterRef
		problems []event.ObjectRef
	}
	scopes := make([]scope, 0, g.f.clusters)
	for c := range g.f.clusters {
		sc := scope{ref: fleetRef(c)}
		for n := range notReady {
			e, err := g.node(s, c, n, false, at, opt)
			if err != nil {
				return err
			}
			sc.problems = append(sc.problems, e.Object)
			if err := emit(e); err != nil {
				return err
			}
		}
		e, err := g.summary(s, c, notReady, at, opt)
		if err != nil {
			return err
		}
		sc.problems = append(sc.problems, e.Object)
		if err := emit(e); err != nil {
			return err
		}
		scopes = append(scopes, sc)
	}
	done, err := event.NewSnapshotDone(source, run, nil, event.SnapshotDone{Started: at, Count: len(hcs),
		Types: []event.Type{event.TypeHostedCluster, event.TypeNodePool, event.TypeVirtLauncher}, Problems: hcs}, at)
	if err != nil {
		return err
	}
	if err := emit(done); err != nil {
		return err
	}
	for _, sc := range scopes {
		done, err := event.NewSnapshotDone(source, run, &sc.ref, event.SnapshotDone{Started: at, Count: len(sc.problems),
			Types: []event.Type{event.TypeNode, event.TypeCrashLoop, event.TypeAPIServerProxy}, Problems: sc.problems}, at)
		if err != nil {
			return err
		}
		if err := emit(done); err != nil {
			return err
		}
	}
	return nil
}

// zoneOutage emits what source s's agent publishes when a zone fails: in
// every hosted cluster its last down nodes turn Ready=Unknown, then one
// node summary per cluster (the agent coalesces a cluster's summaries
// over 5 s). B7 and B8 publish it.
func (g *fleetGen) zoneOutage(s, down int, emit func(event.Event) error) error {
	for c := range g.f.clusters {
		at := time.Now()
		for nd := range down {
			e, err := g.node(s, c, g.f.nodes-1-nd, false, at)
			if err != nil {
				return err
			}
			if err := emit(e); err != nil {
				return err
			}
		}
	}
	for c := range g.f.clusters {
		e, err := g.summary(s, c, down, time.Now())
		if err != nil {
			return err
		}
		if err := emit(e); err != nil {
			return err
		}
	}
	return nil
}
