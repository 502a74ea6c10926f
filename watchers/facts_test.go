package watchers

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/internal/scenario"
)

// Unit tests of the fact functions (facts.go) and the informer transforms
// (transform.go): pure functions, no control plane, so they run with -short.

var (
	factT0 = time.Date(2026, 7, 22, 8, 0, 0, 0, time.UTC)
	factT1 = factT0.Add(90 * time.Second)
	// factObserved is the observation time handed to event.New.
	factObserved = time.Date(2026, 7, 22, 10, 0, 0, 0, time.UTC)
	// factNow is when the agent evaluates a node's join grace.
	factNow     = factObserved
	factCluster = &event.ClusterRef{Namespace: "clusters", Name: "example"}
)

// skipBug skips a test that demonstrates a known bug, unless HCPBOT_BUGS is
// set (HCPBOT_BUGS=1 go test -run ... reproduces it).
func fxSkipBug(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("HCPBOT_BUGS") == "" {
		t.Skip("bug: " + why)
	}
}

// factEvent builds and encodes the event the agent would publish for f,
// failing the test if the fact cannot become a valid event.
func factEvent(t *testing.T, obj event.ObjectRef, f fact) (event.Event, []byte) {
	t.Helper()
	e, err := event.New("mgmt-east", factCluster, obj, f.payload, f.key, factObserved)
	if err != nil {
		t.Fatalf("event.New(%T, key %q): %v", f.payload, f.key, err)
	}
	data, err := event.Encode(e)
	if err != nil {
		t.Fatalf("event.Encode: %v", err)
	}
	return e, data
}

func fxNode(name string, status corev1.ConditionStatus, transition time.Time, mutate ...func(*corev1.Node)) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), ResourceVersion: "42"},
		Spec:       corev1.NodeSpec{ProviderID: "kubevirt://" + name},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{
				{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory"},
				{
					Type: corev1.NodeReady, Status: status, Reason: "KubeletNotReady", Message: "container runtime network not ready",
					LastHeartbeatTime: metav1.NewTime(transition.Add(time.Minute)), LastTransitionTime: metav1.NewTime(transition),
				},
			},
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeHostName, Address: name},
				{Type: corev1.NodeExternalIP, Address: "192.0.2.10"},
				{Type: corev1.NodeInternalIP, Address: "10.131.0.7"},
				{Type: corev1.NodeInternalIP, Address: "fd00::7"},
			},
		},
	}
	for _, m := range mutate {
		m(n)
	}
	return n
}

func TestFactNode(t *testing.T) {
	for _, tc := range []struct {
		name           string
		node           *corev1.Node
		wantReady      event.ConditionStatus
		wantKey        string
		wantState      string
		wantProblem    bool
		wantIP         string
		wantNotJoining bool
		wantCopied     bool // reason, message and transition time of the condition
	}{
		{
			name: "ready", node: fxNode("w-0", corev1.ConditionTrue, factT0),
			wantReady: event.ConditionTrue, wantKey: event.TransitionAt("Ready=True", factT0), wantState: "Ready=True",
			wantIP: "10.131.0.7",
		},
		{
			name: "not ready", node: fxNode("w-1", corev1.ConditionFalse, factT0),
			wantReady: event.ConditionFalse, wantKey: event.TransitionAt("Ready=False", factT0), wantState: "Ready=False",
			wantProblem: true, wantIP: "10.131.0.7", wantCopied: true,
		},
		{
			name: "unknown (kubelet stopped posting)", node: fxNode("w-2", corev1.ConditionUnknown, factT1),
			wantReady: event.ConditionUnknown, wantKey: event.TransitionAt("Ready=Unknown", factT1), wantState: "Ready=Unknown",
			wantProblem: true, wantIP: "10.131.0.7",
		},
		{
			name: "no Ready condition and no addresses, created 2 min ago: joining, no problem",
			node: fxNode("w-3", corev1.ConditionTrue, factT0, func(n *corev1.Node) {
				n.Status.Conditions = n.Status.Conditions[:1]
				n.Status.Addresses = nil
				n.CreationTimestamp = metav1.NewTime(factNow.Add(-2 * time.Minute))
			}),
			wantReady: event.ConditionUnknown, wantKey: event.TransitionAt("Joining", factNow.Add(-2*time.Minute)), wantState: "Joining",
		},
		{
			name: "no Ready condition 11 min after creation: not joining",
			node: fxNode("w-4", corev1.ConditionTrue, factT0, func(n *corev1.Node) {
				n.Status.Conditions = nil
				n.Status.Addresses = nil
				n.CreationTimestamp = metav1.NewTime(factNow.Add(-11 * time.Minute))
			}),
			wantReady: event.ConditionUnknown, wantKey: event.TransitionAt("NotJoining", factNow.Add(-11*time.Minute)), wantState: "NotJoining",
			wantProblem: true, wantNotJoining: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := nodeFact(tc.node, factNow, DefaultNodeJoinGrace)
			p, ok := f.payload.(event.NodeReadiness)
			if !ok {
				t.Fatalf("payload %T, want event.NodeReadiness", f.payload)
			}
			if p.Node != tc.node.Name || p.Ready != tc.wantReady || p.InternalIP != tc.wantIP || p.ProviderID != "kubevirt://"+tc.node.Name {
				t.Errorf("payload = %+v", p)
			}
			if f.key != tc.wantKey || f.state != tc.wantState || f.problem != tc.wantProblem {
				t.Errorf("key/state/problem = %q/%q/%v, want %q/%q/%v", f.key, f.state, f.problem, tc.wantKey, tc.wantState, tc.wantProblem)
			}
			if p.NotJoining != tc.wantNotJoining || (tc.wantNotJoining && !p.Created.Equal(tc.node.CreationTimestamp.Time)) {
				t.Errorf("NotJoining/Created = %v/%v, want %v", p.NotJoining, p.Created, tc.wantNotJoining)
			}
			if tc.wantCopied && (p.Reason != "KubeletNotReady" || p.Message != "container runtime network not ready" || !p.LastTransitionTime.Equal(factT0)) {
				t.Errorf("condition not copied: %+v", p)
			}
			factEvent(t, nodeRef(tc.node), f)
		})
	}
}

