package watchers

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/hypershift"
)

// fact is what one object states right now.
type fact struct {
	payload event.Payload
	// key identifies the fact for the event ID (see event.New).
	key string
	// state is coarser than key: a new event is published only when it
	// changes, so e.g. each restart of a crashlooping pod is not news.
	state string
	// problem facts are restated in snapshots; healthy ones are not.
	problem bool
}

// fingerprint summarises a payload for the in-memory state comparison only.
// It never goes into an event ID: it covers unredacted proxy URLs, and a
// state that comes back would reuse an old ID and be dropped as a duplicate.
// IDs use the object's resourceVersion instead (rvKey).
func fingerprint(p any) string {
	b, _ := json.Marshal(p)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:12])
}

// hostedClusterFact states hc with ca, the summary of the trusted CA
// ConfigMap its proxy names (nil when it names none). The summary is in
// the payload, and so in the state fingerprint: a renewed bundle is news,
// and its resourceVersion is in the key (trustedCA.key).
func hostedClusterFact(hc *hypershift.HostedCluster, ca *trustedCA) fact {
	p := hostedClusterState(hc)
	if ca != nil {
		b := ca.bundle
		p.TrustedCA = &b
	}
	// The bot needs every cluster's proxy and networks to diagnose, so a
	// HostedCluster always counts as a problem: it is restated in every
	// snapshot (and a consumer treats one missing from it as deleted).
	return fact{payload: p, key: rvKey(hc.ResourceVersion) + ca.key(), state: fingerprint(p), problem: true}
}

// hostedClusterState carries the release (Version) too: it picks which of
// HyperShift's noProxy rules the bot applies, and being in the payload, and
// so in the state fingerprint, a rollout that completes is news.
func hostedClusterState(hc *hypershift.HostedCluster) event.HostedClusterState {
	n := hc.Spec.Networking
	p := event.HostedClusterState{
		Platform:       hc.Spec.Platform.Type,
		Labels:         hc.Labels,
		InfraID:        hc.Spec.InfraID,
		Version:        hc.Release(),
		Proxy:          proxySpec(hc.Proxy()),
		NetworkType:    n.NetworkType,
		ClusterNetwork: hypershift.CIDRs(n.ClusterNetwork),
		ServiceNetwork: hypershift.CIDRs(n.ServiceNetwork),
		MachineNetwork: hypershift.CIDRs(n.MachineNetwork),
		// Workers reach both from outside the control plane, through
		// the proxy unless noProxy bypasses them.
		IgnitionEndpoint:     hc.Status.IgnitionEndpoint,
		KonnectivityEndpoint: hc.PublishedEndpoint(hypershift.ServiceKonnectivity),
	}
	if a := n.APIServer; a != nil {
		ep := &event.Endpoint{Host: a.AdvertiseAddress}
		if a.Port != nil {
			ep.Port = *a.Port
		}
		p.APIServer = ep
	}
	if e := hc.Status.ControlPlaneEndpoint; e.Host != "" {
		p.ControlPlaneEndpoint = &event.Endpoint{Host: e.Host, Port: e.Port}
	}
	if hc.Status.Kubeconfig != nil {
		p.KubeconfigSecret = hc.Status.Kubeconfig.Name
	}
	for _, c := range hc.Status.Conditions {
		switch c.Type {
		case "Available", "Degraded", "Progressing", "KubeAPIServerAvailable", "ValidConfiguration",
			"ValidProxyConfiguration", "DataPlaneConnectionAvailable", "ControlPlaneConnectionAvailable",
			"IgnitionEndpointAvailable", "EtcdAvailable", "KubeVirtNodesLiveMigratable", "ValidKubeVirtInfraNetworkMTU",
			"ReconciliationActive", "ExternalDNSReachable", "ValidKubeVirtInfraNetworkPolicyRBAC":
			p.Conditions = append(p.Conditions, event.Condition{
				Type: c.Type, Status: event.ConditionStatus(c.Status), Reason: c.Reason,
				Message: c.Message, LastTransitionTime: c.LastTransitionTime.Time,
				ObservedGeneration: c.ObservedGeneration,
			})
		}
	}
	p.Generation = hc.Generation
	if v := hc.Spec.PausedUntil; v != nil {
		p.PausedUntil = *v
	}
	return p
}

func proxySpec(s hypershift.ProxySpec) event.ProxySpec {
	return event.ProxySpec{
		HTTPProxy: s.HTTPProxy, HTTPSProxy: s.HTTPSProxy, NoProxy: s.NoProxy,
		ReadinessEndpoints: s.ReadinessEndpoints, TrustedCA: s.TrustedCA.Name,
	}
}

