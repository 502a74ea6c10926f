package watchers

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/hcpbot/hcpbot/event"
)

// The node summary: per-node events carry problems only, so the bot cannot
// count a cluster's healthy nodes from them; the summary tells it the
// whole population. It costs one List of the informer's cache and one
// event per change, and changes are coalesced: at most one summary per
// NodeSummaryInterval per hosted cluster, however many nodes flap.

// summaryTimer coalesces the summaries of one hosted cluster.
type summaryTimer struct {
	mu      sync.Mutex
	pending bool      // a summary is scheduled
	last    time.Time // when the last one was computed
}

// nodesChanged schedules a summary of hc's nodes: at once when none was
// computed within the interval, else when the interval is over. Changes
// while one is scheduled cost nothing more.
func (a *Agent) nodesChanged(ctx context.Context, hc *hostedCluster) {
	s := &hc.summary
	s.mu.Lock()
	if s.pending {
		s.mu.Unlock()
		return
	}
	s.pending = true
	wait := s.last.Add(a.cfg.NodeSummaryInterval).Sub(a.now())
	s.mu.Unlock()
	if wait <= 0 {
		a.flushSummary(ctx, hc)
		return
	}
	time.AfterFunc(wait, func() { a.flushSummary(ctx, hc) })
}

// flushSummary publishes hc's node summary if its counts changed since the
// last one published (or restated by a snapshot).
func (a *Agent) flushSummary(ctx context.Context, hc *hostedCluster) {
	s := &hc.summary
	s.mu.Lock()
	s.pending, s.last = false, a.now()
	s.mu.Unlock()
	if ctx.Err() != nil {
		return
	}
	hc.mu.Lock()
	conn := hc.conn
	hc.mu.Unlock()
	if conn == nil {
		return
	}
	if !conn.hasSynced() {
		// A partial cache would count too few nodes: try again later.
		a.nodesChanged(ctx, hc)
		return
	}
	nodes, _ := conn.nodes.List(labels.Everything())
	k := key{kind: kindNodeSummary, cluster: hc.ref}
	ref := hc.ref
	a.emitIfChanged(ctx, k, &ref, summaryRef(ref), a.nodeSummaryFact(nodes, a.now()))
}

// nodeSummaryFact counts nodes. It is a problem fact so that every
// snapshot restates it. The key adds the highest resourceVersion counted
// to the counts, so that counts that come back later (a node NotReady,
// then Ready again) are a new fact rather than a duplicate.
func (a *Agent) nodeSummaryFact(nodes []*corev1.Node, now time.Time) fact {
	p := event.NodeSummary{Total: len(nodes), JoinGrace: a.cfg.NodeJoinGrace}
	var maxRV uint64
	maxRVText := ""
	for _, n := range nodes {
		// As nodeFact decides, without building its payload.
		switch c := readyCondition(n); {
		case c == nil && joinWait(n, now, a.cfg.NodeJoinGrace) > 0:
			p.Joining++
		case c == nil:
			p.NotJoining++
		case c.Status == corev1.ConditionTrue:
			p.Ready++
			// HyperShift counts a cordoned Ready node as no available
			// worker (support/util/util.go:568-590): its connection
			// conditions turn Unknown/NoWorkerNodesAvailable once every
			// Ready node is cordoned, which the bot can only tell with
			// this count.
			if n.Spec.Unschedulable {
				p.Cordoned++
			}
		case c.Status == corev1.ConditionFalse:
			p.NotReady++
		default:
			p.Unknown++
		}
		// resourceVersions are etcd revisions; compare them as numbers
		// where they are, else keep the longest-then-greatest text.
		if v, err := strconv.ParseUint(n.ResourceVersion, 10, 64); err == nil {
			if v > maxRV {
				maxRV = v
			}
		} else if len(n.ResourceVersion) > len(maxRVText) || (len(n.ResourceVersion) == len(maxRVText) && n.ResourceVersion > maxRVText) {
			maxRVText = n.ResourceVersion
		}
	}
	state := fmt.Sprintf("total=%d ready=%d notready=%d unknown=%d joining=%d notjoining=%d cordoned=%d",
		p.Total, p.Ready, p.NotReady, p.Unknown, p.Joining, p.NotJoining, p.Cordoned)
	rv := maxRVText
	if maxRV > 0 {
		rv = strconv.FormatUint(maxRV, 10)
	}
	return fact{payload: p, key: "nodes:" + state + "@rv:" + rv, state: state, problem: true}
}

// summaryRef is the object of a cluster's node summary: its HostedCluster.
func summaryRef(ref event.ClusterRef) event.ObjectRef {
	return event.ObjectRef{Kind: "HostedCluster", Namespace: ref.Namespace, Name: ref.Name}
}
