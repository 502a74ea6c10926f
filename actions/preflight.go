package actions

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Preflight is what can be known of an exposure before anyone approves
// it: whether the node ports it would forward are usable now. Execution
// checks them again (Expose): a port taken in between is refused there.
type Preflight struct {
	// Collision names the node ports the exposure would be refused for
	// now (outside the range, or allocated, with the Service holding
	// each) and the nearest free ones; nil when every known port is free.
	Collision *PortCollision `json:"collision,omitempty"`
	// Free are the node ports checked and found usable.
	Free []int32 `json:"free,omitempty"`
	// Allocated counts the ports whose node port the hosted API server
	// allocates when the exposure runs: they are checked only then.
	Allocated int `json:"allocated,omitempty"`
}

// Preflight answers, reading only, whether the exposure ch would be
// refused for its node ports if it ran now: the reads of Expose up to its
// first write (the HostedCluster, the app's hosted Service, the node
// ports every Service of both clusters allocates), none of its writes or
// dry runs. The ports checked are the ones Expose would forward: the
// app's own when its Service is of type NodePort, else the ones ch
// chooses.
//
// A change Expose would refuse whatever the ports is an error wrapping
// ErrInvalid (the hosted Service is missing, has no selector or lacks a
// port) or ErrNotKubeVirt; any other error (the cluster could not be
// read) says nothing about the change.
func (x *Executor) Preflight(ctx context.Context, ch Change) (*Preflight, error) {
	if ch.Type != TypeExposeNodePort {
		return nil, fmt.Errorf("%w: a preflight is for exposures, not %q", ErrInvalid, ch.Type)
	}
	if _, err := check(ch); err != nil {
		return nil, err
	}
	p := ch.Expose
	_, hosted, err := x.kubevirtCluster(ctx, ch.Cluster)
	if err != nil {
		return nil, err
	}
	app, err := appService(ctx, hosted, p)
	if err != nil {
		return nil, err
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: HostedServiceName(p.Service)}}
	forward := app.Spec.Type == corev1.ServiceTypeNodePort
	if forward {
		if svc, err = forwardedService(app, p); err != nil {
			return nil, err
		}
	} else if svc.Spec.Ports, err = copyPorts(app, p); err != nil {
		return nil, err
	}
	usage, err := x.portUsage(ctx, hosted, ch.ID)
	if err != nil {
		return nil, err
	}
	known := svc.DeepCopy()
	known.Spec.Ports = slices.DeleteFunc(known.Spec.Ports, func(sp corev1.ServicePort) bool { return sp.NodePort == 0 })
	pf := &Preflight{Allocated: len(svc.Spec.Ports) - len(known.Spec.Ports)}
	// As Expose checks them: chosen node ports against both clusters,
	// the app's own only against the management cluster (the hosted one
	// allocates them to the app).
	if problems := usage.problems(known, !forward); len(problems) > 0 {
		pc := usage.collision(problems, known, nil)
		pc.Forwarded = forward
		pf.Collision = &pc.PortCollision
		return pf, nil
	}
	for _, sp := range known.Spec.Ports {
		pf.Free = append(pf.Free, sp.NodePort)
	}
	return pf, nil
}
