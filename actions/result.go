package actions

import (
	"fmt"
	"strconv"
	"strings"
)

// Outcome of an executed action.
type Outcome string

const (
	// OutcomeApplied: the cluster was changed.
	OutcomeApplied Outcome = "applied"
	// OutcomeUnchanged: the cluster already was as asked; nothing written.
	OutcomeUnchanged Outcome = "unchanged"
	// OutcomeRolledBack: a previous action was undone.
	OutcomeRolledBack Outcome = "rolled-back"
)

// Which cluster an object lives in.
const (
	ClusterManagement = "management"
	ClusterHosted     = "hosted"
)

// ObjectRef names an object the action created or deleted.
type ObjectRef struct {
	// Cluster is ClusterManagement or ClusterHosted.
	Cluster   string `json:"cluster"`
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
}

func (o ObjectRef) String() string {
	if o.Namespace == "" {
		return fmt.Sprintf("%s %s (%s cluster)", o.Kind, o.Name, o.Cluster)
	}
	return fmt.Sprintf("%s %s/%s (%s cluster)", o.Kind, o.Namespace, o.Name, o.Cluster)
}

// Result reports what an action did, for chat and for the audit trail.
type Result struct {
	ActionID string  `json:"actionID"`
	Type     Type    `json:"type"`
	Outcome  Outcome `json:"outcome"`
	// Summary is one human sentence or two.
	Summary string `json:"summary"`
	// Diff shows the change in unified-diff style (empty when unchanged).
	Diff    string      `json:"diff,omitempty"`
	Before  string      `json:"before,omitempty"`
	After   string      `json:"after,omitempty"`
	Added   []string    `json:"added,omitempty"`
	Created []ObjectRef `json:"created,omitempty"`
	Deleted []ObjectRef `json:"deleted,omitempty"`
	// Ports of an exposure: hosted Service port → node port.
	Ports []ExposedPort `json:"ports,omitempty"`
	// Endpoints are "<management node InternalIP>:<nodePort>", read from
	// the management cluster's Nodes (data only; never dialled).
	Endpoints []string `json:"endpoints,omitempty"`
	// Undo reverts the action with Rollback; nil when there is nothing to
	// undo (a noProxy patch that changed nothing, a rollback).
	Undo *Undo `json:"undo,omitempty"`
	// As is the Kubernetes user the management writes were made as
	// (Executor.As, the approver's identity); empty: the agent's own.
	As string `json:"as,omitempty"`
}

// ExposedPort is one published port.
type ExposedPort struct {
	Name     string `json:"name,omitempty"`
	Protocol string `json:"protocol"`
	// Port is the hosted Service's port; NodePort is open on the hosted
	// nodes and, with the same number, on the management nodes.
	Port     int32 `json:"port"`
	NodePort int32 `json:"nodePort"`
}

// Undo is what Rollback needs to revert an action.
type Undo struct {
	ActionID string       `json:"actionID"`
	Type     Type         `json:"type"`
	Cluster  ClusterRef   `json:"cluster"`
	NoProxy  *NoProxyUndo `json:"noProxy,omitempty"`
	Expose   *ExposeUndo  `json:"expose,omitempty"`
}

// NoProxyUndo: restore Previous, but only while the value is still Written.
type NoProxyUndo struct {
	Target   Target `json:"target,omitempty"`
	Previous string `json:"previous"`
	Written  string `json:"written"`
	// ResourceVersion is the object's version right after the write, for
	// the audit trail: a different one at rollback time shows that
	// something else touched the object since.
	ResourceVersion string `json:"resourceVersion"`
}

// ExposeUndo: the Services to delete are found by the action id label in
// HostedNamespace (hosted cluster) and in the control-plane namespace
// (management cluster), which Rollback derives from the cluster ref.
type ExposeUndo struct {
	HostedNamespace string `json:"hostedNamespace"`
}

// PortRange is an inclusive range of node ports, the API server's
// --service-node-port-range.
type PortRange struct {
	Min int32 `json:"min"`
	Max int32 `json:"max"`
}

