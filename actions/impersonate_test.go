package actions_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/identity"
	"github.com/hcpbot/hcpbot/internal/controlplane"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv"
)

const agentUser = testenv.AgentUser

// idMap is the identities section of the tests: alice and carol may be
// given rights by a test, dave only reads, all of group ops. bob is mapped
// by nobody.
var idMap = identity.Map{Required: true, Entries: []identity.Entry{
	{Slack: "UALICE0001", User: "alice", Groups: []string{"ops"}},
	{Slack: "UCAROL0001", User: "carol"},
	{Slack: "UDAVE00001", User: "dave"},
}}

// asDeployedAgent deploys the agent as shipped with the impersonation
// ClusterRole `hcpbot rbac` generates for m (testenv.Env.DeployAgent) and
// returns an Executor whose clients authenticate as the agent's
// ServiceAccount. The recorder sees every call of the executor and of the
// copies As makes.
func asDeployedAgent(t *testing.T, ns string, m identity.Map) (*actions.Executor, *recorder) {
	t.Helper()
	rec := &recorder{}
	return executorFor(t, env.DeployAgent(t, ns, m), rec), rec
}

// seededAgent is the seed 000 HostedCluster (clusters/proxied's shape, in
// a namespace of the test's) and the agent deployed for it with m
// (asDeployedAgent).
func seededAgent(t *testing.T, m identity.Map) (scenario.Cluster, *actions.Executor, *recorder) {
	t.Helper()
	c := scenario.BehindProxy(env.Namespace(t), "proxied")
	seedCluster(t, c)
	x, rec := asDeployedAgent(t, c.Namespace, m)
	return c, x, rec
}

func grant(t *testing.T, ns, user, group, resource string, verbs ...string) (revoke func()) {
	t.Helper()
	return env.Grant(t, ns, user, group, resource, verbs...)
}

// auditEvents waits until the management API server's audit log holds
// want events that match, and returns them.
func auditEvents(t *testing.T, what string, want int, match func(controlplane.AuditEvent) bool) []controlplane.AuditEvent {
	t.Helper()
	path := env.CP.Management.AuditLogPath()
	if path == "" {
		t.Fatal("the management API server writes no audit log")
	}
	var got []controlplane.AuditEvent
	testenv.Eventually(t, 10*time.Second, what+" in the audit log", func() bool {
		all, err := controlplane.AuditEvents(path)
		if err != nil {
			t.Fatal(err)
		}
		got = slices.DeleteFunc(all, func(e controlplane.AuditEvent) bool { return !match(e) })
		return len(got) >= want
	})
	return got
}

// byAgent matches the audit events of the agent's writes to one object
// (as itself or impersonating), and with action set only those
// impersonating for that action.
func byAgent(resource, ns, name, action string) func(controlplane.AuditEvent) bool {
	return func(e controlplane.AuditEvent) bool {
		return e.User.Username == agentUser && e.ObjectRef != nil && e.ObjectRef.Resource == resource && e.ObjectRef.Namespace == ns && e.ObjectRef.Name == name &&
			(action == "" || e.ImpersonatedUser != nil && slices.Equal(e.ImpersonatedUser.Extra[identity.ExtraAction], authenticationv1.ExtraValue{action}))
	}
}

