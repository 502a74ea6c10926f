package scenario

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/hcpbot/hcpbot/hypershift"
)

// SeedConnectivityMessage is the service-ca-operator's last log line from seed
// 000, as it lands in lastState.terminated.message (FallbackToLogsOnError).
const SeedConnectivityMessage = "F0603 19:38:28.981007       1 cmd.go:162] failed checking apiserver connectivity: client rate limiter Wait returned an error: context deadline exceeded - error from a previous attempt: read tcp 172.40.0.7:40588->172.50.0.1:443: read: connection reset by peer"

// Cluster describes a HostedCluster to create. Zero fields take the defaults
// HyperShift itself applies (networks) or the seed's values.
type Cluster struct {
	Namespace, Name string
	InfraID         string
	Platform        string // default KubeVirt
	ServiceCIDR     string // default from the CRD: 172.31.0.0/16
	ClusterCIDR     string // default from the CRD: 10.132.0.0/14
	HTTPProxy       string
	HTTPSProxy      string
	NoProxy         string
	TrustedCA       string
	// Services is spec.services (immutable in HyperShift: set at
	// creation); none when empty.
	Services []Service
}

// Service is one entry of spec.services: how a control-plane service
// (hypershift.ServiceKonnectivity, ...) is published. Type Route and
// LoadBalancer take Hostname, NodePort takes Address and Port.
type Service struct {
	Service, Type     string
	Hostname, Address string
	Port              int32
}

func (s Service) object() map[string]any {
	strategy := map[string]any{"type": s.Type}
	switch s.Type {
	case hypershift.PublishRoute, hypershift.PublishLoadBalancer:
		if s.Hostname != "" {
			key := "route"
			if s.Type == hypershift.PublishLoadBalancer {
				key = "loadBalancer"
			}
			strategy[key] = map[string]any{"hostname": s.Hostname}
		}
	case hypershift.PublishNodePort:
		np := map[string]any{"address": s.Address}
		if s.Port > 0 {
			np["port"] = int64(s.Port)
		}
		strategy["nodePort"] = np
	}
	return map[string]any{"service": s.Service, "servicePublishingStrategy": strategy}
}

// SeedNoProxy is the seed 000 noProxy without `kubernetes`: a domain and the
// machine network. It must not hold the service or cluster CIDR either, since
// HyperShift bypasses the proxy for an entry equal to one of those.
const SeedNoProxy = ".corp.example,192.168.201.0/24"

// BehindProxy is the seed 000 cluster: KubeVirt, both proxies set, and a
// noProxy that makes HyperShift tunnel API traffic through the proxy.
func BehindProxy(namespace, name string) Cluster {
	return Cluster{
		Namespace:  namespace,
		Name:       name,
		InfraID:    name + "-sffhb",
		Platform:   hypershift.PlatformKubeVirt,
		HTTPProxy:  "http://proxy.corp.example:3128",
		HTTPSProxy: "http://proxy.corp.example:3128",
		NoProxy:    SeedNoProxy,
		TrustedCA:  "user-ca-bundle",
	}
}

// Healthy is a KubeVirt cluster without a proxy.
func Healthy(namespace, name string) Cluster {
	return Cluster{Namespace: namespace, Name: name, InfraID: name + "-x7k2p", Platform: hypershift.PlatformKubeVirt}
}

// KubeconfigSecretName is the admin kubeconfig Secret HyperShift creates.
func (c Cluster) KubeconfigSecretName() string { return c.Name + "-admin-kubeconfig" }

