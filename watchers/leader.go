package watchers

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// LeaderConfig names the Lease that agent replicas compete for; only the
// holder watches and publishes.
type LeaderConfig struct {
	Namespace, Name, Identity string
	// Defaults: 15s, 10s, 2s (client-go's usual values).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// RunElected runs run while this replica holds the lease, and campaigns again
// when it loses it, until ctx ends. run gets a context cancelled on loss:
// as soon as a renewal has failed for RenewDeadline, so that it stops well
// before the lease expires (LeaseDuration) and another replica may take
// it. When ctx ends, the lease is released once run has returned, so that
// a successor starts at once, but never while run still acts.
func RunElected(ctx context.Context, kube kubernetes.Interface, lc LeaderConfig, m *Metrics, log zerolog.Logger, run func(ctx context.Context)) error {
	if lc.LeaseDuration == 0 {
		lc.LeaseDuration = 15 * time.Second
	}
	if lc.RenewDeadline == 0 {
		lc.RenewDeadline = 10 * time.Second
	}
	if lc.RetryPeriod == 0 {
		lc.RetryPeriod = 2 * time.Second
	}
	if lc.Namespace == "" || lc.Name == "" || lc.Identity == "" {
		return fmt.Errorf("leader election needs namespace, name and identity")
	}
	if m == nil {
		m = NewMetrics(nil)
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: lc.Namespace, Name: lc.Name},
		Client:     kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: lc.Identity},
	}
	for ctx.Err() == nil {
		// client-go starts OnStartedLeading in a goroutine and returns from
		// Run when the lease is lost; wait for run to finish before
		// campaigning again, so two runs never overlap in one process.
		done := make(chan struct{})
		var started atomic.Bool
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:          lock,
			LeaseDuration: lc.LeaseDuration,
			RenewDeadline: lc.RenewDeadline,
			RetryPeriod:   lc.RetryPeriod,
			// Not client-go's release: it runs after a failed renewal too,
			// before run is cancelled, and waits up to RenewDeadline more
			// for an API server that is not answering — run would go on
			// acting past the lease's expiry. release below instead.
			ReleaseOnCancel: false,
			Name:            lc.Name,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(lctx context.Context) {
					started.Store(true)
					defer close(done)
					m.isLeader.Set(1)
					log.Info().Str("identity", lc.Identity).Msg("acquired the agent lease")
					run(lctx)
				},
				OnStoppedLeading: func() {
					m.isLeader.Set(0)
					log.Info().Str("identity", lc.Identity).Msg("stopped leading: the agent lease is lost or being released")
				},
			},
		})
		if err != nil {
			return err
		}
		le.Run(ctx)
		if started.Load() {
			<-done
			if ctx.Err() != nil {
				release(lock, lc, log)
			}
		}
	}
	return nil
}

// release gives up the lease if this replica still holds it, as client-go
// does (holder cleared, 1 s duration), within RenewDeadline.
func release(lock *resourcelock.LeaseLock, lc LeaderConfig, log zerolog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), lc.RenewDeadline)
	defer cancel()
	rec, _, err := lock.Get(ctx)
	if err != nil || rec.HolderIdentity != lc.Identity {
		if err != nil {
			log.Warn().Err(err).Msg("could not release the agent lease; it expires by itself")
		}
		return
	}
	now := metav1.Now()
	if err := lock.Update(ctx, resourcelock.LeaderElectionRecord{LeaderTransitions: rec.LeaderTransitions, LeaseDurationSeconds: 1, RenewTime: now, AcquireTime: now}); err != nil {
		log.Warn().Err(err).Msg("could not release the agent lease; it expires by itself")
	}
}