// The state is what decides whether to publish; the key what makes the
// event unique. A node NotReady again later is the same state (no news for
// emitIfChanged) but a new fact (a new ID, not deduplicated); heartbeats and
// sub-second jitter change neither.
func TestFactNodeStateVersusKey(t *testing.T) {
	base := nodeFact(fxNode("w", corev1.ConditionFalse, factT0), factNow, DefaultNodeJoinGrace)
	for _, tc := range []struct {
		name               string
		node               *corev1.Node
		sameState, sameKey bool
		sameProblem        bool
	}{
		{"only the heartbeat moved", fxNode("w", corev1.ConditionFalse, factT0, func(n *corev1.Node) {
			n.Status.Conditions[1].LastHeartbeatTime = metav1.NewTime(factT0.Add(time.Hour))
		}), true, true, true},
		{"message and reason changed", fxNode("w", corev1.ConditionFalse, factT0, func(n *corev1.Node) {
			n.Status.Conditions[1].Reason, n.Status.Conditions[1].Message = "NodeStatusNeverUpdated", "other text"
		}), true, true, true},
		{"sub-second transition time (API stores seconds)", fxNode("w", corev1.ConditionFalse, factT0.Add(400*time.Millisecond)), true, true, true},
		{"NotReady again after a recovery", fxNode("w", corev1.ConditionFalse, factT1), true, false, true},
		{"Ready", fxNode("w", corev1.ConditionTrue, factT1), false, false, false},
		{"Unknown", fxNode("w", corev1.ConditionUnknown, factT0), false, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := nodeFact(tc.node, factNow, DefaultNodeJoinGrace)
			if got := f.state == base.state; got != tc.sameState {
				t.Errorf("state %q vs %q: same = %v, want %v", f.state, base.state, got, tc.sameState)
			}
			if got := f.key == base.key; got != tc.sameKey {
				t.Errorf("key %q vs %q: same = %v, want %v", f.key, base.key, got, tc.sameKey)
			}
			if got := f.problem == base.problem; got != tc.sameProblem {
				t.Errorf("problem = %v, base %v", f.problem, base.problem)
			}
		})
	}
}

func fxCrashPod(name string, statuses ...corev1.ContainerStatus) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: scenario.ServiceCANamespace, Name: name, UID: types.UID("uid-" + name), ResourceVersion: "7"},
		Spec:       corev1.PodSpec{NodeName: "w-0", Containers: []corev1.Container{{Name: scenario.ServiceCAName}}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: statuses},
	}
}

func fxWaiting(name, reason string, restarts int32, exit int32, message string) corev1.ContainerStatus {
	cs := corev1.ContainerStatus{
		Name: name, RestartCount: restarts,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: "back-off 5m0s restarting failed container"}},
	}
	if message != "" || exit != 0 {
		cs.LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: exit, Reason: "Error", Message: message, FinishedAt: metav1.NewTime(factT0),
		}}
	}
	return cs
}

func fxRunning(name string, restarts int32) corev1.ContainerStatus {
	return corev1.ContainerStatus{
		Name: name, Ready: true, RestartCount: restarts,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(factT0)}},
	}
}

func TestFactCrashLoop(t *testing.T) {
	const c = scenario.ServiceCAName
	for _, tc := range []struct {
		name          string
		pod           *corev1.Pod
		wantOK        bool
		wantContainer string
		wantReason    string
		wantSig       event.Signature
		wantExit      int32
		wantRestarts  int32
		wantKey       string
		wantState     string
	}{
		{
			name:   "seed 000: CrashLoopBackOff, apiserver connectivity",
			pod:    fxCrashPod("sca", fxWaiting(c, "CrashLoopBackOff", 5, 255, scenario.SeedConnectivityMessage)),
			wantOK: true, wantContainer: c, wantReason: "CrashLoopBackOff", wantSig: event.SignatureAPIServerConnectivity,
			wantExit: 255, wantRestarts: 5,
			wantKey: "crashloop:" + c + ":apiserver-connectivity:5", wantState: "crashloop:" + c + ":apiserver-connectivity",
		},
		{
			name:   "waiting with reason Error, proxy CONNECT failure",
			pod:    fxCrashPod("sca", fxWaiting(c, "Error", 1, 1, scenario.TunnelFailureMessage)),
			wantOK: true, wantContainer: c, wantReason: "Error", wantSig: event.SignatureProxyConnect,
			wantExit: 1, wantRestarts: 1,
			wantKey: "crashloop:" + c + ":proxy-connect:1", wantState: "crashloop:" + c + ":proxy-connect",
		},
		{
			name:   "no last termination: no signature",
			pod:    fxCrashPod("sca", fxWaiting(c, "CrashLoopBackOff", 2, 0, "")),
			wantOK: true, wantContainer: c, wantReason: "CrashLoopBackOff", wantRestarts: 2,
			wantKey: "crashloop:" + c + "::2", wantState: "crashloop:" + c + ":",
		},
		{
			name:   "the first crashlooping container is reported",
			pod:    fxCrashPod("sca", fxRunning("sidecar", 0), fxWaiting("second", "CrashLoopBackOff", 3, 255, scenario.SeedConnectivityMessage)),
			wantOK: true, wantContainer: "second", wantReason: "CrashLoopBackOff", wantSig: event.SignatureAPIServerConnectivity,
			wantExit: 255, wantRestarts: 3,
			wantKey: "crashloop:second:apiserver-connectivity:3", wantState: "crashloop:second:apiserver-connectivity",
		},
		{name: "running (after restarts)", pod: fxCrashPod("sca", fxRunning(c, 9))},
		{name: "waiting for another reason", pod: fxCrashPod("sca", fxWaiting(c, "ContainerCreating", 0, 0, ""))},
		{name: "no container statuses yet", pod: fxCrashPod("sca")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, ok := crashLoopFact(tc.pod)
			if ok != tc.wantOK {
				t.Fatalf("ok = %v, want %v (fact %+v)", ok, tc.wantOK, f)
			}
			if !ok {
				if f.payload != nil || f.key != "" || f.state != "" {
					t.Errorf("a healthy pod gave a fact: %+v", f)
				}
				return
			}
			p := f.payload.(event.PodCrashLoop)
			if p.Container != tc.wantContainer || p.WaitingReason != tc.wantReason || p.Signature != tc.wantSig ||
				p.ExitCode != tc.wantExit || p.RestartCount != tc.wantRestarts || p.Cleared || p.Pod != "sca" ||
				p.Namespace != scenario.ServiceCANamespace {
				t.Errorf("payload = %+v", p)
			}
			if f.key != tc.wantKey || f.state != tc.wantState || !f.problem {
				t.Errorf("key/state/problem = %q/%q/%v, want %q/%q/true", f.key, f.state, f.problem, tc.wantKey, tc.wantState)
			}
			if strings.HasSuffix(f.state, ":"+itoa(int(tc.wantRestarts))) {
				t.Errorf("state %q carries the restart count", f.state)
			}
			e, _ := factEvent(t, podRef(tc.pod, true), f)
			dp, err := e.DecodePayload()
			if err != nil {
				t.Fatal(err)
			}
			if got := dp.(event.PodCrashLoop); got.Signature != tc.wantSig || got.ExitCode != tc.wantExit {
				t.Errorf("decoded payload = %+v", got)
			}
		})
	}
}

