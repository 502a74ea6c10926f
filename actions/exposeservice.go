package actions

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/hcpbot/hcpbot/hypershift"
)

// appService reads the hosted Service to expose.
func appService(ctx context.Context, hosted kubernetes.Interface, p *ExposeParams) (*corev1.Service, error) {
	app, err := hosted.CoreV1().Services(p.Namespace).Get(ctx, p.Service, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%w: hosted Service %s/%s not found", ErrInvalid, p.Namespace, p.Service)
		}
		return nil, fmt.Errorf("get hosted Service %s/%s: %w", p.Namespace, p.Service, err)
	}
	return app, nil
}

// forwardedService is the app's own NodePort Service restricted to the
// wanted ports: their node ports are forwarded as they are. Chosen node
// ports must be the ones it has.
func forwardedService(app *corev1.Service, p *ExposeParams) (*corev1.Service, error) {
	ports, err := selectPorts(app, p)
	if err != nil {
		return nil, err
	}
	out := app.DeepCopy()
	out.Spec.Ports = out.Spec.Ports[:0]
	for _, sp := range ports {
		i := slices.IndexFunc(app.Spec.Ports, func(ap corev1.ServicePort) bool { return ap.Port == sp.Port && ap.Protocol == sp.Protocol })
		have := app.Spec.Ports[i]
		switch {
		case have.NodePort == 0:
			return nil, fmt.Errorf("%w: hosted Service %s/%s is of type NodePort but port %d has no node port yet", ErrInvalid, app.Namespace, app.Name, have.Port)
		case sp.NodePort != 0 && sp.NodePort != have.NodePort:
			return nil, fmt.Errorf("%w: hosted Service %s/%s already is of type NodePort, with node port %d for port %d; its node ports are forwarded as they are, so node port %d cannot be chosen (expose it without node ports, or change the Service's)",
				ErrInvalid, app.Namespace, app.Name, have.NodePort, have.Port, sp.NodePort)
		}
		out.Spec.Ports = append(out.Spec.Ports, have)
	}
	return out, nil
}

// copyPorts are the ports of the NodePort copy of app that Expose
// creates in the hosted cluster.
func copyPorts(app *corev1.Service, p *ExposeParams) ([]corev1.ServicePort, error) {
	if len(app.Spec.Selector) == 0 {
		// Without a selector the Service's endpoints are managed by
		// hand; a copy would select nothing.
		return nil, fmt.Errorf("%w: hosted Service %s/%s has no selector", ErrInvalid, p.Namespace, p.Service)
	}
	return selectPorts(app, p)
}

// selectPorts copies the wanted ports of app, asking for the requested
// node ports and leaving the rest to the API server.
func selectPorts(app *corev1.Service, p *ExposeParams) ([]corev1.ServicePort, error) {
	var out []corev1.ServicePort
	if len(p.Ports) == 0 {
		if len(p.NodePorts) > len(app.Spec.Ports) {
			return nil, fmt.Errorf("%w: %d node ports chosen but hosted Service %s/%s has %d ports", ErrInvalid, len(p.NodePorts), app.Namespace, app.Name, len(app.Spec.Ports))
		}
		for i, sp := range app.Spec.Ports {
			var np int32
			if i < len(p.NodePorts) {
				np = p.NodePorts[i]
			}
			out = append(out, nodePortOf(sp, np))
		}
		return out, nil
	}
	for _, w := range p.Ports {
		i := slices.IndexFunc(app.Spec.Ports, func(sp corev1.ServicePort) bool { return sp.Port == w.Port })
		if i < 0 {
			return nil, fmt.Errorf("%w: hosted Service %s/%s has no port %d", ErrInvalid, app.Namespace, app.Name, w.Port)
		}
		out = append(out, nodePortOf(app.Spec.Ports[i], w.NodePort))
	}
	return out, nil
}

func nodePortOf(sp corev1.ServicePort, nodePort int32) corev1.ServicePort {
	return corev1.ServicePort{Name: sp.Name, Protocol: sp.Protocol, Port: sp.Port, TargetPort: sp.TargetPort, NodePort: nodePort}
}

func objectMeta(req Change, namespace, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Namespace: namespace,
		Name:      name,
		Labels:    map[string]string{LabelManagedBy: ManagedBy, LabelActionID: req.ID},
		Annotations: map[string]string{
			AnnotationRequestedBy: req.RequestedBy,
			AnnotationCluster:     req.Cluster.String(),
		},
	}
}

// managementService forwards node port N of the management nodes to port N
// of the virt-launcher pods, where the hosted NodePort Service listens.
func managementService(req Change, hc *hypershift.HostedCluster, cpNS string, hosted *corev1.Service) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: objectMeta(req, cpNS, ManagementServiceName(req.ID)),
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeNodePort,
			Selector: map[string]string{
				hypershift.LabelClusterName: hc.Spec.InfraID,
				hypershift.LabelKubeVirt:    hypershift.VirtLauncher,
			},
		},
	}
	svc.Annotations[AnnotationSource] = hosted.Namespace + "/" + hosted.Name
	for _, hp := range hosted.Spec.Ports {
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{
			Name: hp.Name, Protocol: hp.Protocol,
			Port: hp.NodePort, TargetPort: intstr.FromInt32(hp.NodePort), NodePort: hp.NodePort,
		})
	}
	return svc
}

// portsMatch: every hosted node port is forwarded unchanged.
func portsMatch(hosted, mgmt *corev1.Service) bool {
	if len(hosted.Spec.Ports) != len(mgmt.Spec.Ports) {
		return false
	}
	for i, hp := range hosted.Spec.Ports {
		mp := mgmt.Spec.Ports[i]
		if hp.NodePort == 0 || mp.NodePort != hp.NodePort || mp.TargetPort.IntValue() != int(hp.NodePort) {
			return false
		}
	}
	return true
}

func exposedPorts(svc *corev1.Service) []ExposedPort {
	out := make([]ExposedPort, 0, len(svc.Spec.Ports))
	for _, sp := range svc.Spec.Ports {
		out = append(out, ExposedPort{Name: sp.Name, Protocol: string(sp.Protocol), Port: sp.Port, NodePort: sp.NodePort})
	}
	return out
}
