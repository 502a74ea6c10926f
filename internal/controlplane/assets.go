package controlplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// AssetsEnv names a folder holding prebuilt `etcd` and `kube-apiserver`
// binaries; when set, nothing is built.
const AssetsEnv = "HCPBOT_TESTENV_ASSETS"

// ErrNoAssets reports that the control-plane binaries are neither configured
// nor buildable from this checkout.
var ErrNoAssets = errors.New("control-plane binaries not available")

// Assets returns the folder holding the etcd and kube-apiserver binaries. It
// honours AssetsEnv; otherwise it runs hack/testenv/build.sh from the
// checkout this package was compiled in, which returns at once when the
// per-user cache already holds the pinned versions and builds them (minutes)
// when it does not. progress receives the builder's messages.
func Assets(ctx context.Context, progress *os.File) (string, error) {
	if dir := os.Getenv(AssetsEnv); dir != "" {
		return dir, checkAssets(dir)
	}
	script, err := buildScript()
	if err != nil {
		return "", err
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", script)
	cmd.Stdout = &out
	if progress != nil {
		cmd.Stderr = progress
	}
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%w: %s failed: %v", ErrNoAssets, script, err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	dir := lines[len(lines)-1]
	return dir, checkAssets(dir)
}

func buildScript() (string, error) {
	// The harness is used from tests and from `hcpbot demo` run inside a
	// checkout; both find the builder relative to this source file.
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("%w: cannot locate the source checkout; set %s", ErrNoAssets, AssetsEnv)
	}
	if !filepath.IsAbs(file) {
		// Built with -trimpath (as `make demo` builds): the binary does
		// not know where its checkout is.
		return "", fmt.Errorf("%w: this binary was built with -trimpath and cannot find its source checkout: run `make demo` in the checkout, or set %s to a folder holding etcd and kube-apiserver (`bash hack/testenv/build.sh` there prints one)", ErrNoAssets, AssetsEnv)
	}
	script := filepath.Join(filepath.Dir(file), "..", "..", "hack", "testenv", "build.sh")
	if _, err := os.Stat(script); err != nil {
		return "", fmt.Errorf("%w: %s not found: the checkout this binary was built from is gone; build it again in a checkout (`make demo`), or set %s to a folder holding etcd and kube-apiserver", ErrNoAssets, script, AssetsEnv)
	}
	return script, nil
}

func checkAssets(dir string) error {
	for _, bin := range []string{"etcd", "kube-apiserver"} {
		st, err := os.Stat(filepath.Join(dir, bin))
		if err != nil {
			return fmt.Errorf("%w: %v", ErrNoAssets, err)
		}
		if st.Mode()&0o111 == 0 {
			return fmt.Errorf("%w: %s is not executable", ErrNoAssets, filepath.Join(dir, bin))
		}
	}
	return nil
}
