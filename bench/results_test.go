package bench

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestResultsMergeByID(t *testing.T) {
	path := filepath.Join(t.TempDir(), "results.json")
	a := NewResult("B2", "latency", map[string]any{"trials": 200})
	a.Add("p50", 12.5, "ms")
	a.Want("p50", "<=", 50)
	b := NewResult("B1", "throughput", nil)
	b.Add("rate", 60000, "events/s")
	b.Want("rate", ">=", 50000)
	b.Want("missing", ">=", 1)
	for _, r := range []*Result{a, b} {
		if err := Write(path, r); err != nil {
			t.Fatal(err)
		}
	}
	a2 := NewResult("B2", "latency", nil)
	a2.Add("p50", 70, "ms")
	a2.Want("p50", "<=", 50)
	if err := Write(path, a2); err != nil {
		t.Fatal(err)
	}
	rs, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 || rs[0].ID != "B1" || rs[1].ID != "B2" {
		t.Fatalf("results = %+v, want B1 then B2", rs)
	}
	if rs[1].Figures[0].Value != 70 || rs[1].Met() {
		t.Errorf("B2 not replaced by the rerun: %+v", rs[1])
	}
	if rs[0].Met() {
		t.Errorf("B1 met although a figure is missing")
	}
	var sb strings.Builder
	if err := Table(&sb, rs); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"B1  throughput", "rate", "60000 events/s", "target p50 <= 50: MISSED (70)", "target rate >= 50000: met"} {
		if !strings.Contains(sb.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, sb.String())
		}
	}
}

func TestQuickRunsNeverMeetTargets(t *testing.T) {
	r := NewResult("B9", "x", nil)
	r.Quick = true
	r.Add("v", 1, "")
	r.Want("v", ">=", 0)
	if r.Met() {
		t.Error("a quick run met its target")
	}
}

func TestAddKeepsJSONValid(t *testing.T) {
	r := NewResult("B9", "x", nil)
	var zero float64
	r.Add("ratio", 1/zero, "x")
	if v, _ := r.Value("ratio"); v != 0 || len(r.Notes) != 1 {
		t.Errorf("Inf stored as %v with notes %v", v, r.Notes)
	}
}
