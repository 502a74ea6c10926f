package actions

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/hcpbot/hcpbot/hypershift"
)

// Labels and annotations on every object an action creates.
const (
	LabelManagedBy        = "app.kubernetes.io/managed-by"
	ManagedBy             = "hcpbot"
	LabelActionID         = "hcpbot.io/action-id"
	AnnotationRequestedBy = "hcpbot.io/requested-by"
	AnnotationCluster     = "hcpbot.io/cluster"
	AnnotationSource      = "hcpbot.io/source-service"
)

// AnnotationAction marks an object the executor changed but did not
// create (a HostedCluster, Proxy/cluster) with the id of the action whose
// value it holds: a noProxy patch sets it to the patch's id, a rollback to
// the rollback's, in the same patch as the value. A re-run of the action
// (its result was never recorded: the agent died after the write, or the
// response was lost) recognises its own write by it.
const AnnotationAction = "hcpbot.io/action"

// maxEndpointNodes bounds the endpoint list: a few addresses are enough to
// reach the app, a 200-node management cluster would flood the chat.
const maxEndpointNodes = 5

// cleanupTimeout bounds the deletion of a half-made exposure; it runs even
// when the caller's context is already cancelled.
const cleanupTimeout = 30 * time.Second

// HostedServiceName is the name of the NodePort Service Expose creates in
// the hosted cluster for the Service svc.
func HostedServiceName(svc string) string { return trimName(svc, hostedSuffix) }

// hostedSuffix ends the name of every hosted Service an exposure creates.
const hostedSuffix = "-hcpbot-np"

// ManagementServiceName is the name of the NodePort Service Expose creates
// in the control-plane namespace: one per action, since several hosted
// Services of one cluster share that namespace.
func ManagementServiceName(actionID string) string { return "hcpbot-np-" + actionID }

// ownName reports whether name is one an exposure of action id gives its
// Service in cluster.
func ownName(cluster, name, id string) bool {
	if cluster == ClusterManagement {
		return name == ManagementServiceName(id)
	}
	return strings.HasSuffix(name, hostedSuffix)
}

func trimName(base, suffix string) string {
	if len(base)+len(suffix) > 63 {
		base = strings.TrimRight(base[:63-len(suffix)], "-")
	}
	return base + suffix
}

func actionSelector(id string) string {
	return labels.SelectorFromSet(labels.Set{LabelManagedBy: ManagedBy, LabelActionID: id}).String()
}

// Expose publishes a hosted Service through NodePorts (seed 004). Only
// KubeVirt clusters qualify (ErrNotKubeVirt).
//
// When the hosted Service already is of type NodePort, as in the runbook,
// its node ports are forwarded and nothing is created in the hosted
// cluster: one NodePort Service in the control-plane namespace selecting
// the cluster's virt-launcher pods, each port with port = targetPort =
// nodePort = the hosted node port. Otherwise a NodePort copy of the hosted
// Service is created first, on the node ports the request chooses (the
// rest allocated by the hosted API server), and then forwarded the same way.
//
// Before any write the node ports are checked: inside the node-port range
// (Executor.NodePortRange), not allocated by any Service of the management
// cluster (nor, for chosen ones, of the hosted cluster), and accepted by a
// server-side dry run of the management Service. A refused port returns a
// *PortCollisionError naming it and the nearest free ports, with nothing
// written; only a node port the hosted API server allocated can collide
// after the hosted Service exists, which is then deleted again.
//
// Re-running the same action id (its result was never recorded: the agent
// died, or an API call failed transiently) finds the Services an earlier
// attempt created by the action id label, creates what is missing, and
// reports "applied" with every Service of the action and the same Undo.
func (x *Executor) Expose(ctx context.Context, req Change) (*Result, error) {
	if req.Type != TypeExposeNodePort {
		return nil, fmt.Errorf("%w: Expose got a %q request", ErrInvalid, req.Type)
	}
	c, err := check(req)
	if err != nil {
		return nil, err
	}
	return x.expose(ctx, c, false)
}

// nodePortRange is the range node ports are checked against.
func (x *Executor) nodePortRange() PortRange {
	if x.NodePortRange.valid() {
		return x.NodePortRange
	}
	return DefaultNodePortRange
}