// proxyChangeFact is published when the agent sees a proxy spec differ from
// the one it saw before; the key names both ends, so every agent that saw
// the same edit derives the same ID.
func proxyChangeFact(target event.ProxyTarget, old, cur hypershift.ProxySpec, resourceVersion string) fact {
	p := event.ProxyChange{Target: target, Old: proxySpec(old), New: proxySpec(cur)}
	return fact{payload: p, key: rvKey(resourceVersion), state: fingerprint([2]event.ProxySpec{p.Old, p.New})}
}

func nodePoolFact(np *hypershift.NodePool) fact {
	p := event.NodePoolState{
		Name: np.Name, ClusterName: np.Spec.ClusterName, Platform: np.Spec.Platform.Type,
		Replicas: np.Spec.Replicas, CurrentReplicas: np.Status.Replicas, Generation: np.Generation,
	}
	problem := false
	// The state leaves out messages and times: NodePool messages churn
	// (machine names, counts) without the health changing.
	var state strings.Builder
	for _, c := range np.Status.Conditions {
		switch c.Type {
		case "Ready", "AllNodesHealthy", "AllMachinesReady", "ReachedIgnitionEndpoint", "UpdatingConfig", "ValidGeneratedPayload",
			"ReconciliationActive", "IgnitionEndpointAvailable":
		default:
			continue
		}
		p.Conditions = append(p.Conditions, event.Condition{
			Type: c.Type, Status: event.ConditionStatus(c.Status), Severity: c.Severity,
			Reason: c.Reason, Message: c.Message, LastTransitionTime: c.LastTransitionTime.Time,
			ObservedGeneration: c.ObservedGeneration,
		})
		state.WriteString(c.Type + "=" + c.Status + ";")
		if c.Type != "UpdatingConfig" && c.Status == "False" {
			problem = true
		}
	}
	if v := np.Spec.PausedUntil; v != nil {
		p.PausedUntil = *v
		state.WriteString("pausedUntil=" + *v + ";")
	}
	return fact{payload: p, key: rvKey(np.ResourceVersion), state: state.String(), problem: problem}
}

// The node states that are not a Ready condition's.
const (
	// stateJoining: no Ready condition yet, within the join grace. Never
	// published: a new node is no news.
	stateJoining = "Joining"
	// stateNotJoining: still no Ready condition after the grace, seed
	// 000's first symptom (the kubelet cannot reach the API server).
	stateNotJoining = "NotJoining"
)

// nodeFact states a node's readiness at now. A node without a Ready
// condition (the kubelet has not posted its status yet) is joining for
// grace after its creation, then not joining.
func nodeFact(n *corev1.Node, now time.Time, grace time.Duration) fact {
	p := event.NodeReadiness{Node: n.Name, Ready: event.ConditionUnknown, ProviderID: n.Spec.ProviderID}
	var ltt metav1.Time
	c := readyCondition(n)
	if c != nil {
		p.Ready, p.Reason, p.Message = event.ConditionStatus(c.Status), c.Reason, c.Message
		p.LastTransitionTime, ltt = c.LastTransitionTime.Time, c.LastTransitionTime
	}
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			p.InternalIP = a.Address
			break
		}
	}
	if c == nil {
		created := n.CreationTimestamp.Time
		if joinWait(n, now, grace) > 0 {
			return fact{payload: p, key: event.TransitionAt(stateJoining, created), state: stateJoining}
		}
		// The key derives from the creation time, which every agent reads
		// alike, so two agents report the same fact under one ID.
		p.NotJoining, p.Created = true, created
		return fact{payload: p, key: event.TransitionAt(stateNotJoining, created), state: stateNotJoining, problem: true}
	}
	state := "Ready=" + string(p.Ready)
	return fact{payload: p, key: event.TransitionAt(state, ltt.Time), state: state, problem: p.Ready != event.ConditionTrue}
}

// joinWait is how long a node without a Ready condition is still joining
// at now: zero once the grace is over (or the node has a Ready condition).
func joinWait(n *corev1.Node, now time.Time, grace time.Duration) time.Duration {
	if readyCondition(n) != nil {
		return 0
	}
	return max(0, n.CreationTimestamp.Add(grace).Sub(now))
}

// readyCondition returns the node's last Ready condition, or nil.
func readyCondition(n *corev1.Node) *corev1.NodeCondition {
	var out *corev1.NodeCondition
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == corev1.NodeReady {
			out = &n.Status.Conditions[i]
		}
	}
	return out
}