// Object renders the HostedCluster as the dynamic client sends it.
func (c Cluster) Object() *unstructured.Unstructured {
	platform := c.Platform
	if platform == "" {
		platform = hypershift.PlatformKubeVirt
	}
	spec := map[string]any{
		"infraID":  c.InfraID,
		"platform": map[string]any{"type": platform},
	}
	networking := map[string]any{}
	if c.ServiceCIDR != "" {
		networking["serviceNetwork"] = []any{map[string]any{"cidr": c.ServiceCIDR}}
	}
	if c.ClusterCIDR != "" {
		networking["clusterNetwork"] = []any{map[string]any{"cidr": c.ClusterCIDR}}
	}
	spec["networking"] = networking
	if len(c.Services) > 0 {
		var services []any
		for _, s := range c.Services {
			services = append(services, s.object())
		}
		spec["services"] = services
	}
	if c.HTTPProxy != "" || c.HTTPSProxy != "" || c.NoProxy != "" {
		proxy := map[string]any{}
		for k, v := range map[string]string{"httpProxy": c.HTTPProxy, "httpsProxy": c.HTTPSProxy, "noProxy": c.NoProxy} {
			if v != "" {
				proxy[k] = v
			}
		}
		if c.TrustedCA != "" {
			proxy["trustedCA"] = map[string]any{"name": c.TrustedCA}
		}
		spec["configuration"] = map[string]any{"proxy": proxy}
	}
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetAPIVersion("hypershift.openshift.io/v1beta1")
	u.SetKind("HostedCluster")
	u.SetNamespace(c.Namespace)
	u.SetName(c.Name)
	return u
}

// Create makes the HostedCluster the way HyperShift leaves it once its control
// plane is up: the namespace, the control-plane namespace, the admin
// kubeconfig Secret (holding kubeconfig, which points at a real API server),
// and a status naming that Secret.
func Create(ctx context.Context, kc kubernetes.Interface, dc dynamic.Interface, c Cluster, kubeconfig []byte) (*hypershift.HostedCluster, error) {
	cpNS := hypershift.ControlPlaneNamespace(c.Namespace, c.Name)
	if err := ensureNamespace(ctx, kc, c.Namespace, nil); err != nil {
		return nil, err
	}
	if err := ensureNamespace(ctx, kc, cpNS, map[string]string{hypershift.LabelHostedControlPlane: "true"}); err != nil {
		return nil, err
	}
	if c.TrustedCA != "" {
		// The proxy's CA bundle exists where HyperShift looks for it, as in
		// seed 000, unless the test made its own.
		if _, err := kc.CoreV1().ConfigMaps(c.Namespace).Get(ctx, c.TrustedCA, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			if err := SetTrustedCA(ctx, kc, c.Namespace, c.TrustedCA, "Corp Root CA", time.Now().Add(5*365*24*time.Hour)); err != nil {
				return nil, err
			}
		} else if err != nil {
			return nil, err
		}
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: c.KubeconfigSecretName()},
		Data:       map[string][]byte{hypershift.KubeconfigKey: kubeconfig},
	}
	if _, err := kc.CoreV1().Secrets(c.Namespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("create kubeconfig secret: %w", err)
	}
	created, err := dc.Resource(hypershift.HostedClusterGVR).Namespace(c.Namespace).Create(ctx, c.Object(), metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create HostedCluster %s/%s: %w", c.Namespace, c.Name, err)
	}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	status := map[string]any{
		"kubeconfig":           map[string]any{"name": c.KubeconfigSecretName()},
		"controlPlaneEndpoint": map[string]any{"host": "api." + c.Name + ".hcp.example", "port": int64(6443)},
		"conditions": []any{
			condition("Available", "True", "AsExpected", "The hosted control plane is available", now),
			condition("Degraded", "False", "AsExpected", "", now),
		},
	}
	if err := unstructured.SetNestedField(created.Object, status, "status"); err != nil {
		return nil, err
	}
	updated, err := dc.Resource(hypershift.HostedClusterGVR).Namespace(c.Namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("set HostedCluster status: %w", err)
	}
	return hypershift.FromUnstructured[hypershift.HostedCluster](updated)
}

func condition(typ, status, reason, message string, at metav1.Time) map[string]any {
	return map[string]any{"type": typ, "status": status, "reason": reason, "message": message, "lastTransitionTime": at.UTC().Format(time.RFC3339)}
}

func ensureNamespace(ctx context.Context, kc kubernetes.Interface, name string, labels map[string]string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	_, err := kc.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	return nil
}

// SetNoProxy edits spec.configuration.proxy.noProxy, as a person would.
func SetNoProxy(ctx context.Context, dc dynamic.Interface, namespace, name, noProxy string) error {
	ri := dc.Resource(hypershift.HostedClusterGVR).Namespace(namespace)
	u, err := ri.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if err := unstructured.SetNestedField(u.Object, noProxy, "spec", "configuration", "proxy", "noProxy"); err != nil {
		return err
	}
	_, err = ri.Update(ctx, u, metav1.UpdateOptions{})
	return err
}