// expose is Expose of a validated request. With observe it writes nothing
// and returns a nil Result where it would have written.
func (x *Executor) expose(ctx context.Context, c checked, observe bool) (*Result, error) {
	req := c.req
	p := req.Expose
	hc, hosted, err := x.kubevirtCluster(ctx, req.Cluster)
	if err != nil {
		return nil, err
	}
	cpNS := hypershift.ControlPlaneNamespace(hc.Namespace, hc.Name)
	sel := actionSelector(req.ID)

	hostedSvcs, err := hosted.CoreV1().Services(p.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, fmt.Errorf("list hosted Services of action %s: %w", req.ID, err)
	}
	mgmtSvcs, err := x.Kube.CoreV1().Services(cpNS).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, fmt.Errorf("list management Services of action %s: %w", req.ID, err)
	}
	if len(hostedSvcs.Items) > 1 || len(mgmtSvcs.Items) > 1 {
		return nil, fmt.Errorf("%w: action %s owns %d hosted and %d management Services, expected one each; roll it back", ErrConflict, req.ID, len(hostedSvcs.Items), len(mgmtSvcs.Items))
	}
	if observe && len(mgmtSvcs.Items) == 0 {
		// Every exposure ends with its management Service.
		return nil, nil
	}

	// hostedSvc is the hosted NodePort Service whose node ports are
	// forwarded: the one an earlier run of this action created, the app's
	// own when it is of type NodePort, or the one created now.
	var hostedSvc *corev1.Service
	var usage *portUsage
	// ownHosted: hostedSvc is this action's (created now or by an earlier
	// attempt), not the app's own; wrote: this run created something.
	forward, ownHosted, wrote := false, false, false
	if len(hostedSvcs.Items) == 1 {
		// An earlier run of this action got at least this far.
		hostedSvc, ownHosted = &hostedSvcs.Items[0], true
		if err := x.permitsHostedFound(ctx, hc, hosted, hostedSvc); err != nil {
			return nil, err
		}
	} else {
		app, err := appService(ctx, hosted, p)
		if err != nil {
			return nil, err
		}
		if app.Spec.Type == corev1.ServiceTypeNodePort {
			forward = true
			if hostedSvc, err = forwardedService(app, p); err != nil {
				return nil, err
			}
		} else {
			if len(mgmtSvcs.Items) == 1 {
				return nil, fmt.Errorf("%w: action %s left management Service %s/%s without its hosted Service; roll it back first", ErrConflict, req.ID, cpNS, mgmtSvcs.Items[0].Name)
			}
			ports, err := copyPorts(app, p)
			if err != nil {
				return nil, err
			}
			// The chosen node ports, before anything is written.
			if usage, err = x.portUsage(ctx, hosted, req.ID); err != nil {
				return nil, err
			}
			planned := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: HostedServiceName(p.Service)}, Spec: corev1.ServiceSpec{Ports: ports}}
			if err := x.checkPorts(ctx, usage, req, hc, cpNS, planned, true); err != nil {
				return nil, err
			}
			hostedW, err := x.hostedWriter(ctx, hc, hosted)
			if err != nil {
				return nil, err
			}
			if hostedSvc, err = x.createHostedService(ctx, hostedW, req, app, ports, usage); err != nil {
				return nil, err
			}
			ownHosted, wrote = true, true
		}
	}
	res := &Result{ActionID: req.ID, Type: req.Type, Ports: exposedPorts(hostedSvc)}
	res.Undo = &Undo{ActionID: req.ID, Type: TypeExposeNodePort, Cluster: req.Cluster, Expose: &ExposeUndo{HostedNamespace: p.Namespace}}
	hostedRef := ObjectRef{Cluster: ClusterHosted, Kind: "Service", Namespace: hostedSvc.Namespace, Name: hostedSvc.Name}
	// Do not leave a hosted node port of the action's open that nothing
	// forwards to (the app's own Service is never touched).
	cleanup := func(err error) error {
		if forward {
			if pc := (*PortCollisionError)(nil); errors.As(err, &pc) {
				pc.Forwarded = true
			}
			return err
		}
		if Transient(err) {
			// The management Service may exist all the same (the API
			// server created it and the response was lost). A transient
			// failure is retried: the re-run finds the hosted Service by
			// the action id label and completes the exposure, where
			// deleting it now would leave a management Service without
			// its hosted one.
			return err
		}
		if derr := deleteService(ctx, hosted, hostedSvc); derr != nil {
			err = errors.Join(err, fmt.Errorf("cleanup of hosted Service %s/%s: %w", hostedSvc.Namespace, hostedSvc.Name, derr))
		}
		return err
	}

	var mgmtSvc *corev1.Service
	if len(mgmtSvcs.Items) == 1 {
		mgmtSvc = &mgmtSvcs.Items[0]
		if !portsMatch(hostedSvc, mgmtSvc) {
			return nil, fmt.Errorf("%w: Services of action %s no longer agree on node ports; roll it back", ErrConflict, req.ID)
		}
		if x.writer != nil {
			// Found in place (an earlier attempt, or anyone who can write
			// Services there and knows the action id): the approver's only
			// if RBAC lets them create it. Asked as a permission (a
			// SubjectAccessReview), not as a dry-run create, which a
			// quota the found Service itself uses up would refuse.
			if err := x.permitsCreate(ctx, x.Kube, cpNS, ""); err != nil {
				return nil, err
			}
		}
	} else {
		if usage == nil {
			if usage, err = x.portUsage(ctx, hosted, req.ID); err != nil {
				return nil, err
			}
		}
		// Every forwarded node port, before the management write (and,
		// when forwarding the app's own Service, before any write). The
		// hosted cluster allocates them already: to hostedSvc.
		if err := x.checkPorts(ctx, usage, req, hc, cpNS, hostedSvc, false); err != nil {
			return nil, cleanup(err)
		}
		mgmtSvc, err = x.writeKube().CoreV1().Services(cpNS).Create(ctx, managementService(req, hc, cpNS, hostedSvc), metav1.CreateOptions{FieldManager: fieldManager})
		if err != nil {
			return nil, cleanup(managementCreateError(err, hostedSvc, usage))
		}
		wrote = true
	}
	// Whichever attempt created them, these are the action's objects: the
	// result reports all of them, as the first attempt would have.
	res.Outcome = OutcomeApplied
	if ownHosted {
		res.Created = append(res.Created, hostedRef)
	}
	res.Created = append(res.Created, ObjectRef{Cluster: ClusterManagement, Kind: "Service", Namespace: mgmtSvc.Namespace, Name: mgmtSvc.Name})

	ips, err := x.managementNodeIPs(ctx)
	if err != nil {
		return nil, err
	}
	for _, ip := range ips {
		for _, port := range res.Ports {
			res.Endpoints = append(res.Endpoints, net.JoinHostPort(ip, strconv.Itoa(int(port.NodePort))))
		}
	}
	res.Summary = exposeSummary(req, hostedSvc, mgmtSvc, res, len(ips), forward, !wrote)
	return res, nil
}

