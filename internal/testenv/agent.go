package testenv

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/identity"
)

// The agent's ServiceAccount, as configs/deploy/agent has it.
const (
	AgentNamespace      = "hcpbot"
	AgentServiceAccount = "hcpbot-agent"
	AgentUser           = "system:serviceaccount:" + AgentNamespace + ":" + AgentServiceAccount
)

// deployDir is configs/deploy of this checkout.
func deployDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "configs", "deploy")
}

// DeployAgent deploys the agent's RBAC as shipped
// (configs/deploy/agent/rbac.yaml and, in the HostedCluster namespace ns,
// the RoleBinding of agent/clusters/) plus the impersonation ClusterRole
// `hcpbot rbac` generates for m, waits until the authorizer holds it, and
// returns a client configuration that authenticates as the agent's
// ServiceAccount with a token of its own (as the pod's would;
// impersonating the ServiceAccount instead would not let it impersonate in
// turn). The impersonation role is cluster-wide: one test of a package at
// a time may deploy it.
func (e *Env) DeployAgent(t testing.TB, ns string, m identity.Map) *rest.Config {
	t.Helper()
	ctx := context.Background()
	if _, err := e.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: AgentNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: AgentNamespace, Name: AgentServiceAccount}}
	if _, err := e.Kube.CoreV1().ServiceAccounts(AgentNamespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(deployDir(), "agent", "rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	binding, err := os.ReadFile(filepath.Join(deployDir(), "agent", "clusters", "rolebinding.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		e.ApplyRBAC(t, []byte(doc), "")
	}
	e.ApplyRBAC(t, binding, ns)
	role, err := actions.ImpersonationRole(m, "", actions.ImpersonationConstrained)
	if err != nil {
		t.Fatal(err)
	}
	e.ApplyRBACObject(t, role)
	e.ApplyRBACObject(t, actions.ImpersonationBinding(AgentNamespace, AgentServiceAccount))
	t.Cleanup(func() {
		ctx := context.Background()
		_ = e.Kube.RbacV1().ClusterRoleBindings().Delete(ctx, actions.ImpersonationRoleName, metav1.DeleteOptions{})
		_ = e.Kube.RbacV1().ClusterRoles().Delete(ctx, actions.ImpersonationRoleName, metav1.DeleteOptions{})
	})

	exp := int64(3600)
	tr, err := e.Kube.CoreV1().ServiceAccounts(AgentNamespace).CreateToken(ctx, AgentServiceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := &rest.Config{Host: e.Config.Host, BearerToken: tr.Status.Token, TLSClientConfig: rest.TLSClientConfig{CAData: e.Config.CAData}, QPS: 200, Burst: 400}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// RBAC reaches the authorizer through its informers: wait until the
	// agent holds what was just bound.
	WaitAllowed(t, kc, authorizationv1.ResourceAttributes{Verb: "get", Group: hypershift.HostedClusterGVR.Group, Resource: "hostedclusters", Namespace: ns}, true)
	if len(m.Entries) > 0 && m.Entries[0].User != "" {
		WaitAllowed(t, kc, authorizationv1.ResourceAttributes{Verb: "impersonate:user-info", Group: "authentication.k8s.io", Resource: "users", Name: m.Entries[0].User}, true)
	}
	return cfg
}

// ApplyRBAC creates or replaces the RBAC object of a YAML document; ns,
// when set, is the namespace of its RoleBinding.
func (e *Env) ApplyRBAC(t testing.TB, doc []byte, ns string) {
	t.Helper()
	var meta struct{ Kind string }
	if err := yaml.Unmarshal(doc, &meta); err != nil {
		t.Fatal(err)
	}
	var obj any
	switch meta.Kind {
	case "ClusterRole":
		obj = &rbacv1.ClusterRole{}
	case "ClusterRoleBinding":
		obj = &rbacv1.ClusterRoleBinding{}
	case "Role":
		obj = &rbacv1.Role{}
	case "RoleBinding":
		obj = &rbacv1.RoleBinding{}
	default:
		t.Fatalf("unexpected kind %q", meta.Kind)
	}
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		t.Fatal(err)
	}
	if rb, ok := obj.(*rbacv1.RoleBinding); ok && ns != "" {
		rb.Namespace = ns
	}
	e.ApplyRBACObject(t, obj)
}

