package diagnose

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hcpbot/hcpbot/event"
)

// Paused reconciliation (support/util/pausereconcile.go at openshift/hypershift
// 3ee9615). With spec.pausedUntil "true" or a future RFC3339 time,
// HyperShift writes ReconciliationActive=False/ReconciliationPaused and
// reconciles nothing: the HostedCluster's spec is not rolled into the
// control plane, CAPI is paused, a NodePool rolls no machine
// (hostedcluster_controller.go:1307-1317, nodepool_controller.go:430-436).
// The hosted-cluster-config-operator returns at once
// (hostedclusterconfigoperator resources.go:357-360), so
// DataPlaneConnectionAvailable and ControlPlaneConnectionAvailable stay as
// they were when the pause began. A value that is neither (the CRD lets
// "2026-09-01T00:00:00" without a zone through) pauses nothing
// (InvalidPausedUntilValue).

// reasonReconciliationPaused is ReconciliationActive=False's reason while
// paused (API:332, pausereconcile.go:52-59).
const reasonReconciliationPaused = "ReconciliationPaused"

// PausedObject is a HostedCluster or NodePool whose reconciliation is
// paused by its spec.pausedUntil, read at one moment.
type PausedObject struct {
	// Resource is "hostedclusters" or "nodepools", as oc names them.
	Resource        string
	Namespace, Name string
	// Value is spec.pausedUntil as written; Until its end, zero for
	// "true" (until the field is removed).
	Value string
	Until time.Time
	// Condition is ReconciliationActive as HyperShift wrote it, if seen.
	Condition *event.Condition
}

// Kind is "HostedCluster" or "NodePool".
func (p PausedObject) Kind() string {
	if p.Resource == "nodepools" {
		return "NodePool"
	}
	return "HostedCluster"
}

// LiftCommand is the oc command that lifts the pause
// (docs/content/how-to/pause-reconciliation.md).
func (p PausedObject) LiftCommand() string {
	return fmt.Sprintf(`oc patch -n %s %s/%s --type=merge -p '{"spec":{"pausedUntil":null}}'`, p.Namespace, p.Resource, p.Name)
}

// String says what is paused and until when.
func (p PausedObject) String() string {
	s := fmt.Sprintf("%s %s/%s paused (spec.pausedUntil %q", p.Kind(), p.Namespace, p.Name, p.Value)
	if p.Until.IsZero() {
		return s + ": until the field is removed)"
	}
	return s + ": until " + p.Until.UTC().Format(time.RFC3339) + ")"
}

// Paused returns the HostedCluster and NodePools of c whose reconciliation
// is paused at now, the HostedCluster first, then the NodePools by name.
// Paused is judged from spec.pausedUntil with HyperShift's rules, not
// from the condition: with a time, the condition flips back only when
// HyperShift's requeue fires.
func (c *Cluster) Paused(now time.Time) []PausedObject {
	hc, ok := c.live()
	if !ok {
		return nil
	}
	var out []PausedObject
	if p := event.ReadPausedUntil(hc.PausedUntil, now); p.Paused {
		po := PausedObject{Resource: "hostedclusters", Namespace: c.key.Cluster.Namespace, Name: c.key.Cluster.Name, Value: hc.PausedUntil, Until: p.Until}
		if cd, ok := c.hcCond(condReconciliationActive, func(event.Condition) bool { return true }); ok {
			po.Condition = &cd
		}
		out = append(out, po)
	}
	for _, e := range c.nodePools.visible(true) {
		if p := event.ReadPausedUntil(e.rec.pausedUntil, now); p.Paused {
			po := PausedObject{Resource: "nodepools", Namespace: e.rec.namespace, Name: e.rec.name, Value: e.rec.pausedUntil, Until: p.Until}
			if cd, ok := e.rec.cond(condReconciliationActive); ok {
				po.Condition = &cd
			}
			out = append(out, po)
		}
	}
	return out
}

// invalidPauses names the objects whose spec.pausedUntil is set but
// means nothing: someone meant to pause and did not.
func (c *Cluster) invalidPauses(now time.Time) []string {
	hc, ok := c.live()
	if !ok {
		return nil
	}
	var out []string
	if event.ReadPausedUntil(hc.PausedUntil, now).Invalid {
		out = append(out, fmt.Sprintf("HostedCluster %s has spec.pausedUntil %q, which is neither true nor an RFC3339 time: HyperShift does not pause it (InvalidPausedUntilValue)", c.key.Cluster, hc.PausedUntil))
	}
	for _, e := range c.nodePools.visible(true) {
		if event.ReadPausedUntil(e.rec.pausedUntil, now).Invalid {
			out = append(out, fmt.Sprintf("NodePool %s/%s has spec.pausedUntil %q, which is neither true nor an RFC3339 time: HyperShift does not pause it (InvalidPausedUntilValue)", e.rec.namespace, e.rec.name, e.rec.pausedUntil))
		}
	}
	return out
}

