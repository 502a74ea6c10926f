package actions

import (
	"context"
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Observe reports, reading only, whether the change ch asks for is in
// place in the cluster: true when a run of ch now would write nothing and
// succeed, with the Result that run would report. The approval loop asks
// it once a request's deadline has passed after transient failures, to
// report what the cluster holds instead of guessing.
//
//   - noProxy patch: the object is marked with ch's id (AnnotationAction)
//     and holds the merged value → "applied", with the Undo of the first
//     run; or it still holds Expected, which already has every entry →
//     "unchanged".
//   - exposure: the Services labelled with ch's id exist in both clusters
//     (or, forwarding the app's own NodePort Service, the management one)
//     and agree on node ports → "applied", with every Service and the Undo.
//   - rollback of a noProxy patch: the previous value, marked with ch's id
//     → "rolled-back"; the previous value without that mark → "unchanged".
//     Rollback of an exposure: no Service of the action is left in either
//     cluster → "unchanged" (deleted objects carry no mark, so who removed
//     them cannot be told).
//
// A change that is not in place is (nil, false, nil): also when a run would
// be refused (the value changed, the object or the hosted Service is
// gone). err is for what stopped the observation: ch is invalid, or the
// cluster could not be read (Transient tells whether later may help).
//
// Unlike the executor's internal paths, Observe validates ch: it is an
// entry point of its own, taken rarely (after a deadline).
func (x *Executor) Observe(ctx context.Context, ch Change) (res *Result, inPlace bool, err error) {
	c, err := check(ch)
	if err != nil {
		return nil, false, err
	}
	switch ch.Type {
	case TypeNoProxyPatch:
		res, err = x.patchNoProxyOnce(ctx, ch, x.noProxyObject(ch.NoProxy.Target, ch.Cluster), true)
	case TypeExposeNodePort:
		res, err = x.expose(ctx, c, true)
	case TypeRollback:
		res, err = x.rollback(ctx, ch.ID, ch.Rollback.Undo, true)
	}
	switch {
	case err == nil:
		return res, res != nil, nil
	case notInPlace(err):
		return nil, false, nil
	}
	return nil, false, err
}

// notInPlace: definite answers of a read that say the change is not (or
// can no longer be) there.
func notInPlace(err error) bool {
	return errors.Is(err, ErrConflict) || errors.Is(err, ErrInvalid) || errors.Is(err, ErrNotKubeVirt) || apierrors.IsNotFound(err)
}
