// Package hypershift holds the few HyperShift and OpenShift API fields hcpbot
// reads and writes. The upstream API module is not available to this build,
// so the types are declared here, converted from unstructured objects served
// by dynamic clients, and the matching hand-written CRDs (crds/) back the
// tests and the demo. Field shapes follow openshift/hypershift
// api/hypershift/v1beta1 and openshift/api config/v1.
package hypershift

import (
	"embed"
	"fmt"
	"net"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// CRDs holds the hand-written CustomResourceDefinitions (YAML), for tests
// and the demo; a real management cluster has HyperShift's own.
//
//go:embed crds/*.yaml
var CRDs embed.FS

var (
	HostedClusterGVR = schema.GroupVersionResource{Group: "hypershift.openshift.io", Version: "v1beta1", Resource: "hostedclusters"}
	NodePoolGVR      = schema.GroupVersionResource{Group: "hypershift.openshift.io", Version: "v1beta1", Resource: "nodepools"}
	// ProxyGVR is OpenShift's cluster-scoped Proxy; the one that matters is named ProxyName.
	ProxyGVR = schema.GroupVersionResource{Group: "config.openshift.io", Version: "v1", Resource: "proxies"}
)

const (
	ProxyName = "cluster"

	// Label on the control-plane namespace of a hosted cluster.
	LabelHostedControlPlane = "hypershift.openshift.io/hosted-control-plane"
	// Labels on KubeVirt virt-launcher pods of hosted nodes.
	LabelClusterName  = "cluster.x-k8s.io/cluster-name"
	LabelInfraID      = "hypershift.openshift.io/infra-id"
	LabelNodePoolName = "hypershift.openshift.io/nodepool-name"
	LabelKubeVirt     = "kubevirt.io"
	LabelVMName       = "vm.kubevirt.io/name"
	VirtLauncher      = "virt-launcher"

	// KubeconfigKey is the key of the admin kubeconfig Secret.
	KubeconfigKey = "kubeconfig"

	PlatformKubeVirt = "KubeVirt"

	// DefaultInternalAPIAddress and DefaultInternalAPIPort are where the
	// kube-apiserver-proxy static pod listens on every worker.
	DefaultInternalAPIAddress = "172.20.0.1"
	DefaultInternalAPIPort    = 6443
)

type HostedCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              HostedClusterSpec   `json:"spec"`
	Status            HostedClusterStatus `json:"status,omitempty"`
}

type HostedClusterSpec struct {
	InfraID       string                `json:"infraID,omitempty"`
	Platform      PlatformSpec          `json:"platform"`
	Networking    ClusterNetworking     `json:"networking,omitempty"`
	Configuration *ClusterConfiguration `json:"configuration,omitempty"`
	// Services says how each control-plane service is published
	// (APIServer, OAuthServer, Konnectivity, Ignition).
	Services []ServicePublishingStrategyMapping `json:"services,omitempty"`
	// PausedUntil pauses HyperShift's reconciliation: "true"/"false", or
	// an RFC3339 time (hostedcluster_types.go, the CRD's pattern).
	PausedUntil *string `json:"pausedUntil,omitempty"`
}

// The control-plane services of spec.services (HyperShift's ServiceType).
const (
	ServiceAPIServer    = "APIServer"
	ServiceOAuthServer  = "OAuthServer"
	ServiceKonnectivity = "Konnectivity"
	ServiceIgnition     = "Ignition"
)

// The publishing strategies (HyperShift's PublishingStrategyType).
const (
	PublishLoadBalancer = "LoadBalancer"
	PublishNodePort     = "NodePort"
	PublishRoute        = "Route"
	PublishNone         = "None"
	PublishS3           = "S3"
)

// ServicePublishingStrategyMapping is one entry of spec.services
// (api/hypershift/v1beta1 ServicePublishingStrategyMapping): the strategy
// is embedded under the key servicePublishingStrategy.
type ServicePublishingStrategyMapping struct {
	Service                   string `json:"service"`
	ServicePublishingStrategy `json:"servicePublishingStrategy"`
}

// ServicePublishingStrategy is how one service is published; the member
// matching Type is set (none for None and S3).
type ServicePublishingStrategy struct {
	Type         string                          `json:"type"`
	NodePort     *NodePortPublishingStrategy     `json:"nodePort,omitempty"`
	LoadBalancer *LoadBalancerPublishingStrategy `json:"loadBalancer,omitempty"`
	Route        *RoutePublishingStrategy        `json:"route,omitempty"`
}

// NodePortPublishingStrategy: Port <= 0 means the port is assigned when
// HyperShift creates the Service (then not in the spec).
type NodePortPublishingStrategy struct {
	Address string `json:"address"`
	Port    int32  `json:"port,omitempty"`
}

