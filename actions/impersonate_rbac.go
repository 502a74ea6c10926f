package actions

import (
	"fmt"
	"slices"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hcpbot/hcpbot/identity"
)

// ImpersonationRoleName names the ClusterRole (and its binding) that lets
// the agent act as the identities of the configuration's map.
const ImpersonationRoleName = "hcpbot-agent-impersonate"

// privilegedGroup is let past every authorizer by the API server.
const privilegedGroup = "system:masters"

// ImpersonationExtraKeys are the Impersonate-Extra keys As sends
// (identity.Extra), each granted as userextras/<key>.
var ImpersonationExtraKeys = []string{identity.ExtraAction, identity.ExtraRequester, identity.ExtraApprovers}

// ImpersonationRole is the ClusterRole that lets the agent of management
// cluster source impersonate exactly the users and groups m names for it
// (resourceNames; an entry limited to other clusters is left out, source
// "" takes every entry), and send the extras of identity.Extra (any value:
// action ids and Slack user ids are not known in advance). Nothing else:
// not other users or groups, not ServiceAccounts, not uids.
//
// It refuses what cannot be listed by name: an EmailPrefix entry (the user
// is derived from each person's e-mail), and a ServiceAccount user
// (system:serviceaccount:…, which the API server authorises as
// impersonate on serviceaccounts in its namespace, not as a user); and the
// group system:masters, which the API server lets past every authorizer:
// the agent could then do anything. A map with no entry for source has
// nothing to grant, and is refused too.
func ImpersonationRole(m identity.Map, source string) (*rbacv1.ClusterRole, error) {
	var users, groups []string
	for _, e := range m.Entries {
		if source != "" && len(e.Clusters) > 0 && !slices.Contains(e.Clusters, source) {
			continue
		}
		switch {
		case e.EmailPrefix != "":
			return nil, fmt.Errorf("identity entry %s derives its user from the Slack e-mail (emailPrefix %q): the identities cannot be listed in resourceNames; map its people to users by name", e.Slack, e.EmailPrefix)
		case strings.HasPrefix(e.User, "system:serviceaccount:"):
			return nil, fmt.Errorf("identity entry %s maps to ServiceAccount %s, which the API server authorises as impersonate on serviceaccounts, not users; map people to users and groups", e.Slack, e.User)
		case e.User == "":
			return nil, fmt.Errorf("identity entry %s has no user", e.Slack)
		case slices.Contains(e.Groups, privilegedGroup):
			return nil, fmt.Errorf("identity entry %s names group %s, which bypasses RBAC: impersonating it would make the agent cluster-admin", e.Slack, privilegedGroup)
		}
		users = append(users, e.User)
		groups = append(groups, e.Groups...)
	}
	if len(users) == 0 {
		if source != "" {
			return nil, fmt.Errorf("no identity mapped for management cluster %s: nothing to impersonate", source)
		}
		return nil, fmt.Errorf("no identity mapped: nothing to impersonate")
	}
	slices.Sort(users)
	slices.Sort(groups)
	users, groups = slices.Compact(users), slices.Compact(groups)
	extras := make([]string, 0, len(ImpersonationExtraKeys))
	for _, k := range ImpersonationExtraKeys {
		extras = append(extras, "userextras/"+k)
	}
	role := &rbacv1.ClusterRole{
		TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "ClusterRole"},
		ObjectMeta: metav1.ObjectMeta{Name: ImpersonationRoleName},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"users"}, ResourceNames: users, Verbs: []string{"impersonate"}},
		},
	}
	if len(groups) > 0 {
		role.Rules = append(role.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"groups"}, ResourceNames: groups, Verbs: []string{"impersonate"}})
	}
	role.Rules = append(role.Rules, rbacv1.PolicyRule{APIGroups: []string{"authentication.k8s.io"}, Resources: extras, Verbs: []string{"impersonate"}})
	return role, nil
}

// ImpersonationBinding binds ImpersonationRole to the agent's
// ServiceAccount namespace/name.
func ImpersonationBinding(namespace, name string) *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "ClusterRoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: ImpersonationRoleName},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: ImpersonationRoleName},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: name}},
	}
}
