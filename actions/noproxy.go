package actions

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"

	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/noproxy"
)

// noProxyObject locates the noProxy string of a target.
type noProxyObject struct {
	// ri reads the object (the agent's own client), wri writes it (the
	// approver's identity in an Executor made by As).
	ri   dynamic.ResourceInterface
	wri  dynamic.ResourceInterface
	name string
	path []string
	desc string
	// ref names the object in an Event (RecordEvent reads its UID).
	ref corev1.ObjectReference
	// acting: wri is the approver's identity (As), not the agent's.
	acting bool
}

func (x *Executor) noProxyObject(target Target, ref ClusterRef) noProxyObject {
	if target.orDefault() == TargetProxy {
		return noProxyObject{
			ri:     x.Dynamic.Resource(hypershift.ProxyGVR),
			wri:    x.writeDynamic().Resource(hypershift.ProxyGVR),
			name:   hypershift.ProxyName,
			path:   []string{"spec", "noProxy"},
			desc:   "Proxy " + hypershift.ProxyName + " spec.noProxy",
			ref:    corev1.ObjectReference{APIVersion: hypershift.ProxyGVR.GroupVersion().String(), Kind: "Proxy", Name: hypershift.ProxyName},
			acting: x.writer != nil,
		}
	}
	return noProxyObject{
		ri:     x.Dynamic.Resource(hypershift.HostedClusterGVR).Namespace(ref.Namespace),
		wri:    x.writeDynamic().Resource(hypershift.HostedClusterGVR).Namespace(ref.Namespace),
		name:   ref.Name,
		path:   []string{"spec", "configuration", "proxy", "noProxy"},
		desc:   "HostedCluster " + ref.String() + " spec.configuration.proxy.noProxy",
		ref:    hostedClusterRef(ref),
		acting: x.writer != nil,
	}
}

func hostedClusterRef(ref ClusterRef) corev1.ObjectReference {
	return corev1.ObjectReference{APIVersion: hypershift.HostedClusterGVR.GroupVersion().String(), Kind: "HostedCluster", Namespace: ref.Namespace, Name: ref.Name}
}

func (o noProxyObject) get(ctx context.Context) (*unstructured.Unstructured, string, error) {
	u, err := o.ri.Get(ctx, o.name, metav1.GetOptions{})
	if err != nil {
		return nil, "", fmt.Errorf("get %s: %w", o.desc, err)
	}
	v, _, err := unstructured.NestedString(u.Object, o.path...)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %s: %w", ErrInvalid, o.desc, err)
	}
	return u, v, nil
}

// write stores value on u, marked with the id of the action that writes
// it (AnnotationAction) in the same patch, so that no moment exists in
// which the value is there and the mark is not: a server-side dry run
// first, so that admission and validation failures surface before
// anything is persisted, then the real patch. Both are JSON merge patches
// carrying u's resourceVersion, which the API server holds as a
// precondition: a concurrent change makes them fail with ErrConflict
// instead of being overwritten. A patch rather than an update, so that
// the write sends, and RBAC and the audit log see, only what it changes
// (the verb is patch); value "" removes the field (a rollback to an empty
// list).
func (o noProxyObject) write(ctx context.Context, u *unstructured.Unstructured, value, mark string) (*unstructured.Unstructured, error) {
	body, err := o.patch(u.GetResourceVersion(), value, mark)
	if err != nil {
		return nil, err
	}
	if err := o.dryRun(ctx, body); err != nil {
		return nil, err
	}
	out, err := o.wri.Patch(ctx, o.name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: fieldManager})
	if err != nil {
		return nil, o.classify("patch", err)
	}
	return out, nil
}

func (o noProxyObject) dryRun(ctx context.Context, body []byte) error {
	if _, err := o.wri.Patch(ctx, o.name, types.MergePatchType, body, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}, FieldManager: fieldManager}); err != nil {
		return o.classify("dry run", err)
	}
	return nil
}

// permitsFound asks, acting as the approver, whether they may make the
// write an earlier attempt made (found in place with the action's mark):
// a dry run of it as them. The mark is written by whoever can patch the
// object, and a change is reported as the approver's only if RBAC would
// have let them make it. The agent's own writes need no such proof.
func (o noProxyObject) permitsFound(ctx context.Context, u *unstructured.Unstructured, value, mark string) error {
	if !o.acting {
		return nil
	}
	// No resourceVersion precondition: it asks about permission, and a
	// status write of HyperShift's in between must not refuse it.
	body, err := o.patch("", value, mark)
	if err != nil {
		return err
	}
	return o.dryRun(ctx, body)
}