// kubevirtCluster reads the HostedCluster ref names, refuses it unless
// its VMs' virt-launcher pods can be selected, and reaches its API server.
func (x *Executor) kubevirtCluster(ctx context.Context, ref ClusterRef) (*hypershift.HostedCluster, kubernetes.Interface, error) {
	hc, err := x.getHostedCluster(ctx, ref)
	if err != nil {
		return nil, nil, err
	}
	if hc.Spec.Platform.Type != hypershift.PlatformKubeVirt {
		return nil, nil, fmt.Errorf("%w: HostedCluster %s runs on platform %q; NodePort exposure forwards to KubeVirt virt-launcher pods in the management cluster, which only the KubeVirt platform has", ErrNotKubeVirt, ref, hc.Spec.Platform.Type)
	}
	if hc.Spec.InfraID == "" {
		return nil, nil, fmt.Errorf("%w: HostedCluster %s has no spec.infraID, so its virt-launcher pods cannot be selected", ErrNotKubeVirt, ref)
	}
	hosted, err := x.hostedClient(ctx, hc)
	if err != nil {
		return nil, nil, err
	}
	return hc, hosted, nil
}

// permitsHostedFound: acting as the approver in hc's hosted cluster, the
// action's hosted Service found there (an earlier attempt's, or one
// anyone who may write Services there made with the action's labels) is
// forwarded and reported as theirs only if RBAC lets them create it there
// (a SubjectAccessReview on the hosted API server: a dry-run create would
// meet the quota the found Service itself uses).
func (x *Executor) permitsHostedFound(ctx context.Context, hc *hypershift.HostedCluster, hosted kubernetes.Interface, found *corev1.Service) error {
	if !x.actsInHosted(hc) {
		return nil
	}
	return x.permitsCreate(ctx, hosted, found.Namespace, " in hosted cluster "+hc.Namespace+"/"+hc.Name)
}

