package actions

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Rollback reverts the action undo describes. A noProxy change is undone
// only while the list still holds what the action wrote (else ErrConflict);
// an exposure is undone by deleting exactly the Services labelled with the
// action id, in both clusters. Rolling back twice is harmless: the second
// call writes nothing.
//
// Rollback is a rollback that is no request of its own: it marks a noProxy
// object with DirectRollbackMark(undo.ActionID), so a second call reports
// "rolled-back" again (it cannot be told from a re-run) and "unchanged"
// after a rollback request. A rollback request (a Change of TypeRollback,
// run by Execute) marks it with its own id, which lets its re-run and
// Observe recognise it.
func (x *Executor) Rollback(ctx context.Context, undo Undo) (*Result, error) {
	if err := aggregate(undo.validate(field.NewPath("undo"))); err != nil {
		return nil, err
	}
	switch undo.Type {
	case TypeNoProxyPatch:
		if err := aggregate(validateCluster(field.NewPath("undo", "cluster"), undo.Cluster, undo.NoProxy.Target.orDefault())); err != nil {
			return nil, err
		}
	case TypeExposeNodePort:
		if err := aggregate(validateCluster(field.NewPath("undo", "cluster"), undo.Cluster, TargetHostedCluster)); err != nil {
			return nil, err
		}
	}
	return x.rollback(ctx, DirectRollbackMark(undo.ActionID), undo, false)
}

// DirectRollbackMark is the AnnotationAction value Rollback writes when it
// reverts action id. It cannot be the id of a request (ValidID refuses
// the slash), so it is never taken for one.
func DirectRollbackMark(id string) string { return id + "/rollback" }

// rollback is Rollback of validated undo data (Rollback's, or a rollback
// request's, which Request.Validate checks the same way); mark is what a
// noProxy object is marked with (AnnotationAction). With observe it writes
// nothing and returns a nil Result where it would have written.
func (x *Executor) rollback(ctx context.Context, mark string, undo Undo, observe bool) (*Result, error) {
	switch undo.Type {
	case TypeNoProxyPatch:
		return x.rollbackNoProxy(ctx, mark, undo, observe)
	case TypeExposeNodePort:
		return x.rollbackExpose(ctx, undo, observe)
	}
	return nil, fmt.Errorf("%w: cannot roll back a %q action", ErrInvalid, undo.Type)
}
