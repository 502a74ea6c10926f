package main

import (
	"strings"
	"testing"
)

// `hcpbot demo --script` plays seed 000 end to end on its own control plane
// and exits 0 only if the incident was diagnosed, fixed and resolved.
func TestDemoScript(t *testing.T) {
	env.Need(t)
	code, out, errOut := run(t, "demo", "--script", "--dir", t.TempDir())
	if code != 0 {
		t.Fatalf("demo --script exited %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for _, want := range []string{"✔ diagnosed", "✔ fix applied", "✔ incident", "resolved", "kubernetes"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	if strings.Contains(out, "panic") {
		t.Errorf("demo output mentions a panic:\n%s", out)
	}
}
