package bus

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

const testWait = 20 * time.Second

// testLogger writes warnings and worse to t.Log until the test ends;
// server and client goroutines may outlive it by a moment.
func testLogger(t *testing.T) zerolog.Logger {
	t.Helper()
	w := &tbWriter{tb: t}
	t.Cleanup(w.stop)
	return zerolog.New(w).Level(zerolog.WarnLevel).With().Timestamp().Logger()
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

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testWait)
	t.Cleanup(cancel)
	return ctx
}

func startEmbedded(t *testing.T, cfg EmbeddedConfig) *Embedded {
	t.Helper()
	if cfg.StoreDir == "" {
		cfg.StoreDir = t.TempDir()
	}
	cfg.Logger = testLogger(t)
	e, err := StartEmbedded(testContext(t), cfg)
	if err != nil {
		t.Fatalf("StartEmbedded: %v", err)
	}
	t.Cleanup(e.Shutdown)
	return e
}

func connect(t *testing.T, cfg Config) *Conn {
	t.Helper()
	c, err := Connect(testContext(t), cfg, testLogger(t))
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testWait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", testWait, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// signalled waits for a value on ch with a deadline.
func signalled[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(testWait):
		t.Fatalf("timed out after %v waiting for %s", testWait, what)
		panic("unreachable")
	}
}
