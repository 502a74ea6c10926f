package actions

import (
	"fmt"
	"slices"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hcpbot/hcpbot/hypershift"
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

// ImpersonationMode is the API server check a generated role is written
// for.
type ImpersonationMode string

const (
	// ImpersonationConstrained (the default) grants the verbs of
	// Kubernetes' constrained impersonation (KEP-5284, feature
	// ConstrainedImpersonation: beta and on by default since 1.36):
	// impersonate:user-info on the mapped users and groups, and
	// impersonate-on:user-info:<verb> on exactly the writes hcpbot makes
	// (ImpersonatedWrites). The agent's token is then a mapped person only
	// for those writes: not for a delete of a HostedCluster, a read of a
	// Secret, or anything else the person may do.
	ImpersonationConstrained ImpersonationMode = "constrained"
	// ImpersonationLegacy grants the verb impersonate, for API servers
	// without constrained impersonation (before 1.36, or the feature
	// off): the agent's token is then each mapped person for anything
	// that person may do (docs/security.md, residual risks).
	ImpersonationLegacy ImpersonationMode = "legacy"
)

// ImpersonationModes lists the modes, the default first.
var ImpersonationModes = []ImpersonationMode{ImpersonationConstrained, ImpersonationLegacy}

// ImpersonatedWrite is one kind of write As makes as the approver: a verb
// on a resource (any namespace; Names, when set, limits the objects).
type ImpersonatedWrite struct {
	Group, Resource string
	Names           []string
	Verbs           []string
}

// ImpersonatedWrites are the writes an Executor made by As makes as the
// approver, dry runs included (a dry run is authorised as its verb): the
// noProxy patch and its rollback, the exposure's management Service and
// its rollback's delete. Access asks about the same (writesOf).
var ImpersonatedWrites = slices.Concat(NoProxyWrites, ExposureWrites)

// NoProxyWrites are the writes of the noProxy fix and its rollback.
var NoProxyWrites = []ImpersonatedWrite{
	{Group: hypershift.HostedClusterGVR.Group, Resource: hypershift.HostedClusterGVR.Resource, Verbs: []string{"patch"}},
	{Group: hypershift.ProxyGVR.Group, Resource: hypershift.ProxyGVR.Resource, Names: []string{hypershift.ProxyName}, Verbs: []string{"patch"}},
}

// ExposureWrites are the management writes of a NodePort exposure and its
// rollback. RBAC cannot narrow them to control-plane namespaces or to
// hcpbot's Services, and the shipped admission policy recognises an
// impersonated write as hcpbot's by an extra its sender chooses: with
// them granted, the agent's token may create and delete Services wherever
// a mapped approver may. Leave them out (`hcpbot rbac --exposure=false`)
// where exposures are not used.
var ExposureWrites = []ImpersonatedWrite{
	{Group: "", Resource: "services", Verbs: []string{"create", "delete"}},
}

// ImpersonationRole is the ClusterRole that lets the agent of management
// cluster source impersonate exactly the users and groups m names for it
// (resourceNames; an entry limited to other clusters is left out, source
// "" takes every entry), and send the extras of identity.Extra (any value:
// action ids and Slack user ids are not known in advance). Nothing else:
// not other users or groups, not ServiceAccounts, not uids. In
// ImpersonationConstrained mode (the default, mode "") only for the
// writes given (ImpersonatedWrites when none).
//
// The API server authorises each impersonated user and group on its own:
// when the entries give different groups, the role lets the agent combine
// any mapped user with any mapped group (Mixes says which), which the
// agent never does and its token could; within hcpbot's writes in
// constrained mode.
//
// It refuses what cannot be listed by name: an EmailPrefix entry (the user
// is derived from each person's e-mail), and a ServiceAccount user
// (system:serviceaccount:…, which the API server authorises as
// impersonate on serviceaccounts in its namespace, not as a user); and the
// group system:masters, which the API server lets past every authorizer:
// the agent could then do anything. A map with no entry for source has
// nothing to grant, and is refused too.
func ImpersonationRole(m identity.Map, source string, mode ImpersonationMode, writes ...ImpersonatedWrite) (*rbacv1.ClusterRole, error) {
	if len(writes) == 0 {
		writes = ImpersonatedWrites
	}
	if mode == "" {
		mode = ImpersonationConstrained
	}
	if !slices.Contains(ImpersonationModes, mode) {
		return nil, fmt.Errorf("impersonation mode %q: want %s or %s", mode, ImpersonationConstrained, ImpersonationLegacy)
	}
	users, groups, err := impersonated(m, source)
	if err != nil {
		return nil, err
	}
	extras := make([]string, 0, len(ImpersonationExtraKeys))
	for _, k := range ImpersonationExtraKeys {
		extras = append(extras, "userextras/"+k)
	}
	role := &rbacv1.ClusterRole{
		TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "ClusterRole"},
		ObjectMeta: metav1.ObjectMeta{Name: ImpersonationRoleName},
	}
	if mode == ImpersonationLegacy && len(writes) != len(ImpersonatedWrites) {
		return nil, fmt.Errorf("legacy impersonation cannot be limited to some writes: the verb impersonate lets the agent act as the mapped people for anything")
	}
	if mode == ImpersonationLegacy {
		// Legacy impersonation authorises users and groups in the core
		// group, extras in authentication.k8s.io.
		role.Rules = append(role.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"users"}, ResourceNames: users, Verbs: []string{"impersonate"}})
		if len(groups) > 0 {
			role.Rules = append(role.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"groups"}, ResourceNames: groups, Verbs: []string{"impersonate"}})
		}
		role.Rules = append(role.Rules, rbacv1.PolicyRule{APIGroups: []string{"authentication.k8s.io"}, Resources: extras, Verbs: []string{"impersonate"}})
		return role, nil
	}
	const userInfo = "impersonate:user-info"
	role.Rules = append(role.Rules, rbacv1.PolicyRule{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"users"}, ResourceNames: users, Verbs: []string{userInfo}})
	if len(groups) > 0 {
		role.Rules = append(role.Rules, rbacv1.PolicyRule{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"groups"}, ResourceNames: groups, Verbs: []string{userInfo}})
	}
	role.Rules = append(role.Rules, rbacv1.PolicyRule{APIGroups: []string{"authentication.k8s.io"}, Resources: extras, Verbs: []string{userInfo}})
	for _, w := range writes {
		verbs := make([]string, 0, len(w.Verbs))
		for _, v := range w.Verbs {
			verbs = append(verbs, "impersonate-on:user-info:"+v)
		}
		role.Rules = append(role.Rules, rbacv1.PolicyRule{APIGroups: []string{w.Group}, Resources: []string{w.Resource}, ResourceNames: slices.Clone(w.Names), Verbs: verbs})
	}
	return role, nil
}