// permitsCreate asks kc's API server whether the approver x acts as may
// create Services in namespace: ErrRejected naming the permission if not.
func (x *Executor) permitsCreate(ctx context.Context, kc kubernetes.Interface, namespace, where string) error {
	missing, err := review(ctx, kc, x.writer.id, []authorizationv1.ResourceAttributes{{Verb: "create", Version: "v1", Resource: "services", Namespace: namespace}}, where)
	switch {
	case err != nil:
		return err
	case len(missing) > 0:
		return fmt.Errorf("%w: found in place, but %s may not make it: lacks %s", ErrRejected, x.writer.id.User, strings.Join(missing, "; "))
	}
	return nil
}

// permitsHostedDelete dry-runs with w, as the approver, the delete of
// each hosted Service of undo's exposure (listed with read); a list that
// cannot be made leaves it to the delete itself.
func permitsHostedDelete(ctx context.Context, read, w kubernetes.Interface, undo Undo) error {
	list, err := read.CoreV1().Services(undo.Expose.HostedNamespace).List(ctx, metav1.ListOptions{LabelSelector: actionSelector(undo.ActionID)})
	if err != nil {
		return nil
	}
	for _, svc := range list.Items {
		if !ownName(ClusterHosted, svc.Name, undo.ActionID) {
			continue
		}
		err := w.CoreV1().Services(svc.Namespace).Delete(ctx, svc.Name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		switch {
		case err == nil, apierrors.IsNotFound(err):
		case apierrors.IsForbidden(err):
			return fmt.Errorf("%w: hosted cluster: %w", ErrRejected, err)
		default:
			return fmt.Errorf("dry run of the delete of hosted Service %s/%s: %w", svc.Namespace, svc.Name, err)
		}
	}
	return nil
}

// usageOrEmpty is u, or no ports in use when none were listed: for
// reading a refusal that names no node port.
func usageOrEmpty(u *portUsage) *portUsage {
	if u == nil {
		return &portUsage{}
	}
	return u
}

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

func (x *Executor) createHostedService(ctx context.Context, hosted kubernetes.Interface, req Change, app *corev1.Service, ports []corev1.ServicePort, usage *portUsage) (*corev1.Service, error) {
	p := req.Expose
	svc := &corev1.Service{
		ObjectMeta: objectMeta(req, p.Namespace, HostedServiceName(p.Service)),
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeNodePort,
			Selector: app.Spec.Selector,
			Ports:    ports,
		},
	}
	svc.Annotations[AnnotationSource] = p.Namespace + "/" + p.Service
	created, err := hosted.CoreV1().Services(p.Namespace).Create(ctx, svc, metav1.CreateOptions{FieldManager: fieldManager})
	switch {
	case err == nil:
		return created, nil
	case apierrors.IsAlreadyExists(err):
		return nil, fmt.Errorf("%w: hosted Service %s/%s exists and does not belong to action %s", ErrConflict, p.Namespace, svc.Name, req.ID)
	case apierrors.IsInvalid(err):
		// The hosted API server's own range, or a port allocated since
		// the check: refused, nothing written.
		if pc := nodePortRefusal(err, svc, usage, ClusterHosted); pc != nil {
			return nil, pc
		}
		return nil, fmt.Errorf("%w: hosted cluster: %w", ErrRejected, err)
	case apierrors.IsForbidden(err):
		// The approver's identity in the hosted cluster (As,
		// identity.Entry.Hosted) may not create it, or an admission
		// policy refused it: nothing written.
		return nil, fmt.Errorf("%w: hosted cluster: %w", ErrRejected, err)
	}
	return nil, fmt.Errorf("create hosted Service %s/%s: %w", p.Namespace, svc.Name, err)
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

// nodePortField matches the field of a node-port allocation failure, e.g.
// spec.ports[1].nodePort (pkg/registry/core/service/storage/alloc.go).
var nodePortField = regexp.MustCompile(`^spec\.ports\[(\d+)\]\.nodePort$`)

// validRange reads the API server's node-port range from its refusal
// ("provided port is not in the valid range. The range of valid ports is
// 30000-32767", portallocator.ErrNotInRange).
var validRange = regexp.MustCompile(`range of valid ports is (\d+)-(\d+)`)

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

// deleteService deletes svc if it is still the object that was read (UID
// precondition), never a same-named replacement.
func deleteService(ctx context.Context, kc kubernetes.Interface, svc *corev1.Service) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	uid := types.UID(svc.UID)
	err := kc.CoreV1().Services(svc.Namespace).Delete(ctx, svc.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func (x *Executor) managementNodeIPs(ctx context.Context) ([]string, error) {
	nodes, err := x.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list management Nodes: %w", err)
	}
	var ips []string
	for _, n := range nodes.Items {
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP && net.ParseIP(a.Address) != nil {
				ips = append(ips, a.Address)
				break
			}
		}
		if len(ips) == maxEndpointNodes {
			break
		}
	}
	return ips, nil
}

