package bus

import (
	"context"
	"errors"
	"testing"
	"time"
)

// retryEnsure bounds each attempt, retries until ctx ends, and then
// returns both ctx's error and the last attempt's.
func TestRetryEnsureUntilContextEnds(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	lost := errors.New("reply lost")
	attempts := 0
	_, err := retryEnsure(ctx, "stream", "S", func(actx context.Context) (int, error) {
		attempts++
		if d, ok := actx.Deadline(); !ok || time.Until(d) > ensureAttemptMax {
			t.Errorf("attempt %d not bounded by %v", attempts, ensureAttemptMax)
		}
		return 0, lost
	})
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, lost) {
		t.Fatalf("error %v: want ctx's and the attempt's", err)
	}
	if attempts < 3 {
		t.Errorf("%d attempts in 3s, want several", attempts)
	}
}

// An attempt that hangs (a reply that never comes) is cut off and retried.
func TestRetryEnsureCutsOffHungAttempt(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for ensureAttemptFirst")
	}
	attempts := 0
	start := time.Now()
	v, err := retryEnsure(testContext(t), "bucket", "B", func(actx context.Context) (string, error) {
		attempts++
		if attempts == 1 {
			<-actx.Done()
			return "", actx.Err()
		}
		return "ok", nil
	})
	if err != nil || v != "ok" || attempts != 2 {
		t.Fatalf("got %q, %v after %d attempts", v, err, attempts)
	}
	if took := time.Since(start); took > ensureAttemptFirst+2*ensureRetryFirst+time.Second {
		t.Errorf("took %v: the hung attempt was not cut off at %v", took, ensureAttemptFirst)
	}
}
