package configs

import (
	"fmt"
	"slices"
	"strings"
	"unicode"

	"k8s.io/apimachinery/pkg/util/validation"
	yaml "sigs.k8s.io/yaml/goyaml.v3"

	"github.com/hcpbot/hcpbot/identity"
)

// identities decodes the identities section: who the agent acts as when
// it makes a change a person approved. Both the bot and the agent read it,
// so it is checked whatever sections the file has.
func (d *decoder) identities(n *yaml.Node, path string, m *identity.Map) {
	type placed struct {
		e    identity.Entry
		path string
	}
	var entries []placed
	ok := d.mapping(n, path, []field{
		{"required", func(v *yaml.Node, p string) {
			if b, ok := d.boolean(v, p); ok {
				m.Required = b
			}
		}},
		{"map", func(v *yaml.Node, p string) {
			d.sequence(v, p, func(v *yaml.Node, p string) {
				var e identity.Entry
				if d.identityEntry(v, p, &e) {
					entries = append(entries, placed{e, p})
				}
			})
		}},
	}, nil)
	if !ok {
		return
	}
	// One identity per person and management cluster: with two, which one
	// the agent acts as would depend on the order of the list, and the
	// person could not tell from `/hcp whoami` which one RBAC judges.
	for j, b := range entries {
		for _, a := range entries[:j] {
			if a.e.Slack != b.e.Slack {
				continue
			}
			shared, overlap := sharedClusters(a.e.Clusters, b.e.Clusters)
			if !overlap {
				continue // disjoint clusters: one identity on each
			}
			where := "every management cluster"
			if shared != nil {
				where = strings.Join(shared, ", ")
			}
			p := b.path + ".slack"
			d.problem(d.at(p), p, "%q is already mapped on %s by %s (line %d): one identity per Slack user or group and management cluster; give the entries disjoint clusters or merge them",
				b.e.Slack, where, a.path, d.at(a.path).Line)
			break
		}
	}
	for _, e := range entries {
		m.Entries = append(m.Entries, e.e)
	}
	if m.Required && len(m.Entries) == 0 && !d.problemUnder(path+".map") {
		p := path + ".required"
		d.problem(d.at(p), p, "true with an empty map: nobody could change a cluster (every approval would be refused for want of an identity); map the approvers in identities.map, or set required: false to let the agent act as itself")
	}
}

// sharedClusters is where two entries' clusters overlap. An entry without
// clusters applies to all, so it overlaps another on the other's clusters;
// when both have none they overlap everywhere (shared nil, overlap true).
func sharedClusters(a, b []string) (shared []string, overlap bool) {
	switch {
	case len(a) == 0 && len(b) == 0:
		return nil, true
	case len(a) == 0:
		return b, true
	case len(b) == 0:
		return a, true
	}
	for _, c := range a {
		if slices.Contains(b, c) {
			shared = append(shared, c)
		}
	}
	return shared, len(shared) > 0
}

// identityEntry decodes one entry of identities.map; false when it has a
// problem (it is then left out of the map, so no later check reasons
// about half an entry).
func (d *decoder) identityEntry(n *yaml.Node, path string, e *identity.Entry) bool {
	before := len(d.problems)
	ok := d.mapping(n, path, []field{
		{"slack", func(v *yaml.Node, p string) {
			s, ok := d.str(v, p)
			if !ok {
				return
			}
			if !userIDRE.MatchString(s) && !groupIDRE.MatchString(s) {
				hint := ""
				if channelIDRE.MatchString(s) {
					hint = ": that is a channel ID"
				}
				d.problem(v, p, "%q is not a Slack user ID (U…/W…) or user group ID (S…)%s; names and @handles change, IDs do not (Slack profile → ⋮ → Copy member ID)", s, hint)
				return
			}
			e.Slack = s
		}},
		{"user", func(v *yaml.Node, p string) {
			if s, ok := d.str(v, p); ok && d.kubeName(v, p, s, "user") {
				e.User = s
			}
		}},
		{"emailPrefix", func(v *yaml.Node, p string) {
			if s, ok := d.str(v, p); ok && d.emailPrefix(v, p, s) {
				e.EmailPrefix = s
			}
		}},
		{"groups", func(v *yaml.Node, p string) {
			d.uniqueStrings(v, p, &e.Groups, func(s string) string { return kubeNameProblem(s, "group") })
		}},
		{"clusters", func(v *yaml.Node, p string) {
			d.uniqueStrings(v, p, &e.Clusters, func(s string) string {
				if len(validation.IsDNS1123Label(s)) > 0 {
					return fmt.Sprintf("%q is not a management cluster name (agent.source): a DNS-1123 label is lower-case letters, digits and '-', starts and ends with a letter or digit, at most 63 characters", s)
				}
				return ""
			})
			if s := resolve(v); s.Kind == yaml.SequenceNode && len(s.Content) == 0 {
				// Read as "nowhere" by some and "everywhere" by others.
				d.problem(v, p, "is empty: remove it to apply the entry to every management cluster, or name the clusters")
			}
		}},
		{"hostedClusters", func(v *yaml.Node, p string) {
			d.uniqueStrings(v, p, &e.Hosted, hostedClusterProblem)
			if s := resolve(v); s.Kind == yaml.SequenceNode && len(s.Content) == 0 {
				d.problem(v, p, "is empty: remove it to keep hosted writes the admin kubeconfig's own, or name the hosted clusters (namespace/name, or \"*\")")
			}
			if len(e.Hosted) > 1 && slices.Contains(e.Hosted, identity.AllHosted) {
				d.problem(v, p, "\"*\" names every hosted cluster: the others listed with it say nothing; keep one or the other")
			}
		}},
	}, nil)
	if !ok {
		return false
	}
	set := func(k string) bool { _, ok := d.lines[path+"."+k]; return ok }
	if !set("slack") {
		d.problem(n, path+".slack", "is required: the Slack user ID (U…/W…) or user group ID (S…) the entry maps")
	}
	switch {
	case set("user") && set("emailPrefix"):
		d.problem(d.at(path+".emailPrefix"), path+".emailPrefix", "set user or emailPrefix, not both: the Kubernetes user name is either written here or made of the prefix and the person's Slack e-mail")
	case !set("user") && !set("emailPrefix"):
		d.problem(n, path+".user", "user or emailPrefix is required: the Kubernetes user name (htpasswd: the user's name; OIDC: the name OpenShift gives, often prefix:claim), or emailPrefix to make it of the prefix and the person's Slack e-mail")
	}
	return len(d.problems) == before
}

