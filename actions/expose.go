package actions

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
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

// nodePortField matches the field of a node-port allocation failure, e.g.
// spec.ports[1].nodePort (pkg/registry/core/service/storage/alloc.go).
var nodePortField = regexp.MustCompile(`^spec\.ports\[(\d+)\]\.nodePort$`)

// validRange reads the API server's node-port range from its refusal
// ("provided port is not in the valid range. The range of valid ports is
// 30000-32767", portallocator.ErrNotInRange).
var validRange = regexp.MustCompile(`range of valid ports is (\d+)-(\d+)`)

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
