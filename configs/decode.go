package configs

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	yaml "sigs.k8s.io/yaml/goyaml.v3"
)

// decoder walks the YAML node tree by hand instead of unmarshalling into
// tagged structs: that is what lets every problem carry the line of the
// node it is about, and lets one pass collect all problems instead of
// stopping at the first.
type decoder struct {
	file     string
	problems []Problem
	// secret marks scalar nodes that look like credentials. They are
	// reported once by scanSecrets, and every reader skips them, so no
	// later message (a channel check quoting the value, say) can echo a
	// token into a terminal or a CI log.
	// The value is 1 + the index of the problem that reported it.
	secret map[*yaml.Node]int
	// lines records where each field was written, by YAML path, for the
	// cross-field checks that run after the walk.
	lines map[string]*yaml.Node
	// offered, when not nil, collects every field the schema knows at the
	// mappings walked (list indices written "[]"): Fields.
	offered map[string]bool
}

func (d *decoder) problem(n *yaml.Node, field, format string, a ...any) {
	p := Problem{File: d.file, Field: field, Message: fmt.Sprintf(format, a...)}
	if n != nil {
		p.Line, p.Column = n.Line, n.Column
	}
	d.problems = append(d.problems, p)
}

// at returns the node recorded for path, or the nearest recorded parent,
// so a problem about a missing or defaulted field still points at the
// section it belongs to.
func (d *decoder) at(path string) *yaml.Node { return nearest(d.lines, path) }

// nearest returns the node recorded for path or for its nearest recorded
// parent; nil when neither is in lines.
func nearest(lines map[string]*yaml.Node, path string) *yaml.Node {
	for p := path; p != ""; {
		if n, ok := lines[p]; ok {
			return n
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return nil
}

// field is one known key of a mapping and what to do with its value.
type field struct {
	key    string
	decode func(v *yaml.Node, path string)
}

// mapping walks a mapping node: known keys go to their decoder, unknown
// and duplicate keys are problems. secretKeys names keys that people write
// when they mean to put a credential inline; they get a message saying
// where the credential belongs instead of a bare "unknown key".
func (d *decoder) mapping(n *yaml.Node, path string, fields []field, secretKeys map[string]string) bool {
	n = resolve(n)
	if d.secret[n] > 0 {
		return false // reported by scanSecrets; never describe it
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return false // "section:" with nothing under it: the same as absent
	}
	if n.Kind != yaml.MappingNode {
		d.problem(n, path, "must be a mapping (key: value), not %s", describe(n))
		return false
	}
	if d.offered != nil {
		for _, f := range fields {
			d.offered[listIndexRE.ReplaceAllString(join(path, f.key), "[]")] = true
		}
	}
	seen := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if d.secret[k] > 0 {
			continue
		}
		key := k.Value
		sub := join(path, key)
		if k.Kind != yaml.ScalarNode {
			d.problem(k, path, "keys must be plain strings")
			continue
		}
		if first, dup := seen[key]; dup {
			d.problem(k, sub, "duplicate key (first set on line %d)", first.Line)
			continue
		}
		seen[key] = k
		if hint, ok := secretKeys[key]; ok {
			msg := "secrets must not be written in the config file: " + hint
			if i := d.secret[resolve(v)]; i > 0 {
				// The scan already reported the value; make that one
				// problem say where this particular secret belongs.
				d.problems[i-1].Message = msg
				continue
			}
			d.problem(k, sub, "%s", msg)
			continue
		}
		var f *field
		for j := range fields {
			if fields[j].key == key {
				f = &fields[j]
				break
			}
		}
		if f == nil {
			d.unknownKey(k, sub, key, fields)
			continue
		}
		if isNull(v) {
			continue // "key:" or "key: null" means "use the default"
		}
		d.lines[sub] = k
		f.decode(v, sub)
	}
	return true
}

func (d *decoder) unknownKey(k *yaml.Node, sub, key string, fields []field) {
	lower := strings.ToLower(key)
	for _, w := range []string{"token", "secret", "password", "passwd", "creds", "credential", "seed"} {
		if strings.Contains(lower, w) {
			d.problem(k, sub, "unknown key; if this is a credential, it does not belong in the config file: reference it with the matching …Env (environment variable) or …File (file) field")
			return
		}
	}
	known := make([]string, len(fields))
	for i, f := range fields {
		known[i] = f.key
		// A wrong-case key (streamreplicas) is the most common typo; name
		// the right spelling instead of only listing every key.
		if strings.EqualFold(f.key, key) {
			d.problem(k, sub, "unknown key (did you mean %q?)", f.key)
			return
		}
	}
	d.problem(k, sub, "unknown key (known: %s)", strings.Join(known, ", "))
}

// sequence walks a sequence node, calling item for each element.
func (d *decoder) sequence(n *yaml.Node, path string, item func(v *yaml.Node, path string)) {
	n = resolve(n)
	if d.secret[n] > 0 {
		return
	}
	if n.Kind != yaml.SequenceNode {
		d.problem(n, path, "must be a list, not %s", describe(n))
		return
	}
	for i, v := range n.Content {
		p := fmt.Sprintf("%s[%d]", path, i)
		d.lines[p] = v
		item(v, p)
	}
}

// str reads a string scalar. Numbers and booleans are refused rather than
// converted: `channel: 0123` or `source: yes` are almost always mistakes,
// and YAML would have changed the value on the way.
func (d *decoder) str(n *yaml.Node, path string) (string, bool) {
	r := resolve(n)
	if d.secret[r] > 0 {
		return "", false
	}
	if r.Kind != yaml.ScalarNode || r.Tag != "!!str" {
		d.problem(n, path, "must be a string, not %s (quote it)", describe(r))
		return "", false
	}
	return r.Value, true
}

func (d *decoder) strings(n *yaml.Node, path string, each func(v *yaml.Node, path, s string)) {
	d.sequence(n, path, func(v *yaml.Node, p string) {
		if s, ok := d.str(v, p); ok {
			each(v, p, s)
		}
	})
}

func (d *decoder) integer(n *yaml.Node, path string) (int, bool) {
	r := resolve(n)
	if d.secret[r] > 0 {
		return 0, false
	}
	var i int
	if r.Kind != yaml.ScalarNode || r.Tag != "!!int" || r.Decode(&i) != nil {
		d.problem(n, path, "must be an integer, not %s", describe(r))
		return 0, false
	}
	return i, true
}

func (d *decoder) boolean(n *yaml.Node, path string) (bool, bool) {
	r := resolve(n)
	if d.secret[r] > 0 {
		return false, false
	}
	var b bool
	if r.Kind != yaml.ScalarNode || r.Tag != "!!bool" || r.Decode(&b) != nil {
		d.problem(n, path, "must be true or false, not %s", describe(r))
		return false, false
	}
	return b, true
}

// duration reads a Go duration ("15s", "1h30m"). A bare number is refused
// with a hint, because "15" could mean seconds or minutes depending on who
// wrote it. min is the smallest accepted value (0 allows 0s).
func (d *decoder) duration(n *yaml.Node, path string, min time.Duration) (time.Duration, bool) {
	r := resolve(n)
	if r.Kind == yaml.ScalarNode && (r.Tag == "!!int" || r.Tag == "!!float") {
		d.problem(n, path, "%s has no unit: write a duration such as %ss or %sm", r.Value, r.Value, r.Value)
		return 0, false
	}
	s, ok := d.str(n, path)
	if !ok {
		return 0, false
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		d.problem(n, path, "%q is not a duration (examples: 30s, 5m, 1h30m)", s)
		return 0, false
	}
	if v < min {
		if min == 0 {
			d.problem(n, path, "%s: must not be negative", s)
		} else {
			d.problem(n, path, "%s: must be at least %s", s, min)
		}
		return 0, false
	}
	return v, true
}

// resolve follows aliases (*anchor) to the node they stand for; callers
// keep the alias itself for line numbers, which point to where the value
// is used.
func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	r := resolve(n)
	return r.Kind == yaml.ScalarNode && r.Tag == "!!null"
}

