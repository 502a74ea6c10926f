package configs

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/hcpbot/hcpbot/identity"
)

// agentBase is the smallest agent configuration; identities cases append
// their section after it, starting on line 3.
const agentBase = "agent:\n  source: mgmt-1\n"

// The identities section as written: the map in order, each entry as the
// identity package reads it, required as written; read in an agent-only
// file, a bot-only file and `hcpbot all`'s alike.
func TestIdentitiesAccepted(t *testing.T) {
	const section = `identities:
  required: true
  map:
    - slack: U0ALICE123
      user: alice@corp.example
      groups: [platform-ops, "oidc:sre"]
      clusters: [mgmt-1, mgmt-2]
    - slack: U0ALICE123
      user: alice
      clusters: [mgmt-3]
      hostedClusters: [clusters/prod-eu, clusters/prod-us]
    - slack: W0BOBBY123
      emailPrefix: "oidc:"
      hostedClusters: ["*"]
    - slack: S0OPSTEAM1
      emailPrefix: "https://login.corp.example#"
      groups: [ops]
`
	want := identity.Map{Required: true, Entries: []identity.Entry{
		{Slack: "U0ALICE123", User: "alice@corp.example", Groups: []string{"platform-ops", "oidc:sre"}, Clusters: []string{"mgmt-1", "mgmt-2"}},
		{Slack: "U0ALICE123", User: "alice", Clusters: []string{"mgmt-3"}, Hosted: []string{"clusters/prod-eu", "clusters/prod-us"}},
		{Slack: "W0BOBBY123", EmailPrefix: "oidc:", Hosted: []string{"*"}},
		{Slack: "S0OPSTEAM1", EmailPrefix: "https://login.corp.example#", Groups: []string{"ops"}},
	}}
	for name, base := range map[string]string{"agent": agentBase, "bot": botBase, "all": agentBase + botBase} {
		t.Run(name, func(t *testing.T) {
			c, err := Parse([]byte(base+section), "hcpbot.yaml")
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(c.Identities, want) {
				t.Errorf("identities = %+v\nwant %+v", c.Identities, want)
			}
		})
	}
	// Absent, or without required: nothing required, the agent acts as
	// itself.
	c, err := Parse([]byte(agentBase), "a.yaml")
	if err != nil || !c.Identities.Empty() {
		t.Errorf("no section: %+v, %v", c.Identities, err)
	}
	c, err = Parse([]byte(agentBase+"identities:\n  map:\n    - {slack: U0ALICE123, user: alice}\n"), "a.yaml")
	if err != nil || c.Identities.Required || len(c.Identities.Entries) != 1 {
		t.Errorf("without required: %+v, %v", c.Identities, err)
	}
	// What the map then means, through the contract's own lookup.
	c, err = Parse([]byte(agentBase+section), "a.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		source, user string
		groups       []string
		email, want  string
	}{
		{"mgmt-2", "U0ALICE123", []string{"S0OPSTEAM1"}, "alice@corp.example", "alice@corp.example (groups platform-ops, oidc:sre)"},
		{"mgmt-3", "U0ALICE123", nil, "", "alice"},
		{"mgmt-9", "U0ALICE123", []string{"S0OPSTEAM1"}, "alice@corp.example", "https://login.corp.example#alice@corp.example (groups ops)"},
		{"mgmt-9", "W0BOBBY123", nil, "bob@corp.example", "oidc:bob@corp.example"},
	} {
		id, _, err := c.Identities.For(tc.source, tc.user, tc.groups, tc.email)
		if err != nil || id.String() != tc.want {
			t.Errorf("For(%s, %s) = %s, %v; want %s", tc.source, tc.user, id, err, tc.want)
		}
	}
	// The hosted clusters where the identity is acted as too.
	for _, tc := range []struct {
		source, user, email, hosted string
		want                        bool
	}{
		{"mgmt-3", "U0ALICE123", "", "clusters/prod-eu", true},
		{"mgmt-3", "U0ALICE123", "", "clusters/dev", false},
		{"mgmt-1", "U0ALICE123", "", "clusters/prod-eu", false},
		{"mgmt-9", "W0BOBBY123", "bob@corp.example", "any/where", true},
	} {
		id, _, err := c.Identities.For(tc.source, tc.user, nil, tc.email)
		if err != nil || id.InHosted(tc.hosted) != tc.want {
			t.Errorf("For(%s, %s).InHosted(%s) = %v (%+v, %v); want %v", tc.source, tc.user, tc.hosted, id.InHosted(tc.hosted), id, err, tc.want)
		}
	}
	if _, _, err := c.Identities.For("mgmt-9", "U0NOBODY12", nil, ""); !errors.Is(err, identity.ErrNoIdentity) {
		t.Errorf("unmapped: %v", err)
	}
}

