package configs

import (
	_ "embed"
	"regexp"
	"slices"
	"strings"

	yaml "sigs.k8s.io/yaml/goyaml.v3"
)

// Example is example.yaml: a configuration using every section, each
// field commented with its meaning and default. A test keeps it valid, so
// it can be handed out as a starting point (`hcpbot config check` accepts
// it). It is a string so no caller can change it for the others.
//
//go:embed example.yaml
var Example string

// Fields lists every field the schema knows, as YAML paths with list
// indices written "[]" (nats.urls, bot.routes[].match.kind, ...): the
// leaves, not the sections holding them. It is read from the decoder's own
// field tables while it walks Example, so a field added to the schema is
// listed without anyone updating a list (a field of a new nested section
// once Example shows the section). Tests use it to demand a runtime proof
// per field.
func Fields() []string {
	d := &decoder{file: "example.yaml", secret: map[*yaml.Node]int{}, lines: map[string]*yaml.Node{}, offered: map[string]bool{}}
	root, err := parseYAML([]byte(Example))
	if err != nil || root == nil {
		panic("configs: example.yaml does not parse") // TestExample keeps it valid
	}
	d.root(root, &Config{})
	var out []string
	for p := range d.offered {
		leaf := true
		for q := range d.offered {
			if strings.HasPrefix(q, p+".") || strings.HasPrefix(q, p+"[]") {
				leaf = false
				break
			}
		}
		if leaf {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

var listIndexRE = regexp.MustCompile(`\[\d+\]`)