// describe names a node's kind for messages without quoting long values.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!null":
			return "null"
		case "!!bool":
			return "the boolean " + n.Value
		case "!!int":
			return "the integer " + n.Value
		case "!!float":
			return "the number " + n.Value
		case "!!str":
			return fmt.Sprintf("the string %q", short(n.Value))
		}
		// Custom tags are not quoted: they are free text, so they could
		// carry anything, a token included.
		return "an explicitly tagged value"
	}
	return "an unsupported YAML node"
}

func short(s string) string {
	if len(s) > 60 {
		return s[:57] + "..."
	}
	return s
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// Credential shapes recognised anywhere in the file, keys included. Slack
// tokens have fixed prefixes (xoxb- bot, xoxp- user, xapp- app-level, xoxe
// rotating/refresh ...); NATS credentials are a JWT block or an NKey seed
// (S + key type + base32).
var (
	slackTokenRE = regexp.MustCompile(`xox[abeoprs][-.]|xapp-`)
	natsSeedRE   = regexp.MustCompile(`\bS[UAONCX][A-Z2-7]{56}\b`)
)

// scanSecrets reports, once per node, every scalar that looks like a
// credential, and marks it so no other check quotes it. It runs over the
// raw tree, before the schema walk, so a token is caught under any key,
// known or not, and even as a key.
func (d *decoder) scanSecrets(n *yaml.Node, path string) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			d.scanSecrets(c, path)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			d.scanSecrets(c, fmt.Sprintf("%s[%d]", path, i))
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			sub := join(path, k.Value)
			d.scanSecrets(k, path)
			if d.secret[k] > 0 {
				sub = join(path, "<key>")
			}
			d.scanSecrets(n.Content[i+1], sub)
		}
	case yaml.ScalarNode:
		what := ""
		for _, text := range []string{n.Value, n.Tag} {
			switch {
			case slackTokenRE.MatchString(text):
				what = "a Slack token"
			case strings.Contains(text, "BEGIN NATS USER JWT"), strings.Contains(text, "NKEY SEED"), natsSeedRE.MatchString(text):
				what = "NATS credentials"
			}
			if what != "" {
				break
			}
		}
		if what != "" && d.secret[n] == 0 {
			d.secret[n] = len(d.problems) + 1
			d.problem(n, path, "this value looks like %s; secrets must not be written in the config file: put it in an environment variable or a file and reference it with the matching …Env or …File field (slack.botTokenEnv / slack.botTokenFile, nats.credsEnv / nats.credsFile, ...)", what)
		}
	}
}