// Restarts of a loop are not news (same state); a crash after a recovery
// is (the restart count in the key makes it a new fact, and the state
// differs from "cleared").
func TestFactCrashLoopLifecycle(t *testing.T) {
	const c = scenario.ServiceCAName
	crash := func(restarts int32) fact {
		f, ok := crashLoopFact(fxCrashPod("sca", fxWaiting(c, "CrashLoopBackOff", restarts, 255, scenario.SeedConnectivityMessage)))
		if !ok {
			t.Fatalf("crashLoopFact(%d restarts): ok = false", restarts)
		}
		return f
	}
	first, again := crash(5), crash(6)
	if first.state != again.state {
		t.Errorf("another restart changed the state: %q -> %q", first.state, again.state)
	}
	if first.key == again.key {
		t.Errorf("another restart kept the key %q", first.key)
	}
	cleared := clearedFact(fxCrashPod("sca", fxRunning(c, 6)), "uid-sca")
	relapse := crash(7)
	if cleared.state == relapse.state || cleared.state == first.state {
		t.Errorf("cleared state %q not distinct from crash states", cleared.state)
	}
	if relapse.key == first.key || relapse.key == again.key {
		t.Errorf("a crash after recovery reuses key %q", relapse.key)
	}
}

func TestFactCleared(t *testing.T) {
	for _, tc := range []struct {
		name          string
		pod           *corev1.Pod
		wantContainer string
		wantRestarts  int32
		wantKey       string
	}{
		{"one container", fxCrashPod("sca", fxRunning("op", 6)), "op", 6, "cleared:uid-sca:6"},
		{"restarts of every container count", fxCrashPod("sca", fxRunning("op", 6), fxRunning("sidecar", 2)), "op", 6, "cleared:uid-sca:8"},
		{"pod without statuses (gone)", fxCrashPod("sca"), "", 0, "cleared:uid-sca:0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := clearedFact(tc.pod, "uid-sca")
			p := f.payload.(event.PodCrashLoop)
			if !p.Cleared || p.Container != tc.wantContainer || p.RestartCount != tc.wantRestarts || p.Pod != "sca" || p.Namespace != scenario.ServiceCANamespace {
				t.Errorf("payload = %+v", p)
			}
			if f.key != tc.wantKey || f.state != "cleared" || f.problem {
				t.Errorf("key/state/problem = %q/%q/%v, want %q/cleared/false", f.key, f.state, f.problem, tc.wantKey)
			}
			factEvent(t, podRef(tc.pod, true), f)
		})
	}
}

func fxProxyPod(containers []string, statuses ...corev1.ContainerStatus) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: APIServerProxyNamespace, Name: "kube-apiserver-proxy-w-0", UID: "uid-kap", ResourceVersion: "9",
			Labels: map[string]string{"k8s-app": "kube-apiserver-proxy"}},
		Spec:   corev1.PodSpec{NodeName: "w-0"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: statuses},
	}
	for _, c := range containers {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c})
	}
	return p
}

func fxTerminated(name string, last, current string) corev1.ContainerStatus {
	cs := fxRunning(name, 3)
	if last != "" {
		cs.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: last}
	}
	if current != "" {
		cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: current}}
	}
	return cs
}

func TestFactAPIServerProxy(t *testing.T) {
	const connect = scenario.TunnelFailureMessage
	if connect != "failed to establish a connection through http connect: got unexpected statuscode 403 to CONNECT request" {
		t.Fatalf("scenario.TunnelFailureMessage changed: %q", connect)
	}
	for _, tc := range []struct {
		name        string
		pod         *corev1.Pod
		wantMode    event.ProxyMode
		wantFailure bool
		wantProblem bool
	}{
		{"haproxy, healthy", fxProxyPod([]string{"haproxy"}, fxRunning("haproxy", 0)), event.ProxyModeHAProxy, false, false},
		{"tunnel, healthy so far", fxProxyPod([]string{tunnelContainer}, fxRunning(tunnelContainer, 0)), event.ProxyModeTunnel, false, true},
		{"tunnel, CONNECT refused (last termination)", fxProxyPod([]string{tunnelContainer}, fxTerminated(tunnelContainer, connect, "")), event.ProxyModeTunnel, true, true},
		{"tunnel, CONNECT refused (current termination)", fxProxyPod([]string{tunnelContainer}, fxTerminated(tunnelContainer, "", connect)), event.ProxyModeTunnel, true, true},
		{"tunnel, unrelated termination", fxProxyPod([]string{tunnelContainer}, fxTerminated(tunnelContainer, "OOMKilled", "")), event.ProxyModeTunnel, false, true},
		{"tunnel container listed after haproxy", fxProxyPod([]string{"haproxy", tunnelContainer}), event.ProxyModeTunnel, false, true},
		{"tunnel container listed before haproxy", fxProxyPod([]string{tunnelContainer, "haproxy"}), event.ProxyModeTunnel, false, true},
		// The failure text is recorded, but only tunnel mode is a problem.
		{"haproxy with a CONNECT message", fxProxyPod([]string{"haproxy"}, fxTerminated("haproxy", connect, "")), event.ProxyModeHAProxy, true, false},
		{"no known container", fxProxyPod([]string{"other"}), event.ProxyModeUnknown, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := apiServerProxyFact(tc.pod)
			p := f.payload.(event.KubeAPIServerProxy)
			if p.Mode != tc.wantMode || p.ConnectFailure != tc.wantFailure || p.Pod != tc.pod.Name || p.Node != "w-0" {
				t.Errorf("payload = %+v, want mode %s failure %v", p, tc.wantMode, tc.wantFailure)
			}
			if tc.wantFailure && p.ConnectMessage != connect {
				t.Errorf("ConnectMessage = %q", p.ConnectMessage)
			}
			if !tc.wantFailure && p.ConnectMessage != "" {
				t.Errorf("ConnectMessage = %q without a failure", p.ConnectMessage)
			}
			if f.problem != tc.wantProblem {
				t.Errorf("problem = %v, want %v", f.problem, tc.wantProblem)
			}
			if want := string(tc.wantMode) + ":" + boolStr(tc.wantFailure); f.state != want {
				t.Errorf("state = %q, want %q", f.state, want)
			}
			factEvent(t, podRef(tc.pod, true), f)
		})
	}
}

func fxNodePool(conds ...hypershift.NodePoolCondition) *hypershift.NodePool {
	replicas := int32(3)
	np := &hypershift.NodePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: "clusters", Name: "example-np", UID: "uid-np"},
		Spec:       hypershift.NodePoolSpec{ClusterName: "example", Replicas: &replicas, Platform: hypershift.PlatformSpec{Type: hypershift.PlatformKubeVirt}},
		Status:     hypershift.NodePoolStatus{Replicas: 2, Conditions: conds},
	}
	return np
}

func fxNPCond(typ, status, msg string, at time.Time) hypershift.NodePoolCondition {
	return hypershift.NodePoolCondition{Type: typ, Status: status, Reason: "R", Message: msg, LastTransitionTime: metav1.NewTime(at)}
}

