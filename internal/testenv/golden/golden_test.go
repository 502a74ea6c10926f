package golden

import (
	"encoding/json"
	"testing"
)

func TestUnescapeHTML(t *testing.T) {
	for _, s := range []string{"<cluster> & <b>", `a literal \u003c stays`, `\\<`, "<<>>&&"} {
		raw, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		out := unescapeHTML(raw)
		var back string
		if err := json.Unmarshal(out, &back); err != nil || back != s {
			t.Errorf("%q: %s decodes to %q, %v", s, out, back, err)
		}
	}
	if got := string(unescapeHTML([]byte(`"\u003cx\u003e \u0026"`))); got != `"<x> &"` {
		t.Errorf("got %s", got)
	}
}