// patch is the merge patch of write: the resourceVersion precondition,
// the mark and the value (null removes it).
func (o noProxyObject) patch(resourceVersion, value, mark string) ([]byte, error) {
	var v any
	if value != "" {
		v = value
	}
	md := map[string]any{"annotations": map[string]any{AnnotationAction: mark}}
	if resourceVersion != "" {
		md["resourceVersion"] = resourceVersion
	}
	p := map[string]any{"metadata": md}
	if err := unstructured.SetNestedField(p, v, o.path...); err != nil {
		return nil, fmt.Errorf("patch of %s: %w", o.desc, err)
	}
	body, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("patch of %s: %w", o.desc, err)
	}
	return body, nil
}

func (o noProxyObject) classify(step string, err error) error {
	switch {
	case apierrors.IsConflict(err):
		return fmt.Errorf("%w: %s: %s changed while the action ran: %w", ErrConflict, step, o.desc, err)
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err), apierrors.IsForbidden(err):
		// Forbidden is RBAC saying no to the identity the write runs as
		// (the approver's, who may have lost the permission since Access
		// said yes), or an admission policy or webhook: a definite answer,
		// whose message names the missing permission or the policy.
		return fmt.Errorf("%w: %s of %s: %w", ErrRejected, step, o.desc, err)
	}
	return fmt.Errorf("%s of %s: %w", step, o.desc, err)
}

const fieldManager = "hcpbot"

// PatchNoProxy appends the missing entries of req.NoProxy.Add to the
// noProxy list, keeping the user's entries and their order. It returns
// ErrConflict, writing nothing, when the list no longer equals Expected or
// changes during the call, and outcome "unchanged" when every entry is
// already there. The write marks the object with the action id
// (AnnotationAction); a re-run of the action that finds its own mark on the
// value it writes reports "applied" with the first run's Undo.
//
// A write refused for a stale resourceVersion is read and tried again
// (bounded by retry.DefaultRetry): HyperShift writes the HostedCluster's
// status all the time, and such a write leaves the noProxy the proposal
// was made for. Only when the re-read list differs from Expected does the
// conflict stand.
func (x *Executor) PatchNoProxy(ctx context.Context, req Change) (*Result, error) {
	if req.Type != TypeNoProxyPatch {
		return nil, fmt.Errorf("%w: PatchNoProxy got a %q request", ErrInvalid, req.Type)
	}
	c, err := check(req)
	if err != nil {
		return nil, err
	}
	return x.patchNoProxy(ctx, c)
}