func TestFactNodePool(t *testing.T) {
	healthy := []hypershift.NodePoolCondition{
		fxNPCond("Ready", "True", "", factT0),
		fxNPCond("AllMachinesReady", "True", "", factT0),
		fxNPCond("AllNodesHealthy", "True", "", factT0),
	}
	base := nodePoolFact(fxNodePool(healthy...))
	for _, tc := range []struct {
		name                 string
		np                   *hypershift.NodePool
		wantProblem          bool
		sameState, sameKey   bool
		wantConditionsInLoad int
	}{
		{"healthy", fxNodePool(healthy...), false, true, true, 3},
		{"only messages and times churn", fxNodePool(
			fxNPCond("Ready", "True", "Machine example-np-x7k2p: ready", factT1),
			fxNPCond("AllMachinesReady", "True", "2 of 2 machines ready", factT1),
			fxNPCond("AllNodesHealthy", "True", "", factT1),
		), false, true, false, 3},
		{"AllNodesHealthy=False is a problem", fxNodePool(
			fxNPCond("Ready", "True", "", factT0),
			fxNPCond("AllMachinesReady", "True", "", factT0),
			fxNPCond("AllNodesHealthy", "False", "Machine example-np-x: NodeConditionsFailed: Node is not ready", factT1),
		), true, false, false, 3},
		{"UpdatingConfig=False is not a problem", fxNodePool(append(healthy[:3:3], fxNPCond("UpdatingConfig", "False", "", factT0))...), false, false, false, 4},
		{"UpdatingConfig=True is not a problem", fxNodePool(append(healthy[:3:3], fxNPCond("UpdatingConfig", "True", "updating", factT0))...), false, false, false, 4},
		{"ReachedIgnitionEndpoint=False is a problem", fxNodePool(append(healthy[:3:3], fxNPCond("ReachedIgnitionEndpoint", "False", "", factT0))...), true, false, false, 4},
		{"conditions the bot does not read are left out", fxNodePool(append(healthy[:3:3], fxNPCond("AutoscalingEnabled", "False", "", factT1))...), false, true, true, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := nodePoolFact(tc.np)
			p := f.payload.(event.NodePoolState)
			if p.Name != "example-np" || p.ClusterName != "example" || p.Platform != hypershift.PlatformKubeVirt ||
				p.Replicas == nil || *p.Replicas != 3 || p.CurrentReplicas != 2 || len(p.Conditions) != tc.wantConditionsInLoad {
				t.Errorf("payload = %+v", p)
			}
			if f.problem != tc.wantProblem {
				t.Errorf("problem = %v, want %v", f.problem, tc.wantProblem)
			}
			if got := f.state == base.state; got != tc.sameState {
				t.Errorf("state %q vs healthy %q: same = %v, want %v", f.state, base.state, got, tc.sameState)
			}
			// Every fixture is the same resourceVersion: one key.
			if f.key != "rv:"+tc.np.ResourceVersion {
				t.Errorf("key %q, want the resourceVersion", f.key)
			}
			if strings.Contains(f.state, "example-np") || strings.Contains(f.state, "machines ready") || strings.Contains(f.state, "2026") {
				t.Errorf("state %q carries messages or times", f.state)
			}
			factEvent(t, event.ObjectRef{Kind: "NodePool", Namespace: "clusters", Name: "example-np", UID: "uid-np"}, f)
		})
	}
}

func fxHostedCluster(mutate ...func(*hypershift.HostedCluster)) *hypershift.HostedCluster {
	port := int32(6443)
	hc := &hypershift.HostedCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: "clusters", Name: "example", UID: "uid-hc"},
		Spec: hypershift.HostedClusterSpec{
			InfraID:  "example-sffhb",
			Platform: hypershift.PlatformSpec{Type: hypershift.PlatformKubeVirt},
			Networking: hypershift.ClusterNetworking{
				ClusterNetwork: []hypershift.NetworkEntry{{CIDR: "10.132.0.0/14", HostPrefix: 23}},
				ServiceNetwork: []hypershift.NetworkEntry{{CIDR: "172.31.0.0/16"}},
				NetworkType:    "OVNKubernetes",
				APIServer:      &hypershift.APIServerNetworking{AdvertiseAddress: "172.20.0.1", Port: &port},
			},
			Configuration: &hypershift.ClusterConfiguration{Proxy: &hypershift.ProxySpec{
				HTTPProxy: "http://proxy.corp.example:3128", HTTPSProxy: "http://proxy.corp.example:3128",
				NoProxy: ".corp.example,172.31.0.0/16", TrustedCA: hypershift.ConfigMapNameRef{Name: "user-ca-bundle"},
			}},
		},
		Status: hypershift.HostedClusterStatus{
			Kubeconfig:           &hypershift.LocalObjectRef{Name: "example-admin-kubeconfig"},
			ControlPlaneEndpoint: hypershift.APIEndpoint{Host: "api.example.hcp.example", Port: 6443},
			Conditions: []metav1.Condition{
				{Type: "Available", Status: metav1.ConditionTrue, Reason: "AsExpected", LastTransitionTime: metav1.NewTime(factT0)},
				{Type: "Degraded", Status: metav1.ConditionFalse, Reason: "AsExpected", LastTransitionTime: metav1.NewTime(factT0)},
				{Type: "ClusterVersionSucceeding", Status: metav1.ConditionFalse, Reason: "NotRead", LastTransitionTime: metav1.NewTime(factT0)},
			},
		},
	}
	for _, m := range mutate {
		m(hc)
	}
	return hc
}

