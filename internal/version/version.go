// Package version holds the build's version, stamped at link time:
//
//	go build -ldflags "-X github.com/hcpbot/hcpbot/internal/version.Version=v0.1.0 \
//	  -X github.com/hcpbot/hcpbot/internal/version.Commit=$(git rev-parse --short HEAD)"
//
// The file RELEASE beside this one is the release this tree builds: the
// Makefile stamps it as Version and tags the image with it, and the
// deploy kustomizations (configs/deploy) pin that tag; a test keeps the
// three equal (version_test.go, configs/deploy's TestVersionsPinned).
package version

import (
	_ "embed"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

//go:embed RELEASE
var release string

// Release is the version in the file RELEASE, e.g. "v0.1.0".
func Release() string { return strings.TrimSpace(release) }

// Set by -ldflags; the defaults describe a plain `go build`.
var (
	Version = "dev"
	Commit  = ""
)

// String is the one-line form printed by `hcpbot version` and logged at start.
func String() string {
	commit := Commit
	if commit == "" {
		// go build stamps VCS data when built inside a checkout without -buildvcs=false
		if bi, ok := debug.ReadBuildInfo(); ok {
			for _, s := range bi.Settings {
				if s.Key == "vcs.revision" && len(s.Value) >= 12 {
					commit = s.Value[:12]
				}
			}
		}
	}
	if commit == "" {
		commit = "unknown"
	}
	return fmt.Sprintf("hcpbot %s (commit %s, %s, %s/%s)", Version, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
