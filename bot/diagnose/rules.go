package diagnose

import (
	"strings"
)

// The stable rule IDs.
const (
	RuleProxyTunnel          = "proxy-tunnel"
	RuleRiskyProxyChange     = "risky-proxy-change"
	RuleHostedNotWatched     = "hosted-not-watched"
	RuleHostedAPIUnreachable = "hosted-api-unreachable"
	RuleNodesNotReady        = "nodes-notready"
	RuleOperatorCrashLoop    = "operator-crashloop"
	RuleManagementProxyLint  = "management-proxy-lint"

	RuleEtcdUnavailable         = "etcd-unavailable"
	RuleProxyCAInvalid          = "proxy-ca-invalid"
	RuleControlPlaneUnreachable = "control-plane-unreachable"
	RuleIgnitionUnreachable     = "ignition-unreachable"
	RuleKonnectivityDown        = "konnectivity-down"
	RuleKubeVirtVMs             = "kubevirt-vms"
	RuleControlPlaneComponents  = "control-plane-components"
	RuleNoWorkers               = "no-workers"
	RuleConnectionUnknown       = "connection-unknown"
)

// DefaultRules returns the built-in rules in priority order. Adding a rule
// is one RuleFunc and one entry here (and its RuleSummary and RuleInfo);
// rules before it explain symptoms for it, rules after it see what it
// explained. The package documentation has the table of who explains
// what.
func DefaultRules() RuleSet {
	return RuleSet{
		{RuleProxyTunnel, proxyTunnel},
		{RuleRiskyProxyChange, riskyProxyChange},
		{RuleHostedNotWatched, hostedNotWatched},
		{RuleEtcdUnavailable, etcdUnavailable},
		{RuleHostedAPIUnreachable, hostedAPIUnreachable},
		{RuleControlPlaneComponents, controlPlaneComponents},
		{RuleProxyCAInvalid, proxyCAInvalid},
		{RuleControlPlaneUnreachable, controlPlaneUnreachable},
		{RuleIgnitionUnreachable, ignitionUnreachable},
		{RuleNodesNotReady, nodesNotReady},
		{RuleNoWorkers, noWorkersAvailable},
		{RuleKonnectivityDown, konnectivityDown},
		{RuleConnectionUnknown, connectionUnknown},
		{RuleKubeVirtVMs, kubevirtVMs},
		{RuleOperatorCrashLoop, operatorCrashLoop},
		{RuleManagementProxyLint, managementProxyLint},
	}
}

// RuleSummary names what a rule finds without naming a cluster, for lists
// of many clusters; "" for an unknown rule.
func RuleSummary(id string) string {
	switch id {
	case RuleProxyTunnel:
		return "API traffic tunnelled through the HTTPS proxy"
	case RuleRiskyProxyChange:
		return "a proxy change makes the workers tunnel API traffic"
	case RuleHostedNotWatched:
		return "hosted cluster not watched (admin kubeconfig unusable)"
	case RuleHostedAPIUnreachable:
		return "hosted cluster API unreachable"
	case RuleNodesNotReady:
		return "nodes NotReady without a proxy cause"
	case RuleOperatorCrashLoop:
		return "operator crashlooping without a proxy cause"
	case RuleManagementProxyLint:
		return "management cluster proxy lint"
	case RuleEtcdUnavailable:
		return "etcd of the hosted control plane unavailable"
	case RuleProxyCAInvalid:
		return "proxy CA bundle missing, unusable or expired"
	case RuleControlPlaneUnreachable:
		return "workers cannot reach the API server"
	case RuleIgnitionUnreachable:
		return "workers do not reach the ignition endpoint"
	case RuleKonnectivityDown:
		return "konnectivity down: oc logs and oc exec fail"
	case RuleKubeVirtVMs:
		return "KubeVirt VMs not live-migratable, Pending, with a small MTU or weaker tenant isolation"
	case RuleControlPlaneComponents:
		return "control plane components not available"
	case RuleNoWorkers:
		return "no worker node available"
	case RuleConnectionUnknown:
		return "HyperShift cannot evaluate the workers' connections"
	}
	return ""
}

