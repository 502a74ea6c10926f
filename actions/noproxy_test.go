package actions_test

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv"
	"github.com/hcpbot/hcpbot/noproxy"
)

const fixedNoProxy = scenario.SeedNoProxy + ",kubernetes,172.31.0.0/16,10.132.0.0/14"

// seedCluster creates the seed 000 HostedCluster in the management cluster
// only: the noProxy action never talks to the hosted cluster, so no hosted
// API server is started (the kubeconfig Secret holds a placeholder).
func seedCluster(t *testing.T, c scenario.Cluster) *hypershift.HostedCluster {
	t.Helper()
	hc, err := scenario.Create(context.Background(), env.Kube, env.Dynamic, c, []byte("placeholder"))
	if err != nil {
		t.Fatal(err)
	}
	return hc
}

func readHC(t *testing.T, ns, name string) (noProxy, resourceVersion string) {
	t.Helper()
	u, err := env.Dynamic.Resource(hypershift.HostedClusterGVR).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	v, _, _ := unstructured.NestedString(u.Object, "spec", "configuration", "proxy", "noProxy")
	return v, u.GetResourceVersion()
}

func patchRequest(id string, c scenario.Cluster, expected string) actions.Change {
	return actions.Change{
		ID: id, Type: actions.TypeNoProxyPatch, RequestedBy: "alice",
		Cluster: actions.ClusterRef{Namespace: c.Namespace, Name: c.Name},
		NoProxy: &actions.NoProxyParams{Expected: expected, Add: []string{"kubernetes", "172.31.0.0/16", "10.132.0.0/14"}},
	}
}

