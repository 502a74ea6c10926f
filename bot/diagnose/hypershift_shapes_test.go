package diagnose

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/event"
)

// The shapes in this file are HyperShift's, at openshift/hypershift
// 3ee9615: "HCCO" is control-plane-operator/hostedclusterconfigoperator/
// controllers/resources/resources.go, "HO" hypershift-operator/controllers/
// hostedcluster/hostedcluster_controller.go, "CPO" control-plane-operator/
// controllers/hostedcontrolplane/hostedcontrolplane_controller.go, "NP"
// hypershift-operator/controllers/nodepool/conditions.go.

// The connection conditions' messages, exact.
const (
	msgNoWorkersDP    = "No worker nodes available"                                                                                                                              // HCCO:1675-1680
	msgNoWorkersCP    = "No worker nodes available to verify control plane connectivity"                                                                                         // HCCO:1888-1892
	msgCountFailed    = "Unable to count worker nodes: failed to list nodes: Unauthorized"                                                                                       // HCCO:1668-1673, 1882-1887; util.go:573
	msgCMNotFound     = "Connectivity check ConfigMap kube-system/control-plane-connectivity-check not found; the hosted cluster config operator may not have reconciled it yet" // HCCO:1894-1903
	msgNotInHCP       = "Condition not found in the HCP"                                                                                                                         // HO:834-836
	msgHCPNotFound    = "The hosted control plane is not found"                                                                                                                  // HO:823-829
	msgPausedForever  = "Reconciliation paused until field removed"                                                                                                              // pausereconcile.go:56-57
	msgReconcileAlive = "Reconciliation active on resource"                                                                                                                      // pausereconcile.go:69-70
)

func hasRule(ds []Diagnosis, rule string) bool {
	_, ok := find(ds, rule)
	return ok
}

// TestUnknownByReason: each Unknown shape of the connection conditions.
func TestUnknownByReason(t *testing.T) {
	for _, tt := range []struct {
		name   string
		conds  []event.Condition
		facts  func(t *testing.T) []fact
		rule   string // "" for no diagnosis at all
		sev    Severity
		cause  string
		absent []string
	}{
		{
			name: "StatusUnknown: condition not found in the HCP (an older control plane)",
			conds: []event.Condition{
				cond(condDataPlaneConnection, event.ConditionUnknown, reasonStatusUnknown, msgNotInHCP, at(10)),
				cond(condControlPlaneConnection, event.ConditionUnknown, reasonStatusUnknown, msgNotInHCP, at(10)),
			},
		},
		{
			name: "StatusUnknown: no hosted control plane",
			conds: []event.Condition{
				cond(condDataPlaneConnection, event.ConditionUnknown, reasonStatusUnknown, msgHCPNotFound, at(10)),
				cond(condControlPlaneConnection, event.ConditionUnknown, reasonStatusUnknown, msgHCPNotFound, at(10)),
				cond(condExternalDNSReachable, event.ConditionUnknown, reasonStatusUnknown, "External DNS is not configured", at(10)), // CPO:812-814
			},
		},
		{
			name: "NoWorkerNodesAvailable with no node at all",
			conds: []event.Condition{
				cond(condDataPlaneConnection, event.ConditionUnknown, reasonNoWorkerNodes, msgNoWorkersDP, at(10)),
				cond(condControlPlaneConnection, event.ConditionUnknown, reasonNoWorkerNodes, msgNoWorkersCP, at(10)),
			},
			facts: func(t *testing.T) []fact { return []fact{summaryFact(t, event.NodeSummary{}, at(11))} },
			rule:  RuleNoWorkers, sev: SeverityCritical, cause: "has no nodes at all",
			absent: []string{RuleKonnectivityDown, RuleControlPlaneUnreachable},
		},
		{
			name:  "ConfigMapNotFound",
			conds: []event.Condition{cond(condControlPlaneConnection, event.ConditionUnknown, reasonConfigMapNotFound, msgCMNotFound, at(10))},
			rule:  RuleConnectionUnknown, sev: SeverityInfo, cause: "has not found the ConfigMap kube-system/control-plane-connectivity-check",
			absent: []string{RuleControlPlaneUnreachable},
		},
		{
			name: "ReconcileError on both: one diagnosis",
			conds: []event.Condition{
				cond(condDataPlaneConnection, event.ConditionUnknown, reasonReconcileError, msgCountFailed, at(10)),
				cond(condControlPlaneConnection, event.ConditionUnknown, reasonReconcileError, msgCountFailed, at(10)),
			},
			rule: RuleConnectionUnknown, sev: SeverityWarning, cause: "cannot evaluate the workers' connections",
			absent: []string{RuleKonnectivityDown, RuleControlPlaneUnreachable},
		},
		{
			name:  "ReconcileError on DataPlaneConnectionAvailable alone (before 4.22, no ControlPlaneConnectionAvailable)",
			conds: []event.Condition{cond(condDataPlaneConnection, event.ConditionUnknown, reasonReconcileError, msgCountFailed, at(10))},
			rule:  RuleConnectionUnknown, sev: SeverityWarning, cause: "DataPlaneConnectionAvailable=Unknown, ReconcileError: Unable to count worker nodes",
			absent: []string{RuleKonnectivityDown},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			facts := []fact{hcFact(t, withConds(bypassing(), tt.conds...), at(12))}
			if tt.facts != nil {
				facts = append(facts, tt.facts(t)...)
			}
			c := build(t, facts...)
			ds := Diagnose(c, at(60))
			if tt.rule == "" {
				if len(ds) != 0 {
					t.Fatalf("Unknown/StatusUnknown is not a fault, got:\n%s", render(ds))
				}
				return
			}
			d := want(t, c, at(60), tt.rule, true)
			if d.Severity != tt.sev || !strings.Contains(d.RootCause, tt.cause) || strings.Contains(d.Title+d.RootCause, "=False") {
				t.Errorf("diagnosis:\n%s", render([]Diagnosis{d}))
			}
			for _, r := range tt.absent {
				if hasRule(ds, r) {
					t.Errorf("%s fired too:\n%s", r, render(ds))
				}
			}
			if !d.Began.Equal(at(10)) {
				t.Errorf("Began %v, want the condition's lastTransitionTime %v", d.Began, at(10))
			}
		})
	}
}

