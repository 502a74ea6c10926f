package natstest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// serverModule is the nats-server module hcpbot embeds (go.mod).
const serverModule = "github.com/nats-io/nats-server/v2"

// ServerVersion is the version of the nats-server module that go.mod
// requires, e.g. "v2.15.2" (`go list -m`; test binaries carry no module
// list of their own).
func ServerVersion() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", serverModule).Output()
	if err != nil {
		return "", fmt.Errorf("natstest: go list -m %s: %w", serverModule, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// ServerBinary returns the path of a nats-server executable of the
// version in go.mod, built from the module cache on first use and kept in
// a per-user cache (like hack/testenv/build.sh: $HCPBOT_TESTENV_DIR, else
// $XDG_CACHE_HOME or ~/.cache, under hcpbot/testenv), so that tests can run
// real server processes from a rendered configuration. Concurrent callers
// wait for one build.
func ServerBinary(tb testing.TB) string {
	tb.Helper()
	version, err := ServerVersion()
	if err != nil {
		tb.Fatal(err)
	}
	root := os.Getenv("HCPBOT_TESTENV_DIR")
	if root == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			tb.Fatalf("natstest: no cache folder for the nats-server binary: %v", err)
		}
		root = filepath.Join(cache, "hcpbot", "testenv")
	}
	dir := filepath.Join(root, "nats-server-"+version)
	bin := filepath.Join(dir, "nats-server")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		tb.Fatal(err)
	}
	defer lock.Close()
	// One builder per cache; others wait on the lock, then find the binary.
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		tb.Fatalf("natstest: lock %s: %v", lock.Name(), err)
	}
	defer func() { _ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) }()
	if fi, err := os.Stat(bin); err == nil && fi.Mode()&0o111 != 0 {
		return bin
	}
	tb.Logf("natstest: building nats-server %s from the module cache into %s (once)", version, dir)
	tmp := fmt.Sprintf("%s.tmp.%d", bin, os.Getpid())
	defer os.Remove(tmp)
	// The package is resolved through this module's go.mod, so the build
	// is of exactly the version the tests embed.
	cmd := exec.Command("go", "build", "-trimpath", "-o", tmp, serverModule)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("natstest: go build %s: %v\n%s", serverModule, err, out)
	}
	// rename is atomic: an interrupted build never leaves a half-written binary.
	if err := os.Rename(tmp, bin); err != nil {
		tb.Fatal(err)
	}
	return bin
}