// Each mistake in the identities section is refused with a problem on the
// field and line to edit, and the reason.
func TestIdentitiesRejected(t *testing.T) {
	entry := func(lines ...string) string {
		return agentBase + "identities:\n  map:\n    - " + strings.Join(lines, "\n      ") + "\n"
	}
	for _, tc := range []struct {
		name, yaml string
		line       int
		field, msg string
	}{
		{"not a mapping", agentBase + "identities: [U0ALICE123]\n", 3, "identities", "must be a mapping"},
		{"unknown key", agentBase + "identities:\n  requird: true\n", 4, "identities.requird", "unknown key (known: required, map)"},
		{"required not a boolean", agentBase + "identities:\n  required: yes\n", 4, "identities.required", "must be true or false"},
		{"required with no map", agentBase + "identities:\n  required: true\n", 4, "identities.required", "nobody could change a cluster"},
		{"required with an empty map", agentBase + "identities:\n  required: true\n  map: []\n", 4, "identities.required", "nobody could change a cluster"},
		{"map not a list", agentBase + "identities:\n  map: {slack: U0ALICE123}\n", 4, "identities.map", "must be a list"},
		{"slack missing", entry("user: alice"), 5, "identities.map[0].slack", "is required"},
		{"slack a name", entry("slack: alice", "user: alice"), 5, "identities.map[0].slack", `"alice" is not a Slack user ID (U…/W…) or user group ID (S…)`},
		{"slack a channel", entry("slack: C0123456789", "user: alice"), 5, "identities.map[0].slack", "that is a channel ID"},
		{"slack lower case", entry("slack: u0alice123", "user: alice"), 5, "identities.map[0].slack", "is not a Slack user ID"},
		{"slack a number", entry("slack: 12345678901", "user: alice"), 5, "identities.map[0].slack", "must be a string"},
		{"neither user nor prefix", entry("slack: U0ALICE123", "groups: [ops]"), 5, "identities.map[0].user", "user or emailPrefix is required"},
		{"both user and prefix", entry("slack: U0ALICE123", "user: alice", "emailPrefix: 'oidc:'"), 7, "identities.map[0].emailPrefix", "not both"},
		{"user empty", entry("slack: U0ALICE123", "user: ''"), 6, "identities.map[0].user", "an empty user name"},
		{"user null", entry("slack: U0ALICE123", "user:"), 5, "identities.map[0].user", "user or emailPrefix is required"},
		{"user padded", entry("slack: U0ALICE123", "user: ' alice'"), 6, "identities.map[0].user", "white space"},
		{"user with a newline", entry("slack: U0ALICE123", `user: "alice\nImpersonate-Group: system:masters"`), 6, "identities.map[0].user", "control characters"},
		{"user system:admin", entry("slack: U0ALICE123", "user: 'system:admin'"), 6, "identities.map[0].user", "system identity"},
		{"user a ServiceAccount", entry("slack: U0ALICE123", "user: 'system:serviceaccount:hcpbot:hcpbot-agent'"), 6, "identities.map[0].user", "is a ServiceAccount, not a person"},
		{"user anonymous", entry("slack: U0ALICE123", "user: 'system:anonymous'"), 6, "identities.map[0].user", "system identity"},
		{"group system:masters", entry("slack: U0ALICE123", "user: alice", "groups: ['system:masters']"), 7, "identities.map[0].groups[0]", "without asking RBAC"},
		{"group of ServiceAccounts", entry("slack: U0ALICE123", "user: alice", "groups: ['system:serviceaccounts:hcpbot']"), 7, "identities.map[0].groups[0]", "is a ServiceAccount"},
		{"group system:authenticated", entry("slack: U0ALICE123", "user: alice", "groups: [ops, 'system:authenticated']"), 7, "identities.map[0].groups[1]", "system identity"},
		{"group empty", entry("slack: U0ALICE123", "user: alice", "groups: ['']"), 7, "identities.map[0].groups[0]", "an empty group name"},
		{"group twice", entry("slack: U0ALICE123", "user: alice", "groups: [ops, ops]"), 7, "identities.map[0].groups[1]", "listed twice"},
		{"groups not a list", entry("slack: U0ALICE123", "user: alice", "groups: ops"), 7, "identities.map[0].groups", "must be a list"},
		{"prefix empty", entry("slack: S0OPSTEAM1", "emailPrefix: ''"), 6, "identities.map[0].emailPrefix", "not supported yet"},
		{"prefix system:", entry("slack: S0OPSTEAM1", "emailPrefix: 'system:'"), 6, "identities.map[0].emailPrefix", "could make a system identity"},
		{"prefix of system:", entry("slack: S0OPSTEAM1", "emailPrefix: 'sys'"), 6, "identities.map[0].emailPrefix", "could make a system identity"},
		{"prefix with a space", entry("slack: S0OPSTEAM1", "emailPrefix: 'oidc: '"), 6, "identities.map[0].emailPrefix", "white space"},
		{"cluster not a label", entry("slack: U0ALICE123", "user: alice", "clusters: [Mgmt_1]"), 7, "identities.map[0].clusters[0]", "is not a management cluster name"},
		{"cluster twice", entry("slack: U0ALICE123", "user: alice", "clusters: [mgmt-1, mgmt-1]"), 7, "identities.map[0].clusters[1]", "listed twice"},
		{"clusters empty", entry("slack: U0ALICE123", "user: alice", "clusters: []"), 7, "identities.map[0].clusters", "is empty"},
		{"hosted cluster without a namespace", entry("slack: U0ALICE123", "user: alice", "hostedClusters: [prod-eu]"), 7, "identities.map[0].hostedClusters[0]", `"prod-eu" is not a hosted cluster: write its HostedCluster's namespace/name`},
		{"hosted cluster not a label", entry("slack: U0ALICE123", "user: alice", "hostedClusters: [clusters/Prod_EU]"), 7, "identities.map[0].hostedClusters[0]", "is not a hosted cluster"},
		{"hosted cluster twice", entry("slack: U0ALICE123", "user: alice", "hostedClusters: [clusters/a, clusters/a]"), 7, "identities.map[0].hostedClusters[1]", "listed twice"},
		{"hosted clusters empty", entry("slack: U0ALICE123", "user: alice", "hostedClusters: []"), 7, "identities.map[0].hostedClusters", "is empty"},
		{"hosted clusters all and one", entry("slack: U0ALICE123", "user: alice", "hostedClusters: ['*', clusters/a]"), 7, "identities.map[0].hostedClusters", `"*" names every hosted cluster`},
		{"entry not a mapping", agentBase + "identities:\n  map:\n    - U0ALICE123\n", 5, "identities.map[0]", "must be a mapping"},
		{"entry unknown key", entry("slack: U0ALICE123", "user: alice", "cluster: mgmt-1"), 7, "identities.map[0].cluster", "unknown key (known: slack, user, emailPrefix, groups, clusters, hostedClusters)"},
		{"a person twice everywhere", agentBase + "identities:\n  map:\n    - {slack: U0ALICE123, user: alice}\n    - {slack: U0ALICE123, user: alice2}\n", 6,
			"identities.map[1].slack", `"U0ALICE123" is already mapped on every management cluster by identities.map[0] (line 5)`},
		{"a person twice on one cluster", agentBase + "identities:\n  map:\n    - {slack: U0ALICE123, user: alice, clusters: [mgmt-1, mgmt-2]}\n    - {slack: U0ALICE123, user: alice2, clusters: [mgmt-3, mgmt-2]}\n", 6,
			"identities.map[1].slack", "already mapped on mgmt-2 by identities.map[0]"},
		{"a group twice, one everywhere", agentBase + "identities:\n  map:\n    - {slack: S0OPSTEAM1, emailPrefix: 'oidc:', clusters: [mgmt-1]}\n    - {slack: S0OPSTEAM1, user: ops}\n", 6,
			"identities.map[1].slack", "already mapped on mgmt-1 by identities.map[0]"},
	} {
		t.Run(tc.name, func(t *testing.T) { expectProblem(t, tc.yaml, tc.field, tc.msg, tc.line) })
	}
}