// exposeSummary says what res reports; earlier: an earlier attempt of the
// action made every object and this run wrote nothing.
func exposeSummary(req Change, hosted, mgmt *corev1.Service, res *Result, nodes int, forwarded, earlier bool) string {
	var b strings.Builder
	switch {
	case earlier && forwarded:
		fmt.Fprintf(&b, "Already in place from an earlier attempt of action %s (nothing written now): forwarded ", req.ID)
	case earlier:
		fmt.Fprintf(&b, "Already in place from an earlier attempt of action %s (nothing written now): exposed ", req.ID)
	case forwarded:
		b.WriteString("Forwarded ")
	default:
		b.WriteString("Exposed ")
	}
	if forwarded {
		fmt.Fprintf(&b, "the node ports of hosted NodePort Service %s/%s of %s by %s/%s in the management cluster (nothing created in the hosted cluster); node ports",
			req.Expose.Namespace, req.Expose.Service, req.Cluster, mgmt.Namespace, mgmt.Name)
	} else {
		fmt.Fprintf(&b, "hosted Service %s/%s of %s: NodePort Service %s in the hosted cluster, forwarded by %s/%s in the management cluster; node ports",
			req.Expose.Namespace, req.Expose.Service, req.Cluster, hosted.Name, mgmt.Namespace, mgmt.Name)
	}
	for _, p := range res.Ports {
		fmt.Fprintf(&b, " %d→%d/%s", p.Port, p.NodePort, p.Protocol)
	}
	b.WriteString(".")
	switch {
	case nodes == 0:
		b.WriteString(" The management cluster reports no Node with an InternalIP, so no endpoint address can be given.")
	case len(res.Endpoints) > 0:
		fmt.Fprintf(&b, " Reachable on any management node at that port, e.g. %s.", res.Endpoints[0])
	}
	return b.String()
}