// SetStatus sets status.ignitionEndpoint (unless "") and the conditions
// of a HostedCluster the way HyperShift's reconciler writes them.
func SetStatus(ctx context.Context, dc dynamic.Interface, namespace, name, ignitionEndpoint string, conds ...Condition) error {
	if ignitionEndpoint != "" {
		if err := SetHostedClusterStatusField(ctx, dc, namespace, name, "ignitionEndpoint", ignitionEndpoint); err != nil {
			return err
		}
	}
	return SetHostedClusterConditions(ctx, dc, namespace, name, conds...)
}

// Rollout is one entry of a HostedCluster's status.version.history.
type Rollout struct {
	Version string
	State   string // hypershift.UpdateStateCompleted or UpdateStatePartial
}

// SetVersion writes status.version the way HyperShift does: desired is the
// release being rolled out, history the rollouts newest first (a Partial
// one has no completionTime yet).
func SetVersion(ctx context.Context, dc dynamic.Interface, namespace, name, desired string, history ...Rollout) error {
	ri := dc.Resource(hypershift.HostedClusterGVR).Namespace(namespace)
	u, err := ri.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	image := func(v string) string { return "quay.io/openshift-release-dev/ocp-release:" + v + "-x86_64" }
	started := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	var hist []any
	for i, r := range history {
		// Newest first: each older rollout started an hour before the next.
		at := started.Add(-time.Duration(i) * time.Hour)
		var completed any
		if r.State == hypershift.UpdateStateCompleted {
			completed = at.Add(40 * time.Minute).Format(time.RFC3339)
		}
		hist = append(hist, map[string]any{
			"state": r.State, "version": r.Version, "image": image(r.Version), "verified": false,
			"startedTime": at.Format(time.RFC3339), "completionTime": completed,
		})
	}
	version := map[string]any{
		"desired":            map[string]any{"version": desired, "image": image(desired)},
		"observedGeneration": u.GetGeneration(),
	}
	if len(hist) > 0 {
		version["history"] = hist
	}
	if err := unstructured.SetNestedField(u.Object, version, "status", "version"); err != nil {
		return err
	}
	_, err = ri.UpdateStatus(ctx, u, metav1.UpdateOptions{})
	return err
}

// NodePool creates a NodePool of the cluster and sets its conditions.
func NodePool(ctx context.Context, dc dynamic.Interface, c Cluster, name string, replicas int64, healthy bool) error {
	u := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{
			"clusterName": c.Name,
			"replicas":    replicas,
			"platform":    map[string]any{"type": hypershift.PlatformKubeVirt},
		},
	}}
	u.SetAPIVersion("hypershift.openshift.io/v1beta1")
	u.SetKind("NodePool")
	u.SetNamespace(c.Namespace)
	u.SetName(name)
	ri := dc.Resource(hypershift.NodePoolGVR).Namespace(c.Namespace)
	created, err := ri.Create(ctx, u, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create NodePool: %w", err)
	}
	return SetNodePoolHealth(ctx, dc, c.Namespace, created.GetName(), healthy)
}

// SetNodePoolHealth sets Ready, AllNodesHealthy and AllMachinesReady.
func SetNodePoolHealth(ctx context.Context, dc dynamic.Interface, namespace, name string, healthy bool) error {
	ri := dc.Resource(hypershift.NodePoolGVR).Namespace(namespace)
	u, err := ri.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	status, reason, msg := "True", "AsExpected", ""
	if !healthy {
		status, reason, msg = "False", "NodeConditionsFailed", "Machine "+name+"-x: NodeConditionsFailed: Node is not ready"
	}
	conds := []any{
		condition("Ready", "True", "AsExpected", "", now),
		condition("AllMachinesReady", "True", "AsExpected", "", now),
		condition("AllNodesHealthy", status, reason, msg, now),
	}
	if err := unstructured.SetNestedSlice(u.Object, conds, "status", "conditions"); err != nil {
		return err
	}
	_, err = ri.UpdateStatus(ctx, u, metav1.UpdateOptions{})
	return err
}