// Seed 000: the fix adds kubernetes and both CIDRs after the user's entries,
// and running it again changes nothing.
func TestPatchNoProxySeed000(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	c := scenario.BehindProxy(env.Namespace(t), "example")
	hc := seedCluster(t, c)

	// The proposal the diagnosis would make, for the record.
	missing := noproxy.Missing(noproxy.ClusterProxy{
		HTTPProxy: c.HTTPProxy, HTTPSProxy: c.HTTPSProxy, NoProxy: hc.Proxy().NoProxy, Platform: hc.Spec.Platform.Type,
		ServiceCIDRs: hypershift.CIDRs(hc.Spec.Networking.ServiceNetwork), ClusterCIDRs: hypershift.CIDRs(hc.Spec.Networking.ClusterNetwork),
	})
	req := patchRequest("fix-0001abcd", c, scenario.SeedNoProxy)
	if !slices.Equal(missing, req.NoProxy.Add) {
		t.Fatalf("noproxy.Missing = %q, test proposes %q", missing, req.NoProxy.Add)
	}

	x, mgmt, _ := executor(t)
	res, err := x.Execute(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	res0 := res
	mgmt.expect(t, "apply", "get hostedclusters", "patch hostedclusters dry-run", "patch hostedclusters")
	got, rv := readHC(t, c.Namespace, c.Name)
	if got != fixedNoProxy {
		t.Errorf("noProxy = %q, want %q", got, fixedNoProxy)
	}
	if res.Outcome != actions.OutcomeApplied || res.Before != scenario.SeedNoProxy || res.After != fixedNoProxy ||
		!slices.Equal(res.Added, req.NoProxy.Add) || res.Diff == "" || res.Summary == "" {
		t.Errorf("result %+v", res)
	}
	if u := res.Undo; u == nil || u.NoProxy == nil || u.NoProxy.Previous != scenario.SeedNoProxy || u.NoProxy.Written != fixedNoProxy || u.NoProxy.ResourceVersion != rv {
		t.Errorf("undo %+v, want previous/written and resourceVersion %s", res.Undo, rv)
	}

	// Idempotent: re-proposed from the new value, nothing to do.
	res, err = x.Execute(ctx, patchRequest("fix-0002abcd", c, fixedNoProxy))
	if err != nil {
		t.Fatal(err)
	}
	mgmt.expect(t, "second run", "get hostedclusters")
	if res.Outcome != actions.OutcomeUnchanged || res.Undo != nil {
		t.Errorf("second run: %+v", res)
	}
	if _, rv2 := readHC(t, c.Namespace, c.Name); rv2 != rv {
		t.Errorf("second run wrote: resourceVersion %s → %s", rv, rv2)
	}

	// The first request replayed (its result lost) finds its own write,
	// marked with its id: applied as before, with the same Undo, and no
	// double add.
	first := res0
	replay, err := x.Execute(ctx, req)
	if err != nil {
		t.Fatalf("replayed request: %v", err)
	}
	mgmt.expect(t, "replay", "get hostedclusters")
	if replay.Outcome != actions.OutcomeApplied || !reflect.DeepEqual(replay.Undo, first.Undo) || replay.Before != first.Before || replay.After != first.After {
		t.Errorf("replayed request: %+v, want applied with undo %+v", replay, first.Undo)
	}
	if got, rv2 := readHC(t, c.Namespace, c.Name); got != fixedNoProxy || rv2 != rv {
		t.Errorf("replay wrote: noProxy %q, resourceVersion %s → %s", got, rv, rv2)
	}
}

// Whitespace-only differences hold every entry already: no rollout for that.
func TestPatchNoProxyUnchangedKeepsSpacing(t *testing.T) {
	env.Need(t)
	c := scenario.BehindProxy(env.Namespace(t), "spaced")
	c.NoProxy = " kubernetes , 172.31.0.0/16,10.132.0.0/14 "
	seedCluster(t, c)
	x, mgmt, _ := executor(t)
	res, err := x.PatchNoProxy(context.Background(), patchRequest("fix-0003abcd", c, c.NoProxy))
	if err != nil {
		t.Fatal(err)
	}
	mgmt.expect(t, "unchanged", "get hostedclusters")
	if got, _ := readHC(t, c.Namespace, c.Name); res.Outcome != actions.OutcomeUnchanged || got != c.NoProxy {
		t.Errorf("outcome %s, noProxy %q", res.Outcome, got)
	}
}

// Someone edited the HostedCluster between proposal and execution.
func TestPatchNoProxyExpectedMismatch(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	c := scenario.BehindProxy(env.Namespace(t), "edited")
	seedCluster(t, c)
	const edited = scenario.SeedNoProxy + ",.other.example"
	if err := scenario.SetNoProxy(ctx, env.Dynamic, c.Namespace, c.Name, edited); err != nil {
		t.Fatal(err)
	}
	_, rv := readHC(t, c.Namespace, c.Name)

	x, mgmt, _ := executor(t)
	_, err := x.Execute(ctx, patchRequest("fix-0004abcd", c, scenario.SeedNoProxy))
	if !errors.Is(err, actions.ErrConflict) {
		t.Fatalf("err = %v, want ErrConflict", err)
	}
	mgmt.expect(t, "conflict", "get hostedclusters")
	if got, rv2 := readHC(t, c.Namespace, c.Name); got != edited || rv2 != rv {
		t.Errorf("HostedCluster written: noProxy %q rv %s→%s", got, rv, rv2)
	}
}

// The HostedCluster changes after the dry run and before the write: the
// resourceVersion precondition stops the write, the other edit survives.
func TestPatchNoProxyChangedDuringExecution(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	c := scenario.BehindProxy(env.Namespace(t), "racy")
	seedCluster(t, c)
	const late = scenario.SeedNoProxy + ",.late.example"

	x, mgmt, _ := executor(t)
	edited := false
	mgmt.after = func(a string) {
		if a == "patch hostedclusters dry-run" && !edited {
			edited = true
			if err := scenario.SetNoProxy(ctx, env.Dynamic, c.Namespace, c.Name, late); err != nil {
				t.Error(err)
			}
		}
	}
	_, err := x.Execute(ctx, patchRequest("fix-0005abcd", c, scenario.SeedNoProxy))
	if !errors.Is(err, actions.ErrConflict) {
		t.Fatalf("err = %v, want ErrConflict", err)
	}
	// The conflict is read again (it might have been a status write), and
	// the re-read noProxy is not the expected one: nothing more is sent.
	mgmt.expect(t, "raced", "get hostedclusters", "patch hostedclusters dry-run", "patch hostedclusters", "get hostedclusters")
	if got, _ := readHC(t, c.Namespace, c.Name); got != late {
		t.Errorf("noProxy = %q, the concurrent edit %q was overwritten", got, late)
	}
}

// HyperShift writes the status after the patch read the HostedCluster:
// the update meets a newer resourceVersion, the re-read noProxy still is
// the expected one, so the patch is read, checked and written again, and
// applies once; the status write survives.
func TestPatchNoProxyStatusWriteRetried(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	c := scenario.BehindProxy(env.Namespace(t), "status-race")
	seedCluster(t, c)
	ri := env.Dynamic.Resource(hypershift.HostedClusterGVR).Namespace(c.Namespace)

	x, mgmt, _ := executor(t)
	wrote := false
	mgmt.after = func(a string) {
		if a != "patch hostedclusters dry-run" || wrote {
			return
		}
		wrote = true
		hyperShiftStatusWrite(t, c)
	}
	res, err := x.Execute(ctx, patchRequest("fix-0007abcd", c, scenario.SeedNoProxy))
	if err != nil {
		t.Fatalf("err = %v, want the patch applied after the status write", err)
	}
	if res.Outcome != actions.OutcomeApplied {
		t.Errorf("outcome = %q, want %q", res.Outcome, actions.OutcomeApplied)
	}
	mgmt.expect(t, "retried", "get hostedclusters", "patch hostedclusters dry-run", "patch hostedclusters",
		"get hostedclusters", "patch hostedclusters dry-run", "patch hostedclusters")
	got, rv := readHC(t, c.Namespace, c.Name)
	if got != fixedNoProxy {
		t.Errorf("noProxy = %q, want %q", got, fixedNoProxy)
	}
	if res.Undo == nil || res.Undo.NoProxy.ResourceVersion != rv {
		t.Errorf("undo = %+v, want the resourceVersion of the retried write %s", res.Undo, rv)
	}
	u, err := ri.Get(ctx, c.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if port, _, _ := unstructured.NestedInt64(u.Object, "status", "controlPlaneEndpoint", "port"); port != 6444 {
		t.Errorf("status port = %d, the status write was lost", port)
	}
}

// hyperShiftStatusWrite writes the HostedCluster's status as HyperShift
// does all the time (status.controlPlaneEndpoint.port 6444): a new
// resourceVersion, spec untouched.
func hyperShiftStatusWrite(t *testing.T, c scenario.Cluster) {
	t.Helper()
	ctx := context.Background()
	ri := env.Dynamic.Resource(hypershift.HostedClusterGVR).Namespace(c.Namespace)
	u, err := ri.Get(ctx, c.Name, metav1.GetOptions{})
	if err != nil {
		t.Error(err)
		return
	}
	_ = unstructured.SetNestedField(u.Object, int64(6444), "status", "controlPlaneEndpoint", "port")
	if _, err := ri.UpdateStatus(ctx, u, metav1.UpdateOptions{}); err != nil {
		t.Error(err)
	}
}

// An admission policy that refuses the change in the dry run: the refusal
// surfaces as ErrRejected and the real write is never sent. The policy
// denies dry runs only, so the test also proves the dry run comes first.
// (The CRD accepts any noProxy string, so a policy stands in for the
// validating webhook a real management cluster may run.)
func TestPatchNoProxyDryRunRejected(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	c := scenario.BehindProxy(env.Namespace(t), "policed")
	seedCluster(t, c)

	name := "hcpbot-test-" + c.Namespace
	policy := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr(admissionv1.Fail),
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Update},
					Rule:       admissionv1.Rule{APIGroups: []string{"hypershift.openshift.io"}, APIVersions: []string{"*"}, Resources: []string{"hostedclusters"}},
				},
			}}},
			Validations: []admissionv1.Validation{{
				Expression: `!(has(request.dryRun) && request.dryRun) || !object.spec.configuration.proxy.noProxy.contains('10.132.0.0/14')`,
				Message:    "test policy: the cluster network may not be added here",
			}},
		},
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
			MatchResources: &admissionv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"kubernetes.io/metadata.name": c.Namespace},
			}},
		},
	}
	vap := env.Kube.AdmissionregistrationV1()
	if _, err := vap.ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = vap.ValidatingAdmissionPolicies().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	if _, err := vap.ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = vap.ValidatingAdmissionPolicyBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
	})

	// The API server loads policies asynchronously; wait until it enforces.
	ri := env.Dynamic.Resource(hypershift.HostedClusterGVR).Namespace(c.Namespace)
	testenv.Eventually(t, 30*time.Second, "the policy to deny dry runs", func() bool {
		u, err := ri.Get(ctx, c.Name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		_ = unstructured.SetNestedField(u.Object, fixedNoProxy, "spec", "configuration", "proxy", "noProxy")
		_, err = ri.Update(ctx, u, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil
	})
	_, rv := readHC(t, c.Namespace, c.Name)

	x, mgmt, _ := executor(t)
	_, err := x.Execute(ctx, patchRequest("fix-0006abcd", c, scenario.SeedNoProxy))
	if !errors.Is(err, actions.ErrRejected) {
		t.Fatalf("err = %v, want ErrRejected", err)
	}
	t.Logf("surfaced: %v", err)
	mgmt.expect(t, "rejected", "get hostedclusters", "patch hostedclusters dry-run")
	if got, rv2 := readHC(t, c.Namespace, c.Name); got != scenario.SeedNoProxy || rv2 != rv {
		t.Errorf("written despite the rejection: %q rv %s→%s", got, rv, rv2)
	}
}

func ptr[T any](v T) *T { return &v }

func TestRollbackNoProxy(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	c := scenario.BehindProxy(env.Namespace(t), "undo")
	seedCluster(t, c)
	x, mgmt, _ := executor(t)

	res, err := x.Execute(ctx, patchRequest("fix-0007abcd", c, scenario.SeedNoProxy))
	if err != nil {
		t.Fatal(err)
	}
	// Rollback travels as a request, like any other action.
	undo := actions.Change{ID: "undo-0007abcd", Type: actions.TypeRollback, Cluster: res.Undo.Cluster, RequestedBy: "bob",
		Rollback: &actions.RollbackParams{Undo: *res.Undo}}
	mgmt.take()
	rb, err := x.Execute(ctx, undo)
	if err != nil {
		t.Fatal(err)
	}
	mgmt.expect(t, "rollback", "get hostedclusters", "patch hostedclusters dry-run", "patch hostedclusters")
	if got, _ := readHC(t, c.Namespace, c.Name); got != scenario.SeedNoProxy || rb.Outcome != actions.OutcomeRolledBack {
		t.Errorf("after rollback: noProxy %q, outcome %s", got, rb.Outcome)
	}
	// Twice is harmless.
	if rb, err := x.Rollback(ctx, *res.Undo); err != nil || rb.Outcome != actions.OutcomeUnchanged {
		t.Errorf("second rollback: %+v, %v", rb, err)
	}
	mgmt.expect(t, "second rollback", "get hostedclusters")

	// Apply again; then someone changes the list: the rollback must not
	// throw their change away.
	res, err = x.Execute(ctx, patchRequest("fix-0008abcd", c, scenario.SeedNoProxy))
	if err != nil {
		t.Fatal(err)
	}
	const theirs = fixedNoProxy + ",.theirs.example"
	if err := scenario.SetNoProxy(ctx, env.Dynamic, c.Namespace, c.Name, theirs); err != nil {
		t.Fatal(err)
	}
	mgmt.take()
	if _, err := x.Rollback(ctx, *res.Undo); !errors.Is(err, actions.ErrConflict) {
		t.Errorf("rollback after a foreign edit: %v, want ErrConflict", err)
	}
	mgmt.expect(t, "conflicting rollback", "get hostedclusters")
	if got, _ := readHC(t, c.Namespace, c.Name); got != theirs {
		t.Errorf("noProxy = %q, want their edit %q kept", got, theirs)
	}
}

// Standalone OpenShift: the same action on Proxy/cluster.
func TestPatchNoProxyOpenShiftProxy(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	ri := env.Dynamic.Resource(hypershift.ProxyGVR)
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{
		"httpsProxy": "http://proxy.corp.example:3128", "noProxy": ".corp.example",
	}}}
	u.SetAPIVersion("config.openshift.io/v1")
	u.SetKind("Proxy")
	u.SetName(hypershift.ProxyName)
	if _, err := ri.Create(ctx, u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ri.Delete(context.Background(), hypershift.ProxyName, metav1.DeleteOptions{}) })

	x, mgmt, _ := executor(t)
	req := actions.Change{ID: "fix-0009abcd", Type: actions.TypeNoProxyPatch, RequestedBy: "alice",
		Cluster: actions.ClusterRef{Name: hypershift.ProxyName},
		NoProxy: &actions.NoProxyParams{Target: actions.TargetProxy, Expected: ".corp.example", Add: []string{"kubernetes", ".corp.example"}}}
	res, err := x.Execute(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	mgmt.expect(t, "apply", "get proxies", "patch proxies dry-run", "patch proxies")
	got, _ := ri.Get(ctx, hypershift.ProxyName, metav1.GetOptions{})
	if v, _, _ := unstructured.NestedString(got.Object, "spec", "noProxy"); v != ".corp.example,kubernetes" || !slices.Equal(res.Added, []string{"kubernetes"}) {
		t.Errorf("Proxy noProxy = %q, added %q", v, res.Added)
	}
	if _, err := x.Rollback(ctx, *res.Undo); err != nil {
		t.Fatal(err)
	}
	got, _ = ri.Get(ctx, hypershift.ProxyName, metav1.GetOptions{})
	if v, _, _ := unstructured.NestedString(got.Object, "spec", "noProxy"); v != ".corp.example" {
		t.Errorf("after rollback: %q", v)
	}
}