// hostedClusterProblem says what is wrong with an entry of
// identities.map[].hostedClusters; "" when nothing is.
func hostedClusterProblem(s string) string {
	if s == identity.AllHosted {
		return ""
	}
	ns, name, ok := strings.Cut(s, "/")
	if !ok || len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1123Label(name)) > 0 {
		return fmt.Sprintf("%q is not a hosted cluster: write its HostedCluster's namespace/name (e.g. clusters/prod-eu), or \"*\" for every hosted cluster of the entry's management clusters", s)
	}
	return ""
}

// kubeName checks a Kubernetes user or group name the agent would act as.
func (d *decoder) kubeName(v *yaml.Node, p, s, what string) bool {
	if msg := kubeNameProblem(s, what); msg != "" {
		d.problem(v, p, "%s", msg)
		return false
	}
	return true
}

// kubeNameProblem says what is wrong with a user or group name the agent
// would impersonate; "" when nothing is. The API server takes any string,
// so these are our rules: the name travels in an HTTP header
// (Impersonate-User, Impersonate-Group), and the system: names are the
// API server's own, never a person's.
func kubeNameProblem(s, what string) string {
	switch {
	case s == "":
		return fmt.Sprintf("an empty %s name", what)
	case strings.TrimSpace(s) != s:
		return fmt.Sprintf("%q begins or ends with white space: RBAC bindings would not match it", s)
	case strings.ContainsFunc(s, unicode.IsControl):
		return fmt.Sprintf("the %s name has control characters (it is sent in an Impersonate-%s header)", what, headerWord(what))
	case s == "system:masters":
		return `"system:masters" is never acted as: the API server grants that group everything without asking RBAC, so RBAC could not have the last word`
	case strings.HasPrefix(s, "system:serviceaccount:") || strings.HasPrefix(s, "system:serviceaccounts"):
		return fmt.Sprintf("%q is a ServiceAccount, not a person: what the agent may do by itself it does as its own ServiceAccount already; map people to the names your identity provider gives them", s)
	case strings.HasPrefix(s, "system:"):
		return fmt.Sprintf("%q is a system identity (system:…, the API server's and its components' own): the agent never acts as one; map people to the names your identity provider gives them", s)
	}
	return ""
}

func headerWord(what string) string {
	if what == "group" {
		return "Group"
	}
	return "User"
}

// emailPrefix checks an entry's emailPrefix: the Kubernetes user is the
// prefix followed by the person's Slack e-mail ("oidc:" makes
// oidc:alice@corp.example).
func (d *decoder) emailPrefix(v *yaml.Node, p, s string) bool {
	switch {
	case s == "":
		// identity.Entry tells an e-mail entry by a non-empty prefix.
		d.problem(v, p, "is empty: the bare e-mail as the user name is not supported yet; write user: per person")
	case strings.ContainsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }):
		d.problem(v, p, "%q has white space or control characters: no user name OpenShift gives has them", s)
	case strings.HasPrefix(s, "system:") || strings.HasPrefix("system:", s):
		// A prefix of "system:" could make a system name with the right
		// e-mail; "system:" itself makes one with any.
		d.problem(v, p, "%q could make a system identity (system:…) of an e-mail: the agent never acts as one", s)
	default:
		return true
	}
	return false
}
