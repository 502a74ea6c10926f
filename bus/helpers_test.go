package bus

import (
	"context"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/internal/testenv/testlog"
	"github.com/rs/zerolog"
)

const testWait = 20 * time.Second

// testLogger writes warnings and worse to t.Log until the test ends.
func testLogger(t *testing.T) zerolog.Logger {
	t.Helper()
	return testlog.New(t, zerolog.WarnLevel)
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
	// A test server: open, as natstest's are (the product's is StartLocal).
	cfg.Open = len(cfg.Users) == 0
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
