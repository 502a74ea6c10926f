package watchers

import (
	"context"

	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/hypershift"
)

// ensureHosted starts, keeps or restarts the watch of a hosted cluster to
// match the Secret its HostedCluster names.
func (a *Agent) ensureHosted(ctx context.Context, ref event.ClusterRef, hc *hypershift.HostedCluster) {
	secret := ""
	if hc.Status.Kubeconfig != nil {
		secret = hc.Status.Kubeconfig.Name
	}
	a.mu.Lock()
	cur := a.hosted[ref]
	if cur != nil && cur.secretName == secret {
		a.mu.Unlock()
		return
	}
	delete(a.hosted, ref)
	var next *hostedCluster
	if secret != "" {
		next = &hostedCluster{ref: ref, secretName: secret}
		a.hosted[ref] = next
	}
	n := len(a.hosted)
	a.mu.Unlock()
	if cur != nil {
		cur.stop()
	}
	if next != nil {
		a.startSecretWatch(ctx, next)
		a.log.Info().Str("cluster", ref.String()).Str("secret", secret).Msg("watching hosted cluster")
	}
	a.metrics.hostedWatched.Set(float64(n))
}

func (a *Agent) hostedFor(ref event.ClusterRef) *hostedCluster {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.hosted[ref]
}

func (a *Agent) stopHosted(ref event.ClusterRef) {
	a.mu.Lock()
	hc := a.hosted[ref]
	delete(a.hosted, ref)
	n := len(a.hosted)
	a.mu.Unlock()
	if hc != nil {
		hc.stop()
		a.metrics.hostedSynced.DeleteLabelValues(ref.String())
		a.log.Info().Str("cluster", ref.String()).Msg("stopped watching hosted cluster")
	}
	a.metrics.hostedWatched.Set(float64(n))
}

func (a *Agent) stopAllHosted() {
	a.mu.Lock()
	all := a.hosted
	a.hosted = map[event.ClusterRef]*hostedCluster{}
	a.mu.Unlock()
	for _, hc := range all {
		hc.stop()
	}
	a.metrics.hostedWatched.Set(0)
}

// HostedClusters returns the hosted clusters being watched (for tests and
// the health endpoint).
func (a *Agent) HostedClusters() []event.ClusterRef {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]event.ClusterRef, 0, len(a.hosted))
	for ref, hc := range a.hosted {
		hc.mu.Lock()
		if hc.conn != nil {
			out = append(out, ref)
		}
		hc.mu.Unlock()
	}
	return out
}
