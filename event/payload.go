package event

import (
	"slices"
	"strings"
	"time"
)

// Type names the kind of fact an event carries. Every Type is a single
// lower-case word, so it can be used as a NATS subject token unescaped.
type Type string

// The event types of schema version 1. Each has exactly one payload struct,
// named in its comment; see the package documentation for the transition key
// each one expects.
const (
	TypeHostedCluster  Type = "hostedcluster"  // HostedClusterState
	TypeProxyChange    Type = "proxychange"    // ProxyChange
	TypeNodePool       Type = "nodepool"       // NodePoolState
	TypeNode           Type = "node"           // NodeReadiness
	TypeCrashLoop      Type = "crashloop"      // PodCrashLoop
	TypeAPIServerProxy Type = "apiserverproxy" // KubeAPIServerProxy
	TypeVirtLauncher   Type = "virtlauncher"   // VirtLauncher
	TypeReachability   Type = "reachability"   // Reachability
	TypeOCPProxy       Type = "ocpproxy"       // OpenShiftProxy
	TypeSnapshotDone   Type = "snapshotdone"   // SnapshotDone
	TypeNodeSummary    Type = "nodesummary"    // NodeSummary
	TypeAPIService     Type = "apiservice"     // APIServiceState
	TypeConnectivity   Type = "connectivity"   // ConnectivityCheck
)

// Types returns every type this build knows, in a fixed order. The slice is
// freshly allocated; callers may modify it.
func Types() []Type {
	return []Type{
		TypeHostedCluster, TypeProxyChange, TypeNodePool, TypeNode,
		TypeCrashLoop, TypeAPIServerProxy, TypeVirtLauncher,
		TypeReachability, TypeOCPProxy, TypeSnapshotDone, TypeNodeSummary,
		TypeAPIService, TypeConnectivity,
	}
}

// Known reports whether t is one of the types this build can decode.
func (t Type) Known() bool {
	switch t {
	case TypeHostedCluster, TypeProxyChange, TypeNodePool, TypeNode,
		TypeCrashLoop, TypeAPIServerProxy, TypeVirtLauncher,
		TypeReachability, TypeOCPProxy, TypeSnapshotDone, TypeNodeSummary,
		TypeAPIService, TypeConnectivity:
		return true
	}
	return false
}

// Payload is implemented by the payload structs of this package only: the
// set is closed so that every payload [New] accepts has a [Type] and goes
// through the same redaction.
type Payload interface {
	// EventType is the Type of the events that carry this payload.
	EventType() Type
	// sanitized returns a copy with proxy credentials redacted, free text
	// bounded and derived fields filled in. It must not modify the
	// receiver's slices, which belong to the caller.
	sanitized() Payload
}

// ConditionStatus is the status of a Kubernetes condition.
type ConditionStatus string

// The condition statuses Kubernetes defines.
const (
	ConditionTrue    ConditionStatus = "True"
	ConditionFalse   ConditionStatus = "False"
	ConditionUnknown ConditionStatus = "Unknown"
)