// DefaultNodePortRange is Kubernetes' (and OpenShift's) default
// --service-node-port-range.
var DefaultNodePortRange = PortRange{Min: 30000, Max: 32767}

func (r PortRange) String() string { return fmt.Sprintf("%d-%d", r.Min, r.Max) }

// Contains reports whether port lies in r.
func (r PortRange) Contains(port int32) bool { return r.Min <= port && port <= r.Max }

func (r PortRange) valid() bool { return 1 <= r.Min && r.Min <= r.Max && r.Max <= 65535 }

// Why a node port is refused.
const (
	PortOutOfRange      = "out-of-range"
	PortAllocated       = "allocated"        // in the management cluster
	PortAllocatedHosted = "allocated-hosted" // in the hosted cluster
)

// PortProblem is one refused node port.
type PortProblem struct {
	NodePort int32 `json:"nodePort"`
	// Reason is PortOutOfRange, PortAllocated or PortAllocatedHosted.
	Reason string `json:"reason"`
	// Holder is the Service that allocates it (namespace/name), when known.
	Holder string `json:"holder,omitempty"`
}

func (p PortProblem) String() string {
	switch p.Reason {
	case PortOutOfRange:
		return fmt.Sprintf("%d is outside the node-port range", p.NodePort)
	case PortAllocatedHosted:
		return fmt.Sprintf("%d is already allocated in the hosted cluster%s", p.NodePort, by(p.Holder))
	}
	return fmt.Sprintf("%d is already allocated in the management cluster%s", p.NodePort, by(p.Holder))
}

func by(holder string) string {
	if holder == "" {
		return ""
	}
	return " (Service " + holder + ")"
}

// PortCollision is what a refused exposure reports: the node ports that
// cannot be used, the range they were checked against and the free node
// ports nearest to them (one per refused port where the range has one).
// It travels in the Reply, so the bot can show it.
type PortCollision struct {
	Ports        []PortProblem `json:"ports"`
	Range        PortRange     `json:"range"`
	Alternatives []int32       `json:"alternatives,omitempty"`
	// Forwarded: the ports are the hosted Service's own (it already is of
	// type NodePort), which a request cannot choose; the Service's node
	// ports have to change, or the management cluster's holders go.
	Forwarded bool `json:"forwarded,omitempty"`
}

func (c PortCollision) String() string {
	parts := make([]string, 0, len(c.Ports))
	for _, p := range c.Ports {
		s := p.String()
		if p.Reason == PortOutOfRange {
			s += " " + c.Range.String()
		}
		parts = append(parts, s)
	}
	s := strings.Join(parts, "; ")
	if len(c.Alternatives) > 0 {
		s += "; nearest free node ports (range " + c.Range.String() + "): " + JoinPorts(c.Alternatives)
	} else {
		s += "; no free node port left in the range " + c.Range.String()
	}
	if c.Forwarded {
		s += "; these are the hosted NodePort Service's own node ports, which are forwarded as they are: change them there, or free them in the management cluster"
	}
	return s
}

// JoinPorts writes ports as "30001, 30002".
func JoinPorts(ports []int32) string {
	ps := make([]string, len(ports))
	for i, p := range ports {
		ps[i] = strconv.Itoa(int(p))
	}
	return strings.Join(ps, ", ")
}

// PortCollisionError says which node ports cannot be exposed and why, with
// free alternatives. errors.Is(err, ErrPortCollision) holds, also for the
// error a Reply carries back to the bot (Reply.Err).
type PortCollisionError struct {
	// NodePort is the first refused port.
	NodePort int32
	PortCollision
	// Err is the API server's error, if it was the one to refuse.
	Err error
	// remote is the agent's text of an error rebuilt from a Reply.
	remote string
}

func (e *PortCollisionError) Error() string {
	if e.remote != "" {
		return e.remote
	}
	s := ErrPortCollision.Error() + ": "
	if len(e.Ports) > 0 {
		s += "node port " + e.PortCollision.String()
	} else {
		s += fmt.Sprintf("nodePort %d", e.NodePort)
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *PortCollisionError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrPortCollision}
	}
	return []error{ErrPortCollision, e.Err}
}
