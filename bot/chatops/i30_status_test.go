package chatops

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// `status mgmt-1:` asks for one management cluster's hosted clusters: the
// fleet's answer counts the healthy ones per management cluster and
// points there (issue 30). A lone word without the colon stays refused
// (it reads as a cluster missing its namespace).
func TestParseStatusOfOneManagementCluster(t *testing.T) {
	got, err := Parse("status mgmt-1:")
	if err != nil || !reflect.DeepEqual(got, Status{Mgmt: "mgmt-1"}) || got.String() != "status mgmt-1:" {
		t.Errorf("Parse(status mgmt-1:) = %#v, %v", got, err)
	}
	for in, hint := range map[string]string{
		"status Mgmt-1:":   "is not a DNS label",
		"status :":         "is not a DNS label",
		"status mgmt-1::":  "<namespace>/<name>",
		"status mgmt-1":    "<namespace>/<name>",
		"status mgmt-1: x": "too many",
	} {
		_, err := Parse(in)
		var ue *UsageError
		if !errors.As(err, &ue) || ue.Command != "status" || !strings.Contains(ue.Hint, hint) {
			t.Errorf("Parse(%q) = %v, want a status usage error containing %q", in, err, hint)
		}
	}
}