// Condition is a status condition of a HostedCluster or NodePool, copied
// verbatim apart from the message (redacted and bounded).
type Condition struct {
	Type               string          `json:"type"`
	Status             ConditionStatus `json:"status"`
	Severity           string          `json:"severity,omitempty"` // NodePool conditions only
	Reason             string          `json:"reason,omitempty"`
	Message            string          `json:"message,omitempty"`
	LastTransitionTime time.Time       `json:"lastTransitionTime,omitzero"`
	// ObservedGeneration is the generation of the object the writer saw
	// (0 when it sets none: HyperShift's HCCO writes none on the
	// HostedControlPlane, and the HostedCluster copy carries the
	// HostedCluster's generation, hostedcluster_controller.go:830-839).
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// Endpoint is a host (name or IP) and port.
type Endpoint struct {
	Host string `json:"host"`
	Port int32  `json:"port,omitempty"`
}

// ProxySpec is a cluster-wide proxy configuration: HostedCluster
// spec.configuration.proxy or config.openshift.io/v1 Proxy spec. The zero
// value means no proxy is configured.
type ProxySpec struct {
	// HTTPProxy and HTTPSProxy are stored with any userinfo replaced by
	// "***"; [New] does the redaction, so callers pass the raw values.
	HTTPProxy  string `json:"httpProxy,omitempty"`
	HTTPSProxy string `json:"httpsProxy,omitempty"`
	// NoProxy is the comma-separated list exactly as configured: HyperShift
	// releases differ in how they search it (substring search of the whole
	// string in older ones), so a diagnosis needs the original text.
	NoProxy            string   `json:"noProxy,omitempty"`
	ReadinessEndpoints []string `json:"readinessEndpoints,omitempty"` // redacted like HTTPProxy
	TrustedCA          string   `json:"trustedCA,omitempty"`          // name of the CA bundle ConfigMap
}

// NoProxyEntries splits NoProxy at commas, trimming blanks and dropping
// empty entries; duplicates and order are kept.
func (p ProxySpec) NoProxyEntries() []string {
	var out []string
	for e := range strings.SplitSeq(p.NoProxy, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

func (p ProxySpec) redacted() ProxySpec {
	p.HTTPProxy = redactURL(p.HTTPProxy)
	p.HTTPSProxy = redactURL(p.HTTPSProxy)
	if p.ReadinessEndpoints != nil {
		eps := make([]string, len(p.ReadinessEndpoints))
		for i, e := range p.ReadinessEndpoints {
			eps[i] = redactURL(e)
		}
		p.ReadinessEndpoints = eps
	}
	return p
}

// HostedClusterState is the part of a HostedCluster the bot reasons about.
// Carried by TypeHostedCluster; Event.Object is the HostedCluster.
type HostedClusterState struct {
	Platform string `json:"platform"` // spec.platform.type: KubeVirt, AWS, Agent, None, ...
	// Labels of the HostedCluster, for routing its incidents.
	Labels      map[string]string `json:"labels,omitempty"`
	InfraID     string            `json:"infraID,omitempty"` // spec.infraID
	Version     string            `json:"version,omitempty"` // status.version: newest Completed history entry, else desired; "" when absent. Picks the noProxy rule HyperShift applies
	Proxy       ProxySpec         `json:"proxy,omitzero"`    // spec.configuration.proxy
	NetworkType string            `json:"networkType,omitempty"`
	// The CIDRs of spec.networking in spec order; HyperShift compares
	// noProxy with the first cluster and service network only.
	ClusterNetwork []string `json:"clusterNetwork,omitempty"`
	ServiceNetwork []string `json:"serviceNetwork,omitempty"`
	MachineNetwork []string `json:"machineNetwork,omitempty"`
	// APIServer is spec.networking.apiServer (advertiseAddress, port): what
	// the workers' kube-apiserver-proxy listens on. Nil when unset, which
	// means 172.20.0.1:6443.
	APIServer *Endpoint `json:"apiServer,omitempty"`
	// ControlPlaneEndpoint is status.controlPlaneEndpoint, the external API
	// address the workers dial.
	ControlPlaneEndpoint *Endpoint `json:"controlPlaneEndpoint,omitempty"`
	KubeconfigSecret     string    `json:"kubeconfigSecret,omitempty"` // status.kubeconfig.name
	// IgnitionEndpoint is status.ignitionEndpoint (host, or host:port),
	// where new workers fetch their ignition; KonnectivityEndpoint is the
	// published konnectivity server (spec.services: the Route or
	// LoadBalancer hostname, or the NodePort address and port, the
	// address alone while HyperShift assigns the port). "" when unknown,
	// e.g. a Route whose hostname HyperShift derives from the management
	// cluster's ingress domain. A noProxy that does
	// not bypass them sends ignition or konnectivity through the proxy.
	IgnitionEndpoint     string `json:"ignitionEndpoint,omitempty"`
	KonnectivityEndpoint string `json:"konnectivityEndpoint,omitempty"`
	// TrustedCA summarises the ConfigMap named by Proxy.TrustedCA; nil when
	// the proxy names none. Never the certificates themselves.
	TrustedCA *CABundle `json:"trustedCABundle,omitempty"`
	// PausedUntil is spec.pausedUntil exactly as written ("true", or an
	// RFC3339 time); "" when unset. Read it with [ReadPausedUntil].
	PausedUntil string      `json:"pausedUntil,omitempty"`
	Generation  int64       `json:"generation,omitempty"` // metadata.generation
	Conditions  []Condition `json:"conditions,omitempty"`
	Deleted     bool        `json:"deleted,omitempty"`
}

// CABundle is what the agent read from a proxy's trusted CA ConfigMap (key
// ca-bundle.crt in the HostedCluster's namespace): whether it is there,
// how many certificates it holds and when the first of them expires. The
// PEM itself never leaves the agent. Expiry is judged by the reader
// against its own clock, so the fact does not change as time passes.
type CABundle struct {
	ConfigMap string `json:"configMap"`
	Found     bool   `json:"found"` // the ConfigMap exists
	// Problem is why the bundle is unusable although the ConfigMap exists:
	// the key is missing, empty, or holds no parsable certificate. "" when
	// at least one certificate parsed.
	Problem      string `json:"problem,omitempty"`
	Certificates int    `json:"certificates,omitempty"` // parsed PEM certificates
	// NotAfter and Subject are those of the certificate that expires
	// first; zero when none parsed.
	NotAfter time.Time `json:"notAfter,omitzero"`
	Subject  string    `json:"subject,omitempty"` // its subject common name (else the full subject)
}

// EventType implements Payload.
func (HostedClusterState) EventType() Type { return TypeHostedCluster }

func (p HostedClusterState) sanitized() Payload {
	p.Proxy = p.Proxy.redacted()
	p.Conditions = sanitizeConditions(p.Conditions)
	if p.TrustedCA != nil {
		b := *p.TrustedCA
		b.Problem = boundHead(redactText(b.Problem))
		b.Subject = boundHead(redactText(b.Subject))
		p.TrustedCA = &b
	}
	return p
}

// ProxyTarget is the kind of object whose proxy configuration changed.
type ProxyTarget string

// The objects that carry a cluster-wide proxy configuration.
const (
	ProxyTargetHostedCluster ProxyTarget = "HostedCluster"
	ProxyTargetOpenShift     ProxyTarget = "Proxy" // config.openshift.io/v1 Proxy "cluster"
)

// ProxyChange records an edit of a proxy configuration. Carried by
// TypeProxyChange; Event.Object is the edited object.
type ProxyChange struct {
	Target ProxyTarget `json:"target"`
	Old    ProxySpec   `json:"old,omitzero"`
	New    ProxySpec   `json:"new,omitzero"`
	// NoProxyAdded and NoProxyRemoved are derived from Old and New by [New]
	// (and again on decoding), so producers need not fill them in and
	// consumers can trust them. Entries are compared exactly, in order of
	// first appearance, without duplicates.
	NoProxyAdded   []string `json:"noProxyAdded,omitempty"`
	NoProxyRemoved []string `json:"noProxyRemoved,omitempty"`
}

// EventType implements Payload.
func (ProxyChange) EventType() Type { return TypeProxyChange }

func (p ProxyChange) sanitized() Payload {
	p.Old = p.Old.redacted()
	p.New = p.New.redacted()
	oldEntries, newEntries := p.Old.NoProxyEntries(), p.New.NoProxyEntries()
	p.NoProxyAdded = missingFrom(newEntries, oldEntries)
	p.NoProxyRemoved = missingFrom(oldEntries, newEntries)
	return p
}

// missingFrom returns the distinct entries of a that are not in b.
func missingFrom(a, b []string) []string {
	var out []string
	for _, e := range a {
		if !slices.Contains(b, e) && !slices.Contains(out, e) {
			out = append(out, e)
		}
	}
	return out
}

// NodePoolState is the part of a NodePool the bot reasons about. Carried by
// TypeNodePool; Event.Object is the NodePool.
type NodePoolState struct {
	Name            string      `json:"name"`
	ClusterName     string      `json:"clusterName"`          // spec.clusterName
	Platform        string      `json:"platform,omitempty"`   // spec.platform.type
	Replicas        *int32      `json:"replicas,omitempty"`   // spec.replicas; nil when autoscaled
	CurrentReplicas int32       `json:"currentReplicas"`      // status.replicas
	Conditions      []Condition `json:"conditions,omitempty"` // Ready, AllNodesHealthy, AllMachinesReady, ...
	// PausedUntil is the NodePool's own spec.pausedUntil, as written (see
	// HostedClusterState.PausedUntil); a NodePool does not read its
	// HostedCluster's.
	PausedUntil string `json:"pausedUntil,omitempty"`
	// Generation is metadata.generation: a condition whose
	// observedGeneration is older was written before the last spec
	// change (a pause set or lifted, a fix applied).
	Generation int64 `json:"generation,omitempty"`
	Deleted    bool  `json:"deleted,omitempty"`
}

// EventType implements Payload.
func (NodePoolState) EventType() Type { return TypeNodePool }

func (p NodePoolState) sanitized() Payload {
	p.Conditions = sanitizeConditions(p.Conditions)
	return p
}

// NodeReadiness is the Ready condition of a node of a hosted cluster.
// Carried by TypeNode; Event.Object is the Node (Hosted set).
type NodeReadiness struct {
	Node               string          `json:"node"`
	Ready              ConditionStatus `json:"ready"`
	Reason             string          `json:"reason,omitempty"`
	Message            string          `json:"message,omitempty"`
	LastTransitionTime time.Time       `json:"lastTransitionTime,omitzero"`
	ProviderID         string          `json:"providerID,omitempty"` // kubevirt://<vmi> on KubeVirt
	InternalIP         string          `json:"internalIP,omitempty"` // equals the virt-launcher pod IP on KubeVirt
	// NotJoining: the node has had no Ready condition (the kubelet never
	// posted its status) for longer than the agent's join grace since
	// Created; Ready is then Unknown. Within the grace such a node is
	// "joining", counted in NodeSummary.Joining and not published.
	NotJoining bool      `json:"notJoining,omitempty"`
	Created    time.Time `json:"created,omitzero"` // metadata.creationTimestamp; set with NotJoining
	Deleted    bool      `json:"deleted,omitempty"`
}

// EventType implements Payload.
func (NodeReadiness) EventType() Type { return TypeNode }

func (p NodeReadiness) sanitized() Payload {
	p.Message = boundHead(redactText(p.Message))
	return p
}

// NodeSummary is the node population of one hosted cluster as the agent's
// cache holds it: every Node, healthy ones included, which per-node events
// (problems only) cannot tell. Carried by TypeNodeSummary; Event.Object is
// the HostedCluster. The agent publishes it when the counts change, at most
// once per its summary interval per cluster, and in every snapshot.
//
// Total = Ready + NotReady + Unknown + Joining + NotJoining.
type NodeSummary struct {
	Total    int `json:"total"`
	Ready    int `json:"ready"`    // Ready=True
	NotReady int `json:"notReady"` // Ready=False
	Unknown  int `json:"unknown"`  // Ready=Unknown (the node lifecycle controller lost the kubelet)
	// Joining nodes have no Ready condition yet and are younger than
	// JoinGrace: new, not broken.
	Joining int `json:"joining"`
	// NotJoining nodes have had no Ready condition for longer than
	// JoinGrace (see NodeReadiness.NotJoining).
	NotJoining int           `json:"notJoining"`
	JoinGrace  time.Duration `json:"joinGrace,omitempty"` // the agent's grace, in nanoseconds
	// Cordoned nodes are Ready but spec.unschedulable; they are counted
	// in Ready too. HyperShift counts only Ready, schedulable nodes as
	// available workers (support/util/util.go CountAvailableNodes), so
	// Ready-Cordoned is what its connection conditions see. An older
	// agent sends 0.
	Cordoned int `json:"cordoned,omitempty"`
}

// EventType implements Payload.
func (NodeSummary) EventType() Type { return TypeNodeSummary }

func (p NodeSummary) sanitized() Payload { return p }

// Problems is the number of nodes that are neither Ready nor joining.
func (p NodeSummary) Problems() int { return p.NotReady + p.Unknown + p.NotJoining }

// Available is the number of Ready, schedulable nodes: HyperShift's count
// of available workers.
func (p NodeSummary) Available() int { return max(p.Ready-p.Cordoned, 0) }

// Signature classifies a container's last termination message, so the bot
// can match known failures without each consumer re-parsing log text.
type Signature string

// The signatures [DetectSignature] recognises. New values may be added in
// any minor revision; treat unknown values like SignatureNone.
const (
	SignatureNone Signature = ""
	// SignatureAPIServerConnectivity: library-go's start-up check failed
	// ("failed checking apiserver connectivity"), the service-ca-operator
	// symptom of API traffic tunnelled through a proxy.
	SignatureAPIServerConnectivity Signature = "apiserver-connectivity"
	// SignatureProxyConnect: a dial through an HTTP proxy failed
	// ("proxyconnect tcp", "failed to establish a connection through http
	// connect", "to CONNECT request").
	SignatureProxyConnect Signature = "proxy-connect"
	// SignatureUnknownAuthority: TLS verification failed with
	// "x509: certificate signed by unknown authority", typically a
	// TLS-intercepting proxy whose CA is not trusted.
	SignatureUnknownAuthority Signature = "x509-unknown-authority"
)

// DetectSignature classifies a termination message or log excerpt. Rules are
// tried in the order the constants are listed and the first match wins: a
// connectivity check that failed because of a proxy is still reported as
// SignatureAPIServerConnectivity, the symptom the runbooks start from.
func DetectSignature(message string) Signature {
	m := strings.ToLower(message)
	switch {
	case strings.Contains(m, "failed checking apiserver connectivity"):
		return SignatureAPIServerConnectivity
	case strings.Contains(m, "proxyconnect tcp"),
		strings.Contains(m, "failed to establish a connection through http connect"),
		strings.Contains(m, "to connect request"):
		return SignatureProxyConnect
	case strings.Contains(m, "x509: certificate signed by unknown authority"):
		return SignatureUnknownAuthority
	}
	return SignatureNone
}

// PodCrashLoop reports a container restarting in a loop, or recovering
// (Cleared). Carried by TypeCrashLoop; Event.Object is the Pod.
type PodCrashLoop struct {
	Namespace     string `json:"namespace"`
	Pod           string `json:"pod"`
	Container     string `json:"container"`
	RestartCount  int32  `json:"restartCount"`
	WaitingReason string `json:"waitingReason,omitempty"` // e.g. CrashLoopBackOff
	// LastTerminationMessage is lastState.terminated.message, redacted and,
	// if long, cut from the front: the fatal line is at the end.
	LastTerminationMessage string    `json:"lastTerminationMessage,omitempty"`
	ExitCode               int32     `json:"exitCode"`
	FinishedAt             time.Time `json:"finishedAt,omitzero"`
	// Signature is set by [New] from the full message with
	// [DetectSignature] unless the producer set it.
	Signature Signature `json:"signature,omitempty"`
	Cleared   bool      `json:"cleared,omitempty"` // the container is running and ready again
}

// EventType implements Payload.
func (PodCrashLoop) EventType() Type { return TypeCrashLoop }

func (p PodCrashLoop) sanitized() Payload {
	if p.Signature == SignatureNone {
		p.Signature = DetectSignature(p.LastTerminationMessage)
	}
	p.LastTerminationMessage = boundTail(redactText(p.LastTerminationMessage))
	return p
}

// ProxyMode is how a worker's kube-apiserver-proxy reaches the API server.
type ProxyMode string

// The kube-apiserver-proxy modes HyperShift renders.
const (
	ProxyModeHAProxy ProxyMode = "haproxy" // direct: noProxy exempted the API server
	ProxyModeTunnel  ProxyMode = "tunnel"  // HTTP CONNECT through the proxy (kubernetes-default-proxy container)
	ProxyModeUnknown ProxyMode = "unknown"
)

// KubeAPIServerProxy reports the kube-apiserver-proxy static pod of one
// hosted worker. Carried by TypeAPIServerProxy; Event.Object is the Pod
// (Hosted set).
type KubeAPIServerProxy struct {
	Pod            string    `json:"pod"`
	Node           string    `json:"node"`
	Mode           ProxyMode `json:"mode"`
	ConnectFailure bool      `json:"connectFailure,omitempty"` // a CONNECT failure line was seen in the tunnel's log
	ConnectMessage string    `json:"connectMessage,omitempty"` // excerpt of that line, redacted and bounded
}

// EventType implements Payload.
func (KubeAPIServerProxy) EventType() Type { return TypeAPIServerProxy }

func (p KubeAPIServerProxy) sanitized() Payload {
	p.ConnectMessage = boundHead(redactText(p.ConnectMessage))
	return p
}

// VirtLauncher is a KubeVirt virt-launcher pod in the management cluster,
// the VM behind one hosted node. Carried by TypeVirtLauncher; Event.Object
// is the Pod.
type VirtLauncher struct {
	Pod      string `json:"pod"`
	VMI      string `json:"vmi"`            // equals the hosted node's name
	Node     string `json:"node,omitempty"` // management node running the VM
	PodIP    string `json:"podIP,omitempty"`
	Phase    string `json:"phase,omitempty"` // pod phase
	InfraID  string `json:"infraID,omitempty"`
	NodePool string `json:"nodePool,omitempty"`
	Deleted  bool   `json:"deleted,omitempty"`
}

// EventType implements Payload.
func (VirtLauncher) EventType() Type { return TypeVirtLauncher }

func (p VirtLauncher) sanitized() Payload { return p }

// Reachability reports whether the agent can reach a hosted cluster's API
// server. Carried by TypeReachability; Event.Object is the HostedCluster.
type Reachability struct {
	Endpoint  string `json:"endpoint"` // host:port probed
	Reachable bool   `json:"reachable"`
	// Unwatched: the agent does not watch the hosted cluster at all
	// (its admin kubeconfig Secret is missing, invalid or refused); Error
	// says why. Reachable is then false.
	Unwatched bool      `json:"unwatched,omitempty"`
	Error     string    `json:"error,omitempty"` // last probe error or why unwatched, redacted and bounded
	Since     time.Time `json:"since,omitzero"`  // when the agent first saw this state
}

// EventType implements Payload.
func (Reachability) EventType() Type { return TypeReachability }

func (p Reachability) sanitized() Payload {
	p.Error = boundHead(redactText(p.Error))
	return p
}

// ProxyStatus is the status of config.openshift.io/v1 Proxy: the
// configuration actually rendered, including the entries OpenShift adds.
type ProxyStatus struct {
	HTTPProxy  string `json:"httpProxy,omitempty"`  // redacted
	HTTPSProxy string `json:"httpsProxy,omitempty"` // redacted
	NoProxy    string `json:"noProxy,omitempty"`
}

// OpenShiftProxy is the Proxy "cluster" of a standalone OpenShift cluster.
// Carried by TypeOCPProxy; Event.Object is the Proxy.
type OpenShiftProxy struct {
	Spec   ProxySpec   `json:"spec,omitzero"`
	Status ProxyStatus `json:"status,omitzero"`
}

// EventType implements Payload.
func (OpenShiftProxy) EventType() Type { return TypeOCPProxy }

func (p OpenShiftProxy) sanitized() Payload {
	p.Spec = p.Spec.redacted()
	p.Status.HTTPProxy = redactURL(p.Status.HTTPProxy)
	p.Status.HTTPSProxy = redactURL(p.Status.HTTPSProxy)
	return p
}

// SnapshotDone closes a resync snapshot of one source, for the management
// cluster (Event.Cluster nil) or one hosted cluster; build it with
// [NewSnapshotDone]. Its Event.Snapshot names the run, like the snapshot
// events it closes.
type SnapshotDone struct {
	Started time.Time `json:"started"` // when the agent began listing
	// Count is the number of snapshot events the run published for this
	// scope (informational: deduplicated copies never reach the stream).
	Count int `json:"count"`
	// Types are the types the snapshot covered; state of other types is
	// not to be cleared.
	Types []Type `json:"types,omitempty"`
	// Problems are the objects of the covered types that have a problem
	// now; a consumer clears the problems of every other object of those
	// types in this scope.
	Problems []ObjectRef `json:"problems,omitempty"`
}

// EventType implements Payload.
func (SnapshotDone) EventType() Type { return TypeSnapshotDone }

func (p SnapshotDone) sanitized() Payload { return p }

// APIServiceState is an aggregated APIService of a hosted cluster
// (apiregistration.k8s.io/v1, spec.service set) whose Available condition
// is not True, or that recovered (Cleared). The openshift ones
// (v1.apps.openshift.io, ...) reach openshift-apiserver through
// konnectivity, so Available=False with reason FailedDiscoveryCheck is
// the hosted cluster's own evidence of a konnectivity failure
// (hypershift#313). Carried by TypeAPIService; Event.Object is the
// APIService (Hosted set, no namespace).
type APIServiceState struct {
	Name string `json:"name"`
	// Service is spec.service as namespace/name.
	Service            string          `json:"service,omitempty"`
	Available          ConditionStatus `json:"available"`
	Reason             string          `json:"reason,omitempty"`  // e.g. FailedDiscoveryCheck, MissingEndpoints
	Message            string          `json:"message,omitempty"` // redacted and bounded
	LastTransitionTime time.Time       `json:"lastTransitionTime,omitzero"`
	Cleared            bool            `json:"cleared,omitempty"` // Available=True again, or deleted
}

// EventType implements Payload.
func (APIServiceState) EventType() Type { return TypeAPIService }

func (p APIServiceState) sanitized() Payload {
	p.Message = boundHead(redactText(p.Message))
	return p
}

// ConnectivityCheck is the hosted cluster's own record of the data plane
// reaching its API server: the ConfigMap
// kube-system/control-plane-connectivity-check, whose data.lastSucceeded
// the kas-connection-checker pods on the workers stamp (RFC3339, UTC)
// each time a request to https://kubernetes.default.svc succeeds, about
// every 60 s. HyperShift reads it into ControlPlaneConnectionAvailable
// (hostedclusterconfigoperator resources.go, reconcileControlPlane-
// ConnectionAvailable). Carried by TypeConnectivity; Event.Object is the
// ConfigMap (Hosted set).
//
// The agent publishes it when Stale changes, not on every stamp: a
// stamp that stops moving changes nothing in the ConfigMap.
type ConnectivityCheck struct {
	// LastSucceeded is data.lastSucceeded; zero when absent, empty or
	// unparsable (Raw then holds what is there, bounded).
	LastSucceeded time.Time `json:"lastSucceeded,omitzero"`
	Raw           string    `json:"raw,omitempty"`
	Missing       bool      `json:"missing,omitempty"` // the ConfigMap does not exist
	// Stale: at ObservedAt, LastSucceeded was older than StaleAfter (or
	// never recorded). HyperShift's threshold is 5 minutes.
	Stale      bool          `json:"stale,omitempty"`
	StaleAfter time.Duration `json:"staleAfter,omitempty"` // nanoseconds
	ObservedAt time.Time     `json:"observedAt,omitzero"`
}

// EventType implements Payload.
func (ConnectivityCheck) EventType() Type { return TypeConnectivity }

func (p ConnectivityCheck) sanitized() Payload {
	p.Raw = boundHead(redactText(p.Raw))
	return p
}

func sanitizeConditions(cs []Condition) []Condition {
	if cs == nil {
		return nil
	}
	out := make([]Condition, len(cs))
	for i, c := range cs {
		c.Message = boundHead(redactText(c.Message))
		out[i] = c
	}
	return out
}
