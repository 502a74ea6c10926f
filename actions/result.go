package actions

import (
	"fmt"
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

// PortCollisionError says which node port the management cluster already
// allocates. errors.Is(err, ErrPortCollision) holds.
type PortCollisionError struct {
	NodePort int32
	Err      error
}

func (e *PortCollisionError) Error() string {
	return fmt.Sprintf("%v: nodePort %d: %v", ErrPortCollision, e.NodePort, e.Err)
}

func (e *PortCollisionError) Unwrap() []error { return []error{ErrPortCollision, e.Err} }
