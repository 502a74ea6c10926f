package actions

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"unicode"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/noproxy"
)

// Sentinel errors; callers test them with errors.Is.
var (
	// ErrInvalid: the request (or the object it names) cannot be acted on
	// as asked; re-sending the same request will fail the same way.
	ErrInvalid = errors.New("invalid action request")
	// ErrConflict: the cluster no longer holds what the proposal was
	// computed from, or changed while the action ran. Nothing was written
	// by this call; the caller should re-read and re-propose.
	ErrConflict = errors.New("conflict: the cluster changed since the proposal")
	// ErrNotKubeVirt: NodePort exposure needs hosted nodes that are
	// KubeVirt VMs (virt-launcher pods) in the management cluster.
	ErrNotKubeVirt = errors.New("not a KubeVirt hosted cluster")
	// ErrPortCollision: a node port to expose is outside the node-port
	// range or already allocated (in the management cluster, or in the
	// hosted cluster for a node port the request chose).
	// *PortCollisionError names the ports and free alternatives.
	ErrPortCollision = errors.New("node port unavailable")
	// ErrRejected: the API server refused the change (validation or an
	// admission policy), seen in the dry run or the write.
	ErrRejected = errors.New("change rejected by the API server")
	// ErrKubeconfig: the hosted cluster's admin kubeconfig Secret is
	// missing, malformed or asks for something the bot refuses to do.
	ErrKubeconfig = errors.New("unusable hosted cluster kubeconfig")
)

// Type is the kind of action.
type Type string

// The action types the executor accepts; anything else is invalid.
const (
	TypeNoProxyPatch   Type = "noproxy-patch"
	TypeExposeNodePort Type = "expose-nodeport"
	TypeRollback       Type = "rollback"
)

// Target says which object carries the noProxy list.
type Target string

const (
	// TargetHostedCluster: spec.configuration.proxy.noProxy of the
	// HostedCluster named by Request.Cluster (the default).
	TargetHostedCluster Target = "HostedCluster"
	// TargetProxy: spec.noProxy of the cluster-scoped OpenShift
	// Proxy/cluster reached by the executor's dynamic client (standalone
	// OpenShift). Request.Cluster must then be {Name: "cluster"}.
	TargetProxy Target = "Proxy"
)

// Limits on request sizes; they keep one approval to a reviewable change.
const (
	MaxNoProxyAdd   = 32
	maxNoProxyValue = 16 << 10
	maxEntryLength  = 253
	maxExposePorts  = 32
	maxRequestedBy  = 256
)

// idPattern: a short prefix naming the issuer and a random suffix. It lands
// in a label value, so it must stay a valid one.
var idPattern = regexp.MustCompile(`^[a-z]{1,8}-[0-9a-z]{4,32}$`)

// ValidID reports whether id has the shape of an action id.
func ValidID(id string) bool { return idPattern.MatchString(id) }

// ClusterRef names a HostedCluster (or, for TargetProxy, Proxy/cluster).
type ClusterRef struct {
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
}

func (c ClusterRef) String() string {
	if c.Namespace == "" {
		return c.Name
	}
	return c.Namespace + "/" + c.Name
}

// Change is one approved action.
type Change struct {
	ID          string          `json:"id"`
	Type        Type            `json:"type"`
	Cluster     ClusterRef      `json:"cluster"`
	NoProxy     *NoProxyParams  `json:"noProxy,omitempty"`
	Expose      *ExposeParams   `json:"expose,omitempty"`
	Rollback    *RollbackParams `json:"rollback,omitempty"`
	RequestedBy string          `json:"requestedBy"`
}

// NoProxyParams: append Add to the noProxy list, provided it still equals
// Expected (the value the proposal was computed from).
type NoProxyParams struct {
	Target   Target   `json:"target,omitempty"`
	Expected string   `json:"expected"`
	Add      []string `json:"add"`
}

