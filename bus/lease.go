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

// LeaseBucket holds the leases of bot replicas (one key per lease).
const LeaseBucket = "HCPBOT_LEASES"

// DefaultLeaseTTL is how long a lease outlives its holder's last renewal.
const DefaultLeaseTTL = 15 * time.Second

// Lease is leader election over NATS KV for processes that have NATS but
// no Kubernetes API (the bot): the holder is whoever created the key; it
// renews the key with a compare-and-set every TTL/3; the bucket's max age
// removes a key nobody renewed for TTL, and the next replica's Create then
// wins. A holder that cannot renew steps down after half the TTL, before anyone
// else can take over, so two holders never overlap (clock rates aside).
type Lease struct {
	kv       jetstream.KeyValue
	key, id  string
	ttl      time.Duration
	log      zerolog.Logger
	leader   atomic.Bool
	onChange func(leader bool)
}

// LeaseOption configures a Lease.
type LeaseOption func(*Lease)

// WithLeaseTTL sets the lease duration (default DefaultLeaseTTL). It is the
// bucket's max age, so every lease in one bucket must use the same.
func WithLeaseTTL(d time.Duration) LeaseOption { return func(l *Lease) { l.ttl = d } }

// OnLeaderChange is called (from Run's goroutine) when this replica gains
// or loses the lease.
func OnLeaderChange(f func(leader bool)) LeaseOption { return func(l *Lease) { l.onChange = f } }

// NewLease creates (or opens) the lease bucket and returns a Lease for key
// held under identity. replicas is the bucket's replica count.
func NewLease(ctx context.Context, js jetstream.JetStream, key, identity string, replicas int, log zerolog.Logger, opts ...LeaseOption) (*Lease, error) {
	if identity == "" {
		return nil, errors.New("bus: lease needs an identity")
	}
	l := &Lease{key: key, id: identity, ttl: DefaultLeaseTTL, log: log.With().Str("lease", key).Str("identity", identity).Logger()}
	for _, o := range opts {
		o(l)
	}
	if l.ttl < time.Second {
		return nil, fmt.Errorf("bus: lease TTL %s is under a second", l.ttl)
	}
	kv, err := EnsureKV(ctx, js, KVSpec{Bucket: LeaseBucket, TTL: l.ttl, History: 1, Replicas: replicas})
	if err != nil {
		return nil, err
	}
	l.kv = kv
	return l, nil
}

// Leader reports whether this replica holds the lease now.
func (l *Lease) Leader() bool { return l.leader.Load() }

// Run competes for the lease until ctx ends, then releases it if held.
func (l *Lease) Run(ctx context.Context) error {
	period := l.ttl / 3
	var rev uint64
	var renewed time.Time
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		now := time.Now()
		if l.Leader() {
			r, err := l.kv.Update(ctx, l.key, []byte(l.id), rev)
			switch {
			case err == nil:
				rev, renewed = r, now
			case errors.Is(err, jetstream.ErrKeyExists), isWrongSequence(err), errors.Is(err, jetstream.ErrKeyNotFound):
				l.set(false, "lease taken over")
			case now.Sub(renewed) > l.ttl/2:
				l.log.Warn().Err(err).Msg("lease not renewed")
				l.set(false, "lease not renewed in time")
			}
		} else {
			r, err := l.kv.Create(ctx, l.key, []byte(l.id))
			if err == nil {
				rev, renewed = r, now
				l.set(true, "lease acquired")
			}
		}
		select {
		case <-ctx.Done():
			if l.Leader() {
				l.set(false, "stopping")
				// Hand over at once instead of after TTL.
				dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
				_ = l.kv.Delete(dctx, l.key, jetstream.LastRevision(rev))
				cancel()
			}
			return nil
		case <-t.C:
		}
	}
}

func (l *Lease) set(leader bool, why string) {
	if l.leader.Swap(leader) == leader {
		return
	}
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