// dryRunFirst orders the events of a write: its dry run, then the write
// (the log is written as each request completes, not as it is answered).
func dryRunFirst(evs []controlplane.AuditEvent) []controlplane.AuditEvent {
	slices.SortStableFunc(evs, func(a, b controlplane.AuditEvent) int {
		return boolInt(!strings.Contains(a.RequestURI, "dryRun=")) - boolInt(!strings.Contains(b.RequestURI, "dryRun="))
	})
	return evs
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// checkImpersonated: the event is a write by the agent as user, carrying
// the action id and the requester, and answered with code.
func checkImpersonated(t *testing.T, e controlplane.AuditEvent, verb, user, action, requester string, code int32) {
	t.Helper()
	if e.Verb != verb || e.User.Username != agentUser || e.ImpersonatedUser == nil || e.ImpersonatedUser.Username != user ||
		!slices.Equal(e.ImpersonatedUser.Extra[identity.ExtraAction], authenticationv1.ExtraValue{action}) ||
		!slices.Equal(e.ImpersonatedUser.Extra[identity.ExtraRequester], authenticationv1.ExtraValue{requester}) ||
		e.ResponseStatus == nil || e.ResponseStatus.Code != code {
		t.Errorf("audit event %s %s: user %q, impersonated %+v, status %+v; want %s by %s as %s for %s (requested by %s), code %d",
			e.Verb, e.RequestURI, e.User.Username, e.ImpersonatedUser, e.ResponseStatus, verb, agentUser, user, action, requester, code)
	}
}

// An approver mapped to a user with patch on hostedclusters: Access finds
// nothing missing, the noProxy fix is applied as that user, and the API
// server's audit log records the patch (its dry run and the write) with the
// agent as the user, the approver as the impersonated user, and the action
// id and the requester in its extra. The rollback runs as the approver too.
func TestImpersonationNoProxyPatchAudited(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	c, agent, _ := seededAgent(t, idMap)
	grant(t, c.Namespace, "alice", hypershift.HostedClusterGVR.Group, "hostedclusters", "patch")
	alice := identity.Identity{User: "alice", Groups: []string{"ops"}}

	req := patchRequest("fix-imp0001", c, scenario.SeedNoProxy)
	if missing, err := agent.Access(ctx, alice, req); err != nil || len(missing) > 0 {
		t.Fatalf("Access(alice): missing %q, %v; want nothing missing", missing, err)
	}
	x, err := agent.As(alice, identity.Extra(req.ID, "UREQUESTER1", []string{"UALICE0001"}))
	if err != nil {
		t.Fatal(err)
	}
	if id, ok := x.ActingAs(); !ok || id.User != "alice" {
		t.Errorf("ActingAs = %v, %v", id, ok)
	}
	res, err := x.Execute(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := readHC(t, c.Namespace, c.Name); got != fixedNoProxy || res.Outcome != actions.OutcomeApplied {
		t.Fatalf("noProxy %q, outcome %s", got, res.Outcome)
	}
	evs := dryRunFirst(auditEvents(t, "the dry run and the patch of the HostedCluster", 2, byAgent("hostedclusters", c.Namespace, c.Name, req.ID)))
	if len(evs) != 2 || !strings.Contains(evs[0].RequestURI, "dryRun=All") || strings.Contains(evs[1].RequestURI, "dryRun") {
		t.Fatalf("audit events %+v, want the dry run, then the patch", evs)
	}
	for _, e := range evs {
		checkImpersonated(t, e, "patch", "alice", req.ID, "UREQUESTER1", 200)
		if !slices.Contains(e.ImpersonatedUser.Groups, "ops") || !slices.Equal(e.ImpersonatedUser.Extra[identity.ExtraApprovers], authenticationv1.ExtraValue{"UALICE0001"}) {
			t.Errorf("impersonated %+v: want group ops and the approver", e.ImpersonatedUser)
		}
	}
	t.Logf("audit: %s %s by %s as %s %v", evs[1].Verb, evs[1].RequestURI, evs[1].User.Username, evs[1].ImpersonatedUser.Username, evs[1].ImpersonatedUser.Extra)

	// The rollback, approved by alice too, writes as alice.
	undo := actions.Change{ID: "undo-imp0001", Type: actions.TypeRollback, Cluster: res.Undo.Cluster, RequestedBy: "UREQUESTER1",
		Rollback: &actions.RollbackParams{Undo: *res.Undo}}
	x, err = agent.As(alice, identity.Extra(undo.ID, "UREQUESTER1", []string{"UALICE0001"}))
	if err != nil {
		t.Fatal(err)
	}
	if rb, err := x.Execute(ctx, undo); err != nil || rb.Outcome != actions.OutcomeRolledBack {
		t.Fatalf("rollback: %+v, %v", rb, err)
	}
	evs = dryRunFirst(auditEvents(t, "the rollback's dry run and patch", 2, byAgent("hostedclusters", c.Namespace, c.Name, undo.ID)))
	for _, e := range evs {
		checkImpersonated(t, e, "patch", "alice", undo.ID, "UREQUESTER1", 200)
	}
	if len(evs) != 2 || strings.Contains(evs[1].RequestURI, "dryRun") {
		t.Errorf("rollback audit events %+v, want a dry run and the patch", evs)
	}
	// Events stay the agent's own: alice needs no right to record them.
	if err := x.RecordEvent(ctx, undo, &actions.Result{Outcome: actions.OutcomeRolledBack, Summary: "restored"}, actions.Actors{Approvers: []string{"UALICE0001"}}); err != nil {
		t.Errorf("RecordEvent as the agent: %v", err)
	}
	// The policy logs the writes of HostedClusters, Proxies and Services
	// only: not that Event, not the RBAC and namespaces of the tests, no
	// reads.
	all, err := controlplane.AuditEvents(env.CP.Management.AuditLogPath())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range all {
		if e.ObjectRef == nil || !slices.Contains([]string{"hostedclusters", "proxies", "services"}, e.ObjectRef.Resource) ||
			!slices.Contains([]string{"create", "update", "patch", "delete", "deletecollection"}, e.Verb) || e.Level != "Metadata" {
			t.Errorf("audit event outside the policy: %s %s (%s)", e.Verb, e.RequestURI, e.Level)
		}
	}
}

// An approver mapped to a user who may only read HostedClusters: Access
// names the missing patch, and nothing changes. Were the write attempted
// all the same, the API server would refuse it, and the refusal is
// ErrRejected naming the permission.
func TestImpersonationAccessNamesMissingPermission(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	c, agent, _ := seededAgent(t, idMap)
	grant(t, c.Namespace, "dave", hypershift.HostedClusterGVR.Group, "hostedclusters", "get")
	_, rv := readHC(t, c.Namespace, c.Name)

	req := patchRequest("fix-imp0002", c, scenario.SeedNoProxy)
	dave := identity.Identity{User: "dave"}
	missing, err := agent.Access(ctx, dave, req)
	if err != nil {
		t.Fatal(err)
	}
	want := "patch hostedclusters.hypershift.openshift.io in namespace " + c.Namespace + " (name " + c.Name + ")"
	if len(missing) != 1 || !strings.HasPrefix(missing[0], want) {
		t.Fatalf("Access(dave) = %q, want %q", missing, want)
	}
	t.Logf("missing: %q", missing)
	if got, rv2 := readHC(t, c.Namespace, c.Name); got != scenario.SeedNoProxy || rv2 != rv {
		t.Errorf("the check changed the HostedCluster: %q rv %s→%s", got, rv, rv2)
	}

	// The Proxy/cluster target and an exposure's rollback are named the
	// same way.
	pfix := actions.Change{ID: "fix-imp0003", Type: actions.TypeNoProxyPatch, RequestedBy: "UREQUESTER1", Cluster: actions.ClusterRef{Name: hypershift.ProxyName},
		NoProxy: &actions.NoProxyParams{Target: actions.TargetProxy, Expected: ".corp.example", Add: []string{"kubernetes"}}}
	if missing, err := agent.Access(ctx, dave, pfix); err != nil || len(missing) != 1 || !strings.HasPrefix(missing[0], "patch proxies.config.openshift.io (name cluster)") {
		t.Errorf("Access(dave, Proxy/cluster) = %q, %v", missing, err)
	}
	cpNS := hypershift.ControlPlaneNamespace(c.Namespace, c.Name)
	unexpose := actions.Change{ID: "undo-imp0003", Type: actions.TypeRollback, RequestedBy: "UREQUESTER1", Cluster: req.Cluster,
		Rollback: &actions.RollbackParams{Undo: actions.Undo{ActionID: "expo-imp0003", Type: actions.TypeExposeNodePort, Cluster: req.Cluster, Expose: &actions.ExposeUndo{HostedNamespace: appNS}}}}
	if missing, err := agent.Access(ctx, dave, unexpose); err != nil || len(missing) != 1 ||
		!strings.HasPrefix(missing[0], "delete services in namespace "+cpNS+" (name "+actions.ManagementServiceName("expo-imp0003")+")") {
		t.Errorf("Access(dave, exposure rollback) = %q, %v", missing, err)
	}
	if _, err := agent.Access(ctx, identity.Identity{}, req); !errors.Is(err, identity.ErrNoIdentity) {
		t.Errorf("Access without a user: %v, want ErrNoIdentity", err)
	}

	x, err := agent.As(dave, identity.Extra(req.ID, "UREQUESTER1", []string{"UDAVE00001"}))
	if err != nil {
		t.Fatal(err)
	}
	_, err = x.Execute(ctx, req)
	if !errors.Is(err, actions.ErrRejected) || actions.Transient(err) || !strings.Contains(err.Error(), `User "dave" cannot patch resource "hostedclusters"`) {
		t.Fatalf("Execute as dave: %v, want ErrRejected naming the missing patch", err)
	}
	if got, rv2 := readHC(t, c.Namespace, c.Name); got != scenario.SeedNoProxy || rv2 != rv {
		t.Errorf("written as dave: %q rv %s→%s", got, rv, rv2)
	}
	evs := auditEvents(t, "the refused dry run", 1, byAgent("hostedclusters", c.Namespace, c.Name, req.ID))
	if len(evs) != 1 || !strings.Contains(evs[0].RequestURI, "dryRun=All") {
		t.Errorf("audit events %+v, want only the refused dry run", evs)
	}
	checkImpersonated(t, evs[0], "patch", "dave", req.ID, "UREQUESTER1", 403)
}

// The RBAC changes between the approval (Access said yes) and the
// execution: the permission is gone, the impersonated write fails with the
// API server's Forbidden, reported as ErrRejected (definite, not retried)
// naming it; nothing changes, and the agent's own right to patch is not
// used instead. The same when the permission goes between the dry run
// (allowed) and the write.
func TestImpersonationPermissionRemovedBeforeWrite(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	c, agent, rec := seededAgent(t, idMap)
	carol := identity.Identity{User: "carol"}
	for i, step := range []string{"", "patch hostedclusters dry-run"} {
		req := patchRequest(fmt.Sprintf("fix-imp000%d", 4+i), c, scenario.SeedNoProxy)
		revoke := grant(t, c.Namespace, "carol", hypershift.HostedClusterGVR.Group, "hostedclusters", "patch")
		if missing, err := agent.Access(ctx, carol, req); err != nil || len(missing) > 0 {
			t.Fatalf("Access(carol) at approval: %q, %v", missing, err)
		}
		_, rv := readHC(t, c.Namespace, c.Name)
		rec.after = nil
		if step == "" {
			revoke()
		} else {
			rec.after = func(a string) {
				if a == step {
					revoke()
				}
			}
		}
		rec.take()
		x, err := agent.As(carol, identity.Extra(req.ID, "UREQUESTER1", []string{"UCAROL0001"}))
		if err != nil {
			t.Fatal(err)
		}
		_, err = x.Execute(ctx, req)
		if !errors.Is(err, actions.ErrRejected) || actions.Transient(err) {
			t.Fatalf("Execute after the revocation: %v, want ErrRejected, not transient", err)
		}
		var status apierrors.APIStatus
		if !apierrors.IsForbidden(err) || !errors.As(err, &status) || !strings.Contains(err.Error(), status.Status().Message) ||
			!strings.Contains(err.Error(), `User "carol" cannot patch resource "hostedclusters" in API group "hypershift.openshift.io" in the namespace "`+c.Namespace+`"`) {
			t.Errorf("error %q: want the API server's Forbidden, naming the permission", err)
		}
		t.Logf("reported: %v", err)
		if step == "" {
			rec.expect(t, "revoked before", "get hostedclusters", "patch hostedclusters dry-run")
		} else {
			rec.expect(t, "revoked after the dry run", "get hostedclusters", "patch hostedclusters dry-run", "patch hostedclusters")
		}
		if got, rv2 := readHC(t, c.Namespace, c.Name); got != scenario.SeedNoProxy || rv2 != rv {
			t.Errorf("written after the revocation: %q rv %s→%s", got, rv, rv2)
		}
		if missing, err := agent.Access(ctx, carol, req); err != nil || len(missing) != 1 {
			t.Errorf("Access(carol) after the revocation: %q, %v", missing, err)
		}
	}
}

// NodePort exposure and its rollback as the approver: the management
// Service is created (dry run, then for real) and deleted as alice, and
// the audit log says so; the reads and the hosted cluster's writes stay
// the agent's. A user without the Service rights is named by Access and
// refused by the API server, with nothing left behind in either cluster.
func TestImpersonationExposeAndRollback(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	c, hosted := kubevirtApp(t, "kv")
	cpNS := hypershift.ControlPlaneNamespace(c.Namespace, c.Name)
	agent, _ := asDeployedAgent(t, c.Namespace, idMap)
	grant(t, cpNS, "alice", "", "services", "create", "delete")
	alice, dave := identity.Identity{User: "alice", Groups: []string{"ops"}}, identity.Identity{User: "dave"}

	// dave may not: named at once, and refused if tried.
	req := exposeReq("expo-imp0005", c, actions.ExposePort{Port: 8080, NodePort: 31085})
	missing, err := agent.Access(ctx, dave, req)
	if err != nil || len(missing) != 1 || !strings.HasPrefix(missing[0], "create services in namespace "+cpNS) {
		t.Fatalf("Access(dave, expose) = %q, %v", missing, err)
	}
	x, err := agent.As(dave, identity.Extra(req.ID, "UREQUESTER1", []string{"UDAVE00001"}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := x.Execute(ctx, req); !errors.Is(err, actions.ErrRejected) || !strings.Contains(err.Error(), `User "dave" cannot create resource "services"`) {
		t.Fatalf("expose as dave: %v, want ErrRejected naming create services", err)
	}
	if got := serviceNames(t, env.Kube, cpNS); len(got) != 0 {
		t.Errorf("management Services after dave's refusal: %q", got)
	}
	if got := serviceNames(t, hosted.Kube, appNS); !slices.Equal(got, []string{"petclinic"}) {
		t.Errorf("hosted Services after dave's refusal: %q, want only the app's", got)
	}

	// alice may.
	if missing, err := agent.Access(ctx, alice, req); err != nil || len(missing) > 0 {
		t.Fatalf("Access(alice, expose) = %q, %v", missing, err)
	}
	x, err = agent.As(alice, identity.Extra(req.ID, "UREQUESTER1", []string{"UALICE0001"}))
	if err != nil {
		t.Fatal(err)
	}
	res, err := x.Execute(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != actions.OutcomeApplied || res.Undo == nil {
		t.Fatalf("expose as alice: %+v", res)
	}
	name := actions.ManagementServiceName(req.ID)
	if _, err := env.Kube.CoreV1().Services(cpNS).Get(ctx, name, metav1.GetOptions{}); err != nil {
		t.Fatalf("management Service: %v", err)
	}
	// A create names its object in the audit log by the body's name.
	// Two dry runs (the chosen node port, then every forwarded one) and
	// the create.
	creates := dryRunFirst(auditEvents(t, "the creates of the management Service", 3, byAgent("services", cpNS, name, req.ID)))
	if len(creates) != 3 || !strings.Contains(creates[1].RequestURI, "dryRun=All") || strings.Contains(creates[2].RequestURI, "dryRun") {
		t.Fatalf("audit events of the management Service: %+v", creates)
	}
	for _, e := range creates {
		checkImpersonated(t, e, "create", "alice", req.ID, "UREQUESTER1", 201)
	}
	// dave's dry run, refused before its body was read (so the event names
	// no Service).
	refused := auditEvents(t, "dave's refused create", 1, byAgent("services", cpNS, "", req.ID))
	if len(refused) != 1 {
		t.Fatalf("audit events of dave's create: %+v", refused)
	}
	checkImpersonated(t, refused[0], "create", "dave", req.ID, "UREQUESTER1", 403)

	undo := rollBackAsAlice(t, agent, alice, "undo-imp0005", req, res)
	if got := serviceNames(t, env.Kube, cpNS); len(got) != 0 {
		t.Errorf("management Services after the rollback: %q", got)
	}
	// The dry run (its options travel in the body of a DELETE, so the
	// URI does not show it), then the delete.
	deletes := auditEvents(t, "alice's deletes of the management Service", 2, byAgent("services", cpNS, name, undo.ID))
	if len(deletes) != 2 {
		t.Fatalf("audit events of the rollback: %+v", deletes)
	}
	for _, e := range deletes {
		checkImpersonated(t, e, "delete", "alice", undo.ID, "UREQUESTER1", 200)
	}
}

// The generated impersonation ClusterRole grants exactly the mapped
// identities: with a map of {alice, group ops}, the agent (its own token,
// the shipped RBAC plus the generated role) may impersonate alice and ops
// and send hcpbot's extras, and nobody and nothing else — the question
// `kubectl auth can-i impersonate users/bob
// --as=system:serviceaccount:hcpbot:hcpbot-agent` asks — and a request
// that impersonates bob (or adds system:masters) is refused by the API
// server with nothing written.
func TestImpersonationLeastPrivilege(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	m := identity.Map{Entries: []identity.Entry{{Slack: "UALICE0001", User: "alice", Groups: []string{"ops"}}}}
	c, agent, _ := seededAgent(t, m)
	grant(t, c.Namespace, "bob", hypershift.HostedClusterGVR.Group, "hostedclusters", "patch")

	role, err := env.Kube.RbacV1().ClusterRoles().Get(ctx, actions.ImpersonationRoleName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Constrained impersonation only: no legacy impersonate, nothing on
	// ServiceAccounts or uids, no wildcard.
	for _, r := range role.Rules {
		for _, v := range r.Verbs {
			if v != "impersonate:user-info" && !strings.HasPrefix(v, "impersonate-on:user-info:") {
				t.Errorf("rule %+v: verb %s", r, v)
			}
		}
		if slices.Contains(r.Resources, "*") || slices.Contains(r.Resources, "serviceaccounts") || slices.Contains(r.Resources, "uids") || slices.Contains(r.Verbs, "*") {
			t.Errorf("rule %+v", r)
		}
	}

	type attr = authorizationv1.ResourceAttributes
	const (
		authn    = "authentication.k8s.io"
		userInfo = "impersonate:user-info"
		on       = "impersonate-on:user-info:"
	)
	hcGroup, cpNS := hypershift.HostedClusterGVR.Group, hypershift.ControlPlaneNamespace(c.Namespace, c.Name)
	for _, tc := range []struct {
		attr
		allowed bool
	}{
		{attr{Verb: userInfo, Group: authn, Resource: "users", Name: "alice"}, true},
		{attr{Verb: userInfo, Group: authn, Resource: "groups", Name: "ops"}, true},
		{attr{Verb: userInfo, Group: authn, Resource: "userextras", Subresource: identity.ExtraAction, Name: "fix-any"}, true},
		{attr{Verb: userInfo, Group: authn, Resource: "userextras", Subresource: identity.ExtraRequester, Name: "UANY"}, true},
		{attr{Verb: userInfo, Group: authn, Resource: "userextras", Subresource: identity.ExtraApprovers, Name: "UANY"}, true},
		// hcpbot's writes, and nothing else, as the approver.
		{attr{Verb: on + "patch", Group: hcGroup, Resource: "hostedclusters", Namespace: c.Namespace, Name: c.Name}, true},
		{attr{Verb: on + "patch", Group: hypershift.ProxyGVR.Group, Resource: "proxies", Name: hypershift.ProxyName}, true},
		{attr{Verb: on + "create", Resource: "services", Namespace: cpNS}, true},
		{attr{Verb: on + "delete", Resource: "services", Namespace: cpNS, Name: "any"}, true},
		{attr{Verb: on + "delete", Group: hcGroup, Resource: "hostedclusters", Namespace: c.Namespace, Name: c.Name}, false},
		{attr{Verb: on + "update", Group: hcGroup, Resource: "hostedclusters", Namespace: c.Namespace, Name: c.Name}, false},
		{attr{Verb: on + "get", Resource: "secrets", Namespace: c.Namespace}, false},
		{attr{Verb: on + "patch", Resource: "services", Namespace: cpNS}, false},
		{attr{Verb: on + "create", Group: rbacv1.GroupName, Resource: "rolebindings", Namespace: c.Namespace}, false},
		{attr{Verb: on + "patch", Group: hypershift.ProxyGVR.Group, Resource: "proxies", Name: "other"}, false},
		// Nobody else, and no legacy impersonation at all.
		{attr{Verb: userInfo, Group: authn, Resource: "users", Name: "bob"}, false},
		{attr{Verb: userInfo, Group: authn, Resource: "users", Name: "system:admin"}, false},
		{attr{Verb: userInfo, Group: authn, Resource: "users"}, false},
		{attr{Verb: userInfo, Group: authn, Resource: "groups", Name: "system:masters"}, false},
		{attr{Verb: userInfo, Group: authn, Resource: "groups", Name: "system:authenticated"}, false},
		{attr{Verb: userInfo, Group: authn, Resource: "uids", Name: "any"}, false},
		{attr{Verb: userInfo, Group: authn, Resource: "userextras", Subresource: "scopes.authorization.openshift.io", Name: "user:full"}, false},
		{attr{Verb: "impersonate", Resource: "users", Name: "alice"}, false},
		{attr{Verb: "impersonate", Resource: "groups", Name: "ops"}, false},
		{attr{Verb: "impersonate", Resource: "serviceaccounts", Namespace: "kube-system", Name: "default"}, false},
		{attr{Verb: "impersonate:serviceaccount", Resource: "serviceaccounts", Namespace: "kube-system", Name: "default"}, false},
		{attr{Verb: "impersonate", Group: authn, Resource: "userextras", Subresource: identity.ExtraAction, Name: "fix-any"}, false},
	} {
		r, err := agent.Kube.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx,
			&authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &tc.attr}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if r.Status.Allowed != tc.allowed {
			t.Errorf("can-i %s %s/%s %s as the agent: %v, want %v", tc.Verb, tc.Resource, tc.Subresource, tc.Name, r.Status.Allowed, tc.allowed)
		}
	}

	_, rv := readHC(t, c.Namespace, c.Name)
	req := patchRequest("fix-imp0006", c, scenario.SeedNoProxy)
	for _, id := range []identity.Identity{{User: "bob"}, {User: "alice", Groups: []string{"system:masters"}}} {
		x, err := agent.As(id, identity.Extra(req.ID, "UREQUESTER1", nil))
		if err != nil {
			t.Fatal(err)
		}
		_, err = x.Execute(ctx, req)
		if !errors.Is(err, actions.ErrRejected) || !apierrors.IsForbidden(err) ||
			!strings.Contains(err.Error(), `User "`+agentUser+`" cannot impersonate:user-info resource`) {
			t.Errorf("as %s: %v, want the API server refusing the impersonation", id, err)
		}
	}
	if got, rv2 := readHC(t, c.Namespace, c.Name); got != scenario.SeedNoProxy || rv2 != rv {
		t.Errorf("written by an impersonation outside the map: %q rv %s→%s", got, rv, rv2)
	}
	// The refusals are in the audit log, as the agent's, impersonating
	// nobody.
	evs := auditEvents(t, "the refused impersonations", 2, byAgent("hostedclusters", c.Namespace, c.Name, ""))
	for _, e := range evs {
		if e.User.Username != agentUser || e.ImpersonatedUser != nil || e.ResponseStatus == nil || e.ResponseStatus.Code != 403 {
			t.Errorf("audit event %+v", e)
		}
	}
}

// As needs a user and a base configuration that does not impersonate
// already.
func TestImpersonationAsRefuses(t *testing.T) {
	x := &actions.Executor{}
	if _, err := x.As(identity.Identity{User: "alice"}, nil); !errors.Is(err, actions.ErrNoImpersonation) {
		t.Errorf("without Config: %v", err)
	}
	x.Config = &rest.Config{Host: "https://127.0.0.1:1"}
	if _, err := x.As(identity.Identity{}, nil); !errors.Is(err, identity.ErrNoIdentity) {
		t.Errorf("without a user: %v", err)
	}
	x.Config.Impersonate.UserName = agentUser
	if _, err := x.As(identity.Identity{User: "alice"}, nil); !errors.Is(err, actions.ErrNoImpersonation) {
		t.Errorf("over an impersonating config: %v", err)
	}
	if _, ok := x.ActingAs(); ok {
		t.Error("the agent's own executor acts as someone")
	}
}

// The generated role lists names only: an identity that cannot be named
// (an e-mail-derived user, a ServiceAccount) or one that would make the
// agent cluster-admin is refused, naming the entry; entries limited to
// other management clusters are left out.
func TestImpersonationRoleRefuses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		entry identity.Entry
		want  string
	}{
		{"e-mail prefix", identity.Entry{Slack: "SOPS000001", EmailPrefix: "oidc:"}, "entry SOPS000001 derives its user from the Slack e-mail"},
		{"service account", identity.Entry{Slack: "UBOT000001", User: "system:serviceaccount:ci:deployer"}, "entry UBOT000001 maps to ServiceAccount"},
		{"system:masters", identity.Entry{Slack: "UROOT00001", User: "root", Groups: []string{"system:masters"}}, "names group system:masters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := identity.Map{Entries: []identity.Entry{{Slack: "UALICE0001", User: "alice"}, tc.entry}}
			if _, err := actions.ImpersonationRole(m, "", ""); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ImpersonationRole: %v, want %q", err, tc.want)
			}
		})
	}
	m := identity.Map{Entries: []identity.Entry{
		{Slack: "UALICE0001", User: "alice", Groups: []string{"ops", "sre"}, Clusters: []string{"mgmt-1"}},
		{Slack: "SOPS000001", User: "ops-bot", Groups: []string{"ops"}},
		{Slack: "UBOB000001", User: "bob", Clusters: []string{"mgmt-2"}},
	}}
	extras := []string{"userextras/hcpbot.io/action", "userextras/hcpbot.io/requested-by", "userextras/hcpbot.io/approved-by"}
	for mode, want := range map[actions.ImpersonationMode][]rbacv1.PolicyRule{
		actions.ImpersonationConstrained: {
			{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"users"}, ResourceNames: []string{"alice", "ops-bot"}, Verbs: []string{"impersonate:user-info"}},
			{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"groups"}, ResourceNames: []string{"ops", "sre"}, Verbs: []string{"impersonate:user-info"}},
			{APIGroups: []string{"authentication.k8s.io"}, Resources: extras, Verbs: []string{"impersonate:user-info"}},
			{APIGroups: []string{"hypershift.openshift.io"}, Resources: []string{"hostedclusters"}, Verbs: []string{"impersonate-on:user-info:patch"}},
			{APIGroups: []string{"config.openshift.io"}, Resources: []string{"proxies"}, ResourceNames: []string{"cluster"}, Verbs: []string{"impersonate-on:user-info:patch"}},
			{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"impersonate-on:user-info:create", "impersonate-on:user-info:delete"}},
		},
		actions.ImpersonationLegacy: {
			{APIGroups: []string{""}, Resources: []string{"users"}, ResourceNames: []string{"alice", "ops-bot"}, Verbs: []string{"impersonate"}},
			{APIGroups: []string{""}, Resources: []string{"groups"}, ResourceNames: []string{"ops", "sre"}, Verbs: []string{"impersonate"}},
			{APIGroups: []string{"authentication.k8s.io"}, Resources: extras, Verbs: []string{"impersonate"}},
		},
	} {
		role, err := actions.ImpersonationRole(m, "mgmt-1", mode)
		if err != nil {
			t.Fatal(err)
		}
		if role.Name != actions.ImpersonationRoleName || !slices.EqualFunc(role.Rules, want, func(a, b rbacv1.PolicyRule) bool {
			return slices.Equal(a.APIGroups, b.APIGroups) && slices.Equal(a.Resources, b.Resources) && slices.Equal(a.ResourceNames, b.ResourceNames) && slices.Equal(a.Verbs, b.Verbs)
		}) {
			t.Errorf("%s role for mgmt-1: %+v", mode, role.Rules)
		}
	}
	if _, err := actions.ImpersonationRole(m, "mgmt-1", "sudo"); err == nil || !strings.Contains(err.Error(), `impersonation mode "sudo"`) {
		t.Errorf("unknown mode: %v", err)
	}
	// alice has ops and sre, ops-bot only ops: ops-bot could be given sre.
	if users, groups := actions.Mixes(m, "mgmt-1"); !slices.Equal(users, []string{"ops-bot"}) || !slices.Equal(groups, []string{"ops", "sre"}) {
		t.Errorf("Mixes = %q, %q", users, groups)
	}
	if _, err := actions.ImpersonationRole(identity.Map{Entries: m.Entries[2:]}, "mgmt-1", ""); err == nil || !strings.Contains(err.Error(), "no identity mapped for management cluster mgmt-1") {
		t.Errorf("nothing for mgmt-1: %v", err)
	}
}