// ExposeParams names the hosted Service to publish.
//
// When that Service already is of type NodePort (seed 004's runbook), its
// node ports are forwarded as they are and nothing is created in the hosted
// cluster; node ports may then not be chosen (other than its own). Otherwise
// a NodePort copy of it is created in the hosted cluster, on the node ports
// chosen here, the rest allocated by the hosted API server.
type ExposeParams struct {
	Namespace string `json:"namespace"`
	Service   string `json:"service"`
	// Ports selects Service ports by number; empty means all of them.
	Ports []ExposePort `json:"ports,omitempty"`
	// NodePorts chooses node ports when Ports is empty: the Service's
	// i-th port gets NodePorts[i], ports past the list are allocated. With
	// Ports, each ExposePort carries its own NodePort and this is empty.
	// More node ports than the Service has ports is refused by the agent.
	NodePorts []int32 `json:"nodePorts,omitempty"`
}

// ExposePort selects one port of the hosted Service.
type ExposePort struct {
	Port int32 `json:"port"`
	// NodePort asks for a specific node port; 0 lets the hosted API server
	// allocate one. The same number is then used in the management cluster.
	NodePort int32 `json:"nodePort,omitempty"`
}

// ChosenNodePorts lists the node ports the request chooses, in order.
func (e *ExposeParams) ChosenNodePorts() []int32 {
	out := slices.Clone(e.NodePorts)
	for _, p := range e.Ports {
		if p.NodePort != 0 {
			out = append(out, p.NodePort)
		}
	}
	return out
}

// RollbackParams carries the Undo of the action to revert.
type RollbackParams struct {
	Undo Undo `json:"undo"`
}

func (t Target) orDefault() Target {
	if t == "" {
		return TargetHostedCluster
	}
	return t
}

// Validate checks the request without contacting any cluster. The error
// wraps ErrInvalid and lists every problem found.
//
// A request is validated once at each boundary: by the bot when it is
// proposed (bot/approval's Propose; the proposal's seal then keeps it as
// it was until it is sent), and by the agent when it opens it
// (Verifier.Open). Inside the agent it travels as a checked value, which
// the executor's own paths take without validating again.
func (r *Change) Validate() error {
	if h := validateHook.Load(); h != nil {
		(*h)(*r)
	}
	var errs field.ErrorList
	if !idPattern.MatchString(r.ID) {
		errs = append(errs, field.Invalid(field.NewPath("id"), r.ID, "must match "+idPattern.String()))
	}
	errs = append(errs, validateRequestedBy(field.NewPath("requestedBy"), r.RequestedBy)...)

	params := map[Type]bool{TypeNoProxyPatch: r.NoProxy != nil, TypeExposeNodePort: r.Expose != nil, TypeRollback: r.Rollback != nil}
	if _, known := params[r.Type]; !known {
		errs = append(errs, field.NotSupported(field.NewPath("type"), r.Type, []Type{TypeNoProxyPatch, TypeExposeNodePort, TypeRollback}))
	}
	// Exactly the parameters of the type: a request that carries others was
	// built wrongly and could mean something the approver did not see.
	for t, set := range params {
		p := field.NewPath(paramsField(t))
		switch {
		case t == r.Type && !set:
			errs = append(errs, field.Required(p, "required for type "+string(t)))
		case t != r.Type && set:
			errs = append(errs, field.Forbidden(p, "only allowed for type "+string(t)))
		}
	}

	target := TargetHostedCluster
	if r.NoProxy != nil {
		target = r.NoProxy.Target.orDefault()
	}
	switch {
	case r.Type == TypeRollback && r.Rollback != nil:
		if r.Rollback.Undo.NoProxy != nil {
			target = r.Rollback.Undo.NoProxy.Target.orDefault()
		}
		if r.Rollback.Undo.Cluster != r.Cluster {
			errs = append(errs, field.Invalid(field.NewPath("rollback", "undo", "cluster"), r.Rollback.Undo.Cluster.String(), "must equal cluster"))
		}
		errs = append(errs, r.Rollback.Undo.validate(field.NewPath("rollback", "undo"))...)
	case r.Type == TypeNoProxyPatch && r.NoProxy != nil:
		errs = append(errs, r.NoProxy.validate(field.NewPath("noProxy"))...)
	case r.Type == TypeExposeNodePort && r.Expose != nil:
		errs = append(errs, r.Expose.validate(field.NewPath("expose"))...)
	}
	errs = append(errs, validateCluster(field.NewPath("cluster"), r.Cluster, target)...)
	return aggregate(errs)
}

