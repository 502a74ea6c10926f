package actions_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/identity"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv"
)

// The attack review of issue 28 (acting as the approver): each test here
// failed when it was written; each comment ends with how it was resolved.

// An approver's permission is removed between the approval (Access said
// yes) and the execution, of an exposure that chooses no node ports (the
// plain `/hcp expose clusters/c1 petclinic/petclinic`). The executor
// creates the NodePort copy in the hosted cluster with the agent's admin
// kubeconfig first, and learns only at the management create, made as
// the approver, that the approver may not make the change: the agent's
// own rights opened node ports for an identity that may not expose
// anything, and a cleanup that fails leaves them open. The management
// dry run as the approver (made before any write when node ports are
// chosen) should come before the hosted write whatever the ports.
//
// The hosted API server's Services are watched from before the
// execution up to a sentinel created after it: every write in between is
// seen, without waiting on time.
//
// Resolved: acting as the approver, checkPorts dry-runs the management
// create as the approver before any hosted write, whatever the ports.
func TestI28AttackExposeWritesHostedBeforeTheApproverIsChecked(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	c, hosted := kubevirtApp(t, "kvatk")
	cpNS := hypershift.ControlPlaneNamespace(c.Namespace, c.Name)
	agent, _ := asDeployedAgent(t, c.Namespace, idMap)
	carol := identity.Identity{User: "carol"}
	req := exposeReq("expo-atk0001", c)

	// At approval carol may create the management Service.
	revoke := grant(t, cpNS, "carol", "", "services", "create")
	if missing, err := agent.Access(ctx, carol, req); err != nil || len(missing) > 0 {
		t.Fatalf("Access(carol, expose) at approval = %q, %v", missing, err)
	}
	// Taken away before the execution.
	revoke()

	list, err := hosted.Kube.CoreV1().Services(appNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := hosted.Kube.CoreV1().Services(appNS).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	x, err := agent.As(carol, identity.Extra(req.ID, "UREQUESTER1", []string{"UCAROL0001"}))
	if err != nil {
		t.Fatal(err)
	}
	_, err = x.Execute(ctx, req)
	if !errors.Is(err, actions.ErrRejected) {
		t.Fatalf("expose as carol without create services: %v, want ErrRejected", err)
	}
	t.Logf("refused: %v", err)

	const sentinel = "zz-sentinel"
	if _, err := hosted.Kube.CoreV1().Services(appNS).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: appNS, Name: sentinel},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var written []string
	timeout := time.After(30 * time.Second)
	for done := false; !done; {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("the watch ended before the sentinel")
			}
			svc, isSvc := ev.Object.(*corev1.Service)
			switch {
			case !isSvc:
				t.Fatalf("watch event %s %T", ev.Type, ev.Object)
			case svc.Name == sentinel && ev.Type == watch.Added:
				done = true
			default:
				written = append(written, string(ev.Type)+" "+svc.Name+" ("+string(svc.Spec.Type)+")")
			}
		case <-timeout:
			t.Fatal("the sentinel was not seen within 30s")
		}
	}
	if len(written) > 0 {
		t.Errorf("for carol, who may not create the management Service, the agent wrote in the hosted cluster with its own kubeconfig: %q", written)
	}
}

