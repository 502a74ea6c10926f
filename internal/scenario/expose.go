package scenario

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Seed004NodePorts are the node ports of the runbook's petclinic NodePort
// Service in the hosted cluster, for its ports 8080, 8443 and 8778.
var Seed004NodePorts = []int32{30001, 30002, 30003}

// SetNodePorts makes Service namespace/name of type NodePort, its i-th
// port on nodePorts[i] (seed 004's first step, done by hand in the runbook).
func SetNodePorts(ctx context.Context, kc kubernetes.Interface, namespace, name string, nodePorts []int32) error {
	svc, err := kc.CoreV1().Services(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if len(nodePorts) > len(svc.Spec.Ports) {
		return fmt.Errorf("Service %s/%s has %d ports, not %d", namespace, name, len(svc.Spec.Ports), len(nodePorts))
	}
	svc.Spec.Type = corev1.ServiceTypeNodePort
	for i, n := range nodePorts {
		svc.Spec.Ports[i].NodePort = n
	}
	_, err = kc.CoreV1().Services(namespace).Update(ctx, svc, metav1.UpdateOptions{})
	return err
}

// ServiceVersions maps every Service of a cluster (namespace/name) to its
// resourceVersion, but the API server's own default/kubernetes: equal
// maps mean nothing was created, changed or deleted in between.
func ServiceVersions(ctx context.Context, kc kubernetes.Interface) (map[string]string, error) {
	list, err := kc.CoreV1().Services(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, s := range list.Items {
		if s.Namespace == metav1.NamespaceDefault && s.Name == "kubernetes" {
			// The API server's own, created by its bootstrap controller
			// some time after it is ready: it may appear between two
			// looks, and nothing of hcpbot ever touches it.
			continue
		}
		out[s.Namespace+"/"+s.Name] = s.ResourceVersion
	}
	return out, nil
}
