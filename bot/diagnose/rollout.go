package diagnose

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hcpbot/hcpbot/event"
)

// Rollout is how far a hosted cluster has come back after a fix: the
// steps a noProxy change goes through on HyperShift, in the order they
// happen. The NodePools roll their nodes (UpdatingConfig), each
// kube-apiserver-proxy static pod is rendered again and leaves the tunnel
// through the proxy for a direct haproxy, the nodes report Ready, and the
// service-ca-operator stops crashlooping.
type Rollout struct {
	// ProxyPods are the kube-apiserver-proxy pods the bot heard of (those
	// that were once a problem: the tunnel ones), ProxyDirect those of
	// them now running haproxy.
	ProxyPods, ProxyDirect int
	// Nodes is the node population (NodeCount: a summary's real total).
	Nodes NodeCount
	// Updating are the NodePools with UpdatingConfig=True, NotReady those
	// with Ready=False or AllNodesHealthy=False, by name, sorted.
	Updating, NotReady []string
	// Crashlooping are the crashlooping pods, "namespace/pod", sorted.
	Crashlooping []string
	// Paused are the HostedCluster and NodePools whose reconciliation is
	// paused: while any is, HyperShift rolls nothing out, so the fix
	// waits for the pause (see Cluster.Paused).
	Paused []PausedObject
}

// Waits says what the rollout waits for and how to lift it, "" when
// nothing is paused.
func (r Rollout) Waits() string {
	if len(r.Paused) == 0 {
		return ""
	}
	names := make([]string, 0, len(r.Paused))
	lifts := make([]string, 0, len(r.Paused))
	for _, p := range r.Paused {
		names = append(names, p.String())
		lifts = append(lifts, p.LiftCommand())
	}
	return "the rollout waits for the pause: " + joinList(names, "and") + "; lift it with " + joinList(lifts, "and")
}

// String is the rollout on one line, the steps in the order they happen:
// "NodePool np-1 updating config · kube-apiserver-proxy direct 1 of 3 ·
// nodes Ready 0 of 3 · crashlooping: openshift-service-ca-operator/…".
// Every part is a count or a name from the cluster's objects.
func (r Rollout) String() string {
	var parts []string
	if w := r.Waits(); w != "" {
		parts = append(parts, w)
	}
	if len(r.Updating) > 0 {
		parts = append(parts, "NodePool "+strings.Join(r.Updating, ", ")+" updating config")
	}
	if len(r.NotReady) > 0 {
		parts = append(parts, "NodePool "+strings.Join(r.NotReady, ", ")+" not ready")
	}
	if r.ProxyPods > 0 {
		parts = append(parts, fmt.Sprintf("kube-apiserver-proxy direct %d of %d", r.ProxyDirect, r.ProxyPods))
	}
	if r.Nodes.Total > 0 {
		parts = append(parts, fmt.Sprintf("nodes Ready %d of %d", r.Nodes.Ready, r.Nodes.Total))
	}
	if len(r.Crashlooping) > 0 {
		parts = append(parts, "crashlooping: "+strings.Join(r.Crashlooping, ", "))
	} else {
		parts = append(parts, "no pod crashlooping")
	}
	return strings.Join(parts, " · ")
}

// Rollout returns how far c has come back at now (see Rollout): now
// decides whether a pause with an end time still holds.
func (c *Cluster) Rollout(now time.Time) Rollout {
	r := Rollout{Paused: c.Paused(now)}
	for _, e := range c.apiProxies.live() {
		r.ProxyPods++
		if e.rec.mode == event.ProxyModeHAProxy {
			r.ProxyDirect++
		}
	}
	r.Nodes = c.Nodes()
	if !r.Nodes.Summary {
		// Without the agent's summary only the nodes once a problem are
		// known; count those that are Ready again.
		r.Nodes.Ready = r.Nodes.Total - c.problemNodes()
	}
	for _, e := range c.nodePools.live() {
		if cond, ok := e.rec.cond("UpdatingConfig"); ok && cond.Status == event.ConditionTrue {
			r.Updating = append(r.Updating, e.rec.name)
		}
		ready, rok := e.rec.cond("Ready")
		healthy, hok := e.rec.cond("AllNodesHealthy")
		if (rok && ready.Status == event.ConditionFalse) || (hok && healthy.Status == event.ConditionFalse) {
			r.NotReady = append(r.NotReady, e.rec.name)
		}
	}
	for _, e := range c.crashes.live() {
		r.Crashlooping = append(r.Crashlooping, e.rec.namespace+"/"+e.rec.pod)
	}
	slices.Sort(r.Updating)
	slices.Sort(r.NotReady)
	slices.Sort(r.Crashlooping)
	return r
}

// NotReadyAfter returns the nodes, sorted, that are NotReady since a
// transition after t: a node lost after a fix is a new symptom, not one
// the fix is still healing.
func (c *Cluster) NotReadyAfter(t time.Time) []string {
	var out []string
	for _, e := range c.nodes.live() {
		if e.rec.notReady() && e.rec.ltt.After(t) {
			out = append(out, e.rec.name)
		}
	}
	slices.Sort(out)
	return out
}