// validateHook, nil outside tests, observes every Validate (export_test.go
// counts them per request).
var validateHook atomic.Pointer[func(Change)]

// checked is a Request that passed Validate; only check makes one. The
// executor's paths past its entry points take it, so none validates again
// and none can be handed a request that was not validated.
type checked struct{ req Change }

func check(req Change) (checked, error) {
	if err := req.Validate(); err != nil {
		return checked{}, err
	}
	return checked{req: req}, nil
}

func paramsField(t Type) string {
	switch t {
	case TypeNoProxyPatch:
		return "noProxy"
	case TypeExposeNodePort:
		return "expose"
	}
	return "rollback"
}

func aggregate(errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrInvalid, errs.ToAggregate())
}

func validateRequestedBy(p *field.Path, s string) field.ErrorList {
	switch {
	case strings.TrimSpace(s) == "":
		return field.ErrorList{field.Required(p, "who approved the action is recorded on the objects")}
	case len(s) > maxRequestedBy:
		return field.ErrorList{field.TooLong(p, "", maxRequestedBy)}
	case strings.IndexFunc(s, unicode.IsControl) >= 0:
		return field.ErrorList{field.Invalid(p, s, "must not contain control characters")}
	}
	return nil
}

func validateCluster(p *field.Path, c ClusterRef, target Target) field.ErrorList {
	var errs field.ErrorList
	switch target {
	case TargetProxy:
		if c.Namespace != "" {
			errs = append(errs, field.Forbidden(p.Child("namespace"), "Proxy is cluster-scoped"))
		}
		if c.Name != hypershift.ProxyName {
			errs = append(errs, field.Invalid(p.Child("name"), c.Name, "the OpenShift Proxy is always named "+hypershift.ProxyName))
		}
		return errs
	case TargetHostedCluster:
	default:
		return field.ErrorList{field.NotSupported(p.Root().Child("noProxy", "target"), target, []Target{TargetHostedCluster, TargetProxy})}
	}
	for _, msg := range validation.IsDNS1123Label(c.Namespace) {
		errs = append(errs, field.Invalid(p.Child("namespace"), c.Namespace, msg))
	}
	// HostedCluster names are subdomains (they may hold dots) limited by
	// HyperShift to 53 characters.
	for _, msg := range validation.IsDNS1123Subdomain(c.Name) {
		errs = append(errs, field.Invalid(p.Child("name"), c.Name, msg))
	}
	if len(c.Name) > 53 {
		errs = append(errs, field.TooLong(p.Child("name"), "", 53))
	}
	return errs
}

func (n *NoProxyParams) validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(n.Expected) > maxNoProxyValue {
		errs = append(errs, field.TooLong(p.Child("expected"), "", maxNoProxyValue))
	}
	switch {
	case len(n.Add) == 0:
		errs = append(errs, field.Required(p.Child("add"), "nothing to add"))
	case len(n.Add) > MaxNoProxyAdd:
		errs = append(errs, field.TooMany(p.Child("add"), len(n.Add), MaxNoProxyAdd))
	}
	for i, a := range n.Add {
		errs = append(errs, validateEntry(p.Child("add").Index(i), a)...)
	}
	return errs
}

// validateEntry accepts exactly one noProxy entry that every client can
// read. The wildcard is refused: it would switch the proxy off for
// everything, which no diagnosis here ever calls for.
func validateEntry(p *field.Path, a string) field.ErrorList {
	if len(a) > maxEntryLength {
		return field.ErrorList{field.TooLong(p, "", maxEntryLength)}
	}
	if a != strings.TrimSpace(a) {
		return field.ErrorList{field.Invalid(p, a, "must not have surrounding whitespace")}
	}
	entries := noproxy.Parse(a)
	switch {
	case len(entries) != 1 || strings.Contains(a, ","):
		return field.ErrorList{field.Invalid(p, a, "must be exactly one entry")}
	case entries[0].Kind == noproxy.KindInvalid:
		return field.ErrorList{field.Invalid(p, a, entries[0].Problem)}
	case entries[0].Kind == noproxy.KindWildcard:
		return field.ErrorList{field.Forbidden(p, "\"*\" would bypass the proxy for every host")}
	}
	return nil
}