// Entries with a problem are not also reported by the checks over the
// whole map: one problem per mistake.
func TestIdentitiesOneProblemPerMistake(t *testing.T) {
	yml := agentBase + "identities:\n  required: true\n  map:\n    - {slack: alice, user: alice}\n    - {slack: alice, user: alice}\n"
	_, err := Parse([]byte(yml), "hcpbot.yaml")
	var perr *Error
	if !errors.As(err, &perr) {
		t.Fatalf("Parse: %v", err)
	}
	var fields []string
	for _, p := range perr.Problems {
		fields = append(fields, p.Field)
	}
	if want := []string{"identities.map[0].slack", "identities.map[1].slack"}; !slices.Equal(fields, want) {
		t.Errorf("problems on %v, want %v:\n%v", fields, want, err)
	}
}

// Disjoint clusters are two identities of one person, not a conflict; a
// user entry and a group entry never conflict (the user's own wins).
func TestIdentitiesDisjointClusters(t *testing.T) {
	yml := agentBase + "identities:\n  map:\n" +
		"    - {slack: U0ALICE123, user: alice, clusters: [mgmt-1]}\n" +
		"    - {slack: U0ALICE123, user: 'oidc:alice', clusters: [mgmt-2, mgmt-3]}\n" +
		"    - {slack: S0OPSTEAM1, emailPrefix: 'oidc:'}\n"
	c, err := Parse([]byte(yml), "hcpbot.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(c.Identities.Entries); n != 3 {
		t.Errorf("%d entries", n)
	}
}