// `hcpbot rbac` grants more than the map: RBAC authorises the impersonated
// user and each impersonated group separately, so the generated role (users
// alice and bob, group platform-ops) lets the agent's ServiceAccount act as
// alice with platform-ops, an identity the map never names (only bob's
// entry has the group). Kubernetes cannot tie a group to a user in RBAC;
// resolved by bounding and saying it: the constrained role lets the mixed
// identity make hcpbot's writes only (not platform-ops' delete), `hcpbot
// rbac` warns naming the users (Mixes), and docs/security.md lists it
// among the residual risks.
func TestI28AttackGeneratedRoleMixesUsersAndGroups(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	m := identity.Map{Required: true, Entries: []identity.Entry{
		{Slack: "UALICE0001", User: "alice"},
		{Slack: "UBOB000001", User: "bob", Groups: []string{"platform-ops"}},
	}}
	if users, groups := actions.Mixes(m, ""); !slices.Equal(users, []string{"alice"}) || !slices.Equal(groups, []string{"platform-ops"}) {
		t.Errorf("Mixes = %q, %q: want alice with platform-ops named", users, groups)
	}
	c, agent, _ := seededAgent(t, m)
	role := "test-platform-ops-hostedclusters"
	env.ApplyRBACObject(t, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: role},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{hypershift.HostedClusterGVR.Group}, Resources: []string{"hostedclusters"}, Verbs: []string{"patch", "delete"}}},
	})
	env.ApplyRBACObject(t, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: role},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "platform-ops"}},
	})
	// bob (with the group) may patch; alice, as the map has her, may not.
	bob, alice := identity.Identity{User: "bob", Groups: []string{"platform-ops"}}, identity.Identity{User: "alice"}
	req := patchRequest("fix-atk0002", c, scenario.SeedNoProxy)
	testenv.Eventually(t, 30*time.Second, "the authorizer to see platform-ops' patch", func() bool {
		missing, err := agent.Access(ctx, bob, req)
		return err == nil && len(missing) == 0
	})
	if missing, err := agent.Access(ctx, alice, req); err != nil || len(missing) == 0 {
		t.Fatalf("Access(alice as mapped) = %q, %v: she should lack patch", missing, err)
	}

	// The agent's token as alice with platform-ops, which platform-ops
	// may do and hcpbot never does: refused by the constrained role.
	cfg := rest.CopyConfig(agent.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "alice", Groups: []string{"platform-ops"}}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = dc.Resource(hypershift.HostedClusterGVR).Namespace(c.Namespace).Delete(ctx, c.Name, metav1.DeleteOptions{})
	if err == nil {
		t.Fatalf("the agent's token deleted HostedCluster %s/%s as alice with bob's group platform-ops", c.Namespace, c.Name)
	} else if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "impersonate-on:user-info:delete") {
		t.Fatalf("delete as alice with platform-ops: %v, want Forbidden for impersonate-on:user-info:delete", err)
	}
	t.Logf("bounded: %v", err)
}

// The agent's ServiceAccount token is now every mapped person on its
// management cluster, for anything they may do: the generated role grants
// `impersonate` on the mapped users with no bound on what the impersonated
// requests do. alice may delete HostedClusters (an administrator, as
// approvers often are); the agent's token deletes one as her, which no
// hcpbot change does and no approval asked for. The threat table's agent
// row ("cannot run anything approval.Permit does not accept") no longer
// holds for its ServiceAccount. Kubernetes' constrained impersonation
// (feature ConstrainedImpersonation: impersonate:user-info plus
// impersonate-on:user-info:<verb> on the resources hcpbot writes) would
// bound it; at least the residual risks should say it.
//
// Resolved: `hcpbot rbac` (actions.ImpersonationRole) grants constrained
// impersonation by default, for ImpersonatedWrites only; legacy (for API
// servers before 1.36) only when asked, its header saying what it grants.
func TestI28AttackAgentTokenActsAsAnyMappedUser(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	m := identity.Map{Required: true, Entries: []identity.Entry{{Slack: "UALICE0001", User: "alice"}}}
	c := scenario.BehindProxy(env.Namespace(t), "proxied")
	seedCluster(t, c)
	cfg := env.DeployAgent(t, c.Namespace, m)
	grant(t, c.Namespace, "alice", hypershift.HostedClusterGVR.Group, "hostedclusters", "patch", "delete")

	cfg.Impersonate = rest.ImpersonationConfig{UserName: "alice"}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = dc.Resource(hypershift.HostedClusterGVR).Namespace(c.Namespace).Delete(ctx, c.Name, metav1.DeleteOptions{})
	if err == nil {
		t.Errorf("the agent's ServiceAccount token deleted HostedCluster %s/%s as alice: impersonation is bounded by nothing hcpbot writes", c.Namespace, c.Name)
	} else if !apierrors.IsForbidden(err) {
		t.Fatalf("delete as alice: %v", err)
	}
}
