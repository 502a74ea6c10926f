package actions_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/internal/scenario"
)

// readMark is the HostedCluster's AnnotationAction.
func readMark(t *testing.T, ns, name string) string {
	t.Helper()
	u, err := env.Dynamic.Resource(hypershift.HostedClusterGVR).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return u.GetAnnotations()[actions.AnnotationAction]
}

// observe is Observe that must not fail and must not write.
func observe(t *testing.T, x *actions.Executor, mgmt *recorder, ch actions.Change) (*actions.Result, bool) {
	t.Helper()
	mgmt.take()
	res, in, err := x.Observe(context.Background(), ch)
	if err != nil {
		t.Fatalf("Observe %s: %v", ch.ID, err)
	}
	for _, a := range mgmt.take() {
		if !strings.HasPrefix(a, "get ") && !strings.HasPrefix(a, "list ") {
			t.Errorf("Observe %s wrote: %s", ch.ID, a)
		}
	}
	return res, in
}

// The agent dies after the HostedCluster write and before the result is
// recorded (the patch's answer is lost). The write carries the action's
// mark; the redelivered request finds it and reports the change applied,
// with the Undo of the first run, and the later rollback works the same
// way through its own lost write.
func TestPatchNoProxyReRunAfterLostWrite(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	c := scenario.BehindProxy(env.Namespace(t), "rerun")
	seedCluster(t, c)
	x, mgmt, _ := executor(t)
	req := patchRequest("fix-0101abcd", c, scenario.SeedNoProxy)

	if _, in := observe(t, x, mgmt, req); in {
		t.Error("Observe before any run: in place")
	}
	mgmt.fail = once("patch hostedclusters", failure{lost: true})
	_, err := x.Execute(ctx, req)
	if err == nil || !actions.Transient(err) || errors.Is(err, actions.ErrConflict) {
		t.Fatalf("lost write: err = %v, want a transient error", err)
	}
	mgmt.expect(t, "lost write", "get hostedclusters", "patch hostedclusters dry-run", "patch hostedclusters")
	got, rv := readHC(t, c.Namespace, c.Name)
	if got != fixedNoProxy || readMark(t, c.Namespace, c.Name) != req.ID {
		t.Fatalf("after the lost write: noProxy %q mark %q, want %q marked %s", got, readMark(t, c.Namespace, c.Name), fixedNoProxy, req.ID)
	}
	wantUndo := &actions.Undo{ActionID: req.ID, Type: actions.TypeNoProxyPatch, Cluster: req.Cluster,
		NoProxy: &actions.NoProxyUndo{Previous: scenario.SeedNoProxy, Written: fixedNoProxy, ResourceVersion: rv}}

	// Past the deadline the loop asks what the cluster holds.
	obs, in := observe(t, x, mgmt, req)
	if !in || obs.Outcome != actions.OutcomeApplied || !reflect.DeepEqual(obs.Undo, wantUndo) {
		t.Errorf("Observe after the lost write: in place %v, %+v", in, obs)
	}

	// The redelivered request.
	res, err := x.Execute(ctx, req)
	if err != nil {
		t.Fatalf("re-run: %v", err)
	}
	mgmt.expect(t, "re-run", "get hostedclusters")
	if res.Outcome != actions.OutcomeApplied || !reflect.DeepEqual(res.Undo, wantUndo) ||
		res.Before != scenario.SeedNoProxy || res.After != fixedNoProxy || !reflect.DeepEqual(res.Added, req.NoProxy.Add) ||
		!strings.Contains(res.Summary, "earlier attempt of action "+req.ID) {
		t.Errorf("re-run: %+v, undo %+v; want applied with undo %+v", res, res.Undo, wantUndo)
	}
	if !reflect.DeepEqual(obs, res) {
		t.Errorf("Observe reported %+v, the re-run %+v", obs, res)
	}
	t.Logf("re-run: %s", res.Summary)

	// The rollback, through its own lost write.
	undo := actions.Change{ID: "undo-0101abcd", Type: actions.TypeRollback, Cluster: req.Cluster, RequestedBy: "bob",
		Rollback: &actions.RollbackParams{Undo: *res.Undo}}
	if _, in := observe(t, x, mgmt, undo); in {
		t.Error("Observe of the rollback before it ran: in place")
	}
	mgmt.fail = once("patch hostedclusters", failure{lost: true})
	if _, err := x.Execute(ctx, undo); !actions.Transient(err) {
		t.Fatalf("lost rollback write: err = %v, want a transient error", err)
	}
	mgmt.take()
	if got, _ := readHC(t, c.Namespace, c.Name); got != scenario.SeedNoProxy || readMark(t, c.Namespace, c.Name) != undo.ID {
		t.Fatalf("after the lost rollback: noProxy %q mark %q, want %q marked %s", got, readMark(t, c.Namespace, c.Name), scenario.SeedNoProxy, undo.ID)
	}
	if obs, in := observe(t, x, mgmt, undo); !in || obs.Outcome != actions.OutcomeRolledBack {
		t.Errorf("Observe of the rollback: in place %v, %+v", in, obs)
	}
	if _, in := observe(t, x, mgmt, req); in {
		t.Error("Observe of the patch after its rollback: in place")
	}
	rb, err := x.Execute(ctx, undo)
	if err != nil {
		t.Fatalf("rollback re-run: %v", err)
	}
	mgmt.expect(t, "rollback re-run", "get hostedclusters")
	if rb.Outcome != actions.OutcomeRolledBack || rb.After != scenario.SeedNoProxy || !strings.Contains(rb.Summary, "earlier attempt of this rollback") {
		t.Errorf("rollback re-run: %+v", rb)
	}

	// A rollback without a request of its own marks differently: the
	// rollback request's re-run is not confused with it.
	res2, err := x.Execute(ctx, patchRequest("fix-0102abcd", c, scenario.SeedNoProxy))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := x.Rollback(ctx, *res2.Undo); err != nil {
		t.Fatal(err)
	}
	if m := readMark(t, c.Namespace, c.Name); m != actions.DirectRollbackMark("fix-0102abcd") {
		t.Errorf("mark after Rollback = %q", m)
	}
}