// LoadBalancerPublishingStrategy: an empty Hostname is taken from the
// Service's status by HyperShift (then not in the spec).
type LoadBalancerPublishingStrategy struct {
	Hostname string `json:"hostname,omitempty"`
}

// RoutePublishingStrategy: an empty Hostname is derived from the
// management cluster's ingress domain (then not in the spec).
type RoutePublishingStrategy struct {
	Hostname string `json:"hostname,omitempty"`
}

type PlatformSpec struct {
	Type string `json:"type"`
}

type ClusterNetworking struct {
	ClusterNetwork []NetworkEntry       `json:"clusterNetwork,omitempty"`
	ServiceNetwork []NetworkEntry       `json:"serviceNetwork,omitempty"`
	MachineNetwork []NetworkEntry       `json:"machineNetwork,omitempty"`
	NetworkType    string               `json:"networkType,omitempty"`
	APIServer      *APIServerNetworking `json:"apiServer,omitempty"`
}

type NetworkEntry struct {
	CIDR       string `json:"cidr"`
	HostPrefix int32  `json:"hostPrefix,omitempty"`
}

type APIServerNetworking struct {
	AdvertiseAddress string `json:"advertiseAddress,omitempty"`
	Port             *int32 `json:"port,omitempty"`
}

type ClusterConfiguration struct {
	Proxy *ProxySpec `json:"proxy,omitempty"`
}

// ProxySpec is shared by HostedCluster spec.configuration.proxy and the
// OpenShift Proxy's spec. NoProxy is ONE comma-separated string.
type ProxySpec struct {
	HTTPProxy          string           `json:"httpProxy,omitempty"`
	HTTPSProxy         string           `json:"httpsProxy,omitempty"`
	NoProxy            string           `json:"noProxy,omitempty"`
	ReadinessEndpoints []string         `json:"readinessEndpoints,omitempty"`
	TrustedCA          ConfigMapNameRef `json:"trustedCA,omitempty"`
}

type ConfigMapNameRef struct {
	Name string `json:"name,omitempty"`
}

type HostedClusterStatus struct {
	Kubeconfig           *LocalObjectRef `json:"kubeconfig,omitempty"`
	ControlPlaneEndpoint APIEndpoint     `json:"controlPlaneEndpoint,omitempty"`
	// IgnitionEndpoint is where new workers fetch their ignition: the
	// Route hostname, or address:port of the NodePort.
	IgnitionEndpoint string             `json:"ignitionEndpoint,omitempty"`
	Conditions       []metav1.Condition `json:"conditions,omitempty"`
	// Version is the release the control plane runs and is rolling out to,
	// as HyperShift writes it (ClusterVersionStatus); nil until HyperShift
	// has reconciled the cluster once.
	Version *ClusterVersionStatus `json:"version,omitempty"`
}

// ClusterVersionStatus is HyperShift's status.version (api/hypershift/
// v1beta1 ClusterVersionStatus), reduced to the fields hcpbot reads.
type ClusterVersionStatus struct {
	// Desired is the release being rolled out.
	Desired Release `json:"desired"`
	// History lists the rollouts, newest first. An entry is Partial while
	// its rollout runs (or when it never finished) and Completed once it did.
	History            []UpdateHistory `json:"history,omitempty"`
	ObservedGeneration int64           `json:"observedGeneration"`
}

// Release is openshift/api config/v1 Release.
type Release struct {
	Version string `json:"version,omitempty"`
	Image   string `json:"image,omitempty"`
}

// UpdateHistory is openshift/api config/v1 UpdateHistory.
type UpdateHistory struct {
	State          string       `json:"state"` // UpdateStateCompleted or UpdateStatePartial
	StartedTime    metav1.Time  `json:"startedTime"`
	CompletionTime *metav1.Time `json:"completionTime"`
	Version        string       `json:"version,omitempty"`
	Image          string       `json:"image"`
	Verified       bool         `json:"verified"`
}

// The states of an UpdateHistory entry.
const (
	UpdateStateCompleted = "Completed"
	UpdateStatePartial   = "Partial"
)

// Release returns the release the cluster runs: the newest history entry
// whose rollout Completed, else the desired release (a cluster still on
// its first rollout), else "" (HyperShift has not written status.version).
// A Partial entry is skipped: until it completes, the workers still carry
// what the previous release rendered.
func (hc *HostedCluster) Release() string {
	v := hc.Status.Version
	if v == nil {
		return ""
	}
	for _, h := range v.History {
		if h.State == UpdateStateCompleted && strings.TrimSpace(h.Version) != "" {
			return strings.TrimSpace(h.Version)
		}
	}
	return strings.TrimSpace(v.Desired.Version)
}

