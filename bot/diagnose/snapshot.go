package diagnose

import (
	"slices"

	"github.com/hcpbot/hcpbot/event"
)

// ApplySnapshotDone clears, for the types the snapshot covered, the
// problems of objects it does not list, and reports whether anything
// visible changed. A problem observed at or after done.Started is kept:
// the agent may have listed before it appeared, and the fresh event is the
// better witness. What counts as a problem follows the agent: a node not
// Ready, a crashlooping pod, a tunnel-mode kube-apiserver-proxy (or one
// with CONNECT failures), an unreachable API server, a NodePool with a
// False condition, a virt-launcher pod not Running, an aggregated APIService not
// Available, a stale or missing connectivity-check record. HostedClusters and
// Proxy/cluster are always restated, so a missing one is gone; proxy
// changes are history and never cleared.
//
// The caller must pass only snapshots of this Cluster's scope or of the
// management scope of its source (Apply checks this).
func (c *Cluster) ApplySnapshotDone(done event.SnapshotDone) (changed bool) {
	started := norm(done.Started)
	tomb := stamp{obs: started}
	listed := func(r objRef) bool {
		return slices.ContainsFunc(done.Problems, r.matches)
	}
	for _, t := range done.Types {
		switch t {
		case event.TypeNode:
			changed = clearTable(&c.nodes, tomb, listed, nodeRec.notReady) || changed
		case event.TypeCrashLoop:
			changed = clearTable(&c.crashes, tomb, listed, func(crashRec) bool { return true }) || changed
		case event.TypeAPIServerProxy:
			changed = clearTable(&c.apiProxies, tomb, listed, func(r apiProxyRec) bool {
				return r.mode == event.ProxyModeTunnel || r.connectFailure
			}) || changed
		case event.TypeReachability:
			changed = clearTable(&c.reach, tomb, listed, func(r reachRec) bool { return !r.reachable }) || changed
		case event.TypeNodePool:
			changed = clearTable(&c.nodePools, tomb, listed, nodePoolRec.problem) || changed
		case event.TypeVirtLauncher:
			changed = clearTable(&c.launchers, tomb, listed, func(r launcherRec) bool { return r.phase != "Running" }) || changed
		case event.TypeAPIService:
			changed = clearTable(&c.apiServices, tomb, listed, func(r apiServiceRec) bool { return r.available != event.ConditionTrue }) || changed
		case event.TypeConnectivity:
			changed = clearTable(&c.connectivity, tomb, listed, connectivityRec.problem) || changed
		case event.TypeOCPProxy:
			changed = clearTable(&c.ocp, tomb, listed, func(ocpRec) bool { return true }) || changed
		case event.TypeHostedCluster:
			h := &c.hc
			if h.present && !h.p.Deleted && h.st.obs.Before(started) && !listed(h.ref) {
				h.p.Deleted, h.st = true, tomb
				c.buryHosted(tomb)
				changed = true
			}
		}
	}
	return changed
}

// clearTable tombstones the visible problems of t that the snapshot does
// not list and that were observed before it started.
func clearTable[R any](t *table[R], tomb stamp, listed func(objRef) bool, problem func(R) bool) bool {
	changed := false
	for k, e := range *t {
		if e.gone || !e.st.obs.Before(tomb.obs) || !problem(e.rec) || listed(e.ref) {
			continue
		}
		if t.bury(k, tomb) { // newer: the entry was observed before tomb.obs
			changed = true
		}
	}
	return changed
}
