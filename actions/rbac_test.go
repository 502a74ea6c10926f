package actions_test

import (
	"os"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// The RBAC file grants exactly the verbs the executor issues in the
// management cluster (the lists the integration tests record), no more.
func TestRBACMatchesRecordedCalls(t *testing.T) {
	data, err := os.ReadFile("../configs/rbac/agent-actions.yaml")
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
	// From the recorded management calls in noproxy_test.go and
	// expose_test.go.
	needed := map[string][]string{
		"hypershift.openshift.io/hostedclusters": {"get", "update"},
		"config.openshift.io/proxies":            {"get", "update"},
		"/secrets":                               {"get"},
		"/services":                              {"create", "delete", "list"},
		"/nodes":                                 {"list"},
	}
	for k := range granted {
		slices.Sort(granted[k])
	}
	for k, v := range needed {
		if !slices.Equal(granted[k], v) {
			t.Errorf("%s: granted %v, needed %v", k, granted[k], v)
		}
	}
	for k := range granted {
		if _, ok := needed[k]; !ok {
			t.Errorf("%s granted but never used", k)
		}
	}
}
