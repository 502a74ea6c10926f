package actions_test

import (
	"os"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// The agent's RBAC (configs/deploy/agent/rbac.yaml, the one source of
// truth) grants every verb the executor issues in the management cluster
// (the lists the integration tests record) and, besides, only what the
// agent's watchers and leader election use.
func TestRBACMatchesRecordedCalls(t *testing.T) {
	data, err := os.ReadFile("../configs/deploy/agent/rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	granted := map[string][]string{} // "group/resource" → verbs
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var meta struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatal(err)
		}
		var rules []rbacv1.PolicyRule
		switch meta.Kind {
		case "ClusterRole":
			var r rbacv1.ClusterRole
			if err := yaml.UnmarshalStrict([]byte(doc), &r); err != nil {
				t.Fatal(err)
			}
			rules = r.Rules
		case "Role":
			var r rbacv1.Role
			if err := yaml.UnmarshalStrict([]byte(doc), &r); err != nil {
				t.Fatal(err)
			}
			rules = r.Rules
		case "ClusterRoleBinding", "RoleBinding":
			continue
		default:
			t.Fatalf("unexpected kind %q", meta.Kind)
		}
		for _, r := range rules {
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					for _, v := range r.Verbs {
						if v == "*" || g == "*" || res == "*" {
							t.Errorf("wildcard in %+v", r)
						}
						granted[g+"/"+res] = append(granted[g+"/"+res], v)
					}
				}
			}
		}
	}
	// From the recorded management calls in noproxy_test.go,
	// expose_test.go and event_test.go, and Access's reviews
	// (impersonate_test.go).
	needed := map[string][]string{
		"hypershift.openshift.io/hostedclusters":    {"get", "patch"},
		"config.openshift.io/proxies":               {"get", "patch"},
		"authorization.k8s.io/subjectaccessreviews": {"create"},
		"/secrets":  {"get"},
		"/services": {"create", "delete", "list"},
		"/nodes":    {"list"},
		"/events":   {"create"},
	}
	// What the agent's informers (watchers/agent.go, watchers/hosted.go)
	// and its leader election (client-go LeaseLock) use besides; exercised
	// under the agent's own identity by configs/deploy's integration test.
	agent := map[string][]string{
		"hypershift.openshift.io/hostedclusters": {"list", "watch"},
		"hypershift.openshift.io/nodepools":      {"list", "watch"},
		"config.openshift.io/proxies":            {"list", "watch"},
		"/pods":                                  {"list", "watch"},
		"/configmaps":                            {"list", "watch"},
		"/secrets":                               {"list", "watch"},
		"coordination.k8s.io/leases":             {"create", "get", "update"},
	}
	used := map[string][]string{}
	for _, m := range []map[string][]string{needed, agent} {
		for k, v := range m {
			used[k] = append(used[k], v...)
		}
	}
	for k := range used {
		slices.Sort(used[k])
		used[k] = slices.Compact(used[k])
	}
	for k := range granted {
		slices.Sort(granted[k])
		granted[k] = slices.Compact(granted[k])
	}
	for k, v := range needed {
		for _, verb := range v {
			if !slices.Contains(granted[k], verb) {
				t.Errorf("%s: %s needed by the executor, not granted (granted %v)", k, verb, granted[k])
			}
		}
	}
	for k, v := range granted {
		for _, verb := range v {
			if !slices.Contains(used[k], verb) {
				t.Errorf("%s: %s granted but never used", k, verb)
			}
		}
	}
	for k, v := range used {
		if !slices.Equal(granted[k], v) {
			t.Errorf("%s: granted %v, used %v", k, granted[k], v)
		}
	}
}
