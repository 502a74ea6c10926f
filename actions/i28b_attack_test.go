package actions_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/identity"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv"
	"github.com/hcpbot/hcpbot/noproxy"
)

// The second attack review of issue 28 (acting as the approver): each
// test here failed when it was written, and names the attacker of
// docs/security.md it plays.

// An approver without the Kubernetes rights (attacker 4): dave may read,
// not delete Services in the control-plane namespace. An exposure made
// as alice is to be rolled back; its management Service is gone already
// (deleted by hand by an operator, or by anyone who may delete Services
// there). dave's approval of the rollback counts — the agent did not
// answer the identity check, which README leaves to "RBAC at the write".
// The rollback (rollbackExpose) lists the management Services of the
// action with the agent's own client, finds none, so makes no write as
// dave, and goes on to delete the hosted NodePort Service with the
// hosted cluster's admin kubeconfig: a write made for dave with the
// agent's rights, which RBAC never saw; the outcome then says "written as
// Kubernetes user dave". The exposure itself was fixed for this (its
// management dry run as the approver comes before any hosted write); its
// rollback should do the same: a dry-run delete of the management
// Service's name as the approver (Forbidden stops it; NotFound is fine)
// before anything is deleted in the hosted cluster.
//
// Resolved: rollbackExpose dry-runs the management delete as the
// approver before any delete, NotFound being fine.
func TestI28BExposeRollbackDeletesHostedWithoutTheApproversRight(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	c, hosted := kubevirtApp(t, "kvrb")
	cpNS := hypershift.ControlPlaneNamespace(c.Namespace, c.Name)
	agent, _ := asDeployedAgent(t, c.Namespace, idMap)
	grant(t, cpNS, "alice", "", "services", "create", "delete")
	alice, dave := identity.Identity{User: "alice", Groups: []string{"ops"}}, identity.Identity{User: "dave"}

	req := exposeReq("expo-rbk00001", c)
	x, err := agent.As(alice, identity.Extra(req.ID, "UREQUESTER1", []string{"UALICE0001"}))
	if err != nil {
		t.Fatal(err)
	}
	res, err := x.Execute(ctx, req)
	if err != nil || res.Undo == nil {
		t.Fatalf("expose as alice: %+v, %v", res, err)
	}
	hostedName := actions.HostedServiceName("petclinic")
	if got := serviceNames(t, hosted.Kube, appNS); !slices.Contains(got, hostedName) {
		t.Fatalf("hosted Services after the exposure: %q, want %s", got, hostedName)
	}
	// The management Service goes, by someone else's hand.
	if err := env.Kube.CoreV1().Services(cpNS).Delete(ctx, actions.ManagementServiceName(req.ID), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	undo := actions.Change{ID: "undo-rbk00001", Type: actions.TypeRollback, Cluster: req.Cluster, RequestedBy: "UREQUESTER1",
		Rollback: &actions.RollbackParams{Undo: *res.Undo}}
	if missing, err := agent.Access(ctx, dave, undo); err != nil || len(missing) != 1 {
		t.Fatalf("Access(dave, rollback) = %q, %v; want the delete of services named", missing, err)
	}
	x, err = agent.As(dave, identity.Extra(undo.ID, "UREQUESTER1", []string{"UDAVE00001"}))
	if err != nil {
		t.Fatal(err)
	}
	rb, err := x.Execute(ctx, undo)
	got := serviceNames(t, hosted.Kube, appNS)
	if !slices.Contains(got, hostedName) {
		as := ""
		if rb != nil {
			as = rb.As
		}
		t.Errorf("dave, who may not delete Services in %s, had the hosted Service %s deleted with the agent's admin kubeconfig (outcome %v, written as %q, err %v); want ErrRejected and nothing deleted",
			cpNS, hostedName, rb != nil && rb.Outcome == actions.OutcomeRolledBack, as, err)
	} else if !errors.Is(err, actions.ErrRejected) {
		t.Errorf("rollback as dave: %+v, %v; want ErrRejected", rb, err)
	}
}

// Someone who may patch the HostedCluster (attacker 4's peer: a mapped
// approver with the right, or anyone else with it) makes the pending fix
// themselves, marking it with the action id the proposal shows in Slack
// (hcpbot.io/action), before the agent runs it. The approver, carol, may
// not patch at all (Access says so; the check was not answered, or her
// right went since). Acting as carol, the executor finds its "own" mark
// on the value it would write, writes nothing (no request as carol ever
// reaches RBAC) and reports the change applied — written as Kubernetes
// user carol — with a Roll back: hcpbot's outcome, its audit record and
// the Event credit carol with a change she could not make and did not
// make. What should hold: acting as the approver, a change found in
// place is reported as theirs only after RBAC agreed to it (the dry-run
// patch as the approver, or Access), else refused as ErrRejected.
//
// Resolved: acting as the approver, a noProxy change (or rollback) found
// in place is dry-run as them first (noProxyObject.permitsFound), and so
// is an exposure's management Service found in place.
func TestI28BChangeFoundInPlaceIsCreditedToTheApprover(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	c, agent, rec := seededAgent(t, idMap)
	carol := identity.Identity{User: "carol"}
	req := patchRequest("fix-inpl0001", c, scenario.SeedNoProxy)
	if missing, err := agent.Access(ctx, carol, req); err != nil || len(missing) != 1 {
		t.Fatalf("Access(carol) = %q, %v; want the patch named", missing, err)
	}

	// Mallory writes the fix and the action's mark (as the admin here).
	after := noproxy.Merge(req.NoProxy.Expected, req.NoProxy.Add)
	body, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": map[string]any{actions.AnnotationAction: req.ID}},
		"spec":     map[string]any{"configuration": map[string]any{"proxy": map[string]any{"noProxy": after}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Dynamic.Resource(hypershift.HostedClusterGVR).Namespace(c.Namespace).Patch(ctx, c.Name, types.MergePatchType, body, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}

	rec.take()
	x, err := agent.As(carol, identity.Extra(req.ID, "UREQUESTER1", []string{"UCAROL0001"}))
	if err != nil {
		t.Fatal(err)
	}
	res, err := x.Execute(ctx, req)
	calls := rec.take()
	if err == nil && res.Outcome == actions.OutcomeApplied && res.As == "carol" {
		t.Errorf("carol, who may not patch the HostedCluster, is reported to have applied %s (written as %q, Undo %v); the executor's calls: %q — nothing was asked of RBAC as carol",
			req.ID, res.As, res.Undo != nil, calls)
	}
}

// The agent's ServiceAccount token (attacker 2), with the shipped RBAC,
// the shipped admission policy (configs/deploy/agent/admission.yaml) and
// the constrained role `hcpbot rbac` generates. RBAC grants the agent
// Service writes cluster-wide; the policy narrows them to hcpbot's own
// Services in control-plane namespaces, for the agent's own user and for
// its writes as an approver — which it recognises by the hcpbot.io/action
// extra. That extra is the impersonator's to send or not: the token
// impersonates alice without it, and deletes a Service that is not
// hcpbot's, outside any control-plane namespace, wherever alice may
// (here a namespace where she administers Services). The policy's own
// comment: "so that an approver's broader rights never let an hcpbot
// action touch another Service". What should hold: a Service write the
// agent's token makes as a mapped person is held to the policy whatever
// extras it sends — e.g. the policy matching the mapped users of the
// generated role (which `hcpbot rbac` could print beside it), or the
// Service writes left out of the constrained role (the exposure writing
// its management Service with the agent's own, narrowed, rights after a
// dry run as the approver).
//
// Resolved, as far as Kubernetes allows: admission sees only the
// impersonated user and the extras the impersonator chose, and RBAC
// cannot narrow create/delete services to control-plane namespaces or to
// hcpbot's Services; the issue asks for the exposure to be made as the
// approver. So the residual risk is documented (docs/security.md), `hcpbot
// rbac` says it in the generated role's header, and `hcpbot rbac
// --exposure=false` (actions.NoProxyWrites) leaves the Service writes out
// where exposures are not used: the token then cannot touch a Service as
// anyone, which this test shows; with exposures granted it shows the
// bound documented (only Services, where alice may).
func TestI28BAgentTokenAsApproverAndTheServicePolicy(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	agentCfg := env.DeployAgent(t, ns, idMap)
	victim, err := env.Kube.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "payments"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 443}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	grant(t, ns, "alice", "", "services", "get", "delete")
	shippedServicePolicy(t, ns)

	as := func(extra map[string][]string) kubernetes.Interface {
		cfg := rest.CopyConfig(agentCfg)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: "alice", Groups: []string{"ops"}, Extra: extra}
		kc, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return kc
	}
	dry := metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}
	// The policy is in force: the token as alice for an hcpbot action is
	// refused, and so is the token as itself.
	forAction := as(identity.Extra("expo-tok00001", "UREQUESTER1", []string{"UALICE0001"}))
	testenv.Eventually(t, 30*time.Second, "the policy refusing the agent as alice for an action", func() bool {
		err := forAction.CoreV1().Services(ns).Delete(ctx, victim.Name, dry)
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "hosted control-plane namespaces")
	})
	own, err := kubernetes.NewForConfig(agentCfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := own.CoreV1().Services(ns).Delete(ctx, victim.Name, dry); !apierrors.IsForbidden(err) {
		t.Fatalf("the agent's token as itself deleting %s/%s: %v, want refused by the policy", ns, victim.Name, err)
	}
	// Without the extra, under the default role: the documented residual
	// (Services only, where alice may).
	if err := as(nil).CoreV1().Services(ns).Delete(ctx, victim.Name, dry); err != nil {
		t.Fatalf("delete as alice without the extra, exposures granted: %v; the documented residual changed, update docs/security.md", err)
	}
	// With the role of `hcpbot rbac --exposure=false`: refused.
	role, err := actions.ImpersonationRole(idMap, "", actions.ImpersonationConstrained, actions.NoProxyWrites...)
	if err != nil {
		t.Fatal(err)
	}
	env.ApplyRBACObject(t, role)
	testenv.Eventually(t, 30*time.Second, "the role without Service writes in force", func() bool {
		err := as(nil).CoreV1().Services(ns).Delete(ctx, victim.Name, dry)
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "impersonate-on:user-info:delete")
	})
	if _, err := env.Kube.CoreV1().Services(ns).Get(ctx, victim.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("the victim Service: %v", err)
	}
}