func TestFactHostedCluster(t *testing.T) {
	const password = "secret"
	withCredentials := func(hc *hypershift.HostedCluster) {
		p := hc.Spec.Configuration.Proxy
		p.HTTPProxy = "http://user:" + password + "@proxy:3128"
		p.HTTPSProxy = "http://user:" + password + "@proxy:3128"
		p.ReadinessEndpoints = []string{"http://user:" + password + "@readiness.corp.example/healthz"}
		hc.Status.Conditions = append(hc.Status.Conditions, metav1.Condition{
			Type: "ValidProxyConfiguration", Status: metav1.ConditionFalse, Reason: "InvalidProxy",
			Message: "proxy http://user:" + password + "@proxy:3128 refused CONNECT", LastTransitionTime: metav1.NewTime(factT1),
		})
	}
	for _, tc := range []struct {
		name        string
		hc          *hypershift.HostedCluster
		wantProxy   string
		wantAPI     *event.Endpoint
		wantConds   []string
		wantSecrets []string // must not appear in the encoded event
	}{
		{
			name: "seed 000 proxy", hc: fxHostedCluster(),
			wantProxy: "http://proxy.corp.example:3128", wantAPI: &event.Endpoint{Host: "172.20.0.1", Port: 6443},
			wantConds: []string{"Available", "Degraded"},
		},
		{
			name: "proxy with credentials", hc: fxHostedCluster(withCredentials),
			wantProxy: "http://***@proxy:3128", wantAPI: &event.Endpoint{Host: "172.20.0.1", Port: 6443},
			wantConds:   []string{"Available", "Degraded", "ValidProxyConfiguration"},
			wantSecrets: []string{password, "user:"},
		},
		{
			name: "no proxy, no apiServer", hc: fxHostedCluster(func(hc *hypershift.HostedCluster) {
				hc.Spec.Configuration = nil
				hc.Spec.Networking.APIServer = nil
			}),
			wantConds: []string{"Available", "Degraded"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := hostedClusterFact(tc.hc, nil)
			if !f.problem {
				t.Error("a HostedCluster is always restated (problem = false)")
			}
			if f.key != "rv:"+tc.hc.ResourceVersion || f.state == "" {
				t.Errorf("key %q / state %q: want the resourceVersion and a content fingerprint", f.key, f.state)
			}
			e, data := factEvent(t, objectRef("HostedCluster", &unstructured.Unstructured{Object: map[string]any{
				"metadata": map[string]any{"namespace": "clusters", "name": "example", "uid": "uid-hc"},
			}}), f)
			for _, s := range tc.wantSecrets {
				if strings.Contains(string(data), s) {
					t.Errorf("encoded event contains %q:\n%s", s, data)
				}
				if strings.Contains(e.ID, s) {
					t.Errorf("ID contains %q", s)
				}
			}
			dp, err := e.DecodePayload()
			if err != nil {
				t.Fatal(err)
			}
			p := dp.(event.HostedClusterState)
			if p.Proxy.HTTPProxy != tc.wantProxy || p.Proxy.HTTPSProxy != tc.wantProxy {
				t.Errorf("proxy = %+v, want %q", p.Proxy, tc.wantProxy)
			}
			if tc.wantProxy != "" && (p.Proxy.NoProxy != ".corp.example,172.31.0.0/16" || p.Proxy.TrustedCA != "user-ca-bundle") {
				t.Errorf("proxy = %+v", p.Proxy)
			}
			if !reflect.DeepEqual(p.APIServer, tc.wantAPI) {
				t.Errorf("APIServer = %+v, want %+v", p.APIServer, tc.wantAPI)
			}
			var conds []string
			for _, c := range p.Conditions {
				conds = append(conds, c.Type)
			}
			if !reflect.DeepEqual(conds, tc.wantConds) {
				t.Errorf("conditions = %v, want %v", conds, tc.wantConds)
			}
			if p.Platform != hypershift.PlatformKubeVirt || p.InfraID != "example-sffhb" || p.KubeconfigSecret != "example-admin-kubeconfig" ||
				p.ControlPlaneEndpoint == nil || *p.ControlPlaneEndpoint != (event.Endpoint{Host: "api.example.hcp.example", Port: 6443}) ||
				!reflect.DeepEqual(p.ClusterNetwork, []string{"10.132.0.0/14"}) || !reflect.DeepEqual(p.ServiceNetwork, []string{"172.31.0.0/16"}) ||
				p.NetworkType != "OVNKubernetes" {
				t.Errorf("payload = %+v", p)
			}
		})
	}
}

// The event ID must not be a function of the proxy password: IDs are
// public on the stream and in the bot, and the redacted payload gives an
// attacker everything else the key hashes, so a password that changes the
// ID can be guessed offline. hostedClusterFact (and proxyChangeFact,
// openShiftProxyFact) fingerprint the payload before event.New redacts it.
func TestFactHostedClusterIDIndependentOfProxyPassword(t *testing.T) {
	ids := map[string]string{}
	for _, pw := range []string{"secret", "hunter2"} {
		hc := fxHostedCluster(func(hc *hypershift.HostedCluster) {
			hc.Spec.Configuration.Proxy.HTTPProxy = "http://user:" + pw + "@proxy:3128"
		})
		e, data := factEvent(t, event.ObjectRef{Kind: "HostedCluster", Namespace: "clusters", Name: "example", UID: "uid-hc"}, hostedClusterFact(hc, nil))
		if strings.Contains(string(data), pw) {
			t.Fatalf("encoded event contains the password")
		}
		ids[pw] = e.ID
	}
	if ids["secret"] != ids["hunter2"] {
		t.Errorf("events identical but for the redacted password have different IDs (%s, %s): the ID depends on the password", ids["secret"], ids["hunter2"])
	}
}

// A fact that comes back (a proxy edit reverted and made again, a VM pod
// failing a second time) is a new transition and needs a new ID: the
// stream drops a repeated ID for its whole duplicate window (15 min), so the
// second occurrence would never reach the bot. Facts keyed by a fingerprint
// of their payload repeat their earlier ID. (Node and crashloop facts are
// keyed by transition time and restart count and are not affected; the
// event package asks for the resourceVersion here.)
func TestFactRecurrenceGetsNewID(t *testing.T) {
	// Every write gives the object a new resourceVersion; the recurring
	// state is a later version with old content.
	version := func(rv string) func(*hypershift.HostedCluster) {
		return func(hc *hypershift.HostedCluster) { hc.ResourceVersion = rv }
	}
	a := fxHostedCluster(version("1"))
	b := fxHostedCluster(version("2"), func(hc *hypershift.HostedCluster) { hc.Spec.Configuration.Proxy.NoProxy = ".corp.example" })
	aAgain := fxHostedCluster(version("3"))
	pod := func(phase corev1.PodPhase, rv string) *corev1.Pod {
		p := fxVirtLauncherPod(phase, "10.131.0.7")
		p.ResourceVersion = rv
		return p
	}
	hcObj := event.ObjectRef{Kind: "HostedCluster", Namespace: "clusters", Name: "example", UID: "uid-hc"}
	vlObj := podRef(fxVirtLauncherPod(corev1.PodRunning, ""), false)
	for _, tc := range []struct {
		name   string
		obj    event.ObjectRef
		facts  []fact // successive facts about one object; the last repeats an earlier state
		repeat int    // index of the earlier fact the last one repeats
	}{
		{"HostedCluster noProxy A, B, A again", hcObj, []fact{hostedClusterFact(a, nil), hostedClusterFact(b, nil), hostedClusterFact(aAgain, nil)}, 0},
		{"proxy edit A->B, reverted, made again", hcObj, []fact{
			proxyChangeFact(event.ProxyTargetHostedCluster, a.Proxy(), b.Proxy(), "2"),
			proxyChangeFact(event.ProxyTargetHostedCluster, b.Proxy(), a.Proxy(), "3"),
			proxyChangeFact(event.ProxyTargetHostedCluster, a.Proxy(), b.Proxy(), "4"),
		}, 0},
		{"virt-launcher fails, runs, fails again", vlObj, []fact{
			virtLauncherFact(pod(corev1.PodFailed, "5")),
			virtLauncherFact(pod(corev1.PodRunning, "6")),
			virtLauncherFact(pod(corev1.PodFailed, "7")),
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ids []string
			for _, f := range tc.facts {
				e, _ := factEvent(t, tc.obj, f)
				ids = append(ids, e.ID)
			}
			if last := ids[len(ids)-1]; last == ids[tc.repeat] {
				t.Errorf("the recurring fact has the ID %s of fact %d: JetStream drops it as a duplicate", last, tc.repeat)
			}
		})
	}
}