// TestDay2ClusterLosesEveryWorker follows HyperShift through a day-2
// cluster that loses every worker (research §1): both connection
// conditions go True → Unknown/NoWorkerNodesAvailable (the
// lastTransitionTime moves with the status), the nodes are NotReady,
// then the HCCO cannot list the nodes: Unknown/ReconcileError, with the
// lastTransitionTime unchanged (meta.SetStatusCondition moves it only on a
// status change, apimachinery conditions.go:25-68).
func TestDay2ClusterLosesEveryWorker(t *testing.T) {
	lost := at(-3 * 24 * 60) // three days before
	healthy := withConds(bypassing(),
		cond(condDataPlaneConnection, event.ConditionTrue, "AsExpected", "All is well", at(-10*24*60)),
		cond(condControlPlaneConnection, event.ConditionTrue, "AsExpected", "All is well", at(-10*24*60)))
	c := build(t, hcFact(t, healthy, at(-4*24*60)), summaryFact(t, event.NodeSummary{Total: 3, Ready: 3}, at(-4*24*60)))
	if ds := Diagnose(c, at(0)); len(ds) != 0 {
		t.Fatalf("healthy cluster:\n%s", render(ds))
	}

	// Step 1: every node NotReady; both conditions Unknown/NoWorkerNodesAvailable.
	noWorkers := withConds(bypassing(),
		cond(condDataPlaneConnection, event.ConditionUnknown, reasonNoWorkerNodes, msgNoWorkersDP, lost),
		cond(condControlPlaneConnection, event.ConditionUnknown, reasonNoWorkerNodes, msgNoWorkersCP, lost))
	var facts []fact
	for _, n := range []string{nodeA, nodeB, nodeC} {
		facts = append(facts, nodeFact(t, n, event.ConditionUnknown, lost.Add(-time.Minute), lost))
	}
	facts = append(facts, summaryFact(t, event.NodeSummary{Total: 3, Unknown: 3}, lost), hcFact(t, noWorkers, lost.Add(time.Minute)))
	for _, f := range facts {
		c.Apply(f.e, f.p)
		checkBrief(t, c, f.e.Time)
	}
	ds := Diagnose(c, at(0))
	if len(ds) != 1 || ds[0].Rule != RuleNodesNotReady {
		t.Fatalf("want one nodes-notready diagnosis explaining both conditions, got:\n%s", render(ds))
	}
	d := ds[0]
	if !slices.Contains(d.Symptoms, "cond/DataPlaneConnectionAvailable") || !slices.Contains(d.Symptoms, "cond/ControlPlaneConnectionAvailable") ||
		d.Severity != SeverityCritical || !strings.Contains(d.RootCause, "ControlPlaneConnectionAvailable=Unknown, NoWorkerNodesAvailable") {
		t.Errorf("nodes-notready:\n%s", render(ds))
	}
	if want := lost.Add(-time.Minute); !d.Began.Equal(want) || !d.Since(at(0)).Equal(want) {
		t.Errorf("Began %v, Since %v, want the nodes' Ready transition %v", d.Began, d.Since(at(0)), want)
	}

	// Step 2: the HCCO cannot list the nodes: Unknown/ReconcileError,
	// lastTransitionTime unchanged.
	blind := withConds(bypassing(),
		cond(condDataPlaneConnection, event.ConditionUnknown, reasonReconcileError, msgCountFailed, lost),
		cond(condControlPlaneConnection, event.ConditionUnknown, reasonReconcileError, msgCountFailed, lost))
	f := hcFact(t, blind, at(-60))
	c.Apply(f.e, f.p)
	checkBrief(t, c, at(0))
	ds = Diagnose(c, at(0))
	// nodes-notready stays the headline; the HCCO's blindness is a
	// warning of its own.
	if !slices.Equal(rulesOf(ds), []string{RuleNodesNotReady, RuleConnectionUnknown}) {
		t.Fatalf("rules %v\n%s", rulesOf(ds), render(ds))
	}
	cp, _ := find(ds, RuleConnectionUnknown)
	if cp.Severity != SeverityWarning || !slices.Equal(cp.Symptoms, []string{"cond/ControlPlaneConnectionAvailable", "cond/DataPlaneConnectionAvailable"}) ||
		!strings.Contains(cp.RootCause, "Unable to count worker nodes") || !cp.Began.Equal(lost) {
		t.Errorf("connection-unknown (Began %v, want %v):\n%s", cp.Began, lost, render([]Diagnosis{cp}))
	}
	if got := cp.Since(at(0)); at(0).Sub(got) != 3*24*time.Hour {
		t.Errorf("Since %v: the status began three days ago", got)
	}
}

