package bus

import (
	"context"
	"errors"
	"time"

	"github.com/rs/zerolog"

	"github.com/hcpbot/hcpbot/internal/jitter"
)

// Bounds of EnsureStream's and EnsureKV's retries. When two bot replicas
// create the same replicated stream at the same moment, the server creates
// it but may answer neither request (nats-server 2.15: the meta leader
// proposes the second, equal create as a new assignment of the same raft
// group, which replaces the first one, reply subject included, before the
// group has a leader to answer): a request waits for its whole timeout,
// however long (TestEnsureConcurrentOnFreshCluster: 2 minutes, both
// replicas, before this).
// Hence a bounded attempt, then another, which finds the stream and
// updates it (a no-op). The first attempt is short so that a lost reply
// costs little; later ones are longer so that a slow server is not cut
// off every time.
const (
	ensureAttemptFirst = 2 * time.Second
	ensureAttemptMax   = 10 * time.Second
	ensureRetryFirst   = 250 * time.Millisecond
	ensureRetryMax     = 10 * time.Second
)

// retryEnsure runs attempt, each within a timeout doubling from
// ensureAttemptFirst to ensureAttemptMax, until it succeeds or ctx ends,
// pausing with jitter.Backoff from ensureRetryFirst to ensureRetryMax. It
// logs with ctx's logger (zerolog.Ctx): one warning at the first failure
// with its reason (and again only when the reason changes), and one info
// line when it succeeded after failing; single attempts at debug level.
func retryEnsure[T any](ctx context.Context, kind, name string, attempt func(context.Context) (T, error)) (T, error) {
	log := zerolog.Ctx(ctx).With().Str(kind, name).Logger()
	timeout := ensureAttemptFirst
	var lastReason string
	for n := 1; ; n++ {
		actx, cancel := context.WithTimeout(ctx, timeout)
		v, err := attempt(actx)
		cancel()
		if err == nil {
			if n > 1 {
				log.Info().Int("attempts", n).Msg(kind + " " + name + " ready")
			}
			return v, nil
		}
		if ctx.Err() != nil {
			var zero T
			return zero, errors.Join(ctx.Err(), err)
		}
		// Jitter spreads the replicas' retries apart: lock-step retries
		// would race again.
		pause := jitter.Backoff(n, ensureRetryFirst, ensureRetryMax)
		if reason := err.Error(); reason != lastReason {
			log.Warn().Err(err).Int("attempt", n).Dur("retry_in", pause).Msg("cannot ensure " + kind + " " + name + " yet; retrying until it succeeds (not ready meanwhile)")
			lastReason = reason
		} else {
			log.Debug().Err(err).Int("attempt", n).Dur("retry_in", pause).Msg("retrying " + kind + " " + name)
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			var zero T
			return zero, errors.Join(ctx.Err(), err)
		case <-t.C:
		}
		timeout = min(2*timeout, ensureAttemptMax)
	}
}