func fxVirtLauncherPod(phase corev1.PodPhase, ip string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "clusters-example", Name: "virt-launcher-w-0-abcde", UID: "uid-vl", Labels: map[string]string{
			hypershift.LabelKubeVirt: hypershift.VirtLauncher, hypershift.LabelVMName: "w-0",
			hypershift.LabelInfraID: "example-sffhb", hypershift.LabelNodePoolName: "example-np",
		}},
		Spec:   corev1.PodSpec{NodeName: "mgmt-worker-3"},
		Status: corev1.PodStatus{Phase: phase, PodIP: ip},
	}
}

func TestFactVirtLauncher(t *testing.T) {
	base := virtLauncherFact(fxVirtLauncherPod(corev1.PodRunning, "10.131.0.7"))
	// sameKey here compares states: the key is the resourceVersion (all
	// fixtures share one), the state is the content.
	for _, tc := range []struct {
		name        string
		pod         *corev1.Pod
		wantProblem bool
		sameKey     bool
	}{
		{"running", fxVirtLauncherPod(corev1.PodRunning, "10.131.0.7"), false, true},
		{"pending (VM scheduling)", fxVirtLauncherPod(corev1.PodPending, ""), true, false},
		{"failed", fxVirtLauncherPod(corev1.PodFailed, "10.131.0.7"), true, false},
		{"running with another IP (VM migrated)", fxVirtLauncherPod(corev1.PodRunning, "10.131.0.8"), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := virtLauncherFact(tc.pod)
			p := f.payload.(event.VirtLauncher)
			want := event.VirtLauncher{Pod: "virt-launcher-w-0-abcde", VMI: "w-0", Node: "mgmt-worker-3", PodIP: tc.pod.Status.PodIP,
				Phase: string(tc.pod.Status.Phase), InfraID: "example-sffhb", NodePool: "example-np"}
			if p != want {
				t.Errorf("payload = %+v, want %+v", p, want)
			}
			if f.problem != tc.wantProblem || f.key != "rv:"+tc.pod.ResourceVersion {
				t.Errorf("problem %v (want %v), key %q state %q", f.problem, tc.wantProblem, f.key, f.state)
			}
			if got := f.state == base.state; got != tc.sameKey {
				t.Errorf("same state as running = %v, want %v", got, tc.sameKey)
			}
			factEvent(t, podRef(tc.pod, false), f)
		})
	}
}

func TestFactProxyChange(t *testing.T) {
	a := hypershift.ProxySpec{HTTPProxy: "http://proxy:3128", NoProxy: "kubernetes,.corp.example"}
	b := hypershift.ProxySpec{HTTPProxy: "http://proxy:3128", NoProxy: ".corp.example"}
	c := hypershift.ProxySpec{HTTPProxy: "http://user:secret@proxy:3128", NoProxy: ".corp.example"}
	// The edit a→b wrote resourceVersion 7: every agent that sees it
	// derives the same key; any other write is another fact.
	ab := proxyChangeFact(event.ProxyTargetHostedCluster, a, b, "7")
	for _, tc := range []struct {
		name     string
		f        fact
		sameKey  bool
		wantDiff [2][]string // added, removed
	}{
		{"the same edit seen again (another agent)", proxyChangeFact(event.ProxyTargetHostedCluster, a, b, "7"), true, [2][]string{nil, {"kubernetes"}}},
		{"the same edit of a Proxy/cluster", proxyChangeFact(event.ProxyTargetOpenShift, a, b, "7"), true, [2][]string{nil, {"kubernetes"}}},
		{"the edit reverted", proxyChangeFact(event.ProxyTargetHostedCluster, b, a, "8"), false, [2][]string{{"kubernetes"}, nil}},
		{"another edit", proxyChangeFact(event.ProxyTargetHostedCluster, b, c, "9"), false, [2][]string{nil, nil}},
		{"the same content written again", proxyChangeFact(event.ProxyTargetHostedCluster, a, b, "10"), false, [2][]string{nil, {"kubernetes"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.f.key == ab.key; got != tc.sameKey {
				t.Errorf("key %q vs %q: same = %v, want %v", tc.f.key, ab.key, got, tc.sameKey)
			}
			if tc.f.problem {
				t.Errorf("a proxy change is not itself a problem")
			}
			e, data := factEvent(t, event.ObjectRef{Kind: "HostedCluster", Namespace: "clusters", Name: "example", UID: "uid-hc"}, tc.f)
			if strings.Contains(string(data), "secret") {
				t.Errorf("encoded event contains the password: %s", data)
			}
			dp, err := e.DecodePayload()
			if err != nil {
				t.Fatal(err)
			}
			p := dp.(event.ProxyChange)
			if !reflect.DeepEqual([2][]string{p.NoProxyAdded, p.NoProxyRemoved}, tc.wantDiff) {
				t.Errorf("noProxy added/removed = %v/%v, want %v", p.NoProxyAdded, p.NoProxyRemoved, tc.wantDiff)
			}
		})
	}
}

// fullNode is a Node as a kubelet leaves it: images, managedFields,
// capacity, labels and annotations, none of which a fact reads.
func fxFullNode(name string) *corev1.Node {
	n := fxNode(name, corev1.ConditionFalse, factT0)
	n.Labels = map[string]string{}
	n.Annotations = map[string]string{}
	for i := range 12 {
		n.Labels[fmt.Sprintf("node.kubernetes.io/label-%d", i)] = "value"
		n.Annotations[fmt.Sprintf("machine.openshift.io/annotation-%d", i)] = strings.Repeat("a", 60)
	}
	fields := []byte(`{"f:status":{"f:conditions":{"k:{\"type\":\"Ready\"}":{".":{},"f:lastHeartbeatTime":{},"f:lastTransitionTime":{},"f:message":{},"f:reason":{},"f:status":{},"f:type":{}}},"f:images":{},"f:nodeInfo":{"f:bootID":{},"f:containerRuntimeVersion":{},"f:kernelVersion":{}}}}`)
	for _, m := range []string{"kubelet", "machine-config-daemon", "ovnkube-controller", "kube-controller-manager"} {
		n.ManagedFields = append(n.ManagedFields, metav1.ManagedFieldsEntry{
			Manager: m, Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", FieldsType: "FieldsV1",
			FieldsV1: &metav1.FieldsV1{Raw: fields}, Subresource: "status",
		})
	}
	for i := range 40 {
		n.Status.Images = append(n.Status.Images, corev1.ContainerImage{
			Names: []string{
				fmt.Sprintf("quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:%064d", i),
				fmt.Sprintf("quay.io/openshift-release-dev/ocp-v4.0-art-dev:component-%d", i),
			},
			SizeBytes: 512 << 20,
		})
	}
	n.Status.Capacity = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"), corev1.ResourcePods: resource.MustParse("250")}
	n.Status.Allocatable = n.Status.Capacity
	n.Status.NodeInfo = corev1.NodeSystemInfo{MachineID: strings.Repeat("f", 32), SystemUUID: strings.Repeat("e", 36), BootID: strings.Repeat("d", 36),
		KernelVersion: "5.14.0-427.el9.x86_64", OSImage: "Red Hat Enterprise Linux CoreOS", ContainerRuntimeVersion: "cri-o://1.29.1", KubeletVersion: "v1.29.5"}
	for _, typ := range []corev1.NodeConditionType{corev1.NodeDiskPressure, corev1.NodePIDPressure} {
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: typ, Status: corev1.ConditionFalse, Reason: "KubeletHasNo" + string(typ),
			Message: "kubelet has no " + string(typ), LastHeartbeatTime: metav1.NewTime(factT1), LastTransitionTime: metav1.NewTime(factT0)})
	}
	return n
}

