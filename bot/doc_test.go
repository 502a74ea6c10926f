package bot

import (
	"bytes"
	"go/build"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

// maxFileLines bounds a non-test file of this package unless doc.go names
// it and says why ("<file> is over 450 lines: …").
const maxFileLines = 450

// docFiles are the files doc.go's "# Files" section lists, one a line.
func docFiles(t *testing.T, doc string) []string {
	t.Helper()
	_, section, ok := strings.Cut(doc, "// # Files\n")
	if !ok {
		t.Fatal("doc.go has no # Files section")
	}
	section, _, _ = strings.Cut(section, "\n// #")
	var files []string
	for _, m := range regexp.MustCompile(`(?m)^//\t(\S+\.go) `).FindAllStringSubmatch(section, -1) {
		files = append(files, m[1])
	}
	return files
}

// The package doc is the newcomer's map: it lists every file, and no file
// grows past maxFileLines without a reason there.
func TestDocListsEveryFile(t *testing.T) {
	raw, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	pkg, err := build.Default.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	listed := docFiles(t, doc)
	for _, f := range pkg.GoFiles {
		if !slices.Contains(listed, f) {
			t.Errorf("doc.go does not list %s", f)
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if n := bytes.Count(src, []byte("\n")); n > maxFileLines && !strings.Contains(doc, f+" is over 450 lines") {
			t.Errorf("%s has %d lines and doc.go does not say why", f, n)
		}
	}
	for _, f := range listed {
		if !slices.Contains(pkg.GoFiles, f) {
			t.Errorf("doc.go lists %s, which is no file of the package", f)
		}
	}
}

// The package doc lists the flush's stages in the order they run, and the
// tests it names exist.
func TestDocListsStagesInOrder(t *testing.T) {
	raw, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	intro := map[string]string{
		"incident": "// The incident stages, in order",
		"storm":    "// The storm stages (stormStages, stages.go; types in storm_stages.go), in",
	}
	b := New(Config{}, nil, nil, nil, zerolog.Nop())
	var incident, storms []string
	for _, s := range b.incidentStages() {
		incident = append(incident, s.Name())
	}
	for _, s := range b.stormStages() {
		storms = append(storms, s.Name())
	}
	paragraph := regexp.MustCompile(`\n//\n// \S`)
	item := regexp.MustCompile(`(?m)^//  +\d+\. ([a-z-]+)[,:]`)
	for kind, want := range map[string][]string{"incident": incident, "storm": storms} {
		_, list, ok := strings.Cut(doc, intro[kind])
		if !ok {
			t.Fatalf("doc.go has no list of the %s stages", kind)
		}
		// The list ends at the first paragraph that is not an item.
		if end := paragraph.FindStringIndex(list); end != nil {
			list = list[:end[0]]
		}
		var got []string
		for _, m := range item.FindAllStringSubmatch(list, -1) {
			got = append(got, m[1])
		}
		if !slices.Equal(got, want) {
			t.Errorf("doc.go lists the %s stages %v, the flush runs %v", kind, got, want)
		}
	}
	tests, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	var src []byte
	for _, f := range tests {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src = append(src, b...)
	}
	for _, name := range regexp.MustCompile(`\bTest[A-Z]\w*`).FindAllString(doc, -1) {
		if !bytes.Contains(src, []byte("func "+name+"(")) {
			t.Errorf("doc.go names %s, which is no test of the package", name)
		}
	}
}
