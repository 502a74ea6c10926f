package diagnose

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/event"
)

// Seed 000 as the brief states it: the HostedCluster of domain.md with the
// service-ca-operator failure of the seed.
const (
	source      = "mgmt-east"
	seedProxy   = "http://proxy.corp.example:3128"
	seedNoProxy = ".corp.example,172.31.0.0/16"
	// tunnelNoProxy is the seed's noProxy without the service network: the
	// edit that removes HyperShift's bypass (an entry equal to the first
	// service network is a bypass under both rules, so seedNoProxy itself
	// does not tunnel).
	tunnelNoProxy = ".corp.example"
	serviceCIDR   = "172.31.0.0/16"
	clusterCIDR   = "10.132.0.0/14"
	seedMessage   = "F0603 19:38:28.981007       1 cmd.go:162] failed checking apiserver connectivity: client rate limiter Wait returned an error: context deadline exceeded - error from a previous attempt: read tcp 172.40.0.7:40588->172.50.0.1:443: read: connection reset by peer"
	scaNamespace  = "openshift-service-ca-operator"
	scaPod        = "service-ca-operator-6d5f7b9c4-x2x9z"
)

var (
	t0      = time.Date(2026, 6, 3, 19, 0, 0, 0, time.UTC)
	hcRef   = event.ClusterRef{Namespace: "clusters", Name: "example"}
	hcKey   = Key{Source: source, Cluster: hcRef}
	mgmtKey = Key{Source: source}
)

func at(min int) time.Time { return t0.Add(time.Duration(min) * time.Minute) }

// seedHC is the seed's HostedCluster (KubeVirt, 4.18, default networks,
// API published on a management node IP) with the given noProxy.
func seedHC(noProxy string) event.HostedClusterState {
	return event.HostedClusterState{
		Platform: "KubeVirt", InfraID: "example-sffhb", Version: "4.18.12",
		Proxy: event.ProxySpec{
			HTTPProxy: seedProxy, HTTPSProxy: seedProxy, NoProxy: noProxy, TrustedCA: "user-ca-bundle",
		},
		NetworkType:          "OVNKubernetes",
		ClusterNetwork:       []string{clusterCIDR},
		ServiceNetwork:       []string{serviceCIDR},
		ControlPlaneEndpoint: &event.Endpoint{Host: "192.168.126.50", Port: 6443},
		KubeconfigSecret:     "example-admin-kubeconfig",
	}
}

func withVersion(s event.HostedClusterState, v string) event.HostedClusterState {
	s.Version = v
	return s
}

func withEndpoint(s event.HostedClusterState, host string, port int32) event.HostedClusterState {
	s.ControlPlaneEndpoint = &event.Endpoint{Host: host, Port: port}
	return s
}

func noProxyState() event.HostedClusterState {
	s := seedHC("")
	s.Proxy = event.ProxySpec{}
	return s
}

// fact is an event with its decoded payload, as the consumer sees it.
type fact struct {
	e event.Event
	p event.Payload
}

func (f fact) String() string {
	return fmt.Sprintf("%s %s %s", f.e.Type, f.e.Object.Name, f.e.Time.Format(time.RFC3339))
}

func newFact(t testing.TB, cluster *event.ClusterRef, obj event.ObjectRef, p event.Payload, key string, when time.Time, opts ...event.Option) fact {
	t.Helper()
	e, err := event.New(source, cluster, obj, p, key, when, opts...)
	if err != nil {
		t.Fatalf("event.New(%T): %v", p, err)
	}
	// Round-trip like the consumer does, so the tests see what the bot
	// sees (redaction, derived fields, signatures).
	data, err := event.Encode(e)
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	e, err = event.Decode(data)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	dp, err := e.DecodePayload()
	if err != nil {
		t.Fatalf("DecodePayload: %v", err)
	}
	return fact{e, dp}
}

func hosted(t testing.TB, obj event.ObjectRef, p event.Payload, key string, when time.Time) fact {
	t.Helper()
	ref := hcRef
	return newFact(t, &ref, obj, p, key, when)
}

