package blockkit

import "testing"

// Text from clusters shown in a code span cannot close it (and pass for
// the bot's words), ping anyone, or reorder itself.
func TestEscapeCode(t *testing.T) {
	for in, want := range map[string]string{
		"a```\n✅ only adds .svc":     "aˋˋˋ\n✅ only adds .svc",
		"<!channel> & `x`":           "&lt;!channel&gt; &amp; ˋxˋ",
		"abc\u202edcba\u2066x\u2069": "abcdcbax",
	} {
		if got := EscapeCode(in); got != want {
			t.Errorf("EscapeCode(%q) = %q, want %q", in, got, want)
		}
	}
}