// TestNoWorkerWhileEveryReadyNodeIsCordoned: HyperShift counts only Ready,
// schedulable nodes (support/util/util.go:568-590), so a cluster whose
// Ready nodes are all cordoned has no available worker.
func TestNoWorkerWhileEveryReadyNodeIsCordoned(t *testing.T) {
	hc := withConds(bypassing(),
		cond(condDataPlaneConnection, event.ConditionUnknown, reasonNoWorkerNodes, msgNoWorkersDP, at(10)),
		cond(condControlPlaneConnection, event.ConditionUnknown, reasonNoWorkerNodes, msgNoWorkersCP, at(10)))
	c := build(t, hcFact(t, hc, at(11)), summaryFact(t, event.NodeSummary{Total: 3, Ready: 3, Cordoned: 3}, at(11)))
	ds := Diagnose(c, at(60))
	if len(ds) != 1 || ds[0].Rule != RuleNoWorkers {
		t.Fatalf("want one no-workers diagnosis, got:\n%s", render(ds))
	}
	d := ds[0]
	checkShape(t, d)
	if !strings.Contains(d.RootCause, "every one is cordoned") || !strings.Contains(d.RootCause, "oc adm uncordon") || d.Confidence.Level != ConfidenceHigh ||
		!strings.Contains(d.Title, "DataPlaneConnectionAvailable=Unknown, NoWorkerNodesAvailable") ||
		!slices.Equal(d.Symptoms, []string{"cond/ControlPlaneConnectionAvailable", "cond/DataPlaneConnectionAvailable"}) {
		t.Errorf("no-workers:\n%s", render(ds))
	}
	// One Ready node schedulable again: HyperShift's count is 1, and the
	// condition (still NoWorkerNodesAvailable until the HCCO's next pass)
	// is a lag, not nodes-notready's.
	c = build(t, hcFact(t, hc, at(11)), summaryFact(t, event.NodeSummary{Total: 3, Ready: 3, Cordoned: 2}, at(11)))
	if d := want(t, c, at(60), RuleNoWorkers, true); !strings.Contains(d.RootCause, "no available worker although the agent sees") {
		t.Errorf("no-workers with a schedulable node:\n%s", render([]Diagnosis{d}))
	}
}