func (e *ExposeParams) validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Label(e.Namespace) {
		errs = append(errs, field.Invalid(p.Child("namespace"), e.Namespace, msg))
	}
	for _, msg := range validation.IsDNS1035Label(e.Service) {
		errs = append(errs, field.Invalid(p.Child("service"), e.Service, msg))
	}
	if len(e.Ports) > maxExposePorts {
		errs = append(errs, field.TooMany(p.Child("ports"), len(e.Ports), maxExposePorts))
	}
	ports, nodePorts := map[int32]bool{}, map[int32]bool{}
	for i, port := range e.Ports {
		pp := p.Child("ports").Index(i)
		if port.Port < 1 || port.Port > 65535 {
			errs = append(errs, field.Invalid(pp.Child("port"), port.Port, "must be 1..65535"))
		} else if ports[port.Port] {
			errs = append(errs, field.Duplicate(pp.Child("port"), port.Port))
		}
		ports[port.Port] = true
		// The node-port range is a setting of the management cluster: the
		// executor checks it (Executor.NodePortRange) before any write.
		if port.NodePort < 0 || port.NodePort > 65535 {
			errs = append(errs, field.Invalid(pp.Child("nodePort"), port.NodePort, "must be 0 (allocate) or 1..65535"))
		} else if port.NodePort != 0 && nodePorts[port.NodePort] {
			errs = append(errs, field.Duplicate(pp.Child("nodePort"), port.NodePort))
		}
		nodePorts[port.NodePort] = true
	}
	np := p.Child("nodePorts")
	switch {
	case len(e.NodePorts) > 0 && len(e.Ports) > 0:
		errs = append(errs, field.Forbidden(np, "with ports, each port carries its own nodePort"))
	case len(e.NodePorts) > maxExposePorts:
		errs = append(errs, field.TooMany(np, len(e.NodePorts), maxExposePorts))
	}
	for i, n := range e.NodePorts {
		if n < 1 || n > 65535 {
			errs = append(errs, field.Invalid(np.Index(i), n, "must be 1..65535"))
		} else if nodePorts[n] {
			errs = append(errs, field.Duplicate(np.Index(i), n))
		}
		nodePorts[n] = true
	}
	return errs
}

func (u *Undo) validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if !idPattern.MatchString(u.ActionID) {
		errs = append(errs, field.Invalid(p.Child("actionID"), u.ActionID, "must match "+idPattern.String()))
	}
	switch u.Type {
	case TypeNoProxyPatch:
		if u.NoProxy == nil || u.Expose != nil {
			errs = append(errs, field.Required(p.Child("noProxy"), "exactly the noProxy undo data is required"))
			break
		}
		if t := u.NoProxy.Target.orDefault(); t != TargetHostedCluster && t != TargetProxy {
			errs = append(errs, field.NotSupported(p.Child("noProxy", "target"), t, []Target{TargetHostedCluster, TargetProxy}))
		}
		for _, s := range []string{u.NoProxy.Previous, u.NoProxy.Written} {
			if len(s) > maxNoProxyValue {
				errs = append(errs, field.TooLong(p.Child("noProxy"), "", maxNoProxyValue))
			}
		}
	case TypeExposeNodePort:
		if u.Expose == nil || u.NoProxy != nil {
			errs = append(errs, field.Required(p.Child("expose"), "exactly the expose undo data is required"))
			break
		}
		for _, msg := range validation.IsDNS1123Label(u.Expose.HostedNamespace) {
			errs = append(errs, field.Invalid(p.Child("expose", "hostedNamespace"), u.Expose.HostedNamespace, msg))
		}
	default:
		errs = append(errs, field.NotSupported(p.Child("type"), u.Type, []Type{TypeNoProxyPatch, TypeExposeNodePort}))
	}
	return errs
}