// rollbackExpose deletes the Services of undo's exposure. With observe it
// deletes nothing and returns a nil Result while any remains.
func (x *Executor) rollbackExpose(ctx context.Context, undo Undo, observe bool) (*Result, error) {
	hc, err := x.getHostedCluster(ctx, undo.Cluster)
	if err != nil {
		return nil, err
	}
	res := &Result{ActionID: undo.ActionID, Type: TypeRollback, Outcome: OutcomeUnchanged}
	// Management first: that closes the port reachable from outside, and
	// it still happens when the hosted cluster cannot be reached.
	cpNS := hypershift.ControlPlaneNamespace(hc.Namespace, hc.Name)
	if x.writer != nil && !observe {
		// As the approver, their right to the management delete is tried
		// first, whether or not the Service is still there: the hosted
		// delete that follows may be the admin kubeconfig's, and must
		// not be made for someone who may not roll the exposure back.
		name := ManagementServiceName(undo.ActionID)
		err := x.writeKube().CoreV1().Services(cpNS).Delete(ctx, name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		switch {
		case err == nil, apierrors.IsNotFound(err):
		case apierrors.IsForbidden(err):
			return nil, fmt.Errorf("%w: management cluster: %w", ErrRejected, err)
		default:
			return nil, fmt.Errorf("dry run of the delete of management Service %s/%s: %w", cpNS, name, err)
		}
	}
	// Acting as the approver there, so too their right to the hosted
	// delete, as them: refused, nothing is deleted in either cluster. A
	// hosted cluster that cannot be reached leaves it to the delete
	// itself, after the management one.
	var hosted, hostedW kubernetes.Interface
	if x.actsInHosted(hc) && !observe {
		if hosted, err = x.hostedClient(ctx, hc); err == nil {
			if hostedW, err = x.hostedWriter(ctx, hc, hosted); err != nil {
				return nil, err
			}
			if err := permitsHostedDelete(ctx, hosted, hostedW, undo); err != nil {
				return nil, err
			}
		}
	}
	if err := deleteOwned(ctx, x.Kube, x.writeKube(), ClusterManagement, cpNS, undo.ActionID, res, observe); err != nil {
		return res, err
	}
	if hosted == nil {
		if hosted, err = x.hostedClient(ctx, hc); err != nil {
			return res, err
		}
	}
	if hostedW == nil {
		if hostedW, err = x.hostedWriter(ctx, hc, hosted); err != nil {
			return res, err
		}
	}
	if err := deleteOwned(ctx, hosted, hostedW, ClusterHosted, undo.Expose.HostedNamespace, undo.ActionID, res, observe); err != nil {
		if len(res.Deleted) > 0 && errors.Is(err, ErrRejected) {
			// Not "nothing written": the management Service is gone.
			// The agent reads the cluster for what holds.
			// %s, not %w: the refusal's class (ErrRejected, "nothing
			// written") is not this result's.
			return res, fmt.Errorf("management Service deleted, then the hosted delete failed: %s", err.Error())
		}
		return res, err
	}
	if observe && len(res.Deleted) > 0 {
		return nil, nil
	}
	if len(res.Deleted) == 0 {
		res.Summary = fmt.Sprintf("Action %s has no Services left; nothing to delete.", undo.ActionID)
		return res, nil
	}
	res.Outcome = OutcomeRolledBack
	names := make([]string, 0, len(res.Deleted))
	for _, d := range res.Deleted {
		names = append(names, d.String())
	}
	res.Summary = fmt.Sprintf("Removed the exposure of action %s: deleted %s.", undo.ActionID, strings.Join(names, ", "))
	return res, nil
}

// deleteOwned deletes (with writer) the Services in namespace labelled as
// made by hcpbot for action id, found with reader, and records them in
// res; with observe it only records them.
func deleteOwned(ctx context.Context, reader, writer kubernetes.Interface, cluster, namespace, id string, res *Result, observe bool) error {
	list, err := reader.CoreV1().Services(namespace).List(ctx, metav1.ListOptions{LabelSelector: actionSelector(id)})
	if err != nil {
		return fmt.Errorf("list %s Services of action %s: %w", cluster, id, err)
	}
	for i := range list.Items {
		svc := &list.Items[i]
		if !ownName(cluster, svc.Name, id) {
			// Labels are anyone's who may patch Services there: one
			// named otherwise (the app's own Service, labelled with the
			// action id) was not made by this action and is not deleted.
			continue
		}
		if !observe {
			if err := deleteService(ctx, writer, svc); err != nil {
				if apierrors.IsForbidden(err) {
					// RBAC refused the identity the deletion runs as (As),
					// or an admission policy did: definite, and named.
					err = fmt.Errorf("%w: %w", ErrRejected, err)
				}
				return fmt.Errorf("delete %s Service %s/%s: %w", cluster, svc.Namespace, svc.Name, err)
			}
		}
		res.Deleted = append(res.Deleted, ObjectRef{Cluster: cluster, Kind: "Service", Namespace: svc.Namespace, Name: svc.Name})
	}
	return nil
}
