package actions

import (
	"context"
	"fmt"
	"slices"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/identity"
)

// Access asks the management cluster's API server whether id may make
// every write of ch in the management cluster (the writes an Executor
// made by As makes as id): one SubjectAccessReview per write, with the
// verb, group, resource, namespace and name the write uses —
//
//   - noProxy patch, and its rollback: patch hostedclusters
//     (hypershift.openshift.io) <namespace>/<name>, or patch proxies
//     (config.openshift.io) cluster;
//   - exposure: create services in the control-plane namespace;
//   - an exposure's rollback: delete services there, by the name the
//     exposure gave its management Service;
//
// and, where id is acted as in the hosted cluster too (id.Hosted), asks
// that cluster's API server (through its admin kubeconfig) about the
// writes there: create services in the app's namespace, or, for the
// rollback, delete them.
//
// missing lists each denied write as a sentence ("patch
// hostedclusters.hypershift.openshift.io in namespace clusters (name
// proxied)"), with the authorizer's reason when it gives one; empty, id
// may make the change. The reviews are made with the agent's own client
// (create subjectaccessreviews), and carry the groups the API server
// gives an impersonated user (system:authenticated added, as the
// impersonation filter does), so the answer is the one the impersonated
// write will get — unless the RBAC changes in between, which the write,
// itself impersonated, then honours.
//
// err is only for a review that could not be made (ch invalid, no user,
// the API server unreachable or refusing the agent the review): the
// caller then decides — but missing still holds every denial the reviews
// made before it found (the management cluster's, when the hosted one
// cannot be asked): a definite no is never dropped for an error.
func (x *Executor) Access(ctx context.Context, id identity.Identity, ch Change) (missing []string, err error) {
	c, err := check(ch)
	if err != nil {
		return nil, err
	}
	if id.User == "" {
		return nil, fmt.Errorf("%w: an identity to check needs a user name", identity.ErrNoIdentity)
	}
	missing, err = review(ctx, x.Kube, id, writesOf(c.req), "")
	if err != nil {
		return missing, err
	}
	// The hosted cluster's writes, where id is acted as there too.
	hw, ref := hostedWritesOf(c.req)
	if len(hw) == 0 || !id.InHosted(ref.String()) {
		return missing, nil
	}
	hc, err := x.getHostedCluster(ctx, ref)
	if err != nil {
		return missing, err
	}
	hosted, err := x.hostedClient(ctx, hc)
	if err != nil {
		return missing, err
	}
	switch c.req.Type {
	case TypeExposeNodePort:
		// An app Service of type NodePort is forwarded as it is: nothing
		// is written in the hosted cluster, nothing to ask.
		app, err := appService(ctx, hosted, c.req.Expose)
		if err != nil {
			return missing, err
		}
		if app.Spec.Type == corev1.ServiceTypeNodePort {
			return missing, nil
		}
	case TypeRollback:
		// Nor for the rollback of such a forward: the action owns no
		// hosted Service to delete.
		u := c.req.Rollback.Undo
		list, err := hosted.CoreV1().Services(u.Expose.HostedNamespace).List(ctx, metav1.ListOptions{LabelSelector: actionSelector(u.ActionID)})
		if err != nil {
			return missing, fmt.Errorf("list hosted Services of action %s: %w", u.ActionID, err)
		}
		if !slices.ContainsFunc(list.Items, func(svc corev1.Service) bool { return ownName(ClusterHosted, svc.Name, u.ActionID) }) {
			return missing, nil
		}
	}
	more, err := review(ctx, hosted, id, hw, " in hosted cluster "+ref.String())
	if err != nil {
		return append(missing, more...), err
	}
	return append(missing, more...), nil
}

// review asks kc's API server whether id may make each write: the denied
// ones as sentences, where ending each.
func review(ctx context.Context, kc kubernetes.Interface, id identity.Identity, writes []authorizationv1.ResourceAttributes, where string) (missing []string, err error) {
	groups := impersonatedGroups(id)
	for _, w := range writes {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: id.User, Groups: groups, ResourceAttributes: &w,
		}}
		got, err := kc.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err != nil {
			return missing, fmt.Errorf("access review of %s%s for %s: %w", describeWrite(w), where, id.User, err)
		}
		if got.Status.Allowed && !got.Status.Denied {
			continue
		}
		s := describeWrite(w) + where
		if r := strings.TrimSpace(got.Status.Reason); r != "" {
			s += ": " + r
		}
		if e := strings.TrimSpace(got.Status.EvaluationError); e != "" {
			s += " (evaluation error: " + e + ")"
		}
		missing = append(missing, s)
	}
	return missing, nil
}