// TestConnectionEvidence: the hosted cluster's own records sharpen the
// connection rules.
func TestConnectionEvidence(t *testing.T) {
	check := func(t *testing.T, p event.ConnectivityCheck, when time.Time) fact {
		return hosted(t, event.ObjectRef{Kind: "ConfigMap", Namespace: "kube-system", Name: "control-plane-connectivity-check", Hosted: true}, p, "cm-"+when.Format("150405"), when)
	}
	apiSvc := func(t *testing.T, name, svc, reason string, cleared bool, when time.Time) fact {
		p := event.APIServiceState{Name: name, Service: svc, Available: event.ConditionFalse, Reason: reason,
			Message: "failing or missing response from https://172.30.0.20:443/apis/apps.openshift.io/v1: dial timeout", LastTransitionTime: at(14), Cleared: cleared}
		return hosted(t, event.ObjectRef{Kind: "APIService", Name: name, Hosted: true}, p, "as-"+name+when.Format("150405"), when)
	}
	t.Run("stale connectivity record: the failure began at the last success", func(t *testing.T) {
		// HCCO:1928-1933.
		cp := cond(condControlPlaneConnection, event.ConditionFalse, reasonConnectionStale,
			"Data plane to control plane connection is not available: last successful check was at 2026-06-03T19:09:00Z, which is older than 5 minutes", at(15))
		c := build(t, hcFact(t, withConds(bypassing(), cp), at(16)),
			check(t, event.ConnectivityCheck{LastSucceeded: at(9), Stale: true, StaleAfter: 5 * time.Minute, ObservedAt: at(15)}, at(15)))
		d := want(t, c, at(60), RuleControlPlaneUnreachable, true)
		if d.Confidence.Level != ConfidenceHigh || !d.Began.Equal(at(9)) ||
			!slices.ContainsFunc(d.Evidence, func(e Evidence) bool {
				return e.Kind == "connectivity" && strings.Contains(e.Text, "lastSucceeded 2026-06-03T19:09:00Z, stale")
			}) {
			t.Errorf("Began %v:\n%s", d.Began, render([]Diagnosis{d}))
		}
	})
	t.Run("openshift APIServices FailedDiscoveryCheck point at the control-plane side", func(t *testing.T) {
		// hypershift#313: v1.*.openshift.io served through default/openshift-apiserver.
		dp := cond(condDataPlaneConnection, event.ConditionFalse, reasonAgentPodsNotFound, "failed to read konnectivity-agent logs from data plane", at(15))
		c := build(t, hcFact(t, withConds(bypassing(), dp), at(16)),
			apiSvc(t, "v1.apps.openshift.io", "default/openshift-apiserver", "FailedDiscoveryCheck", false, at(17)),
			apiSvc(t, "v1.route.openshift.io", "default/openshift-apiserver", "FailedDiscoveryCheck", false, at(17)))
		d := want(t, c, at(60), RuleKonnectivityDown, true)
		if !strings.Contains(d.RootCause, "v1.apps.openshift.io, v1.route.openshift.io") || !strings.Contains(d.RootCause, "control-plane konnectivity-agent") ||
			!strings.Contains(d.RootCause, "likely") || !slices.ContainsFunc(d.Evidence, func(e Evidence) bool { return e.Object == "apiservice/v1.apps.openshift.io" }) {
			t.Errorf("konnectivity-down:\n%s", render([]Diagnosis{d}))
		}
		// Cleared, then a snapshot of the type that no longer lists it.
		f := apiSvc(t, "v1.apps.openshift.io", "default/openshift-apiserver", "", true, at(18))
		if !c.Apply(f.e, f.p) {
			t.Fatal("clearing an APIService changed nothing")
		}
		before := c.ApproxBytes()
		cp := c.Clone()
		ref := hcRef
		s := snapshotDone(t, &ref, 30, []event.Type{event.TypeAPIService})
		if !c.Apply(s.e, s.p) {
			t.Fatal("the snapshot did not clear the route APIService")
		}
		if d := want(t, c, at(60), RuleKonnectivityDown, true); slices.ContainsFunc(d.Evidence, func(e Evidence) bool { return e.Kind == "apiservice" }) {
			t.Errorf("cleared APIServices still evidence:\n%s", render([]Diagnosis{d}))
		}
		if d, _ := find(Diagnose(cp, at(60)), RuleKonnectivityDown); !slices.ContainsFunc(d.Evidence, func(e Evidence) bool { return e.Object == "apiservice/v1.route.openshift.io" }) {
			t.Errorf("the clone lost its APIService:\n%s", render([]Diagnosis{d}))
		}
		if before <= 0 {
			t.Errorf("ApproxBytes %d", before)
		}
	})
}

