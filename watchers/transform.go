package watchers

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Informer transforms keep in the caches only what the facts read: a hosted
// cluster can have thousands of Nodes, and full Node objects (images,
// managedFields, capacity) cost tens of KB each.

func slimMeta(m metav1.ObjectMeta) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion,
		Generation: m.Generation, Labels: m.Labels, DeletionTimestamp: m.DeletionTimestamp,
	}
}

func transformNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	// Unschedulable: a cordoned Ready node is no available worker to
	// HyperShift (nodesummary.go).
	out := &corev1.Node{ObjectMeta: slimMeta(n.ObjectMeta), Spec: corev1.NodeSpec{ProviderID: n.Spec.ProviderID, Unschedulable: n.Spec.Unschedulable}}
	out.Labels = nil
	// A node without status is "joining" for a grace after its creation.
	out.CreationTimestamp = n.CreationTimestamp
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			c.LastHeartbeatTime = metav1.Time{} // changes every few seconds; not part of any fact
			out.Status.Conditions = []corev1.NodeCondition{c}
		}
	}
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			out.Status.Addresses = []corev1.NodeAddress{a}
			break
		}
	}
	return out, nil
}

func transformPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	out := &corev1.Pod{ObjectMeta: slimMeta(p.ObjectMeta)}
	out.Spec.NodeName = p.Spec.NodeName
	for _, c := range p.Spec.Containers {
		out.Spec.Containers = append(out.Spec.Containers, corev1.Container{Name: c.Name})
	}
	out.Status = corev1.PodStatus{Phase: p.Status.Phase, PodIP: p.Status.PodIP}
	for _, cs := range p.Status.ContainerStatuses {
		out.Status.ContainerStatuses = append(out.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: cs.Name, Ready: cs.Ready, RestartCount: cs.RestartCount,
			State: cs.State, LastTerminationState: cs.LastTerminationState,
		})
	}
	return out, nil
}

func transformUnstructured(obj any) (any, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		u.SetManagedFields(nil)
		u.SetAnnotations(nil)
	}
	return obj, nil
}
