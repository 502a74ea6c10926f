package actions

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/hcpbot/hcpbot/hypershift"
)

// usageOrEmpty is u, or no ports in use when none were listed: for
// reading a refusal that names no node port.
func usageOrEmpty(u *portUsage) *portUsage {
	if u == nil {
		return &portUsage{}
	}
	return u
}

// managementCreateError turns the API server's refusal of node ports
// ("provided port is already allocated", "not in the valid range") into a
// *PortCollisionError naming the ports, with free alternatives.
func managementCreateError(err error, hosted *corev1.Service, usage *portUsage) error {
	if pc := nodePortRefusal(err, hosted, usage, ClusterManagement); pc != nil {
		return pc
	}
	if apierrors.IsInvalid(err) || apierrors.IsForbidden(err) {
		// Forbidden: RBAC refused the identity the write runs as (As), or
		// an admission policy refused the Service; its message says which.
		return fmt.Errorf("%w: management cluster: %w", ErrRejected, err)
	}
	if apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("%w: management Service %s exists without the action's labels: %w", ErrConflict, hosted.Name, err)
	}
	return fmt.Errorf("create management Service: %w", err)
}

// nodePortRefusal is the *PortCollisionError for an API server's refusal
// of the node ports of svc in cluster, or nil when err is not one. A range
// the refusal names replaces the one checked before: it is that server's.
func nodePortRefusal(err error, svc *corev1.Service, usage *portUsage, cluster string) *PortCollisionError {
	var status apierrors.APIStatus
	if !apierrors.IsInvalid(err) || !errors.As(err, &status) || status.Status().Details == nil {
		return nil
	}
	var problems []PortProblem
	u := *usage
	for _, c := range status.Status().Details.Causes {
		m := nodePortField.FindStringSubmatch(c.Field)
		if m == nil {
			continue
		}
		i, _ := strconv.Atoi(m[1])
		if i >= len(svc.Spec.Ports) {
			continue
		}
		n := svc.Spec.Ports[i].NodePort
		switch {
		case strings.Contains(c.Message, "provided port is already allocated") && cluster == ClusterHosted:
			problems = append(problems, PortProblem{NodePort: n, Reason: PortAllocatedHosted, Holder: usage.hosted[n]})
		case strings.Contains(c.Message, "provided port is already allocated"):
			problems = append(problems, PortProblem{NodePort: n, Reason: PortAllocated, Holder: usage.mgmt[n]})
		case strings.Contains(c.Message, "not in the valid range"):
			if r := validRange.FindStringSubmatch(c.Message); r != nil {
				lo, _ := strconv.ParseInt(r[1], 10, 32)
				hi, _ := strconv.ParseInt(r[2], 10, 32)
				if pr := (PortRange{Min: int32(lo), Max: int32(hi)}); pr.valid() {
					u.rng = pr
				}
			}
			problems = append(problems, PortProblem{NodePort: n, Reason: PortOutOfRange})
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return u.collision(problems, svc, err)
}

// portUsage is what the node-port checks read: the range and the node ports
// every Service (but the action's own) allocates in each cluster.
type portUsage struct {
	rng    PortRange
	mgmt   map[int32]string // node port → namespace/name of its Service
	hosted map[int32]string
}

func (x *Executor) portUsage(ctx context.Context, hosted kubernetes.Interface, id string) (*portUsage, error) {
	u := &portUsage{rng: x.nodePortRange()}
	var err error
	if u.mgmt, err = nodePortsInUse(ctx, x.Kube, id); err != nil {
		return nil, fmt.Errorf("list management Services: %w", err)
	}
	if u.hosted, err = nodePortsInUse(ctx, hosted, id); err != nil {
		return nil, fmt.Errorf("list hosted Services: %w", err)
	}
	return u, nil
}

// nodePortsInUse lists the node ports the Services of a cluster allocate,
// but those of action id.
func nodePortsInUse(ctx context.Context, kc kubernetes.Interface, id string) (map[int32]string, error) {
	list, err := kc.CoreV1().Services(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	used := map[int32]string{}
	for _, s := range list.Items {
		if s.Labels[LabelManagedBy] == ManagedBy && s.Labels[LabelActionID] == id {
			continue
		}
		for _, sp := range s.Spec.Ports {
			if sp.NodePort != 0 {
				used[sp.NodePort] = s.Namespace + "/" + s.Name
			}
		}
	}
	return used, nil
}

// checkPorts refuses, before any write, the node ports of svc that are out
// of range or allocated in the management cluster (and, with hosted, in
// the hosted cluster), then asks the management API server in a dry run
// whether it would allocate them; ports still 0 are not checked.
//
// Acting as the approver (As), the dry run is made whatever the ports:
// the hosted write that follows uses the agent's own admin kubeconfig,
// so the approver's right to the management Service is tried first, and
// an approver who lost it gets nothing written in either cluster.
func (x *Executor) checkPorts(ctx context.Context, u *portUsage, req Change, hc *hypershift.HostedCluster, cpNS string, svc *corev1.Service, hosted bool) error {
	want := svc.DeepCopy()
	want.Spec.Ports = slices.DeleteFunc(want.Spec.Ports, func(sp corev1.ServicePort) bool { return sp.NodePort == 0 })
	if len(want.Spec.Ports) == 0 {
		if x.writer == nil || !hosted {
			return nil
		}
		// The ports the hosted API server will allocate are not known
		// yet: the dry run asks for the app's ports, its node ports
		// allocated (and released) by the management API server.
		dry := managementService(req, hc, cpNS, svc)
		for i := range dry.Spec.Ports {
			dry.Spec.Ports[i].Port = svc.Spec.Ports[i].Port
			dry.Spec.Ports[i].TargetPort = intstr.FromInt32(svc.Spec.Ports[i].Port)
		}
		if _, err := x.writeKube().CoreV1().Services(cpNS).Create(ctx, dry, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldManager: fieldManager}); err != nil {
			return managementCreateError(err, svc, u)
		}
		return nil
	}
	if problems := u.problems(want, hosted); len(problems) > 0 {
		return u.collision(problems, want, nil)
	}
	dry := managementService(req, hc, cpNS, want)
	if _, err := x.writeKube().CoreV1().Services(cpNS).Create(ctx, dry, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldManager: fieldManager}); err != nil {
		return managementCreateError(err, want, u)
	}
	return nil
}

// problems are the node ports of svc (all set) that are out of range or
// allocated in the management cluster (and, with hosted, in the hosted
// cluster), the holder named: the reads of checkPorts, without its dry
// run, so that Preflight asks the same before anyone approves.
func (u *portUsage) problems(svc *corev1.Service, hosted bool) []PortProblem {
	var problems []PortProblem
	for _, sp := range svc.Spec.Ports {
		n := sp.NodePort
		if !u.rng.Contains(n) {
			problems = append(problems, PortProblem{NodePort: n, Reason: PortOutOfRange})
		} else if holder, ok := u.mgmt[n]; ok {
			problems = append(problems, PortProblem{NodePort: n, Reason: PortAllocated, Holder: holder})
		} else if holder, ok := u.hosted[n]; ok && hosted {
			problems = append(problems, PortProblem{NodePort: n, Reason: PortAllocatedHosted, Holder: holder})
		}
	}
	return problems
}

// collision is the error for problems among the node ports of svc, with
// the free node ports nearest to each refused one: free in both clusters,
// inside the range, and none of the ports svc keeps.
func (u portUsage) collision(problems []PortProblem, svc *corev1.Service, err error) *PortCollisionError {
	taken := map[int32]bool{}
	for n := range u.mgmt {
		taken[n] = true
	}
	for n := range u.hosted {
		taken[n] = true
	}
	for _, sp := range svc.Spec.Ports {
		taken[sp.NodePort] = true
	}
	var alts []int32
	for _, p := range problems {
		if a, ok := nearestFree(u.rng, p.NodePort, taken); ok {
			taken[a] = true
			alts = append(alts, a)
		}
	}
	return &PortCollisionError{NodePort: problems[0].NodePort, PortCollision: PortCollision{Ports: problems, Range: u.rng, Alternatives: alts}, Err: err}
}

// nearestFree is the port of r closest to n (the higher one on a tie) that
// is not taken.
func nearestFree(r PortRange, n int32, taken map[int32]bool) (int32, bool) {
	c := min(max(n, r.Min), r.Max)
	for d := int32(0); d <= r.Max-r.Min; d++ {
		for _, a := range []int32{c + d, c - d} {
			if r.Contains(a) && !taken[a] {
				return a, true
			}
		}
	}
	return 0, false
}