// TestPausedReconciliation: spec.pausedUntil as HyperShift reads it
// (support/util/pausereconcile.go:31-82).
func TestPausedReconciliation(t *testing.T) {
	tunnel := func(value string, ra event.Condition) event.HostedClusterState {
		s := withConds(seedHC(tunnelNoProxy), ra,
			cond(condControlPlaneConnection, event.ConditionFalse, reasonKASAccessFailed, "Data plane to control plane connection is not available: no successful connectivity check recorded", at(20)))
		s.PausedUntil = value
		return s
	}
	paused := cond(condReconciliationActive, event.ConditionFalse, reasonReconciliationPaused, msgPausedForever, at(3))
	for _, tt := range []struct {
		name, value string
		ra          event.Condition
		paused      bool
		invalid     bool
	}{
		{"true", "true", paused, true, false},
		{"future RFC3339", "2026-06-05T00:00:00Z", cond(condReconciliationActive, event.ConditionFalse, reasonReconciliationPaused, "Reconciliation paused until: 2026-06-05T00:00:00Z", at(3)), true, false}, // pausereconcile.go:58-59
		{"past RFC3339", "2026-06-03T19:30:00Z", cond(condReconciliationActive, event.ConditionTrue, "AsExpected", msgReconcileAlive, at(30)), false, false},
		// Passes the CRD (hostedcluster_types.go:791-799), not RFC3339.
		{"invalid", "2026-06-05T00:00:00", cond(condReconciliationActive, event.ConditionTrue, "InvalidPausedUntilValue", "Invalid value provided for PausedUntil field", at(3)), false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := build(t, append([]fact{hcFact(t, tunnel(tt.value, tt.ra), at(21))}, seedSymptoms(t)...)...)
			ds := Diagnose(c, at(60))
			d, ok := find(ds, RuleProxyTunnel)
			if !ok {
				t.Fatalf("no proxy-tunnel:\n%s", render(ds))
			}
			text := render([]Diagnosis{d})
			lift := `oc patch -n clusters hostedclusters/example --type=merge -p '{"spec":{"pausedUntil":null}}'`
			if !tt.paused {
				if len(d.Paused) > 0 || strings.Contains(d.RootCause, "paused") || d.Fix.Waits != "" || strings.Contains(text, "[frozen") {
					t.Errorf("not paused, yet:\n%s", text)
				}
				if got := slices.ContainsFunc(d.Evidence, func(e Evidence) bool { return strings.Contains(e.Text, "InvalidPausedUntilValue") }); got != tt.invalid {
					t.Errorf("invalid value said = %v, want %v:\n%s", got, tt.invalid, text)
				}
				if r := c.Rollout(at(60)); r.Waits() != "" {
					t.Errorf("rollout waits: %q", r.Waits())
				}
				return
			}
			if len(d.Paused) != 1 || d.Paused[0].Value != tt.value || !strings.Contains(d.RootCause, "Reconciliation is paused: HostedCluster clusters/example paused") ||
				!slices.Contains(d.NextSteps, lift+" (management cluster)") || d.Fix == nil || !strings.Contains(d.Fix.Waits, "The rollout waits for the pause") ||
				!strings.Contains(d.Fix.Waits, lift) || !strings.Contains(d.RootCause, "show the state when the pause began") ||
				!slices.ContainsFunc(d.Evidence, func(e Evidence) bool {
					return e.Kind == "paused" && e.At.Equal(at(3)) && strings.Contains(e.Text, "ReconciliationActive=False (ReconciliationPaused)")
				}) ||
				!slices.ContainsFunc(d.Evidence, func(e Evidence) bool { return strings.HasSuffix(e.Text, "[frozen while paused]") }) {
				t.Errorf("paused:\n%s\nfix waits %q", text, d.Fix.Waits)
			}
			if d.Began.Equal(at(3)) {
				t.Errorf("the pause is not the problem's start: Began %v", d.Began)
			}
			r := c.Rollout(at(60))
			if !strings.Contains(r.String(), "the rollout waits for the pause") || !strings.Contains(r.String(), lift) {
				t.Errorf("rollout %q", r.String())
			}
			// The memo's fix is not written through.
			if d2, _ := find(Diagnose(build(t, append([]fact{hcFact(t, tunnel("", tt.ra), at(21))}, seedSymptoms(t)...)...), at(60)), RuleProxyTunnel); d2.Fix.Waits != "" {
				t.Errorf("an unpaused cluster's fix waits: %q", d2.Fix.Waits)
			}
		})
	}
	t.Run("a paused NodePool", func(t *testing.T) {
		replicas := int32(2)
		np := event.NodePoolState{Name: "np2", ClusterName: "example", Replicas: &replicas, PausedUntil: "True",
			// nodepool_conditions.go:68-69; NP:127-160.
			Conditions: []event.Condition{cond(condReconciliationActive, event.ConditionFalse, reasonReconciliationPaused, msgPausedForever, at(4))}}
		c := build(t, append([]fact{hcFact(t, tunnel("", cond(condReconciliationActive, event.ConditionTrue, "AsExpected", msgReconcileAlive, at(1))), at(21)),
			hosted(t, event.ObjectRef{Kind: "NodePool", Namespace: "clusters", Name: "np2", UID: "uid-np2"}, np, "np", at(5))}, seedSymptoms(t)...)...)
		d, _ := find(Diagnose(c, at(60)), RuleProxyTunnel)
		lift := `oc patch -n clusters nodepools/np2 --type=merge -p '{"spec":{"pausedUntil":null}}'`
		if !strings.Contains(d.Fix.Waits, lift) || !strings.Contains(d.RootCause, "NodePool clusters/np2 paused") || strings.Contains(d.RootCause, "frozen") ||
			strings.Contains(render([]Diagnosis{d}), "[frozen") {
			t.Errorf("NodePool pause (the HCCO runs; nothing frozen):\n%s\n%q", render([]Diagnosis{d}), d.Fix.Waits)
		}
	})
}