// Nodes creates n hosted Nodes named <prefix>-<i> (KubeVirt: node name = VMI
// name, providerID kubevirt://<name>), all Ready.
func Nodes(ctx context.Context, kc kubernetes.Interface, prefix string, n int) ([]string, error) {
	names := make([]string, 0, n)
	for i := range n {
		name := fmt.Sprintf("%s-%d", prefix, i)
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"node-role.kubernetes.io/worker": ""}},
			Spec:       corev1.NodeSpec{ProviderID: "kubevirt://" + name},
		}
		if _, err := kc.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("create node %s: %w", name, err)
		}
		if err := SetNodeReady(ctx, kc, name, corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"); err != nil {
			return nil, err
		}
		names = append(names, name)
	}
	return names, nil
}

// SetNodeReady sets the Ready condition, as the kubelet or the node lifecycle
// controller would (NotReady: False; lost contact: Unknown).
func SetNodeReady(ctx context.Context, kc kubernetes.Interface, name string, status corev1.ConditionStatus, reason, message string) error {
	node, err := kc.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	now := metav1.Now()
	ready := corev1.NodeCondition{Type: corev1.NodeReady, Status: status, Reason: reason, Message: message, LastHeartbeatTime: now, LastTransitionTime: now}
	replaced := false
	for i, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			if c.Status == status {
				ready.LastTransitionTime = c.LastTransitionTime
			}
			node.Status.Conditions[i] = ready
			replaced = true
		}
	}
	if !replaced {
		node.Status.Conditions = append(node.Status.Conditions, ready)
	}
	if len(node.Status.Addresses) == 0 {
		node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: nodeIP(name)}}
	}
	_, err = kc.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
	return err
}

// nodeIP invents a stable pod-network address for a node: data only.
func nodeIP(name string) string {
	var h uint32
	for _, b := range []byte(name) {
		h = h*31 + uint32(b)
	}
	return fmt.Sprintf("10.131.%d.%d", (h>>8)%250, h%250+2)
}

// Service-ca-operator names, from openshift/service-ca-operator manifests.
const (
	ServiceCANamespace = "openshift-service-ca-operator"
	ServiceCAName      = "service-ca-operator"
)

// ServiceCAOperator creates the operator pod, running.
func ServiceCAOperator(ctx context.Context, kc kubernetes.Interface, node string) (*corev1.Pod, error) {
	if err := ensureNamespace(ctx, kc, ServiceCANamespace, nil); err != nil {
		return nil, err
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ServiceCANamespace, Name: ServiceCAName + "-5d4b8c7f9-abcde",
			Labels: map[string]string{"app": ServiceCAName},
		},
		Spec: corev1.PodSpec{
			NodeName: node,
			Containers: []corev1.Container{{
				Name: ServiceCAName, Image: "quay.io/openshift/origin-service-ca-operator:latest",
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
			}},
		},
	}
	created, err := kc.CoreV1().Pods(ServiceCANamespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create service-ca-operator pod: %w", err)
	}
	created.Status = corev1.PodStatus{
		Phase: corev1.PodRunning,
		ContainerStatuses: []corev1.ContainerStatus{{
			Name: ServiceCAName, Ready: true, Image: pod.Spec.Containers[0].Image,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}},
		}},
	}
	return kc.CoreV1().Pods(ServiceCANamespace).UpdateStatus(ctx, created, metav1.UpdateOptions{})
}

// CrashLoop puts a pod's first container into CrashLoopBackOff with the given
// last termination (exit code 255: klog.Fatal).
func CrashLoop(ctx context.Context, kc kubernetes.Interface, namespace, name string, restarts int32, message string) error {
	pod, err := kc.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	now := metav1.Now()
	pod.Status.Phase = corev1.PodRunning
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{
		Name: pod.Spec.Containers[0].Name, Image: pod.Spec.Containers[0].Image, RestartCount: restarts,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
			Reason:  "CrashLoopBackOff",
			Message: fmt.Sprintf("back-off 5m0s restarting failed container=%s pod=%s", pod.Spec.Containers[0].Name, name),
		}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 255, Reason: "Error", Message: message,
			StartedAt: metav1.NewTime(now.Add(-31 * time.Second)), FinishedAt: now,
		}},
	}}
	_, err = kc.CoreV1().Pods(namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	return err
}

// Recover marks a pod's containers running and ready again.
func Recover(ctx context.Context, kc kubernetes.Interface, namespace, name string) error {
	pod, err := kc.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for i := range pod.Status.ContainerStatuses {
		cs := &pod.Status.ContainerStatuses[i]
		cs.Ready = true
		cs.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}
	}
	_, err = kc.CoreV1().Pods(namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	return err
}

