package chatops

import (
	"errors"
	"reflect"
	"testing"
)

// FuzzParse checks that Parse never panics, fails only with *UsageError,
// and that whatever parses round-trips through String to an equal command.
// Seeds live in testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	f.Add("status mgmt-1:clusters/example")
	f.Fuzz(func(t *testing.T, in string) {
		c, err := Parse(in)
		if err != nil {
			var ue *UsageError
			if !errors.As(err, &ue) || c != nil {
				t.Fatalf("Parse(%q) = %#v, %v; want nil, *UsageError", in, c, err)
			}
			if ue.Usage == "" || ue.Hint == "" {
				t.Fatalf("Parse(%q): empty usage or hint: %#v", in, ue)
			}
			return
		}
		s := c.String()
		again, err := Parse(s)
		if err != nil {
			t.Fatalf("Parse(%q) = %#v; its String %q does not parse: %v", in, c, s, err)
		}
		if !reflect.DeepEqual(again, c) {
			t.Fatalf("Parse(%q) = %#v; Parse(String()=%q) = %#v", in, c, s, again)
		}
		if again.String() != s {
			t.Fatalf("String not stable: %q then %q", s, again.String())
		}
	})
}