// TestConditionsTheCatalogueDidNotKnow: the other shapes of research §4.
func TestConditionsTheCatalogueDidNotKnow(t *testing.T) {
	for _, tt := range []struct {
		name   string
		conds  []event.Condition
		avail  *event.Condition // replaces Available=True
		rule   string
		sev    Severity
		inText []string
	}{
		{
			name:  "ExternalDNSReachable=False: the resolver's error", // CPO:797-803
			conds: []event.Condition{cond(condExternalDNSReachable, event.ConditionFalse, "ExternalDNSHostNotReachable", "lookup api.example.corp on 172.30.0.10:53: no such host", at(10))},
			rule:  RuleHostedAPIUnreachable, sev: SeverityWarning,
			inText: []string{"does not resolve", "ExternalDNSReachable=False, ExternalDNSHostNotReachable: lookup api.example.corp", "dig +short"},
		},
		{
			name:  "Available=False/KASLoadBalancerNotReachable", // CPO:929-931, 1036-1043
			avail: &event.Condition{Type: condAvailable, Status: event.ConditionFalse, Reason: reasonKASLoadBalancerNotReachable, Message: "APIServer endpoint api.example.corp is not healthy (status 503): failing health checks: etcd", LastTransitionTime: at(10)},
			rule:  RuleHostedAPIUnreachable, sev: SeverityCritical,
			inText: []string{"health check of the API endpoint fails", "failing health checks: etcd", "oc get svc,route"},
		},
		{
			name:  "Available=False/ComponentsNotAvailable names the components", // CPO:935-937
			avail: &event.Condition{Type: condAvailable, Status: event.ConditionFalse, Reason: reasonComponentsNotAvailable, Message: "Waiting for components to be available: kube-controller-manager, openshift-apiserver", LastTransitionTime: at(10)},
			rule:  RuleControlPlaneComponents, sev: SeverityWarning,
			inText: []string{"waiting for kube-controller-manager, openshift-apiserver", "coming up", "oc get controlplanecomponents"},
		},
		{
			name:  "IgnitionEndpointAvailable=False/WaitingForAvailable on the HostedCluster", // HO:1157-1163
			conds: []event.Condition{cond(condIgnitionEndpointAvailable, event.ConditionFalse, "WaitingForAvailable", "Ignition server deployment is not yet available", at(10))},
			rule:  RuleIgnitionUnreachable, sev: SeverityCritical,
			inText: []string{"Ignition server of clusters/example on mgmt-east is not available", "IgnitionEndpointAvailable=False (WaitingForAvailable)", "is not Available"},
		},
		{
			name: "ValidProxyConfiguration: not yet valid is not expired", // validation.go:61-62
			conds: []event.Condition{cond(condValidProxyConfiguration, event.ConditionFalse, "ProxyCABundleInvalid",
				"Proxy CA bundle is invalid for HostedCluster clusters/example: a configured certificate in the ca bundle is not yet valid: Corp Proxy CA", at(10))},
			rule: RuleProxyCAInvalid, sev: SeverityWarning,
			inText: []string{"not valid yet", "clock", "It is not expired", `"Corp Proxy CA"`},
		},
		{
			name: "ValidProxyConfiguration: expired", // validation.go:64-65
			conds: []event.Condition{cond(condValidProxyConfiguration, event.ConditionFalse, "ProxyCABundleInvalid",
				"Proxy CA bundle is invalid for HostedCluster clusters/example: a configured certificate in the ca bundle was no longer valid: Corp Proxy CA", at(10))},
			rule: RuleProxyCAInvalid, sev: SeverityCritical,
			inText: []string{"is expired", "no longer valid"},
		},
		{
			name: "ValidProxyConfiguration: missing", // validation.go:48-54
			conds: []event.Condition{cond(condValidProxyConfiguration, event.ConditionFalse, "ProxyCABundleInvalid",
				`Proxy CA bundle is invalid for HostedCluster clusters/example: configmaps "user-ca-bundle" not found`, at(10))},
			rule: RuleProxyCAInvalid, sev: SeverityCritical,
			inText: []string{"is missing", "finds no proxy CA bundle"},
		},
		{
			name: "ValidKubeVirtInfraNetworkPolicyRBAC=False/InfraClusterNetworkReadFailed", // network_policies.go:1099-1119
			conds: []event.Condition{cond(condNetworkPolicyRBAC, event.ConditionFalse, "InfraClusterNetworkReadFailed",
				"The external infrastructure kubeconfig lacks permission to read networks.config.openshift.io/cluster. The virt-launcher NetworkPolicy has been created without CIDR-based egress restrictions, resulting in weaker tenant isolation. Grant a ClusterRole with get on networks.config.openshift.io to the infra service account for full isolation. Error: forbidden", at(10))},
			rule: RuleKubeVirtVMs, sev: SeverityWarning,
			inText: []string{"weaker tenant isolation, not an outage", "get on networks.config.openshift.io", "virt-launcher-netpol-rbac-example-sffhb"},
		},
		{
			name: "ValidKubeVirtInfraNetworkPolicyRBAC=False/InfraClusterNetworkPolicyCreateFailed", // network_policies.go:1073-1087
			conds: []event.Condition{cond(condNetworkPolicyRBAC, event.ConditionFalse, "InfraClusterNetworkPolicyCreateFailed",
				"Unable to create/update virt-launcher NetworkPolicy on the infrastructure cluster: the external infra kubeconfig lacks networking.k8s.io/networkpolicies permissions. Grant create/update/get/list/watch on networkpolicies in the infra namespace. Error: forbidden", at(10))},
			rule: RuleKubeVirtVMs, sev: SeverityWarning,
			inText: []string{"may not create or update NetworkPolicies", "create, update, get, list and watch on networkpolicies"},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := withConds(bypassing(), tt.conds...)
			s.APIServer = &event.Endpoint{Host: "api.example.corp", Port: 443}
			if tt.avail != nil {
				s = replaceAvailable(s, *tt.avail)
			}
			c := build(t, hcFact(t, s, at(11)))
			d := want(t, c, at(60), tt.rule, true)
			text := render([]Diagnosis{d})
			if d.Severity != tt.sev {
				t.Errorf("severity %s, want %s", d.Severity, tt.sev)
			}
			for _, w := range tt.inText {
				if !strings.Contains(text, w) {
					t.Errorf("lacks %q:\n%s", w, text)
				}
			}
			if !d.Began.Equal(at(10)) {
				t.Errorf("Began %v, want %v", d.Began, at(10))
			}
		})
	}
}