// hostedWritesOf lists the writes a validated change makes in its hosted
// cluster (an exposure's NodePort copy, its rollback's delete), and that
// cluster.
func hostedWritesOf(ch Change) ([]authorizationv1.ResourceAttributes, ClusterRef) {
	switch {
	case ch.Type == TypeExposeNodePort:
		// (Access skips it when the app's Service is of type NodePort:
		// forwarded without a hosted write.)
		return []authorizationv1.ResourceAttributes{{Verb: "create", Version: "v1", Resource: "services", Namespace: ch.Expose.Namespace}}, ch.Cluster
	case ch.Type == TypeRollback && ch.Rollback.Undo.Type == TypeExposeNodePort && ch.Rollback.Undo.Expose != nil:
		u := ch.Rollback.Undo
		return []authorizationv1.ResourceAttributes{{Verb: "delete", Version: "v1", Resource: "services", Namespace: u.Expose.HostedNamespace}}, u.Cluster
	}
	return nil, ClusterRef{}
}

// writesOf lists the management writes a validated change makes, as the
// API server authorises them.
func writesOf(ch Change) []authorizationv1.ResourceAttributes {
	patch := func(target Target, ref ClusterRef) authorizationv1.ResourceAttributes {
		if target.orDefault() == TargetProxy {
			return authorizationv1.ResourceAttributes{Verb: "patch", Group: hypershift.ProxyGVR.Group, Version: hypershift.ProxyGVR.Version,
				Resource: hypershift.ProxyGVR.Resource, Name: hypershift.ProxyName}
		}
		return authorizationv1.ResourceAttributes{Verb: "patch", Group: hypershift.HostedClusterGVR.Group, Version: hypershift.HostedClusterGVR.Version,
			Resource: hypershift.HostedClusterGVR.Resource, Namespace: ref.Namespace, Name: ref.Name}
	}
	services := func(verb string, ref ClusterRef, name string) authorizationv1.ResourceAttributes {
		// A create names no object for RBAC: the name is not known to the
		// authorizer before the object exists.
		return authorizationv1.ResourceAttributes{Verb: verb, Version: "v1", Resource: "services",
			Namespace: hypershift.ControlPlaneNamespace(ref.Namespace, ref.Name), Name: name}
	}
	switch ch.Type {
	case TypeNoProxyPatch:
		return []authorizationv1.ResourceAttributes{patch(ch.NoProxy.Target, ch.Cluster)}
	case TypeExposeNodePort:
		return []authorizationv1.ResourceAttributes{services("create", ch.Cluster, "")}
	case TypeRollback:
		u := ch.Rollback.Undo
		if u.Type == TypeExposeNodePort {
			return []authorizationv1.ResourceAttributes{services("delete", u.Cluster, ManagementServiceName(u.ActionID))}
		}
		return []authorizationv1.ResourceAttributes{patch(u.NoProxy.Target, u.Cluster)}
	}
	return nil
}

// describeWrite names a write: "patch hostedclusters.hypershift.openshift.io
// in namespace clusters (name proxied)".
func describeWrite(w authorizationv1.ResourceAttributes) string {
	s := w.Verb + " " + w.Resource
	if w.Group != "" {
		s += "." + w.Group
	}
	if w.Namespace != "" {
		s += " in namespace " + w.Namespace
	}
	if w.Name != "" {
		s += " (name " + w.Name + ")"
	}
	return s
}

// impersonatedGroups are the groups the API server gives a request
// impersonating id: those named, plus system:authenticated unless
// system:authenticated or system:unauthenticated is among them (the
// impersonation filter of k8s.io/apiserver).
func impersonatedGroups(id identity.Identity) []string {
	groups := slices.Clone(id.Groups)
	if !slices.Contains(groups, "system:authenticated") && !slices.Contains(groups, "system:unauthenticated") {
		groups = append(groups, "system:authenticated")
	}
	return groups
}
