package bus

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// DefaultLeaseTTL is how long a lease outlives its holder's last renewal.
const DefaultLeaseTTL = 15 * time.Second

// Lease is leader election over NATS KV for processes that have NATS but
// no Kubernetes API (the bot): the holder is whoever created the key; it
// renews the key with a compare-and-set every TTL/5; the bucket's max age
// removes a key nobody renewed for TTL, and the next replica's Create then
// wins.
//
// A holder leads until half the TTL after it SENT its last successful
// renewal (or the Create that won): Leader compares the clock with that
// deadline itself, so a renewal that hangs (NATS cut, a frozen link) cannot
// stretch the leadership, and every KV call is bounded by a timeout no
// longer than the time left. The server received that renewal after it was
// sent, so the key outlives the deadline by about TTL/2 (less the server's
// coarse clock, 100 ms ticks), and nobody else can create it before; two
// holders never overlap (clock rates aside).
type Lease struct {
	kv       jetstream.KeyValue
	key, id  string
	ttl      time.Duration
	log      zerolog.Logger
	onChange func(leader bool)

	epoch time.Time    // origin of until (monotonic clock)
	until atomic.Int64 // leading while time.Since(epoch) < until; 0: not leading
	held  bool         // what onChange last reported (Run's goroutine only)
}

// WithLeaseTTL sets the lease duration (default DefaultLeaseTTL). It is the
// bucket's max age, so every lease in one bucket must use the same. For
// NewLease only.
func WithLeaseTTL(d time.Duration) Option { return func(o *options) { o.leaseTTL = d } }

// OnLeaderChange is called (from Run's goroutine) when this replica gains
// or loses the lease. Losing it is reported once Run notices (at the
// deadline at the latest, give or take scheduling); Leader is exact. For
// NewLease only.
func OnLeaderChange(f func(leader bool)) Option { return func(o *options) { o.onChange = f } }

// NewLease creates (or opens) the lease bucket, with WithReplicas copies,
// and returns a Lease for key held under identity.
func NewLease(ctx context.Context, js BucketManager, key, identity string, log zerolog.Logger, opts ...Option) (*Lease, error) {
	if identity == "" {
		return nil, errors.New("bus: lease needs an identity")
	}
	o := apply(opts)
	l := &Lease{key: key, id: identity, ttl: durOr(o.leaseTTL, DefaultLeaseTTL), onChange: o.onChange, epoch: time.Now(),
		log: log.With().Str("lease", key).Str("identity", identity).Logger()}
	if l.ttl < time.Second {
		return nil, fmt.Errorf("bus: lease TTL %s is under a second", l.ttl)
	}
	kv, err := EnsureKV(ctx, js, LeasesKV(l.ttl, WithReplicas(o.replicas)))
	if err != nil {
		return nil, err
	}
	l.kv = kv
	return l, nil
}

// stepDownAfter is how long a holder leads after sending its last
// successful renewal: TTL/2, so the key outlives the leadership by half
// the TTL.
func (l *Lease) stepDownAfter() time.Duration { return l.ttl / 2 }

// Leader reports whether this replica holds the lease now: it won or
// renewed the key less than TTL/2 ago (measured from sending the call).
func (l *Lease) Leader() bool { return l.now() < time.Duration(l.until.Load()) }

func (l *Lease) now() time.Duration { return time.Since(l.epoch) }

// Run competes for the lease until ctx ends, then releases it if held.
func (l *Lease) Run(ctx context.Context) error {
	period := l.ttl / 5 // two renewals fit before the step-down deadline
	// A standby tries more often than the holder renews: the key of a
	// holder that died expires up to a renewal period after its last
	// write, and a standby trying only every period would add up to
	// another one to the hand-over (B8: lease + 4 s at 15 s; now + 1 s).
	standby := max(period/3, 100*time.Millisecond)
	var rev uint64 // our revision of the key; 0: we hold none
	tick := time.NewTicker(standby)
	defer tick.Stop()
	lapse := time.NewTimer(time.Hour) // fires at the step-down deadline
	defer lapse.Stop()
	for {
		rev = l.attempt(ctx, rev, period)
		if l.held {
			lapse.Reset(time.Duration(l.until.Load()) - l.now())
		} else {
			lapse.Stop()
		}
		if rev != 0 {
			tick.Reset(period)
		} else {
			tick.Reset(standby)
		}
		for waiting := true; waiting; {
			select {
			case <-ctx.Done():
				l.until.Store(0)
				l.notify("stopping")
				if rev != 0 {
					// Hand over at once instead of after TTL.
					_, _ = bounded(context.WithoutCancel(ctx), 2*time.Second, func(ctx context.Context) (uint64, error) {
						return 0, l.kv.Delete(ctx, l.key, jetstream.LastRevision(rev))
					})
				}
				return nil
			case <-lapse.C:
				// Report the step-down now, not at the next renewal.
				l.notify("lease not renewed in time")
			case <-tick.C:
				waiting = false
			}
		}
	}
}

