package deploy_test

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// goMemLimit parses a GOMEMLIMIT value as the Go runtime does
// (runtime/debug.SetMemoryLimit's environment form): a number of bytes
// with an optional B, KiB, MiB, GiB or TiB suffix.
func goMemLimit(s string) (int64, bool) {
	m := regexp.MustCompile(`^([0-9]+)(B|KiB|MiB|GiB|TiB)?$`).FindStringSubmatch(s)
	if m == nil {
		return 0, false
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		return 0, false
	}
	shift := map[string]uint{"": 0, "B": 0, "KiB": 10, "MiB": 20, "GiB": 30, "TiB": 40}[m[2]]
	return n << shift, true
}

// The shipped bot sets GOMEMLIMIT below its memory limit, so that its
// garbage collector works harder before the kernel kills it, and leaves
// the rest of the limit to what the Go runtime does not count (the
// binary's pages, the kernel's for its sockets). docs/capacity.md sizes
// both from the measured heap per hosted cluster and names them: the
// manifest and the document say the same.
func TestBotMemoryLimitSized(t *testing.T) {
	objs := render(t, "bot")
	d := as[appsv1.Deployment](t, find(t, objs, "Deployment", "hcpbot-bot"))
	c := d.Spec.Template.Spec.Containers[0]
	limit := c.Resources.Limits.Memory()
	if limit.IsZero() {
		t.Fatal("the bot has no memory limit")
	}
	var value string
	for _, e := range c.Env {
		if e.Name == "GOMEMLIMIT" {
			value = e.Value
		}
	}
	gml, ok := goMemLimit(value)
	if !ok {
		t.Fatalf("bot GOMEMLIMIT %q: want a literal Go memory limit (e.g. 448MiB)", value)
	}
	ratio := float64(gml) / float64(limit.Value())
	if ratio < 0.75 || ratio > 0.9 {
		t.Errorf("bot GOMEMLIMIT %s is %.0f%% of its memory limit %s, want 75–90%%: below, the collector runs early for nothing; above, what the runtime does not count has no room", value, 100*ratio, limit)
	}
	doc, err := os.ReadFile("../../docs/capacity.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"`GOMEMLIMIT=" + value + "`", "memory limit of " + limit.String()} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("docs/capacity.md does not say %q, which the bot's Deployment ships", want)
		}
	}
}
