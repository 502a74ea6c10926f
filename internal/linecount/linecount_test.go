package linecount

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// maxFileLines is the length a non-test file may reach without its
// package's doc.go saying why (bot/doc_test.go checks package bot the same way).
const maxFileLines = 450

// moduleRoot is the nearest directory above the test's with a go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test")
		}
		dir = parent
	}
}

// generated reports whether src carries Go's generated-code marker
// (https://go.dev/s/generatedcode), which is nobody's to split.
func generated(src []byte) bool {
	for line := range bytes.Lines(src) {
		if bytes.HasPrefix(line, []byte("// Code generated ")) && bytes.Contains(line, []byte(" DO NOT EDIT.")) {
			return true
		}
	}
	return false
}

// long lists the module's non-test, hand-written .go files over
// maxFileLines, by path from root, with their line counts.
func long(t *testing.T, root string) map[string]int {
	t.Helper()
	found := map[string]int{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			// Like the go command: testdata and dot or underscore folders
			// are no packages; a nested go.mod is another module.
			if path != root && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			if path != root {
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if n := bytes.Count(src, []byte("\n")); n > maxFileLines && !generated(src) {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			found[rel] = n
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// Every non-test file over maxFileLines is named in its package's doc.go
// as "<file> is over 450 lines", followed by the reason it is one file.
func TestLongFilesAreNamedInDoc(t *testing.T) {
	root := moduleRoot(t)
	for rel, n := range long(t, root) {
		dir, file := filepath.Split(rel)
		doc, err := os.ReadFile(filepath.Join(root, dir, "doc.go"))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if !bytes.Contains(doc, []byte(file+" is over 450 lines")) {
			t.Errorf("%s has %d lines and %sdoc.go does not say why (\"%s is over 450 lines: …\")", rel, n, dir, file)
		}
	}
}