// attempt renews the key (rev != 0) or tries to create it, and returns
// the revision we hold afterwards (0: none).
func (l *Lease) attempt(ctx context.Context, rev uint64, period time.Duration) uint64 {
	sent := l.now()
	timeout := period
	if left := time.Duration(l.until.Load()) - sent; left > 0 && left < timeout {
		timeout = left // a later answer cannot keep us leading anyway
	}
	r, err := bounded(ctx, timeout, func(ctx context.Context) (uint64, error) {
		if rev != 0 {
			return l.kv.Update(ctx, l.key, []byte(l.id), rev)
		}
		return l.kv.Create(ctx, l.key, []byte(l.id))
	})
	switch {
	case err == nil:
		// A CAS on our revision succeeded, so nobody wrote the key since:
		// leading again is safe even after a lapse. A lapse not reported
		// yet (the tick won over the lapse timer after a stall, or this
		// answer came after the deadline) is reported first: Leader said
		// false meanwhile, and what acted on it (the notifier drops
		// leader-only roots) must be told to render them again.
		if l.held && l.now() >= time.Duration(l.until.Load()) {
			l.notify("lease not renewed in time")
		}
		l.until.Store(int64(sent + l.stepDownAfter()))
		l.notify("lease acquired")
		return r
	case rev == 0:
		return 0 // someone else holds it, or NATS is unreachable
	case errors.Is(err, jetstream.ErrKeyExists), isWrongSequence(err), errors.Is(err, jetstream.ErrKeyNotFound):
		if r := l.ours(ctx, timeout); r != 0 {
			// A renewal we abandoned did write: the key is still ours. Keep
			// the deadline (that call's sending time is unknown); the next
			// renewal, on this revision, extends it.
			return r
		}
		l.until.Store(0)
		l.notify("lease taken over")
		return 0
	default:
		// Keep the revision: a later renewal may still succeed. Leader
		// turns false at the deadline by itself.
		if ctx.Err() == nil {
			l.log.Warn().Err(err).Msg("lease not renewed")
		}
		l.notify("lease not renewed in time")
		return rev
	}
}

// ours returns the key's revision if its value is our identity (nobody
// else writes it), else 0.
func (l *Lease) ours(ctx context.Context, timeout time.Duration) uint64 {
	r, _ := bounded(ctx, timeout, func(ctx context.Context) (uint64, error) {
		e, err := l.kv.Get(ctx, l.key)
		if err != nil || string(e.Value()) != l.id {
			return 0, err
		}
		return e.Revision(), nil
	})
	return r
}

// bounded runs call with a timeout and returns when the timeout ends even
// if call has not: nats.go honours the context only once it has the
// connection's lock, which a write to a dead link holds for up to its
// flusher timeout (a minute). The abandoned call finishes in the
// background; if it did renew, our next compare-and-set fails on the
// revision and we step down, which is safe.
func bounded(ctx context.Context, timeout time.Duration, call func(context.Context) (uint64, error)) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	type result struct {
		rev uint64
		err error
	}
	done := make(chan result, 1)
	go func() {
		defer cancel()
		r, err := call(ctx)
		done <- result{r, err}
	}()
	select {
	case res := <-done:
		return res.rev, res.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// notify reports a change of Leader to the log and onChange.
func (l *Lease) notify(why string) {
	leader := l.Leader()
	if leader == l.held {
		return
	}
	l.held = leader
	l.log.Info().Bool("leader", leader).Msg(why)
	if l.onChange != nil {
		l.onChange(leader)
	}
}

// isWrongSequence: the key was written by someone else since our revision.
func isWrongSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}