// pauseEvidence is a paused object as evidence, at the start of the
// pause as HyperShift recorded it (the condition's lastTransitionTime).
func (c *Cluster) pauseEvidence(p PausedObject) Evidence {
	at := c.hc.st.obs
	obj := c.hcObject()
	if p.Resource == "nodepools" {
		obj = nodePoolKey(p.Namespace, p.Name)
		if e := c.nodePools[p.Namespace+"/"+p.Name]; e != nil {
			at = e.since
		}
	}
	text := p.String()
	if cd := p.Condition; cd != nil {
		if cd.Status == event.ConditionFalse && cd.Reason == reasonReconciliationPaused {
			at = firstTime(cd.LastTransitionTime, at)
		}
		text += "; HyperShift reports " + condText(*cd)
	}
	return Evidence{At: at, Kind: "paused", Object: obj, Text: clip(text, maxEvidenceText)}
}

// frozenConds are the conditions the HCCO stops updating while the
// HostedCluster is paused.
var frozenConds = []string{condDataPlaneConnection, condControlPlaneConnection}

// notePause says in d that reconciliation is paused: an evidence line per
// paused object, a sentence in the root cause, the lift command in the
// next steps, a note on the fix (its rollout waits), and, when d rests
// on a connection condition, that it is frozen.
func (c *Cluster) notePause(d *Diagnosis, paused []PausedObject, invalid []string) {
	for _, s := range invalid {
		d.Evidence = append(d.Evidence, Evidence{At: c.hc.st.obs, Kind: "paused", Object: c.hcObject(), Text: clip(s, maxEvidenceText)})
	}
	if len(paused) == 0 {
		return
	}
	var names, lifts []string
	hcPaused := false
	for _, p := range paused {
		d.Evidence = append(d.Evidence, c.pauseEvidence(p))
		names = append(names, p.String())
		lifts = append(lifts, p.LiftCommand()+" (management cluster)")
		hcPaused = hcPaused || p.Resource == "hostedclusters"
	}
	parts := []string{"Reconciliation is paused: " + joinList(names, "and") + ". HyperShift rolls nothing out until the pause ends or is lifted."}
	if hcPaused {
		var frozen []string
		for i, ev := range d.Evidence {
			for _, t := range frozenConds {
				if ev.Kind == "condition" && strings.HasPrefix(ev.Text, t+"=") {
					d.Evidence[i].Text = clip(ev.Text, maxEvidenceText-60) + " [frozen while paused]"
					frozen = append(frozen, t)
				}
			}
		}
		if len(frozen) > 0 {
			parts = append(parts, "While the HostedCluster is paused the hosted-cluster-config-operator does not run, so "+joinList(slices.Compact(frozen), "and")+" show the state when the pause began, not now.")
			d.Confidence = Confidence{ConfidenceLow, "it rests on a condition HyperShift does not update while reconciliation is paused"}
		}
	}
	d.RootCause = strings.TrimSpace(d.RootCause + " " + strings.Join(parts, " "))
	if d.Fix != nil {
		f := *d.Fix // the memo shares the Fix: never write through it
		f.Waits = "The rollout waits for the pause: " + joinList(names, "and") + ". Lift it with " + joinList(lifts, "and") + "."
		d.Fix = &f
	}
	d.NextSteps = append(d.NextSteps, lifts...)
}

// began is when the cluster's own record says d's problem began: the
// earliest time among its evidence of kinds that carry the cluster's own
// times (a condition's lastTransitionTime, a node's Ready transition, a
// termination, a probe's first failure). Zero when it has none.
func began(d Diagnosis) time.Time {
	var t time.Time
	for _, ev := range d.Evidence {
		switch ev.Kind {
		case "proxy-spec", "paused", "lint", "nodes", "nodepool-size":
			// A state, not the start of the problem.
			continue
		}
		if !ev.At.IsZero() && (t.IsZero() || ev.At.Before(t)) {
			t = ev.At
		}
	}
	return t
}

// Since is when an incident opened at opened with d as its diagnosis
// began: d.Began when the cluster's record has it and it is earlier,
// else opened.
func (d Diagnosis) Since(opened time.Time) time.Time {
	if !d.Began.IsZero() && (opened.IsZero() || d.Began.Before(opened)) {
		return d.Began
	}
	return opened
}
