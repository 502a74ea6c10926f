package actions

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"

	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/noproxy"
)

// noProxyObject locates the noProxy string of a target.
type noProxyObject struct {
	ri   dynamic.ResourceInterface
	name string
	path []string
	desc string
}

func (x *Executor) noProxyObject(target Target, ref ClusterRef) noProxyObject {
	if target.orDefault() == TargetProxy {
		return noProxyObject{
			ri:   x.Dynamic.Resource(hypershift.ProxyGVR),
			name: hypershift.ProxyName,
			path: []string{"spec", "noProxy"},
			desc: "Proxy " + hypershift.ProxyName + " spec.noProxy",
		}
	}
	return noProxyObject{
		ri:   x.Dynamic.Resource(hypershift.HostedClusterGVR).Namespace(ref.Namespace),
		name: ref.Name,
		path: []string{"spec", "configuration", "proxy", "noProxy"},
		desc: "HostedCluster " + ref.String() + " spec.configuration.proxy.noProxy",
	}
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

// write stores value on u: a server-side dry run first, so that admission
// and validation failures surface before anything is persisted, then the
// real update. Both carry u's resourceVersion, so a concurrent change makes
// them fail with ErrConflict instead of being overwritten.
func (o noProxyObject) write(ctx context.Context, u *unstructured.Unstructured, value string) (*unstructured.Unstructured, error) {
	u = u.DeepCopy()
	if value == "" {
		unstructured.RemoveNestedField(u.Object, o.path...)
	} else if err := unstructured.SetNestedField(u.Object, value, o.path...); err != nil {
		return nil, err
	}
	if _, err := o.ri.Update(ctx, u, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}, FieldManager: fieldManager}); err != nil {
		return nil, o.classify("dry run", err)
	}
	out, err := o.ri.Update(ctx, u, metav1.UpdateOptions{FieldManager: fieldManager})
	if err != nil {
		return nil, o.classify("update", err)
	}
	return out, nil
}

func (o noProxyObject) classify(step string, err error) error {
	switch {
	case apierrors.IsConflict(err):
		return fmt.Errorf("%w: %s: %s changed while the action ran: %w", ErrConflict, step, o.desc, err)
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err), apierrors.IsForbidden(err):
		// Forbidden also covers admission policies and webhooks saying no.
		return fmt.Errorf("%w: %s of %s: %w", ErrRejected, step, o.desc, err)
	}
	return fmt.Errorf("%s of %s: %w", step, o.desc, err)
}

const fieldManager = "hcpbot"

// PatchNoProxy appends the missing entries of req.NoProxy.Add to the
// noProxy list, keeping the user's entries and their order. It returns
// ErrConflict, writing nothing, when the list no longer equals Expected or
// changes during the call, and outcome "unchanged" when every entry is
// already there.
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
		res, err = x.patchNoProxyOnce(ctx, req, obj)
		return err
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// patchNoProxyOnce is one read, compare and write of PatchNoProxy; its
// error is an API conflict (apierrors.IsConflict) only when the write met
// a newer resourceVersion.
func (x *Executor) patchNoProxyOnce(ctx context.Context, req Change, obj noProxyObject) (*Result, error) {
	p := req.NoProxy
	u, current, err := obj.get(ctx)
	if err != nil {
		return nil, err
	}
	res := &Result{ActionID: req.ID, Type: req.Type, Before: current}
	if current != p.Expected {
		return nil, fmt.Errorf("%w: %s is %q, the proposal was made for %q", ErrConflict, obj.desc, current, p.Expected)
	}
	after := noproxy.Merge(current, p.Add)
	// Compare with the list merged with nothing, not with current: a list
	// that only differs by whitespace already holds every entry, and
	// tidying a user's spacing is no reason to roll out every NodePool.
	if after == noproxy.Merge(current, nil) {
		res.Outcome, res.After = OutcomeUnchanged, current
		res.Summary = fmt.Sprintf("%s already contains %s; nothing changed.", obj.desc, strings.Join(p.Add, ", "))
		return res, nil
	}
	written, err := obj.write(ctx, u, after)
	if err != nil {
		return nil, err
	}
	res.Outcome, res.After = OutcomeApplied, after
	res.Added = added(current, after)
	res.Diff = valueDiff(obj.desc, current, after)
	res.Summary = fmt.Sprintf("Added %s to %s.", strings.Join(res.Added, ", "), obj.desc)
	if p.Target.orDefault() == TargetHostedCluster {
		res.Summary += " HyperShift now rolls the change out to every NodePool of the cluster."
	}
	res.Undo = &Undo{
		ActionID: req.ID, Type: TypeNoProxyPatch, Cluster: req.Cluster,
		NoProxy: &NoProxyUndo{Target: p.Target, Previous: current, Written: after, ResourceVersion: written.GetResourceVersion()},
	}
	return res, nil
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

func (x *Executor) rollbackNoProxy(ctx context.Context, undo Undo) (*Result, error) {
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
		if current == n.Previous {
			res.Outcome, res.After = OutcomeUnchanged, current
			res.Summary = fmt.Sprintf("%s already holds the value from before action %s; nothing changed.", obj.desc, undo.ActionID)
			return res, nil
		}
		return nil, fmt.Errorf("%w: %s is %q, not %q as action %s left it; not restoring %q", ErrConflict, obj.desc, current, n.Written, undo.ActionID, n.Previous)
	}
	if _, err := obj.write(ctx, u, n.Previous); err != nil {
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
