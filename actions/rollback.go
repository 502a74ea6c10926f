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
// call reports "unchanged".
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
	return x.rollback(ctx, undo)
}

// rollback is Rollback of validated undo data (Rollback's, or a rollback
// request's, which Request.Validate checks the same way).
func (x *Executor) rollback(ctx context.Context, undo Undo) (*Result, error) {
	switch undo.Type {
	case TypeNoProxyPatch:
		return x.rollbackNoProxy(ctx, undo)
	case TypeExposeNodePort:
		return x.rollbackExpose(ctx, undo)
	}
	return nil, fmt.Errorf("%w: cannot roll back a %q action", ErrInvalid, undo.Type)
}