// RuleInfo says in one line what a rule looks for, so that a user asking
// why a rule did not fire learns what it would have needed; "" for an
// unknown rule.
func RuleInfo(id string) string {
	switch id {
	case RuleProxyTunnel:
		return "HostedCluster httpsProxy whose spec noProxy makes HyperShift tunnel API traffic, with NotReady nodes, the operator's apiserver connectivity crash, CONNECT failures, ControlPlaneConnectionAvailable=False or ignition failing through the proxy"
	case RuleRiskyProxyChange:
		return "a HostedCluster proxy change that made the spec tunnel API traffic (or proxy in-cluster clients), before any symptom"
	case RuleHostedNotWatched:
		return "the agent reports the hosted cluster's admin kubeconfig Secret missing, invalid or refused"
	case RuleEtcdUnavailable:
		return "HostedCluster EtcdAvailable=False (EtcdWaitingForQuorum, StatefulSetNotFound, EtcdRecoveryJobFailed)"
	case RuleHostedAPIUnreachable:
		return "the agent's API probe fails, HostedCluster KubeAPIServerAvailable=False, Available=False (KASLoadBalancerNotReachable) or ExternalDNSReachable=False (ExternalDNSHostNotReachable)"
	case RuleControlPlaneComponents:
		return "HostedCluster Available=False (ComponentsNotAvailable), which HyperShift reports while the control plane comes up"
	case RuleProxyCAInvalid:
		return "HostedCluster ValidProxyConfiguration=False (ProxyCABundleInvalid: missing, unusable, not yet valid or expired), or the trustedCA ConfigMap missing, unusable or expired"
	case RuleControlPlaneUnreachable:
		return "HostedCluster ControlPlaneConnectionAvailable=False (KASAccessFailed, ConnectionCheckStale: the workers fail to reach the API server), with the hosted cluster's connectivity-check record as evidence"
	case RuleIgnitionUnreachable:
		return "NodePool ReachedIgnitionEndpoint=False or IgnitionEndpointAvailable=False, or HostedCluster IgnitionEndpointAvailable=False (NotFound, WaitingForAvailable)"
	case RuleNodesNotReady:
		return "hosted nodes NotReady, Unknown or not joining"
	case RuleNoWorkers:
		return "HostedCluster DataPlaneConnectionAvailable or ControlPlaneConnectionAvailable Unknown (NoWorkerNodesAvailable: no Ready, schedulable node) that no node rule explains"
	case RuleKonnectivityDown:
		return "HostedCluster DataPlaneConnectionAvailable=False (KonnectivityAgentPodsNotFound: no agent Running, or their logs unreadable through the tunnel; ReconciliationError), with the hosted cluster's APIServices as evidence"
	case RuleConnectionUnknown:
		return "HostedCluster ControlPlaneConnectionAvailable or DataPlaneConnectionAvailable Unknown (ReconcileError, ConfigMapNotFound: the hosted-cluster-config-operator cannot evaluate them)"
	case RuleKubeVirtVMs:
		return "HostedCluster KubeVirtNodesLiveMigratable=False, ValidKubeVirtInfraNetworkMTU=False or ValidKubeVirtInfraNetworkPolicyRBAC=False (Pending virt-launcher pods as evidence)"
	case RuleOperatorCrashLoop:
		return "pods of the hosted cluster in CrashLoopBackOff"
	case RuleManagementProxyLint:
		return "the management cluster's Proxy/cluster noProxy lacking entries OpenShift does not add"
	}
	return ""
}

// maxEvidencePerKind bounds the evidence lines of one kind in a diagnosis.
const maxEvidencePerKind = 10

// sentence ends s with a full stop unless it ends with punctuation.
func sentence(s string) string {
	if s == "" || strings.ContainsAny(s[len(s)-1:], ".!?…") {
		return s
	}
	return s + "."
}
