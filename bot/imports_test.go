package bot

import (
	"go/build"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// modulePath is this repository's module path (go.mod).
const modulePath = "github.com/hcpbot/hcpbot/"

// moduleDeps lists the packages of this module that the package in dir
// imports, directly or not, in its non-test files for this platform, as
// `go list -deps` would, read with go/build (no go command, no network).
func moduleDeps(t *testing.T, dir string) []string {
	t.Helper()
	root, err := filepath.Abs("..") // the module's root: this package is bot/
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var walk func(dir string)
	walk = func(dir string) {
		pkg, err := build.Default.ImportDir(dir, 0)
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		for _, imp := range pkg.Imports {
			rel, ours := strings.CutPrefix(imp, modulePath)
			if !ours || seen[rel] {
				continue
			}
			seen[rel] = true
			walk(filepath.Join(root, filepath.FromSlash(rel)))
		}
	}
	walk(dir)
	deps := make([]string, 0, len(seen))
	for p := range seen {
		deps = append(deps, p)
	}
	slices.Sort(deps)
	return deps
}

// The correlator never imports chat input: it speaks Slack through
// bot/blockkit (action ids, escaping, mentions, limits), a leaf that the
// chat layer, the digest and the notifier import too, while bot/chatops
// and bot/command, the digest above them, import the correlator.
func TestCorrelatorImportsNoChatInput(t *testing.T) {
	deps := moduleDeps(t, ".")
	for _, chat := range []string{"bot/chatops", "bot/command", "bot/digest"} {
		if slices.Contains(deps, chat) {
			t.Errorf("package bot imports %s; its module imports: %v", chat, deps)
		}
	}
	if !slices.Contains(deps, "bot/blockkit") {
		t.Errorf("package bot does not import bot/blockkit: %v", deps)
	}
	if leaf := moduleDeps(t, "blockkit"); len(leaf) > 0 {
		t.Errorf("bot/blockkit imports %v: the vocabulary must stay a leaf", leaf)
	}
}