// Where the map names the hosted cluster (identity.Entry.Hosted), the
// exposure's hosted NodePort Service and its rollback's delete are made
// as the approver too, through the hosted admin kubeconfig impersonating
// them, so the hosted cluster's RBAC decides: an approver who may create
// the management Service but not the hosted one is named the hosted
// permission at approval (Access) and gets nothing written in either
// cluster; granted it, the exposure and its rollback run as them. The
// admin kubeconfig alone would have written both (it is system:masters
// on the hosted API server).
func TestImpersonationHostedWrites(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	c, hosted := kubevirtApp(t, "kvhost")
	ref := c.Namespace + "/" + c.Name
	cpNS := hypershift.ControlPlaneNamespace(c.Namespace, c.Name)
	m := identity.Map{Required: true, Entries: []identity.Entry{{Slack: "UALICE0001", User: "alice", Groups: []string{"ops"}, Hosted: []string{ref}}}}
	agent, _ := asDeployedAgent(t, c.Namespace, m)
	grant(t, cpNS, "alice", "", "services", "create", "delete")
	alice, _, err := m.For("mgmt-1", "UALICE0001", nil, "")
	if err != nil || !alice.InHosted(ref) {
		t.Fatalf("alice = %+v, %v: want acted as in %s", alice, err, ref)
	}

	req := exposeReq("expo-imp0h01", c)
	missing, err := agent.Access(ctx, alice, req)
	want := "create services in namespace " + appNS + " in hosted cluster " + ref
	if err != nil || len(missing) != 1 || !strings.HasPrefix(missing[0], want) {
		t.Fatalf("Access(alice, expose) = %q, %v; want %q named", missing, err, want)
	}
	x, err := agent.As(alice, identity.Extra(req.ID, "UREQUESTER1", []string{"UALICE0001"}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := x.Execute(ctx, req); !errors.Is(err, actions.ErrRejected) || !strings.Contains(err.Error(), `hosted cluster: services is forbidden: User "alice" cannot create resource "services"`) {
		t.Fatalf("expose as alice without the hosted right: %v, want ErrRejected naming the hosted create", err)
	}
	if got := serviceNames(t, env.Kube, cpNS); len(got) != 0 {
		t.Errorf("management Services after the hosted refusal: %q", got)
	}
	if got := serviceNames(t, hosted.Kube, appNS); !slices.Equal(got, []string{"petclinic"}) {
		t.Errorf("hosted Services after the hosted refusal: %q, want only the app's", got)
	}

	// The hosted cluster's own RBAC grants alice (as its identity
	// provider would know her) what the exposure writes there.
	hostedGrant(t, hosted.Kube, appNS, "alice", "create", "delete")
	testenv.Eventually(t, 30*time.Second, "the hosted authorizer to see alice's grant", func() bool {
		missing, err := agent.Access(ctx, alice, req)
		return err == nil && len(missing) == 0
	})
	res, err := x.Execute(ctx, req)
	if err != nil || res.Outcome != actions.OutcomeApplied || res.Undo == nil || res.As != "alice" {
		t.Fatalf("expose as alice: %+v, %v", res, err)
	}
	copyName := actions.HostedServiceName("petclinic")
	svc, err := hosted.Kube.CoreV1().Services(appNS).Get(ctx, copyName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("hosted NodePort copy: %v", err)
	}
	t.Logf("hosted %s/%s created as alice, node ports %v", appNS, svc.Name, res.Ports)

	rollBackAsAlice(t, agent, alice, "undo-imp0h01", req, res)
	if got := serviceNames(t, hosted.Kube, appNS); !slices.Equal(got, []string{"petclinic"}) {
		t.Errorf("hosted Services after the rollback: %q, want only the app's", got)
	}
}

// hostedGrant lets user make verbs on services in ns of a hosted cluster.
func hostedGrant(t *testing.T, kc kubernetes.Interface, ns, user string, verbs ...string) {
	t.Helper()
	ctx := context.Background()
	name := "test-" + user + "-services"
	if _, err := kc.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: verbs}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kc.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// rollBackAsAlice rolls back res of req as alice, once Access finds
// nothing missing, and returns the rollback.
func rollBackAsAlice(t *testing.T, agent *actions.Executor, alice identity.Identity, id string, req actions.Change, res *actions.Result) actions.Change {
	t.Helper()
	ctx := context.Background()
	undo := actions.Change{ID: id, Type: actions.TypeRollback, Cluster: req.Cluster, RequestedBy: "UREQUESTER1",
		Rollback: &actions.RollbackParams{Undo: *res.Undo}}
	if missing, err := agent.Access(ctx, alice, undo); err != nil || len(missing) > 0 {
		t.Fatalf("Access(alice, rollback) = %q, %v", missing, err)
	}
	x, err := agent.As(alice, identity.Extra(undo.ID, "UREQUESTER1", []string{"UALICE0001"}))
	if err != nil {
		t.Fatal(err)
	}
	rb, err := x.Execute(ctx, undo)
	if err != nil || rb.Outcome != actions.OutcomeRolledBack {
		t.Fatalf("rollback as alice: %+v, %v", rb, err)
	}
	return undo
}

// `hcpbot rbac --impersonation=legacy` (API servers without constrained
// impersonation): its role, applied on the real API server, lets the
// agent write as the mapped approver (the verb impersonate, on exactly
// the mapped names), audited as them.
func TestImpersonationLegacyRole(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	m := identity.Map{Required: true, Entries: []identity.Entry{{Slack: "UALICE0001", User: "alice"}}}
	c, agent, _ := seededAgent(t, m)
	legacy, err := actions.ImpersonationRole(m, "", actions.ImpersonationLegacy)
	if err != nil {
		t.Fatal(err)
	}
	env.ApplyRBACObject(t, legacy)
	grant(t, c.Namespace, "alice", hypershift.HostedClusterGVR.Group, "hostedclusters", "patch")
	kc, err := kubernetes.NewForConfig(agent.Config)
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitAllowed(t, kc, authorizationv1.ResourceAttributes{Verb: "impersonate", Resource: "users", Name: "alice"}, true)
	// Still nobody else.
	testenv.WaitAllowed(t, kc, authorizationv1.ResourceAttributes{Verb: "impersonate", Resource: "users", Name: "bob"}, false)

	req := patchRequest("fix-legacy01", c, scenario.SeedNoProxy)
	x, err := agent.As(identity.Identity{User: "alice"}, identity.Extra(req.ID, "UREQUESTER1", []string{"UALICE0001"}))
	if err != nil {
		t.Fatal(err)
	}
	res, err := x.Execute(ctx, req)
	if err != nil || res.Outcome != actions.OutcomeApplied || res.As != "alice" {
		t.Fatalf("patch as alice under the legacy role: %+v, %v", res, err)
	}
	evs := auditEvents(t, "alice's patch under the legacy role", 2, byAgent("hostedclusters", c.Namespace, c.Name, req.ID))
	for _, e := range evs {
		checkImpersonated(t, e, "patch", "alice", req.ID, "UREQUESTER1", 200)
	}
}