// ApplyRBACObject creates or replaces a ClusterRole, ClusterRoleBinding,
// Role or RoleBinding.
func (e *Env) ApplyRBACObject(t testing.TB, obj any) {
	t.Helper()
	ctx := context.Background()
	rbac := e.Kube.RbacV1()
	var err error
	switch o := obj.(type) {
	case *rbacv1.ClusterRole:
		if _, err = rbac.ClusterRoles().Create(ctx, o, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
			_, err = rbac.ClusterRoles().Update(ctx, o, metav1.UpdateOptions{})
		}
	case *rbacv1.ClusterRoleBinding:
		if _, err = rbac.ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
			_, err = rbac.ClusterRoleBindings().Update(ctx, o, metav1.UpdateOptions{})
		}
	case *rbacv1.Role:
		if _, err = rbac.Roles(o.Namespace).Create(ctx, o, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
			_, err = rbac.Roles(o.Namespace).Update(ctx, o, metav1.UpdateOptions{})
		}
	case *rbacv1.RoleBinding:
		if _, err = rbac.RoleBindings(o.Namespace).Create(ctx, o, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
			_, err = rbac.RoleBindings(o.Namespace).Update(ctx, o, metav1.UpdateOptions{})
		}
	default:
		t.Fatalf("not an RBAC object: %T", obj)
	}
	if err != nil {
		t.Fatalf("apply %T: %v", obj, err)
	}
}

// Grant gives user the verbs on resource of group in namespace ns (a Role
// and its RoleBinding named after the user), as a cluster administrator
// would, and waits until the authorizer holds it; the returned function
// takes it away again, and waits likewise.
func (e *Env) Grant(t testing.TB, ns, user, group, resource string, verbs ...string) (revoke func()) {
	t.Helper()
	name := "test-" + user + "-" + resource
	e.ApplyRBACObject(t, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{group}, Resources: []string{resource}, Verbs: verbs}},
	})
	e.ApplyRBACObject(t, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	})
	for _, v := range verbs {
		e.WaitUserAllowed(t, user, authorizationv1.ResourceAttributes{Verb: v, Group: group, Resource: resource, Namespace: ns}, true)
	}
	return func() {
		t.Helper()
		if err := e.Kube.RbacV1().RoleBindings(ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		for _, v := range verbs {
			e.WaitUserAllowed(t, user, authorizationv1.ResourceAttributes{Verb: v, Group: group, Resource: resource, Namespace: ns}, false)
		}
	}
}

// WaitAllowed waits until kc's own identity is (or is not) allowed attr.
func WaitAllowed(t testing.TB, kc kubernetes.Interface, attr authorizationv1.ResourceAttributes, allowed bool) {
	t.Helper()
	Eventually(t, 30*time.Second, "the authorizer to see the RBAC for "+attr.Verb+" "+attr.Resource, func() bool {
		r, err := kc.AuthorizationV1().SelfSubjectAccessReviews().Create(context.Background(),
			&authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &attr}}, metav1.CreateOptions{})
		return err == nil && r.Status.Allowed == allowed
	})
}

// WaitUserAllowed waits until user is (or is not) allowed attr.
func (e *Env) WaitUserAllowed(t testing.TB, user string, attr authorizationv1.ResourceAttributes, allowed bool) {
	t.Helper()
	Eventually(t, 30*time.Second, "the authorizer to see the RBAC of "+user, func() bool {
		r, err := e.Kube.AuthorizationV1().SubjectAccessReviews().Create(context.Background(),
			&authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: []string{"system:authenticated"}, ResourceAttributes: &attr}}, metav1.CreateOptions{})
		return err == nil && r.Status.Allowed == allowed
	})
}
