package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A release build (-tags nodemo: `make build` and the image) links none of
// the demo's harness, and its `hcpbot demo` says that the demo needs a
// source checkout and how to run it there, instead of failing on a
// missing build.sh.
func TestReleaseBuildDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the release binary")
	}
	deps, err := exec.Command("go", "list", "-deps", "-tags", "nodemo", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, pkg := range []string{"internal/demo", "internal/controlplane", "internal/scenario", "internal/testenv"} {
		if strings.Contains(string(deps), "github.com/hcpbot/hcpbot/"+pkg+"\n") {
			t.Errorf("the release build links %s", pkg)
		}
	}
	// Both release recipes build with the tag.
	for _, f := range []string{"Dockerfile", "Makefile"} {
		b, err := os.ReadFile(filepath.Join("..", "..", f))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "go build -tags nodemo") && !strings.Contains(string(b), "$(GO) build -tags nodemo") {
			t.Errorf("%s does not build the release binary with -tags nodemo", f)
		}
	}

	bin := filepath.Join(t.TempDir(), "hcpbot")
	if out, err := exec.Command("go", "build", "-tags", "nodemo", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build -tags nodemo: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "demo", "--script")
	cmd.Env = append(os.Environ(), "HCPBOT_TESTENV_ASSETS=") // nothing to fall back on
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("release hcpbot demo: %v, want exit 1\n%s", err, out)
	}
	for _, want := range []string{"hcpbot demo: not in this build", "needs a source checkout", "make demo"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("release hcpbot demo says %q, lacking %q", out, want)
		}
	}
	if help, _ := exec.Command(bin, "--help").CombinedOutput(); !strings.Contains(string(help), "(not in this build)") {
		t.Errorf("release --help does not say the demo is not in this build:\n%s", help)
	}
}
