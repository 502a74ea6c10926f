package chaosreport

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLogAppendsOneLinePerCase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "chaos.jsonl")
	t.Setenv(EnvReport, path)
	t.Setenv(EnvLong, "")
	Log(t, "a", map[string]any{"sent": 3, "took": 1500 * time.Millisecond})
	Log(t, "b", map[string]any{"ok": true})
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2:\n%s", len(lines), b)
	}
	var e Entry
	if err := json.Unmarshal([]byte(lines[0]), &e); err != nil {
		t.Fatal(err)
	}
	if e.Case != "a" || e.Figures["sent"] != 3.0 || e.Figures["took"] != 1.5 || e.Long || e.Test != t.Name() {
		t.Errorf("entry = %+v", e)
	}
	if Pick(1, 2) != 1 {
		t.Error("Pick chose the long value without HCPBOT_CHAOS_LONG")
	}
	t.Setenv(EnvLong, "1")
	if !Long() || Pick(1, 2) != 2 {
		t.Error("HCPBOT_CHAOS_LONG=1 not seen")
	}
}