// crashLoopFact reports the first container of a pod that is waiting in
// CrashLoopBackOff (or failing with a known signature). ok is false for a
// healthy pod: there is nothing to say unless it was reported before.
func crashLoopFact(pod *corev1.Pod) (f fact, ok bool) {
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.State.Waiting == nil || (cs.State.Waiting.Reason != "CrashLoopBackOff" && cs.State.Waiting.Reason != "Error") {
			continue
		}
		p := event.PodCrashLoop{
			Namespace: pod.Namespace, Pod: pod.Name, Container: cs.Name,
			RestartCount: cs.RestartCount, WaitingReason: cs.State.Waiting.Reason,
		}
		if t := cs.LastTerminationState.Terminated; t != nil {
			p.LastTerminationMessage, p.ExitCode, p.FinishedAt = t.Message, t.ExitCode, t.FinishedAt.Time
		}
		sig := event.DetectSignature(p.LastTerminationMessage)
		p.Signature = sig
		state := "crashloop:" + cs.Name + ":" + string(sig)
		// The restart count makes a crash after a recovery a new fact,
		// while the state keeps repeated restarts from being news.
		key := state + ":" + itoa(int(cs.RestartCount))
		return fact{payload: p, key: key, state: state, problem: true}, true
	}
	return fact{}, false
}

// clearedFact says a pod reported as crashlooping runs again (or is gone).
func clearedFact(pod *corev1.Pod, uidKey string) fact {
	p := event.PodCrashLoop{Namespace: pod.Namespace, Pod: pod.Name, Cleared: true}
	var restarts int32
	for _, cs := range pod.Status.ContainerStatuses {
		restarts += cs.RestartCount
		if p.Container == "" {
			p.Container, p.RestartCount = cs.Name, cs.RestartCount
		}
	}
	return fact{payload: p, key: "cleared:" + uidKey + ":" + itoa(int(restarts)), state: "cleared"}
}

// Container names HyperShift renders into the kube-apiserver-proxy static pod.
const tunnelContainer = "kubernetes-default-proxy"

func apiServerProxyFact(pod *corev1.Pod) fact {
	p := event.KubeAPIServerProxy{Pod: pod.Name, Node: pod.Spec.NodeName, Mode: event.ProxyModeUnknown}
	for _, c := range pod.Spec.Containers {
		switch {
		case c.Name == tunnelContainer:
			p.Mode = event.ProxyModeTunnel
		case c.Name == "haproxy" && p.Mode == event.ProxyModeUnknown:
			p.Mode = event.ProxyModeHAProxy
		}
	}
	for _, cs := range pod.Status.ContainerStatuses {
		for _, msg := range []string{terminatedMessage(cs.LastTerminationState), terminatedMessage(cs.State)} {
			if event.DetectSignature(msg) == event.SignatureProxyConnect {
				p.ConnectFailure, p.ConnectMessage = true, msg
			}
		}
	}
	state := string(p.Mode) + ":" + boolStr(p.ConnectFailure)
	return fact{payload: p, key: rvKey(pod.ResourceVersion), state: state, problem: p.Mode == event.ProxyModeTunnel}
}

func terminatedMessage(s corev1.ContainerState) string {
	if s.Terminated == nil {
		return ""
	}
	return s.Terminated.Message
}

func virtLauncherFact(pod *corev1.Pod) fact {
	p := event.VirtLauncher{
		Pod: pod.Name, VMI: pod.Labels[hypershift.LabelVMName], Node: pod.Spec.NodeName,
		PodIP: pod.Status.PodIP, Phase: string(pod.Status.Phase),
		InfraID: pod.Labels[hypershift.LabelInfraID], NodePool: pod.Labels[hypershift.LabelNodePoolName],
	}
	return fact{payload: p, key: rvKey(pod.ResourceVersion), state: fingerprint(p), problem: pod.Status.Phase != corev1.PodRunning}
}

func openShiftProxyFact(p *hypershift.Proxy) fact {
	payload := event.OpenShiftProxy{
		Spec:   proxySpec(p.Spec),
		Status: event.ProxyStatus{HTTPProxy: p.Status.HTTPProxy, HTTPSProxy: p.Status.HTTPSProxy, NoProxy: p.Status.NoProxy},
	}
	return fact{payload: payload, key: rvKey(p.ResourceVersion), state: fingerprint(payload), problem: true}
}

// rvKey is the transition key of facts read from a whole object: every
// agent reading the same version of the object derives the same ID, and a
// state that returns later comes with a new resourceVersion, so it is news.
func rvKey(resourceVersion string) string { return "rv:" + resourceVersion }

func boolStr(b bool) string {
	if b {
		return "true"
	}
	return "false"
}