// TestNodePoolIgnitionEndpoint: a NodePool's own IgnitionEndpointAvailable,
// present only while failing (NP:272-348; reasons nodepool_conditions.go:130-131).
func TestNodePoolIgnitionEndpoint(t *testing.T) {
	for _, tt := range []struct{ reason, msg, cause string }{
		{"IgnitionEndpointMissing", "Ignition endpoint not available, waiting", "publishes no ignition endpoint yet"},
		{"IgnitionCACertMissing", "still waiting for ignition CA cert Secret to exist", "CA Secret is missing"},
		{"ExternalDNSHostNotReachable", `Ignition endpoint DNS hostname "ignition.example.corp" is not resolvable: lookup ignition.example.corp: no such host`, "DNS name does not resolve"},
	} {
		t.Run(tt.reason, func(t *testing.T) {
			c := build(t, hcFact(t, withConds(bypassing()), at(5)),
				poolConds(t, "np1", at(12), cond(condIgnitionEndpointAvailable, event.ConditionFalse, tt.reason, tt.msg, at(11))))
			d := want(t, c, at(60), RuleIgnitionUnreachable, true)
			if !strings.Contains(d.RootCause, "NodePool np1 reports IgnitionEndpointAvailable=False ("+tt.reason+")") || !strings.Contains(d.RootCause, tt.cause) ||
				!slices.Equal(d.Symptoms, []string{"cond/nodepool/clusters/np1/IgnitionEndpointAvailable"}) || d.Fix != nil {
				t.Errorf("diagnosis:\n%s", render([]Diagnosis{d}))
			}
		})
	}
}

// TestSinceIsTheClustersRecord: a condition that turned False three days
// before the bot saw it began three days ago.
func TestSinceIsTheClustersRecord(t *testing.T) {
	threeDays := at(60).Add(-72 * time.Hour)
	etcd := cond(condEtcdAvailable, event.ConditionFalse, "EtcdWaitingForQuorum", "Waiting for etcd to reach quorum", threeDays)
	c := build(t, hcFact(t, withConds(bypassing(), etcd), at(59)))
	d := want(t, c, at(60), RuleEtcdUnavailable, true)
	if !d.Began.Equal(threeDays) || !d.Since(at(59)).Equal(threeDays) {
		t.Errorf("Began %v, Since %v, want %v", d.Began, d.Since(at(59)), threeDays)
	}
	// No time of its own: Since is the opening.
	if got := (Diagnosis{}).Since(at(59)); !got.Equal(at(59)) {
		t.Errorf("Since without a record = %v", got)
	}
	// Brief leaves it out: only the full diagnosis carries texts and times.
	if b := Brief(c, at(60)); !b[0].Began.IsZero() {
		t.Errorf("Brief set Began %v", b[0].Began)
	}
}