func hcFact(t testing.TB, s event.HostedClusterState, when time.Time) fact {
	t.Helper()
	return hosted(t, event.ObjectRef{Kind: "HostedCluster", Namespace: "clusters", Name: "example", UID: "hc-uid"}, s, "rv-"+when.Format("150405"), when)
}

func nodeFact(t testing.TB, name string, ready event.ConditionStatus, ltt, when time.Time) fact {
	t.Helper()
	p := event.NodeReadiness{
		Node: name, Ready: ready, LastTransitionTime: ltt, ProviderID: "kubevirt://" + name, InternalIP: "10.131.0.10",
	}
	if ready != event.ConditionTrue {
		p.Reason, p.Message = "NodeStatusUnknown", "Kubelet stopped posting node status."
	}
	return hosted(t, event.ObjectRef{Kind: "Node", Name: name, UID: "uid-" + name, Hosted: true}, p,
		event.TransitionAt("Ready="+string(ready), ltt), when)
}

func nodeDeleted(t testing.TB, name string, when time.Time) fact {
	t.Helper()
	return hosted(t, event.ObjectRef{Kind: "Node", Name: name, UID: "uid-" + name, Hosted: true},
		event.NodeReadiness{Node: name, Ready: event.ConditionUnknown, Deleted: true}, "deleted", when)
}

func crashFact(t testing.TB, ns, pod, msg string, restarts int32, when time.Time) fact {
	t.Helper()
	p := event.PodCrashLoop{
		Namespace: ns, Pod: pod, Container: "service-ca-operator", RestartCount: restarts,
		WaitingReason: "CrashLoopBackOff", LastTerminationMessage: msg, ExitCode: 255, FinishedAt: when.Add(-time.Minute),
	}
	return hosted(t, event.ObjectRef{Kind: "Pod", Namespace: ns, Name: pod, UID: "uid-" + pod, Hosted: true}, p,
		fmt.Sprintf("crashloop:%s:%d", p.Container, restarts), when)
}

func seedCrash(t testing.TB, when time.Time) fact {
	t.Helper()
	return crashFact(t, scaNamespace, scaPod, seedMessage, 7, when)
}

func crashCleared(t testing.TB, ns, pod string, when time.Time) fact {
	t.Helper()
	return hosted(t, event.ObjectRef{Kind: "Pod", Namespace: ns, Name: pod, UID: "uid-" + pod, Hosted: true},
		event.PodCrashLoop{Namespace: ns, Pod: pod, Container: "service-ca-operator", RestartCount: 9, Cleared: true}, "cleared:9", when)
}

func apiProxyFact(t testing.TB, node string, mode event.ProxyMode, failure bool, when time.Time) fact {
	t.Helper()
	p := event.KubeAPIServerProxy{Pod: "kube-apiserver-proxy-" + node, Node: node, Mode: mode}
	key := string(mode) + "/1"
	if failure {
		p.ConnectFailure = true
		p.ConnectMessage = "failed to establish a connection through http connect: got unexpected statuscode 403 to CONNECT request"
		key += "/connect-failure"
	}
	return hosted(t, event.ObjectRef{Kind: "Pod", Namespace: "kube-system", Name: p.Pod, UID: "uid-kasp-" + node, Hosted: true}, p, key, when)
}

func poolFact(t testing.TB, name string, healthy bool, ltt, when time.Time) fact {
	t.Helper()
	status, reason := event.ConditionTrue, "AsExpected"
	msg := "All is well"
	if !healthy {
		status, reason, msg = event.ConditionFalse, "NodeConditionsFailed", "Machine example-np1-abc: NodeConditionsFailed"
	}
	replicas := int32(3)
	p := event.NodePoolState{
		Name: name, ClusterName: "example", Platform: "KubeVirt", Replicas: &replicas, CurrentReplicas: 3,
		Conditions: []event.Condition{
			{Type: "Ready", Status: event.ConditionTrue, Reason: "AsExpected", LastTransitionTime: t0},
			{Type: "AllNodesHealthy", Status: status, Reason: reason, Message: msg, LastTransitionTime: ltt},
		},
	}
	return hosted(t, event.ObjectRef{Kind: "NodePool", Namespace: "clusters", Name: name, UID: "uid-np-" + name}, p, "rv-"+when.Format("150405"), when)
}

