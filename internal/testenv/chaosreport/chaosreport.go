// Package chaosreport records the figures of the fault and abuse suite
// (issue 9) in one machine-readable line per case:
//
//	chaosreport.Log(t, "nats-leader-loss", map[string]any{"published": 400, "received": 400})
//
// writes
//
//	CHAOS {"case":"nats-leader-loss","figures":{"published":400,"received":400}}
//
// to t.Log and, when HCPBOT_CHAOS_REPORT names a file, appends the JSON
// (without the CHAOS prefix) to it as one line. `make chaos` sets the
// variable and prints the lines as a table with ./cmd/chaostable.
package chaosreport

import (
	"encoding/json"
	"os"
	"sync"
	"testing"
	"time"
)

// EnvReport names the JSON-lines file cases are appended to.
const EnvReport = "HCPBOT_CHAOS_REPORT"

// EnvLong selects the long variants of the cases (make chaos).
const EnvLong = "HCPBOT_CHAOS_LONG"

// Prefix starts the line written to the test log.
const Prefix = "CHAOS "

// Entry is one line of the report.
type Entry struct {
	Case    string         `json:"case"`
	Test    string         `json:"test,omitempty"`
	Long    bool           `json:"long,omitempty"`
	Failed  bool           `json:"failed,omitempty"`
	Time    time.Time      `json:"time"`
	Figures map[string]any `json:"figures"`
}

// Long reports whether the long variants were asked for.
func Long() bool { return os.Getenv(EnvLong) != "" && os.Getenv(EnvLong) != "0" }

// Pick returns long under HCPBOT_CHAOS_LONG, short otherwise.
func Pick[T any](short, long T) T {
	if Long() {
		return long
	}
	return short
}

var mu sync.Mutex // serialises appends within one test binary

// Log records figures for name. Durations are written in seconds (float)
// so that the report reads the same whatever the unit. A failure to append
// to the report file fails the test.
func Log(tb testing.TB, name string, figures map[string]any) {
	tb.Helper()
	f := make(map[string]any, len(figures))
	for k, v := range figures {
		if d, ok := v.(time.Duration); ok {
			v = round(d.Seconds())
		}
		f[k] = v
	}
	e := Entry{Case: name, Test: tb.Name(), Long: Long(), Failed: tb.Failed(), Time: time.Now().UTC(), Figures: f}
	line, err := json.Marshal(e)
	if err != nil {
		tb.Errorf("chaosreport: %v", err)
		return
	}
	tb.Log(Prefix + string(line))
	path := os.Getenv(EnvReport)
	if path == "" {
		return
	}
	mu.Lock()
	defer mu.Unlock()
	fh, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		tb.Errorf("chaosreport: %v", err)
		return
	}
	// One write of a line under 4 KiB: appends from parallel test
	// binaries do not interleave.
	if _, err := fh.Write(append(line, '\n')); err != nil {
		tb.Errorf("chaosreport: %v", err)
	}
	if err := fh.Close(); err != nil {
		tb.Errorf("chaosreport: %v", err)
	}
}

func round(s float64) float64 {
	return float64(int64(s*1000+0.5)) / 1000
}