// The value a patch would write, written by someone else (a person, or
// another action): without this action's mark it is no re-run, and the
// value-changed conflict stands; so does a later edit of the action's own
// write.
func TestPatchNoProxySameEditBySomeoneElse(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	c := scenario.BehindProxy(env.Namespace(t), "same-edit")
	seedCluster(t, c)
	x, mgmt, _ := executor(t)
	req := patchRequest("fix-0103abcd", c, scenario.SeedNoProxy)

	if err := scenario.SetNoProxy(ctx, env.Dynamic, c.Namespace, c.Name, fixedNoProxy); err != nil {
		t.Fatal(err)
	}
	if _, err := x.Execute(ctx, req); !errors.Is(err, actions.ErrConflict) {
		t.Errorf("same edit by a person: %v, want ErrConflict", err)
	}
	if _, in := observe(t, x, mgmt, req); in {
		t.Error("Observe of the same edit by a person: in place")
	}

	// Another action's mark on the same value.
	other := patchRequest("fix-0104abcd", c, fixedNoProxy)
	other.NoProxy.Add = []string{".other.example"}
	o, err := x.Execute(ctx, other)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := x.Rollback(ctx, *o.Undo); err != nil {
		t.Fatal(err)
	}
	if _, err := x.Execute(ctx, req); !errors.Is(err, actions.ErrConflict) {
		t.Errorf("same value marked by another action: %v, want ErrConflict", err)
	}

	// This action's own write, edited since.
	if err := scenario.SetNoProxy(ctx, env.Dynamic, c.Namespace, c.Name, scenario.SeedNoProxy); err != nil {
		t.Fatal(err)
	}
	if _, err := x.Execute(ctx, req); err != nil {
		t.Fatal(err)
	}
	const later = fixedNoProxy + ",.later.example"
	if err := scenario.SetNoProxy(ctx, env.Dynamic, c.Namespace, c.Name, later); err != nil {
		t.Fatal(err)
	}
	_, err = x.Execute(ctx, req)
	if !errors.Is(err, actions.ErrConflict) || !strings.Contains(err.Error(), "changed since") {
		t.Errorf("own write edited since: %v, want ErrConflict naming the earlier attempt", err)
	}
	if got, _ := readHC(t, c.Namespace, c.Name); got != later {
		t.Errorf("noProxy = %q, want the later edit %q kept", got, later)
	}
	if _, in := observe(t, x, mgmt, req); in {
		t.Error("Observe of an edited write: in place")
	}
}

// A failure before the API server wrote anything: transient, nothing in
// place, and the request succeeds when it comes again.
func TestPatchNoProxyTransientBeforeWrite(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	c := scenario.BehindProxy(env.Namespace(t), "unavailable")
	seedCluster(t, c)
	x, mgmt, _ := executor(t)
	req := patchRequest("fix-0105abcd", c, scenario.SeedNoProxy)
	hcs := schema.GroupResource{Group: hypershift.HostedClusterGVR.Group, Resource: hypershift.HostedClusterGVR.Resource}
	for _, f := range []*apierrors.StatusError{
		apierrors.NewServiceUnavailable("the API server is shutting down"),
		apierrors.NewInternalError(errors.New("etcdserver: leader changed")),
		apierrors.NewTooManyRequests("the server has received too many requests", 1),
		apierrors.NewTimeoutError("request did not complete within 60s", 0),
		apierrors.NewServerTimeout(hcs, "patch", 0),
	} {
		mgmt.fail = once("patch hostedclusters dry-run", failure{status: f})
		_, err := x.Execute(ctx, req)
		if !actions.Transient(err) {
			t.Errorf("%s: err = %v, want transient", f.Status().Reason, err)
		}
		if got, _ := readHC(t, c.Namespace, c.Name); got != scenario.SeedNoProxy {
			t.Fatalf("%s: written: %q", f.Status().Reason, got)
		}
		if _, in := observe(t, x, mgmt, req); in {
			t.Errorf("%s: Observe: in place", f.Status().Reason)
		}
	}
	mgmt.fail = nil
	res, err := x.Execute(ctx, req)
	if err != nil || res.Outcome != actions.OutcomeApplied || strings.Contains(res.Summary, "earlier attempt") {
		t.Errorf("once the API server answers: %+v, %v", res, err)
	}
}