func TestTransformNode(t *testing.T) {
	full := fxFullNode("w-0")
	before := full.DeepCopy()
	got, err := transformNode(full)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(full, before) {
		t.Error("transformNode modified its input")
	}
	slim := got.(*corev1.Node)
	if slim.Name != "w-0" || slim.UID != full.UID || slim.ResourceVersion != full.ResourceVersion || slim.Spec.ProviderID != full.Spec.ProviderID {
		t.Errorf("identity lost: %+v", slim.ObjectMeta)
	}
	if slim.Labels != nil || slim.Annotations != nil || slim.ManagedFields != nil || slim.Status.Images != nil ||
		slim.Status.Capacity != nil || slim.Status.Allocatable != nil || slim.Status.NodeInfo != (corev1.NodeSystemInfo{}) {
		t.Errorf("kept fields no fact reads: %+v", slim)
	}
	if len(slim.Status.Conditions) != 1 || slim.Status.Conditions[0].Type != corev1.NodeReady {
		t.Fatalf("conditions = %+v, want only Ready", slim.Status.Conditions)
	}
	if c := slim.Status.Conditions[0]; !c.LastHeartbeatTime.IsZero() || !c.LastTransitionTime.Equal(&before.Status.Conditions[1].LastTransitionTime) ||
		c.Status != corev1.ConditionFalse || c.Reason != "KubeletNotReady" {
		t.Errorf("Ready condition = %+v: want the heartbeat dropped and the rest kept", c)
	}
	if want := []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.131.0.7"}}; !reflect.DeepEqual(slim.Status.Addresses, want) {
		t.Errorf("addresses = %+v, want %+v", slim.Status.Addresses, want)
	}
	// The transform must not change what the agent concludes.
	if f, g := nodeFact(full, factNow, DefaultNodeJoinGrace), nodeFact(slim, factNow, DefaultNodeJoinGrace); !reflect.DeepEqual(f, g) {
		t.Errorf("nodeFact differs after the transform:\n full %+v\n slim %+v", f, g)
	}
	// A heartbeat alone must leave the cached object unchanged, so that
	// the informer's resync/update carries nothing new.
	beat := fxFullNode("w-0")
	beat.Status.Conditions[1].LastHeartbeatTime = metav1.NewTime(factT1.Add(time.Hour))
	slimBeat, _ := transformNode(beat)
	if !reflect.DeepEqual(slim, slimBeat) {
		t.Error("a heartbeat changes the transformed Node")
	}

	fullJSON, _ := json.Marshal(full)
	slimJSON, _ := json.Marshal(slim)
	t.Logf("Node JSON: %d bytes full, %d bytes transformed", len(fullJSON), len(slimJSON))
	if len(slimJSON)*10 > len(fullJSON) {
		t.Errorf("transformed Node is %d bytes, full %d: want at least 10x smaller", len(slimJSON), len(fullJSON))
	}

	// Anything else (a tombstone, say) passes through untouched.
	other := cache.DeletedFinalStateUnknown{Key: "w-0", Obj: full}
	if out, err := transformNode(other); err != nil || out != any(other) {
		t.Errorf("transformNode(%T) = %v, %v", other, out, err)
	}
	if out, err := transformPod(other); err != nil || out != any(other) {
		t.Errorf("transformPod(%T) = %v, %v", other, out, err)
	}
}

