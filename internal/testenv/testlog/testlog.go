// Package testlog gives tests a zerolog.Logger that writes to t.Log, and
// stops writing when the test ends: server and client goroutines may log a
// moment later, which would otherwise panic.
package testlog

import (
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"
)

// New returns a logger at level writing to tb.Log until tb ends.
func New(tb testing.TB, level zerolog.Level) zerolog.Logger {
	tb.Helper()
	w := &tbWriter{tb: tb}
	tb.Cleanup(w.stop)
	return zerolog.New(w).Level(level).With().Timestamp().Logger()
}

type tbWriter struct {
	mu      sync.Mutex
	tb      testing.TB
	stopped bool
}

func (w *tbWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stopped {
		w.tb.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

func (w *tbWriter) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
}