// Mode of the kube-apiserver-proxy static pod on a worker.
type Mode string

const (
	ModeHAProxy Mode = "haproxy"
	// ModeTunnel: a kubernetes-default-proxy container tunnels API traffic
	// through the HTTP proxy with CONNECT.
	ModeTunnel Mode = "tunnel"
)

// TunnelFailureMessage is what the tunnel container logs when CONNECT fails.
const TunnelFailureMessage = "failed to establish a connection through http connect: got unexpected statuscode 403 to CONNECT request"

// KubeAPIServerProxy creates the static (mirror) pod of a worker in kube-system,
// shaped like HyperShift renders it; in tunnel mode its proxy container has
// crashed with a CONNECT failure.
func KubeAPIServerProxy(ctx context.Context, kc kubernetes.Interface, node string, mode Mode) error {
	containers := []corev1.Container{{Name: "haproxy", Image: "registry.example/haproxy-router:latest"}}
	if mode == ModeTunnel {
		containers = []corev1.Container{{Name: "kubernetes-default-proxy", Image: "registry.example/hypershift:latest",
			Command: []string{"/usr/bin/control-plane-operator", "kubernetes-default-proxy"}}}
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "kube-system", Name: "kube-apiserver-proxy-" + node,
			Labels: map[string]string{"k8s-app": "kube-apiserver-proxy"},
		},
		Spec: corev1.PodSpec{NodeName: node, HostNetwork: true, Containers: containers},
	}
	created, err := kc.CoreV1().Pods("kube-system").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create kube-apiserver-proxy pod: %w", err)
	}
	cs := corev1.ContainerStatus{Name: containers[0].Name, Image: containers[0].Image, Ready: true,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}
	if mode == ModeTunnel {
		cs.RestartCount = 3
		cs.LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 1, Reason: "Error", Message: TunnelFailureMessage, FinishedAt: metav1.Now()}}
	}
	created.Status = corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{cs}}
	_, err = kc.CoreV1().Pods("kube-system").UpdateStatus(ctx, created, metav1.UpdateOptions{})
	return err
}

// RerenderKubeAPIServerProxy is a rollout reaching node: the kubelet
// replaces the static pod with the newly rendered one, so its mirror pod
// is deleted and created again, in mode.
func RerenderKubeAPIServerProxy(ctx context.Context, kc kubernetes.Interface, node string, mode Mode) error {
	err := kc.CoreV1().Pods("kube-system").Delete(ctx, "kube-apiserver-proxy-"+node, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete kube-apiserver-proxy pod: %w", err)
	}
	return KubeAPIServerProxy(ctx, kc, node, mode)
}

// VirtLaunchers creates one virt-launcher pod per hosted node in the
// control-plane namespace of the management cluster, with KubeVirt's labels
// and the node's InternalIP as pod IP.
func VirtLaunchers(ctx context.Context, kc kubernetes.Interface, c Cluster, nodePool string, nodes []string) error {
	ns := hypershift.ControlPlaneNamespace(c.Namespace, c.Name)
	for _, node := range nodes {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: ns, Name: "virt-launcher-" + node + "-" + shortHash(node),
				Labels: map[string]string{
					hypershift.LabelKubeVirt:     hypershift.VirtLauncher,
					hypershift.LabelClusterName:  c.InfraID,
					hypershift.LabelInfraID:      c.InfraID,
					hypershift.LabelNodePoolName: nodePool,
					hypershift.LabelVMName:       node,
				},
			},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "compute", Image: "quay.io/kubevirt/virt-launcher:latest"}}},
		}
		created, err := kc.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create virt-launcher pod: %w", err)
		}
		ip := nodeIP(node)
		created.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}
		if _, err := kc.CoreV1().Pods(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			return err
		}
	}
	return nil
}

func shortHash(s string) string {
	const letters = "bcdfghjklmnpqrstvwxz2456789"
	var h uint32 = 2166136261
	for _, b := range []byte(s) {
		h = (h ^ uint32(b)) * 16777619
	}
	out := make([]byte, 5)
	for i := range out {
		out[i] = letters[h%uint32(len(letters))]
		h /= uint32(len(letters))
	}
	return string(out)
}