func TestTransformPod(t *testing.T) {
	const c = scenario.ServiceCAName
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
	}{
		{"crashlooping operator", fxCrashPod("sca", fxWaiting(c, "CrashLoopBackOff", 5, 255, scenario.SeedConnectivityMessage), fxRunning("sidecar", 1))},
		{"tunnel with CONNECT failure", fxProxyPod([]string{tunnelContainer}, fxTerminated(tunnelContainer, scenario.TunnelFailureMessage, ""))},
		{"virt-launcher", fxVirtLauncherPod(corev1.PodRunning, "10.131.0.7")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			full := tc.pod.DeepCopy()
			full.Annotations = map[string]string{"k8s.v1.cni.cncf.io/network-status": strings.Repeat("x", 500)}
			full.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet", FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{}}`)}}}
			full.OwnerReferences = []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "rs", UID: "uid-rs"}}
			for i := range full.Spec.Containers {
				full.Spec.Containers[i].Image = "quay.io/openshift/image:latest"
				full.Spec.Containers[i].Env = []corev1.EnvVar{{Name: "HTTPS_PROXY", Value: "http://user:secret@proxy:3128"}}
			}
			for i := range full.Status.ContainerStatuses {
				full.Status.ContainerStatuses[i].Image = "quay.io/openshift/image:latest"
				full.Status.ContainerStatuses[i].ImageID = "quay.io/openshift/image@sha256:" + strings.Repeat("0", 64)
				full.Status.ContainerStatuses[i].ContainerID = "cri-o://" + strings.Repeat("1", 64)
			}
			full.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
			before := full.DeepCopy()

			got, err := transformPod(full)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(full, before) {
				t.Error("transformPod modified its input")
			}
			slim := got.(*corev1.Pod)
			if slim.Name != full.Name || slim.Namespace != full.Namespace || slim.UID != full.UID || slim.ResourceVersion != full.ResourceVersion ||
				!reflect.DeepEqual(slim.Labels, full.Labels) || slim.Spec.NodeName != full.Spec.NodeName ||
				slim.Status.Phase != full.Status.Phase || slim.Status.PodIP != full.Status.PodIP {
				t.Errorf("kept fields changed: %+v", slim)
			}
			if slim.Annotations != nil || slim.ManagedFields != nil || slim.OwnerReferences != nil || slim.Status.Conditions != nil {
				t.Errorf("kept fields no fact reads: %+v", slim.ObjectMeta)
			}
			if len(slim.Spec.Containers) != len(full.Spec.Containers) {
				t.Fatalf("containers = %+v", slim.Spec.Containers)
			}
			for i, ctr := range slim.Spec.Containers {
				if !reflect.DeepEqual(ctr, corev1.Container{Name: full.Spec.Containers[i].Name}) {
					t.Errorf("container %d = %+v, want its name only (no env: it may hold proxy credentials)", i, ctr)
				}
			}
			if len(slim.Status.ContainerStatuses) != len(full.Status.ContainerStatuses) {
				t.Fatalf("container statuses = %+v", slim.Status.ContainerStatuses)
			}
			for i, cs := range slim.Status.ContainerStatuses {
				want := full.Status.ContainerStatuses[i]
				if cs.Name != want.Name || cs.Ready != want.Ready || cs.RestartCount != want.RestartCount ||
					!reflect.DeepEqual(cs.State, want.State) || !reflect.DeepEqual(cs.LastTerminationState, want.LastTerminationState) {
					t.Errorf("status %d = %+v, want %+v", i, cs, want)
				}
				if cs.Image != "" || cs.ImageID != "" || cs.ContainerID != "" {
					t.Errorf("status %d keeps image/container IDs", i)
				}
			}
			// Every fact read from a pod is the same on the slim copy.
			f1, ok1 := crashLoopFact(full)
			f2, ok2 := crashLoopFact(slim)
			if ok1 != ok2 || !reflect.DeepEqual(f1, f2) {
				t.Errorf("crashLoopFact differs: %+v vs %+v", f1, f2)
			}
			for name, fn := range map[string]func(*corev1.Pod) fact{
				"apiServerProxyFact": apiServerProxyFact,
				"virtLauncherFact":   virtLauncherFact,
				"clearedFact":        func(p *corev1.Pod) fact { return clearedFact(p, string(p.UID)) },
			} {
				if a, b := fn(full), fn(slim); !reflect.DeepEqual(a, b) {
					t.Errorf("%s differs after the transform:\n full %+v\n slim %+v", name, a, b)
				}
			}
			fullJSON, _ := json.Marshal(full)
			slimJSON, _ := json.Marshal(slim)
			if strings.Contains(string(slimJSON), "secret") {
				t.Error("transformed pod keeps the proxy credentials of the container env")
			}
			t.Logf("Pod JSON: %d bytes full, %d bytes transformed", len(fullJSON), len(slimJSON))
		})
	}
}

func TestTransformUnstructured(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "hypershift.openshift.io/v1beta1", "kind": "HostedCluster",
		"metadata": map[string]any{
			"namespace": "clusters", "name": "example", "uid": "uid-hc", "resourceVersion": "5",
			"annotations":   map[string]any{"kubectl.kubernetes.io/last-applied-configuration": `{"spec":{"configuration":{"proxy":{"httpProxy":"http://user:secret@proxy:3128"}}}}`},
			"managedFields": []any{map[string]any{"manager": "kubectl", "operation": "Update"}},
			"labels":        map[string]any{"team": "a"},
		},
		"spec": map[string]any{"platform": map[string]any{"type": "KubeVirt"}},
	}}
	out, err := transformUnstructured(u)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*unstructured.Unstructured)
	if got.GetAnnotations() != nil || got.GetManagedFields() != nil {
		t.Errorf("annotations/managedFields kept: %v", got.Object["metadata"])
	}
	if got.GetName() != "example" || got.GetUID() != "uid-hc" || got.GetResourceVersion() != "5" || got.GetLabels()["team"] != "a" {
		t.Errorf("metadata = %v", got.Object["metadata"])
	}
	if _, err := hypershift.FromUnstructured[hypershift.HostedCluster](got); err != nil {
		t.Errorf("transformed HostedCluster does not convert: %v", err)
	}
}

// TestFactHostedClusterRelease: the release the agent publishes is the
// newest Completed rollout in status.version.history, else desired, and ""
// only when HyperShift has written no status.version; a new release is a
// new state (and so a new event).
func TestFactHostedClusterRelease(t *testing.T) {
	version := func(desired string, history ...hypershift.UpdateHistory) func(*hypershift.HostedCluster) {
		return func(hc *hypershift.HostedCluster) {
			hc.Status.Version = &hypershift.ClusterVersionStatus{Desired: hypershift.Release{Version: desired}, History: history, ObservedGeneration: 1}
		}
	}
	rollout := func(v, state string) hypershift.UpdateHistory {
		h := hypershift.UpdateHistory{State: state, Version: v, Image: "quay.io/openshift-release-dev/ocp-release:" + v + "-x86_64", StartedTime: metav1.NewTime(factT0)}
		if state == hypershift.UpdateStateCompleted {
			done := metav1.NewTime(factT1)
			h.CompletionTime = &done
		}
		return h
	}
	states := map[string]string{}
	for _, tc := range []struct {
		name string
		hc   *hypershift.HostedCluster
		want string
	}{
		{"no status.version", fxHostedCluster(), ""},
		{"first rollout running: desired", fxHostedCluster(version("4.19.7", rollout("4.19.7", hypershift.UpdateStatePartial))), "4.19.7"},
		{"Completed beats desired", fxHostedCluster(version("4.23.0", rollout("4.19.7", hypershift.UpdateStateCompleted))), "4.19.7"},
		{"Partial skipped", fxHostedCluster(version("4.23.0", rollout("4.23.0", hypershift.UpdateStatePartial),
			rollout("4.22.3", hypershift.UpdateStatePartial), rollout("4.19.7", hypershift.UpdateStateCompleted))), "4.19.7"},
		{"newest Completed", fxHostedCluster(version("4.23.0", rollout("4.23.0", hypershift.UpdateStateCompleted), rollout("4.19.7", hypershift.UpdateStateCompleted))), "4.23.0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := hostedClusterFact(tc.hc, nil)
			if got := f.payload.(event.HostedClusterState).Version; got != tc.want {
				t.Errorf("version = %q, want %q", got, tc.want)
			}
			if prev, seen := states[tc.want]; seen && prev != f.state {
				t.Errorf("same release %q, different state", tc.want)
			}
			for v, st := range states {
				if v != tc.want && st == f.state {
					t.Errorf("release %q has the state of %q: a rollout would not be news", tc.want, v)
				}
			}
			states[tc.want] = f.state
		})
	}
}