// shippedServicePolicy applies the Service policy of
// configs/deploy/agent/admission.yaml as shipped, under names of the
// test's, bound to namespace ns only (the tests of this package share one
// API server).
func shippedServicePolicy(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	data, err := os.ReadFile("../configs/deploy/agent/admission.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var policy *admissionv1.ValidatingAdmissionPolicy
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var p admissionv1.ValidatingAdmissionPolicy
		if err := yaml.Unmarshal([]byte(doc), &p); err != nil {
			t.Fatal(err)
		}
		if p.Kind == "ValidatingAdmissionPolicy" && p.Name == "hcpbot-agent-services" {
			policy = &p
		}
	}
	if policy == nil {
		t.Fatal("no ValidatingAdmissionPolicy hcpbot-agent-services in admission.yaml")
	}
	name := "i28b-" + ns
	policy.Name = name
	const label = "hcpbot.test/i28b"
	nsObj, err := env.Kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if nsObj.Labels == nil {
		nsObj.Labels = map[string]string{}
	}
	nsObj.Labels[label] = ns
	if _, err := env.Kube.CoreV1().Namespaces().Update(ctx, nsObj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	adm := env.Kube.AdmissionregistrationV1()
	if _, err := adm.ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = adm.ValidatingAdmissionPolicies().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName: name, ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
			MatchResources: &admissionv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{label: ns}}},
		},
	}
	if _, err := adm.ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = adm.ValidatingAdmissionPolicyBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}