// patchNoProxy is PatchNoProxy of a validated request.
func (x *Executor) patchNoProxy(ctx context.Context, c checked) (*Result, error) {
	req := c.req
	obj := x.noProxyObject(req.NoProxy.Target, req.Cluster)
	var res *Result
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var err error
		res, err = x.patchNoProxyOnce(ctx, req, obj, false)
		return err
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// patchNoProxyOnce is one read, compare and write of PatchNoProxy; its
// error is an API conflict (apierrors.IsConflict) only when the write met
// a newer resourceVersion. With observe it writes nothing and returns a
// nil Result where it would have written.
func (x *Executor) patchNoProxyOnce(ctx context.Context, req Change, obj noProxyObject, observe bool) (*Result, error) {
	p := req.NoProxy
	u, current, err := obj.get(ctx)
	if err != nil {
		return nil, err
	}
	after := noproxy.Merge(p.Expected, p.Add)
	mine := u.GetAnnotations()[AnnotationAction] == req.ID
	if current != p.Expected {
		if mine && current == after {
			// An earlier attempt of this very action wrote it and its
			// result was never recorded (the agent died after the write,
			// or the response was lost): report what that attempt did.
			if err := obj.permitsFound(ctx, u, after, req.ID); err != nil {
				return nil, err
			}
			res := noProxyApplied(req, obj, p.Expected, after, u.GetResourceVersion())
			res.Summary = fmt.Sprintf("Already in place from an earlier attempt of action %s (nothing written now): added %s to %s.",
				req.ID, strings.Join(res.Added, ", "), obj.desc)
			return res, nil
		}
		if mine {
			return nil, fmt.Errorf("%w: %s is %q; an earlier attempt of action %s wrote %q, which has been changed since", ErrConflict, obj.desc, current, req.ID, after)
		}
		// Even when current is exactly the value this action would write,
		// it is not this action's write without the mark: someone else (a
		// person, another action) made the same edit. "applied" would then
		// offer a Roll back that reverts their edit, and "unchanged" would
		// claim the proposal's value was found, which it was not: the
		// conflict stands, and a proposal made again from the current value
		// reports "unchanged".
		return nil, fmt.Errorf("%w: %s is %q, the proposal was made for %q", ErrConflict, obj.desc, current, p.Expected)
	}
	// Compare with the list merged with nothing, not with current: a list
	// that only differs by whitespace already holds every entry, and
	// tidying a user's spacing is no reason to roll out every NodePool.
	if after == noproxy.Merge(current, nil) {
		res := &Result{ActionID: req.ID, Type: req.Type, Outcome: OutcomeUnchanged, Before: current, After: current}
		res.Summary = fmt.Sprintf("%s already contains %s; nothing changed.", obj.desc, strings.Join(p.Add, ", "))
		return res, nil
	}
	if observe {
		return nil, nil
	}
	written, err := obj.write(ctx, u, after, req.ID)
	if err != nil {
		return nil, err
	}
	return noProxyApplied(req, obj, current, after, written.GetResourceVersion()), nil
}

// noProxyApplied is the Result of patch req having changed before to
// after, leaving the object at resourceVersion rv.
func noProxyApplied(req Change, obj noProxyObject, before, after, rv string) *Result {
	p := req.NoProxy
	res := &Result{ActionID: req.ID, Type: req.Type, Outcome: OutcomeApplied, Before: before, After: after}
	res.Added = added(before, after)
	res.Diff = valueDiff(obj.desc, before, after)
	res.Summary = fmt.Sprintf("Added %s to %s.", strings.Join(res.Added, ", "), obj.desc)
	if p.Target.orDefault() == TargetHostedCluster {
		res.Summary += " HyperShift now rolls the change out to every NodePool of the cluster."
	}
	res.Undo = &Undo{
		ActionID: req.ID, Type: TypeNoProxyPatch, Cluster: req.Cluster,
		NoProxy: &NoProxyUndo{Target: p.Target, Previous: before, Written: after, ResourceVersion: rv},
	}
	return res
}

// added lists the entries of after that before lacks (Merge appends them).
func added(before, after string) []string {
	n := len(noproxy.Parse(noproxy.Merge(before, nil)))
	var out []string
	for i, e := range noproxy.Parse(after) {
		if i >= n {
			out = append(out, e.Text)
		}
	}
	return out
}

func valueDiff(desc, before, after string) string {
	return fmt.Sprintf("--- %s\n+++ %s\n-%s\n+%s\n", desc, desc, before, after)
}

// rollbackNoProxy restores the value from before undo's action, marking
// the object with mark (the rollback's own id). With observe it writes
// nothing and returns a nil Result where it would have written.
func (x *Executor) rollbackNoProxy(ctx context.Context, mark string, undo Undo, observe bool) (*Result, error) {
	n := undo.NoProxy
	obj := x.noProxyObject(n.Target, undo.Cluster)
	u, current, err := obj.get(ctx)
	if err != nil {
		return nil, err
	}
	res := &Result{ActionID: undo.ActionID, Type: TypeRollback, Before: current}
	// The value, not the resourceVersion, decides: status updates and
	// unrelated spec edits change the version without touching noProxy.
	if current != n.Written {
		if current == n.Previous && u.GetAnnotations()[AnnotationAction] == mark {
			// An earlier attempt of this rollback restored it; its result
			// was not recorded.
			if err := obj.permitsFound(ctx, u, n.Previous, mark); err != nil {
				return nil, err
			}
			res.Outcome, res.Before, res.After = OutcomeRolledBack, n.Written, n.Previous
			res.Diff = valueDiff(obj.desc, n.Written, n.Previous)
			res.Summary = fmt.Sprintf("Already in place from an earlier attempt of this rollback (nothing written now): restored %s to its value from before action %s.", obj.desc, undo.ActionID)
			return res, nil
		}
		if current == n.Previous {
			// Without the mark someone else restored it: nothing this
			// rollback did, so nothing to report as rolled back.
			res.Outcome, res.After = OutcomeUnchanged, current
			res.Summary = fmt.Sprintf("%s already holds the value from before action %s; nothing changed.", obj.desc, undo.ActionID)
			return res, nil
		}
		return nil, fmt.Errorf("%w: %s is %q, not %q as action %s left it; not restoring %q", ErrConflict, obj.desc, current, n.Written, undo.ActionID, n.Previous)
	}
	if observe {
		return nil, nil
	}
	if _, err := obj.write(ctx, u, n.Previous, mark); err != nil {
		return nil, err
	}
	res.Outcome, res.After = OutcomeRolledBack, n.Previous
	res.Diff = valueDiff(obj.desc, current, n.Previous)
	res.Summary = fmt.Sprintf("Restored %s to its value from before action %s.", obj.desc, undo.ActionID)
	if u.GetResourceVersion() != n.ResourceVersion {
		res.Summary += " The object had been modified since (other fields), those changes were kept."
	}
	return res, nil
}