func changeFact(t testing.TB, old, cur event.ProxySpec, when time.Time) fact {
	t.Helper()
	return hosted(t, event.ObjectRef{Kind: "HostedCluster", Namespace: "clusters", Name: "example", UID: "hc-uid"},
		event.ProxyChange{Target: event.ProxyTargetHostedCluster, Old: old, New: cur}, "chg-"+old.NoProxy+"->"+cur.NoProxy+"|"+cur.HTTPSProxy, when)
}

func proxySpec(noProxy string) event.ProxySpec {
	return event.ProxySpec{HTTPProxy: seedProxy, HTTPSProxy: seedProxy, NoProxy: noProxy, TrustedCA: "user-ca-bundle"}
}

func reachFact(t testing.TB, reachable bool, since, when time.Time) fact {
	t.Helper()
	p := event.Reachability{Endpoint: "192.168.126.50:6443", Reachable: reachable, Since: since}
	state := "reachable"
	if !reachable {
		p.Error = "dial tcp 192.168.126.50:6443: i/o timeout"
		state = "unreachable"
	}
	return hosted(t, event.ObjectRef{Kind: "HostedCluster", Namespace: "clusters", Name: "example", UID: "hc-uid"}, p, event.TransitionAt(state, since), when)
}

func launcherFact(t testing.TB, vmi, phase string, when time.Time) fact {
	t.Helper()
	pod := "virt-launcher-" + vmi + "-abcde"
	p := event.VirtLauncher{Pod: pod, VMI: vmi, Node: "mgmt-worker-1", PodIP: "10.131.0.10", Phase: phase, InfraID: "example-sffhb", NodePool: "np1"}
	return hosted(t, event.ObjectRef{Kind: "Pod", Namespace: "clusters-example", Name: pod, UID: "uid-" + pod}, p, "rv-"+phase, when)
}

// build applies facts to a fresh Cluster of hcKey.
func build(t testing.TB, facts ...fact) *Cluster {
	t.Helper()
	c := NewCluster(hcKey)
	for _, f := range facts {
		c.Apply(f.e, f.p)
		checkBrief(t, c, f.e.Time)
	}
	return c
}

func rulesOf(ds []Diagnosis) []string {
	out := []string{}
	for _, d := range ds {
		out = append(out, d.Rule)
	}
	return out
}

func find(ds []Diagnosis, rule string) (Diagnosis, bool) {
	for _, d := range ds {
		if d.Rule == rule {
			return d, true
		}
	}
	return Diagnosis{}, false
}

// render prints a diagnosis for failure messages.
func render(ds []Diagnosis) string {
	var b strings.Builder
	for _, d := range ds {
		fmt.Fprintf(&b, "[%s %s %s] %s\n  cause: %s\n  confidence: %s\n", d.Rule, d.Severity, d.Confidence.Level, d.Title, d.RootCause, d.Confidence.Why)
		for _, e := range d.Evidence {
			fmt.Fprintf(&b, "  %s %s %s %s\n", e.At.Format(time.RFC3339), e.Kind, e.Object, e.Text)
		}
		fmt.Fprintf(&b, "  symptoms: %v\n", d.Symptoms)
		if d.Fix != nil {
			fmt.Fprintf(&b, "  fix: %s → %s\n%s", d.Fix.Before, d.Fix.After, d.Fix.Diff)
		}
		for _, s := range d.NextSteps {
			fmt.Fprintf(&b, "  next: %s\n", s)
		}
		if d.Trigger != nil {
			fmt.Fprintf(&b, "  trigger: %+v\n", *d.Trigger)
		}
	}
	return b.String()
}