type LocalObjectRef struct {
	Name string `json:"name"`
}

type APIEndpoint struct {
	Host string `json:"host,omitempty"`
	Port int32  `json:"port,omitempty"`
}

type NodePool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              NodePoolSpec   `json:"spec"`
	Status            NodePoolStatus `json:"status,omitempty"`
}

type NodePoolSpec struct {
	ClusterName string       `json:"clusterName"`
	Replicas    *int32       `json:"replicas,omitempty"`
	Platform    PlatformSpec `json:"platform"`
	// PausedUntil is the NodePool's own pause (nodepool_types.go), read
	// like HostedClusterSpec.PausedUntil.
	PausedUntil *string `json:"pausedUntil,omitempty"`
}

type NodePoolStatus struct {
	Replicas   int32               `json:"replicas,omitempty"`
	Conditions []NodePoolCondition `json:"conditions,omitempty"`
}

// NodePoolCondition is HyperShift's own condition type (it has a severity),
// not metav1.Condition.
type NodePoolCondition struct {
	Type               string      `json:"type"`
	Status             string      `json:"status"`
	Severity           string      `json:"severity,omitempty"`
	Reason             string      `json:"reason,omitempty"`
	Message            string      `json:"message,omitempty"`
	LastTransitionTime metav1.Time `json:"lastTransitionTime,omitempty"`
	// ObservedGeneration: the NodePool controller stamps every condition
	// with the NodePool's generation (nodepool/conditions.go:43-73).
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// Proxy is OpenShift's config.openshift.io/v1 Proxy (standalone clusters).
type Proxy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ProxySpec   `json:"spec"`
	Status            ProxyStatus `json:"status,omitempty"`
}

type ProxyStatus struct {
	HTTPProxy  string `json:"httpProxy,omitempty"`
	HTTPSProxy string `json:"httpsProxy,omitempty"`
	NoProxy    string `json:"noProxy,omitempty"`
}

// FromUnstructured converts a dynamic-client object into one of the types
// above, e.g. FromUnstructured[HostedCluster](u).
func FromUnstructured[T any](u *unstructured.Unstructured) (*T, error) {
	out := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), out); err != nil {
		return nil, fmt.Errorf("convert %s %s/%s: %w", u.GetKind(), u.GetNamespace(), u.GetName(), err)
	}
	return out, nil
}

// ControlPlaneNamespace is where HyperShift runs the hosted control plane
// (and, on KubeVirt, the node VMs): <namespace>-<name with "." as "-">.
func ControlPlaneNamespace(namespace, name string) string {
	return namespace + "-" + strings.ReplaceAll(name, ".", "-")
}

// Proxy returns the proxy spec, empty when none is configured.
func (hc *HostedCluster) Proxy() ProxySpec {
	if hc.Spec.Configuration == nil || hc.Spec.Configuration.Proxy == nil {
		return ProxySpec{}
	}
	return *hc.Spec.Configuration.Proxy
}

// CIDRs returns the CIDRs of a network list, in order.
func CIDRs(entries []NetworkEntry) []string {
	out := make([]string, 0, len(entries))
	for _, e := range entries {
		out = append(out, e.CIDR)
	}
	return out
}

// PublishedEndpoint is where service (e.g. ServiceKonnectivity) is
// published according to spec.services: the Route or LoadBalancer
// hostname, or the NodePort address and port (the address alone when the
// port is left to HyperShift). "" when the service is not listed, not
// published, or its hostname is left to HyperShift to find.
func (hc *HostedCluster) PublishedEndpoint(service string) string {
	for _, s := range hc.Spec.Services {
		if s.Service != service {
			continue
		}
		switch st := s.ServicePublishingStrategy; st.Type {
		case PublishRoute:
			if st.Route != nil {
				return st.Route.Hostname
			}
		case PublishLoadBalancer:
			if st.LoadBalancer != nil {
				return st.LoadBalancer.Hostname
			}
		case PublishNodePort:
			if st.NodePort == nil || st.NodePort.Address == "" {
				return ""
			}
			if st.NodePort.Port <= 0 {
				return st.NodePort.Address
			}
			return net.JoinHostPort(st.NodePort.Address, strconv.Itoa(int(st.NodePort.Port)))
		}
		return ""
	}
	return ""
}

// InternalAPIAddress is where workers' kube-apiserver-proxy listens.
func (hc *HostedCluster) InternalAPIAddress() (string, int32) {
	addr, port := DefaultInternalAPIAddress, int32(DefaultInternalAPIPort)
	if a := hc.Spec.Networking.APIServer; a != nil {
		if a.AdvertiseAddress != "" {
			addr = a.AdvertiseAddress
		}
		if a.Port != nil {
			port = *a.Port
		}
	}
	return addr, port
}
