// Package identity maps the people who approve changes in chat to the
// Kubernetes identities the agent acts as when it makes the change
// (client-go impersonation), so that the cluster's RBAC, not the bot,
// has the last word on what each person may change, and the API
// server's audit log names who asked, who approved and which action.
//
// Both sides read the same map (the configuration's identities section):
// the bot to tell a person their identity (`/hcp whoami`) and to refuse an
// approval an unmapped person could not complete; the agent to impersonate
// the approver whose sealed approval completed the decision, and to check,
// when the bot asks, whether that identity may make the change
// (SubjectAccessReview).
package identity

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrNoIdentity: the person has no Kubernetes identity on that
// management cluster.
var ErrNoIdentity = errors.New("no Kubernetes identity mapped")

// Identity is who the agent acts as.
type Identity struct {
	User   string   `json:"user"`
	Groups []string `json:"groups,omitempty"`
	// Hosted are the HostedClusters ("namespace/name", or "*" for every
	// one) in which the agent acts as this identity too (Entry.Hosted).
	Hosted []string `json:"hosted,omitempty"`
}

// InHosted reports whether the agent acts as i in hosted cluster
// ("namespace/name" of its HostedCluster).
func (i Identity) InHosted(cluster string) bool {
	return slices.ContainsFunc(i.Hosted, func(h string) bool { return h == AllHosted || h == cluster })
}

// AllHosted in Entry.Hosted names every hosted cluster of the entry's
// management clusters.
const AllHosted = "*"

func (i Identity) String() string {
	if len(i.Groups) == 0 {
		return i.User
	}
	return i.User + " (groups " + strings.Join(i.Groups, ", ") + ")"
}

// Entry maps a Slack user, or the members of a Slack user group, to a
// Kubernetes identity.
type Entry struct {
	// Slack is a user ID (U…/W…) or a user group ID (S…).
	Slack string
	// User is the Kubernetes user name; or EmailPrefix, and the user is
	// the prefix followed by the person's Slack e-mail address (OpenShift
	// OIDC users are often "prefix:e-mail").
	User        string
	EmailPrefix string
	Groups      []string
	// Clusters are the management clusters (agent sources) it applies to;
	// empty: all.
	Clusters []string
	// Hosted are the hosted clusters (their HostedCluster's
	// "namespace/name", or AllHosted) whose API servers also see this
	// identity: the agent's writes there (an exposure's NodePort Service,
	// its deletion) impersonate it through the hosted cluster's admin
	// kubeconfig, for a hosted cluster whose RBAC knows the same person.
	// Empty: hosted writes are the admin kubeconfig's own.
	Hosted []string
}

// Group reports whether the entry names a Slack user group.
func (e Entry) Group() bool { return strings.HasPrefix(e.Slack, "S") }

func (e Entry) appliesTo(source string) bool {
	return len(e.Clusters) == 0 || slices.Contains(e.Clusters, source)
}

// Map is the configuration's identities.
type Map struct {
	// Required: a change runs only as a mapped identity; an approver
	// without one cannot complete a decision, and the agent refuses to
	// act with its own rights. Off, an approver without a mapping has the
	// agent act as itself.
	Required bool
	Entries  []Entry
}

// Empty reports whether nothing is mapped and nothing required: the agent
// acts as itself.
func (m Map) Empty() bool { return !m.Required && len(m.Entries) == 0 }

// For is the identity of Slack user on management cluster source: the
// entry naming the user wins over one naming a group in groups (the
// groups the user is a member of, as the bot resolved them); email is the
// user's Slack e-mail, needed by an EmailPrefix entry. It returns the
// entry used; ErrNoIdentity when none applies.
func (m Map) For(source, user string, groups []string, email string) (Identity, Entry, error) {
	var match *Entry
	for i, e := range m.Entries {
		if !e.appliesTo(source) {
			continue
		}
		if e.Slack == user {
			match = &m.Entries[i]
			break
		}
		if match == nil && e.Group() && slices.Contains(groups, e.Slack) {
			match = &m.Entries[i]
		}
	}
	if match == nil {
		return Identity{}, Entry{}, fmt.Errorf("%w for %s on %s", ErrNoIdentity, user, source)
	}
	id := Identity{User: match.User, Groups: slices.Clone(match.Groups), Hosted: slices.Clone(match.Hosted)}
	if match.EmailPrefix != "" {
		if email == "" {
			return Identity{}, *match, fmt.Errorf("%w for %s on %s: its entry (%s) derives the user from the Slack e-mail, which is not known", ErrNoIdentity, user, source, match.Slack)
		}
		id.User = match.EmailPrefix + email
	}
	return id, *match, nil
}

// The Impersonate-Extra keys the agent sends with every write, so the API
// server's audit log records which action, who asked and who approved.
// Domain-prefixed paths, lowercase: constrained impersonation refuses any
// other key; each is granted as userextras/<key>.
const (
	ExtraAction    = "hcpbot.io/action"
	ExtraRequester = "hcpbot.io/requested-by"
	ExtraApprovers = "hcpbot.io/approved-by"
)

// Extra is the Impersonate-Extra of a write for action id.
func Extra(action, requestedBy string, approvers []string) map[string][]string {
	return map[string][]string{
		ExtraAction:    {action},
		ExtraRequester: {requestedBy},
		ExtraApprovers: slices.Clone(approvers),
	}
}
