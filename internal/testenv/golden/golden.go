// Package golden keeps the Block Kit JSON of each message kind hcpbot
// sends in testdata/golden/<name>.json, compares renderings against it, and
// checks it against Slack's limits (package bot/blockkit), so that
// a change of wording or layout shows up in review as a diff of what Slack
// receives, and no rendering Slack would refuse gets in.
//
//	golden.BlockKit(t, "incident-open", text, blocks)
//
// `go test ./bot -run TestGolden -update` rewrites the files from the
// current rendering (then review the diff).
package golden

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/slack-go/slack"

	"github.com/hcpbot/hcpbot/bot/blockkit"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden from the current rendering")

// Dir is where the golden files are, relative to the test's package.
const Dir = "testdata/golden"

// message is a golden file: a message as chat.postMessage sends it.
type message struct {
	Text   string          `json:"text"`
	Blocks json.RawMessage `json:"blocks,omitempty"`
}

// Option rewrites what a run varies (a random id, the wall clock) to a
// fixed value before the comparison; the limits are checked before.
type Option func([]byte) []byte

// Replace replaces every match of re with repl (regexp.ReplaceAll).
func Replace(re *regexp.Regexp, repl string) Option {
	return func(b []byte) []byte { return re.ReplaceAll(b, []byte(repl)) }
}

// BlockKit compares text and blocks, encoded as slack-go sends them, with
// testdata/golden/<name>.json (rewriting it with -update), and fails tb if
// they break one of Block Kit's limits.
func BlockKit(tb testing.TB, name, text string, blocks []slack.Block, opts ...Option) {
	tb.Helper()
	var raw json.RawMessage
	if len(blocks) > 0 {
		b, err := encode(blocks, "")
		if err != nil {
			tb.Fatalf("golden %s: encode blocks: %v", name, err)
		}
		raw = b
	}
	if err := blockkit.ValidateMessage(text, raw); err != nil {
		tb.Errorf("golden %s: Slack would refuse this message: %v", name, err)
	}
	got, err := encode(message{Text: text, Blocks: raw}, "  ")
	if err != nil {
		tb.Fatalf("golden %s: %v", name, err)
	}
	for _, o := range opts {
		got = o(got)
	}
	path := filepath.Join(Dir, name+".json")
	if *update {
		if err := os.MkdirAll(Dir, 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			tb.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		tb.Fatalf("golden %s: %v (run the test with -update to write it)", name, err)
	}
	if !bytes.Equal(got, want) {
		tb.Errorf("golden %s differs from %s (run the test with -update to accept):\n%s", name, path, firstDiff(string(want), string(got)))
	}
}

// encode is JSON as Slack receives it, but with <, > and & left as they
// are, so the golden files read like the mrkdwn they hold (slack-go's own
// MarshalJSON methods escape them, hence unescapeHTML).
func encode(v any, indent string) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", indent)
	err := enc.Encode(v)
	return unescapeHTML(b.Bytes()), err
}

// htmlEscape is an escape \u003c, \u003e or \u0026 that is not itself
// escaped (an even number of backslashes before it).
var htmlEscape = regexp.MustCompile(`(^|[^\\])((?:\\\\)*)\\u00(3c|3e|26)`)

func unescapeHTML(b []byte) []byte {
	plain := map[string]string{"3c": "<", "3e": ">", "26": "&"}
	for { // adjacent escapes share the character between them: repeat
		out := htmlEscape.ReplaceAllFunc(b, func(m []byte) []byte {
			sub := htmlEscape.FindSubmatch(m)
			return append(append(append([]byte{}, sub[1]...), sub[2]...), plain[string(sub[3])]...)
		})
		if bytes.Equal(out, b) {
			return out
		}
		b = out
	}
}

// firstDiff shows the first line where want and got part, with its number.
func firstDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := range max(len(w), len(g)) {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return "line " + strconv.Itoa(i+1) + ":\n  want: " + wl + "\n  got:  " + gl
		}
	}
	return "(same lines, different bytes)"
}