// Mixes lists the mapped users of source whose entries do not give every
// mapped group of source: the generated role lets the agent's token act
// as each of them with the groups of the others (ImpersonationRole).
func Mixes(m identity.Map, source string) (users, groups []string) {
	_, groups, err := impersonated(m, source)
	if err != nil || len(groups) == 0 {
		return nil, nil
	}
	for _, e := range entriesFor(m, source) {
		for _, g := range groups {
			if !slices.Contains(e.Groups, g) {
				users = append(users, e.User)
				break
			}
		}
	}
	slices.Sort(users)
	users = slices.Compact(users)
	if len(users) == 0 {
		return nil, nil
	}
	return users, groups
}

func entriesFor(m identity.Map, source string) []identity.Entry {
	var out []identity.Entry
	for _, e := range m.Entries {
		if source != "" && len(e.Clusters) > 0 && !slices.Contains(e.Clusters, source) {
			continue
		}
		out = append(out, e)
	}
	return out
}

// impersonated lists, sorted, the users and groups m names for source,
// refusing what cannot be named (ImpersonationRole).
func impersonated(m identity.Map, source string) (users, groups []string, err error) {
	for _, e := range entriesFor(m, source) {
		switch {
		case e.EmailPrefix != "":
			return nil, nil, fmt.Errorf("identity entry %s derives its user from the Slack e-mail (emailPrefix %q): the identities cannot be listed in resourceNames; map its people to users by name", e.Slack, e.EmailPrefix)
		case strings.HasPrefix(e.User, "system:serviceaccount:"):
			return nil, nil, fmt.Errorf("identity entry %s maps to ServiceAccount %s, which the API server authorises as impersonate on serviceaccounts, not users; map people to users and groups", e.Slack, e.User)
		case e.User == "":
			return nil, nil, fmt.Errorf("identity entry %s has no user", e.Slack)
		case slices.Contains(e.Groups, privilegedGroup):
			return nil, nil, fmt.Errorf("identity entry %s names group %s, which bypasses RBAC: impersonating it would make the agent cluster-admin", e.Slack, privilegedGroup)
		}
		users = append(users, e.User)
		groups = append(groups, e.Groups...)
	}
	if len(users) == 0 {
		if source != "" {
			return nil, nil, fmt.Errorf("no identity mapped for management cluster %s: nothing to impersonate", source)
		}
		return nil, nil, fmt.Errorf("no identity mapped: nothing to impersonate")
	}
	slices.Sort(users)
	slices.Sort(groups)
	return slices.Compact(users), slices.Compact(groups), nil
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
