package diagnose

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/event"
)

// The ignition endpoint of the test cluster: a Route of the management
// cluster, which the seed's noProxy (.corp.example) does not exempt.
const (
	ignitionHost = "ignition-server-clusters-example.apps.mgmt-east.lab.example"
	konnHost     = "konnectivity-clusters-example.apps.mgmt-east.lab.example"
)

// cond is a condition as HyperShift writes it.
func cond(typ string, status event.ConditionStatus, reason, msg string, ltt time.Time) event.Condition {
	return event.Condition{Type: typ, Status: status, Reason: reason, Message: msg, LastTransitionTime: ltt}
}

// withConds is s with the endpoints of the test cluster and the given
// conditions after HyperShift's usual Available one.
func withConds(s event.HostedClusterState, cs ...event.Condition) event.HostedClusterState {
	s.IgnitionEndpoint, s.KonnectivityEndpoint = ignitionHost, konnHost+":443"
	s.Conditions = append([]event.Condition{cond("Available", event.ConditionTrue, "AsExpected", "The hosted control plane is available", t0)}, cs...)
	return s
}

// bypassing is the seed's HostedCluster with a noProxy that bypasses the
// proxy for the API server and the management cluster's routes.
// replaceAvailable is s with its Available condition replaced by cd.
func replaceAvailable(s event.HostedClusterState, cd event.Condition) event.HostedClusterState {
	s.Conditions = slices.Clone(s.Conditions)
	for i := range s.Conditions {
		if s.Conditions[i].Type == condAvailable {
			s.Conditions[i] = cd
		}
	}
	return s
}

func bypassing() event.HostedClusterState {
	return seedHC(".corp.example,.lab.example,kubernetes,172.31.0.0/16,10.132.0.0/14")
}

func poolConds(t testing.TB, name string, when time.Time, cs ...event.Condition) fact {
	t.Helper()
	replicas := int32(2)
	p := event.NodePoolState{
		Name: name, ClusterName: "example", Platform: "KubeVirt", Replicas: &replicas,
		Conditions: append([]event.Condition{cond("Ready", event.ConditionFalse, "WaitingForAvailableMachines", "Minimum availability requires 2 replicas, current 0 available", at(10))}, cs...),
	}
	return hosted(t, event.ObjectRef{Kind: "NodePool", Namespace: "clusters", Name: name, UID: "uid-np-" + name}, p, "rv-"+when.Format("150405"), when)
}

func notReached(reason, msg string) event.Condition {
	return cond(condReachedIgnition, event.ConditionFalse, reason, msg, at(12))
}

// checkShape asserts what every diagnosis of the new rules promises: a
// one-line title, a root cause of at most two sentences, evidence with
// times, oc commands that say which cluster they run on.
func checkShape(t *testing.T, d Diagnosis) {
	t.Helper()
	if d.Title == "" || strings.Contains(d.Title, "\n") {
		t.Errorf("%s: title %q", d.Rule, d.Title)
	}
	if n := strings.Count(d.Short(), ". ") + 1; d.Short() != d.RootCause || n > 2 {
		t.Errorf("%s: root cause is not at most two sentences: %q", d.Rule, d.RootCause)
	}
	if d.Confidence.Level == "" || d.Confidence.Why == "" || RuleSummary(d.Rule) == "" || RuleInfo(d.Rule) == "" {
		t.Errorf("%s: confidence %+v, summary %q, info %q", d.Rule, d.Confidence, RuleSummary(d.Rule), RuleInfo(d.Rule))
	}
	if len(d.Evidence) == 0 {
		t.Errorf("%s: no evidence", d.Rule)
	}
	for _, e := range d.Evidence {
		if e.At.IsZero() || e.Kind == "" {
			t.Errorf("%s: evidence %+v", d.Rule, e)
		}
	}
	oc := 0
	for _, s := range d.NextSteps {
		if strings.HasPrefix(s, "oc ") || strings.Contains(s, ": oc ") {
			oc++
			if !strings.Contains(s, "(management cluster)") && !strings.Contains(s, "(hosted cluster)") && !strings.Contains(s, "(in the hosted cluster)") && !strings.HasPrefix(s, "Add ") {
				t.Errorf("%s: next step does not say where it runs: %q", d.Rule, s)
			}
		}
	}
	if oc == 0 {
		t.Errorf("%s: no oc command in %q", d.Rule, d.NextSteps)
	}
}

// conditionRules are the rules of issue 18, which checkShape holds to
// its promises.
var conditionRules = []string{RuleEtcdUnavailable, RuleProxyCAInvalid, RuleControlPlaneUnreachable, RuleIgnitionUnreachable, RuleKonnectivityDown, RuleKubeVirtVMs,
	RuleControlPlaneComponents, RuleNoWorkers, RuleConnectionUnknown}

// want runs Diagnose and checks whether rule fired.
func want(t *testing.T, c *Cluster, now time.Time, rule string, fire bool) Diagnosis {
	t.Helper()
	ds := Diagnose(c, now)
	d, ok := find(ds, rule)
	if ok != fire {
		t.Fatalf("%s fired = %v, want %v; rules %v\n%s", rule, ok, fire, rulesOf(ds), render(ds))
	}
	if ok && slices.Contains(conditionRules, rule) {
		checkShape(t, d)
	}
	checkBrief(t, c, now)
	return d
}

func TestIgnitionUnreachable(t *testing.T) {
	for _, reason := range []string{"ignitionNotReached", "NotFound", "FailedToGet", "IgnitionEndpointMissing", "IgnitionCACertMissing"} {
		t.Run(reason, func(t *testing.T) {
			c := build(t, hcFact(t, withConds(bypassing()), at(5)),
				poolConds(t, "np1", at(12), notReached(reason, "ignition server: "+reason)))
			d := want(t, c, at(60), RuleIgnitionUnreachable, true)
			if d.Fix != nil || !strings.Contains(d.RootCause, "NodePool np1 of clusters/example reports ReachedIgnitionEndpoint=False ("+reason+")") ||
				!slices.Equal(d.Symptoms, []string{"cond/nodepool/clusters/np1/ReachedIgnitionEndpoint"}) {
				t.Errorf("diagnosis:\n%s", render([]Diagnosis{d}))
			}
			if d.Severity != SeverityCritical { // no node at all
				t.Errorf("severity %s", d.Severity)
			}
		})
	}
	t.Run("HostedCluster IgnitionEndpointAvailable only", func(t *testing.T) {
		// hostedcluster_controller.go:1146-1152 (3ee9615): the HostedCluster's
		// reason when the ignition-server Deployment is missing.
		c := build(t, hcFact(t, withConds(bypassing(), cond(condIgnitionEndpointAvailable, event.ConditionFalse, "NotFound", "Ignition server deployment not found", at(8))), at(9)))
		d := want(t, c, at(60), RuleIgnitionUnreachable, true)
		if !strings.Contains(d.RootCause, "IgnitionEndpointAvailable=False (NotFound)") || !strings.Contains(d.RootCause, "ignition-server Deployment does not exist") ||
			!slices.Equal(d.Symptoms, []string{"cond/IgnitionEndpointAvailable"}) {
			t.Errorf("diagnosis:\n%s", render([]Diagnosis{d}))
		}
	})
	t.Run("reached", func(t *testing.T) {
		c := build(t, hcFact(t, withConds(bypassing()), at(5)),
			poolConds(t, "np1", at(12), cond(condReachedIgnition, event.ConditionTrue, "AsExpected", "", at(12))))
		want(t, c, at(60), RuleIgnitionUnreachable, false)
	})
	t.Run("through the proxy", func(t *testing.T) {
		// The spec bypasses the proxy for the API server (no tunnel) but
		// not for the management cluster's ignition Route.
		hc := withConds(seedHC(".corp.example,kubernetes,172.31.0.0/16,10.132.0.0/14"))
		c := build(t, hcFact(t, hc, at(5)), poolConds(t, "np1", at(12), notReached("ignitionNotReached", "machines have not fetched ignition")),
			nodeFact(t, nodeC, event.ConditionTrue, at(1), at(1)))
		d := want(t, c, at(60), RuleIgnitionUnreachable, true)
		if d.Fix == nil || !slices.Equal(d.Fix.Add, []string{ignitionHost}) ||
			d.Fix.After != ".corp.example,kubernetes,172.31.0.0/16,10.132.0.0/14,"+ignitionHost ||
			!strings.Contains(d.Fix.Diff, "+ "+ignitionHost+"\n") {
			t.Fatalf("fix = %+v", d.Fix)
		}
		if !strings.Contains(d.NextSteps[0], `oc patch hostedcluster -n clusters example --type=merge -p '{"spec":{"configuration":{"proxy":{"noProxy":".corp.example,kubernetes,172.31.0.0/16,10.132.0.0/14,`+ignitionHost+`"}}}}'`) {
			t.Errorf("next steps = %q", d.NextSteps)
		}
		if !strings.Contains(d.Title, "through the HTTPS proxy") || !strings.Contains(d.RootCause, "Add "+ignitionHost+" to spec.configuration.proxy.noProxy") ||
			d.Confidence.Level != ConfidenceHigh || d.Severity != SeverityWarning {
			t.Errorf("diagnosis:\n%s", render([]Diagnosis{d}))
		}
	})
	t.Run("nodes not joining of its NodePool", func(t *testing.T) {
		c := build(t, hcFact(t, withConds(bypassing()), at(5)),
			poolConds(t, "np1", at(12), notReached("ignitionNotReached", "")),
			launcherFact(t, nodeA, "Running", at(13)),
			notJoiningFact(t, nodeA, at(13), at(30)),
			notJoiningFact(t, "other-pool-x", at(13), at(30)),
			nodeFact(t, nodeC, event.ConditionTrue, at(1), at(1)))
		d := want(t, c, at(60), RuleIgnitionUnreachable, true)
		if !slices.Contains(d.Symptoms, nodeKey(nodeA)) || slices.Contains(d.Symptoms, nodeKey("other-pool-x")) || d.Nodes == nil || d.Nodes.Affected != 1 {
			t.Errorf("symptoms %v, nodes %+v", d.Symptoms, d.Nodes)
		}
		n := want(t, c, at(60), RuleNodesNotReady, true)
		if !slices.Equal(n.Symptoms, []string{nodeKey("other-pool-x")}) {
			t.Errorf("nodes-notready symptoms = %v, want only the node of another pool", n.Symptoms)
		}
	})
	t.Run("node of the pool by name", func(t *testing.T) {
		c := build(t, hcFact(t, withConds(bypassing()), at(5)),
			poolConds(t, "example-np2", at(12), notReached("ignitionNotReached", "")),
			notJoiningFact(t, "example-np2-q7x", at(13), at(30)))
		d := want(t, c, at(60), RuleIgnitionUnreachable, true)
		want(t, c, at(60), RuleNodesNotReady, false)
		if !slices.Contains(d.Symptoms, nodeKey("example-np2-q7x")) {
			t.Errorf("symptoms %v", d.Symptoms)
		}
	})
	t.Run("explained by proxy-tunnel", func(t *testing.T) {
		c := build(t, append([]fact{hcFact(t, withConds(seedHC(tunnelNoProxy)), at(5)),
			poolConds(t, "np2", at(12), notReached("ignitionNotReached", ""))}, seedSymptoms(t)...)...)
		want(t, c, at(60), RuleIgnitionUnreachable, false)
		d := want(t, c, at(60), RuleProxyTunnel, true)
		if !slices.Contains(d.Symptoms, "cond/nodepool/clusters/np2/ReachedIgnitionEndpoint") || d.Fix == nil || !slices.Contains(d.Fix.Add, ignitionHost) {
			t.Errorf("proxy-tunnel:\n%s", render([]Diagnosis{d}))
		}
	})
	t.Run("a failure of the ignition server is not the proxy's", func(t *testing.T) {
		// The endpoint goes through the proxy, but the NodePool's reason
		// and the HostedCluster's condition are about the server.
		hc := withConds(seedHC(tunnelNoProxy), cond(condIgnitionEndpointAvailable, event.ConditionFalse, "WaitingForAvailable", "Ignition server deployment is not yet available", at(8))) // hostedcluster_controller.go:1157-1163
		c := build(t, append([]fact{hcFact(t, hc, at(5)),
			poolConds(t, "np2", at(12), notReached("IgnitionCACertMissing", "ignition CA secret not found"))}, seedSymptoms(t)...)...)
		p := want(t, c, at(60), RuleProxyTunnel, true)
		d := want(t, c, at(60), RuleIgnitionUnreachable, true)
		if d.Fix != nil || strings.Contains(d.RootCause, "through the HTTPS proxy") || slices.ContainsFunc(p.Symptoms, func(s string) bool { return strings.Contains(s, "Ignition") }) ||
			!slices.Equal(d.Symptoms, []string{"cond/IgnitionEndpointAvailable", "cond/nodepool/clusters/np2/ReachedIgnitionEndpoint"}) {
			t.Errorf("diagnoses:\n%s", render([]Diagnosis{p, d}))
		}
	})
	t.Run("not explained by proxy-tunnel when ignition bypasses the proxy", func(t *testing.T) {
		c := build(t, append([]fact{hcFact(t, withConds(seedHC(".corp.example,.lab.example")), at(5)),
			poolConds(t, "np2", at(12), notReached("ignitionNotReached", ""))}, seedSymptoms(t)...)...)
		want(t, c, at(60), RuleProxyTunnel, true)
		if d := want(t, c, at(60), RuleIgnitionUnreachable, true); d.Fix != nil {
			t.Errorf("no fix without the proxy: %+v", d.Fix)
		}
	})
}

func TestKonnectivityDown(t *testing.T) {
	// The False shapes of DataPlaneConnectionAvailable as the HCCO writes
	// them (resources.go at 3ee9615); LogsAccessFailed is declared
	// (hostedcluster_conditions.go:349) and never set, read for a later
	// HyperShift.
	for _, tt := range []struct{ name, reason, msg, cause string }{
		{"no agent Running", "KonnectivityAgentPodsNotFound", "Couldn't find any konnectivity-agent running in data plane", "no konnectivity-agent pod is Running"}, // HCCO:1707-1709
		{"agent logs unreadable", "KonnectivityAgentPodsNotFound", "failed to read konnectivity-agent logs from data plane", "konnectivity-agent pods are Running"}, // HCCO:1710-1713
		{"LogsAccessFailed", "LogsAccessFailed", "", "konnectivity-agent pods are Running"},
		{"agent pods not listed", "ReconciliationError", "Couldn't list konnectivity-agent PODs in kube-system namespace: the server was unable to return a response in the time allotted", "could not list the konnectivity-agent pods"}, // HCCO:1681-1687
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := build(t, hcFact(t, withConds(bypassing(), cond(condDataPlaneConnection, event.ConditionFalse, tt.reason, tt.msg, at(15))), at(16)))
			d := want(t, c, at(60), RuleKonnectivityDown, true)
			if d.Severity != SeverityWarning || !strings.Contains(d.RootCause, "oc logs, oc exec") || !strings.Contains(d.Title, "DataPlaneConnectionAvailable=False, "+tt.reason) ||
				!strings.Contains(d.RootCause, tt.cause) || !slices.Equal(d.Symptoms, []string{"cond/DataPlaneConnectionAvailable"}) {
				t.Errorf("diagnosis:\n%s", render([]Diagnosis{d}))
			}
			if tt.name == "agent logs unreadable" && strings.Contains(d.RootCause, "no konnectivity-agent pod") {
				t.Errorf("a failed log read is not a missing agent:\n%s", d.RootCause)
			}
			steps := strings.Join(d.NextSteps, "\n")
			for _, s := range []string{"oc get pods -n kube-system -l app=konnectivity-agent", "(hosted cluster)", "-n clusters-example", "konnectivity-server"} {
				if !strings.Contains(steps, s) {
					t.Errorf("next steps lack %q:\n%s", s, steps)
				}
			}
		})
	}
	t.Run("available", func(t *testing.T) {
		c := build(t, hcFact(t, withConds(bypassing(), cond(condDataPlaneConnection, event.ConditionTrue, "AsExpected", "", at(15))), at(16)))
		want(t, c, at(60), RuleKonnectivityDown, false)
	})
	dp := func(reason string) event.Condition {
		return cond(condDataPlaneConnection, event.ConditionFalse, reason, "", at(15))
	}
	// resources.go:1675-1680 (D2) and 1710-1713 (D5).
	dpNoWorkers := cond(condDataPlaneConnection, event.ConditionUnknown, reasonNoWorkerNodes, "No worker nodes available", at(15))
	dpLogs := cond(condDataPlaneConnection, event.ConditionFalse, "KonnectivityAgentPodsNotFound", "failed to read konnectivity-agent logs from data plane", at(15))
	t.Run("no workers, explained by nodes-notready when every node is down", func(t *testing.T) {
		c := build(t, hcFact(t, withConds(bypassing(), dpNoWorkers), at(16)),
			nodeFact(t, nodeA, event.ConditionFalse, at(14), at(14)), nodeFact(t, nodeB, event.ConditionUnknown, at(14), at(14)))
		want(t, c, at(60), RuleKonnectivityDown, false)
		d := want(t, c, at(60), RuleNodesNotReady, true)
		if !slices.Contains(d.Symptoms, "cond/DataPlaneConnectionAvailable") || !strings.Contains(d.RootCause, "DataPlaneConnectionAvailable=Unknown, NoWorkerNodesAvailable") {
			t.Errorf("nodes-notready:\n%s", render([]Diagnosis{d}))
		}
		want(t, c, at(60), RuleNoWorkers, false)
	})
	t.Run("no workers, not explained by nodes-notready while a node is Ready", func(t *testing.T) {
		// HyperShift counts no available worker although the agent saw
		// a Ready node (cordoned, or the condition lags): no-workers
		// says so, not konnectivity-down.
		c := build(t, hcFact(t, withConds(bypassing(), dpNoWorkers), at(16)),
			nodeFact(t, nodeA, event.ConditionFalse, at(14), at(14)), nodeFact(t, nodeC, event.ConditionTrue, at(1), at(1)))
		want(t, c, at(60), RuleNodesNotReady, true)
		want(t, c, at(60), RuleNoWorkers, true)
		want(t, c, at(60), RuleKonnectivityDown, false)
	})
	t.Run("agents missing, not explained by NotReady nodes", func(t *testing.T) {
		c := build(t, hcFact(t, withConds(bypassing(), dp("KonnectivityAgentPodsNotFound")), at(16)),
			nodeFact(t, nodeA, event.ConditionFalse, at(14), at(14)))
		want(t, c, at(60), RuleNodesNotReady, true)
		want(t, c, at(60), RuleKonnectivityDown, true)
	})
	t.Run("explained by hosted-api-unreachable", func(t *testing.T) {
		c := build(t, hcFact(t, withConds(bypassing(), dp("KonnectivityAgentPodsNotFound"),
			cond(condKubeAPIServerAvailable, event.ConditionFalse, "WaitingForAvailable", "kube-apiserver deployment has 0 ready replicas", at(14))), at(16)))
		want(t, c, at(60), RuleKonnectivityDown, false)
		if d := want(t, c, at(60), RuleHostedAPIUnreachable, true); !slices.Contains(d.Symptoms, "cond/DataPlaneConnectionAvailable") {
			t.Errorf("hosted-api-unreachable symptoms %v", d.Symptoms)
		}
	})
	t.Run("konnectivity endpoint through the proxy", func(t *testing.T) {
		c := build(t, hcFact(t, withConds(seedHC(".corp.example,kubernetes,172.31.0.0/16,10.132.0.0/14"), dpLogs), at(16)))
		d := want(t, c, at(60), RuleKonnectivityDown, true)
		if !strings.Contains(strings.Join(d.NextSteps, "\n"), "does not exempt the konnectivity endpoint "+konnHost+":443") {
			t.Errorf("next steps = %q", d.NextSteps)
		}
	})
}

func TestControlPlaneUnreachable(t *testing.T) {
	// ControlPlaneConnectionAvailable=False as the HCCO writes it
	// (resources.go:1911-1933 at 3ee9615): both reasons are the workers
	// failing to reach the API server, ConnectionCheckStale included.
	for _, tt := range []struct{ reason, msg, cause string }{
		{"KASAccessFailed", "Data plane to control plane connection is not available: no successful connectivity check recorded", "no request from the workers to the API server has ever succeeded"},
		{"KASAccessFailed", "Data plane to control plane connection is not available: failed to parse lastSucceeded timestamp: parsing time \"x\"", "holds no readable time"},
		{"ConnectionCheckStale", "Data plane to control plane connection is not available: last successful check was at 2026-06-03T19:09:00Z, which is older than 5 minutes", "the stamp stopped moving because their requests fail"},
	} {
		t.Run(tt.reason, func(t *testing.T) {
			c := build(t, hcFact(t, withConds(bypassing(), cond(condControlPlaneConnection, event.ConditionFalse, tt.reason, tt.msg, at(15))), at(16)))
			d := want(t, c, at(60), RuleControlPlaneUnreachable, true)
			if d.Severity != SeverityCritical || !strings.Contains(d.Title, tt.reason) || !strings.Contains(d.RootCause, tt.cause) ||
				strings.Contains(d.RootCause, "nobody") || !slices.Equal(d.Symptoms, []string{"cond/ControlPlaneConnectionAvailable"}) {
				t.Errorf("diagnosis:\n%s", render([]Diagnosis{d}))
			}
			if ev := d.Evidence[0]; !ev.At.Equal(at(15)) || ev.Text != "ControlPlaneConnectionAvailable=False ("+tt.reason+"): "+tt.msg {
				t.Errorf("evidence %+v", ev)
			}
		})
	}
	cp := func(reason string) event.Condition {
		return cond(condControlPlaneConnection, event.ConditionFalse, reason, "Data plane to control plane connection is not available: no successful connectivity check recorded", at(15))
	}
	t.Run("with CONNECT failures", func(t *testing.T) {
		c := build(t, hcFact(t, withConds(bypassing(), cp("KASAccessFailed")), at(16)), apiProxyFact(t, nodeA, event.ProxyModeHAProxy, true, at(17)))
		if d := want(t, c, at(60), RuleControlPlaneUnreachable, true); d.Confidence.Level != ConfidenceHigh {
			t.Errorf("confidence %+v", d.Confidence)
		}
	})
	t.Run("explained by proxy-tunnel", func(t *testing.T) {
		c := build(t, hcFact(t, withConds(seedHC(tunnelNoProxy), cp("KASAccessFailed")), at(16)))
		want(t, c, at(60), RuleControlPlaneUnreachable, false)
		if d := want(t, c, at(60), RuleProxyTunnel, true); !slices.Contains(d.Symptoms, "cond/ControlPlaneConnectionAvailable") {
			t.Errorf("proxy-tunnel symptoms %v", d.Symptoms)
		}
	})
	t.Run("explained by etcd-unavailable", func(t *testing.T) {
		c := build(t, hcFact(t, withConds(bypassing(), cp("KASAccessFailed"), cond(condEtcdAvailable, event.ConditionFalse, "EtcdWaitingForQuorum", "Waiting for etcd to reach quorum", at(13))), at(16)))
		want(t, c, at(60), RuleControlPlaneUnreachable, false)
		want(t, c, at(60), RuleEtcdUnavailable, true)
	})
	t.Run("explained by hosted-api-unreachable", func(t *testing.T) {
		c := build(t, hcFact(t, withConds(bypassing(), cp("KASAccessFailed")), at(16)), reachFact(t, false, at(14), at(14)))
		want(t, c, at(60), RuleControlPlaneUnreachable, false)
		want(t, c, at(60), RuleHostedAPIUnreachable, true)
	})
}

func TestEtcdUnavailable(t *testing.T) {
	for _, reason := range []string{"EtcdWaitingForQuorum", "StatefulSetNotFound", "EtcdRecoveryJobFailed"} {
		t.Run(reason, func(t *testing.T) {
			c := build(t, hcFact(t, withConds(bypassing(),
				cond(condEtcdAvailable, event.ConditionFalse, reason, "etcd: "+reason, at(13)),
				cond(condKubeAPIServerAvailable, event.ConditionFalse, "WaitingForAvailable", "kube-apiserver deployment has 0 ready replicas", at(14)),
				cond(condDataPlaneConnection, event.ConditionFalse, "LogsAccessFailed", "", at(15))), at(16)))
			ds := Diagnose(c, at(60))
			if got := rulesOf(ds); !slices.Equal(got, []string{RuleEtcdUnavailable}) {
				t.Fatalf("rules = %v\n%s", got, render(ds))
			}
			d := ds[0]
			checkShape(t, d)
			if d.Severity != SeverityCritical || !strings.Contains(d.Title, reason) ||
				!slices.Equal(d.Symptoms, []string{"api/clusters/example", "cond/DataPlaneConnectionAvailable", "cond/EtcdAvailable"}) ||
				!strings.Contains(strings.Join(d.NextSteps, "\n"), "oc get statefulset,pods,pvc -n clusters-example -l app=etcd") {
				t.Errorf("diagnosis:\n%s", render(ds))
			}
		})
	}
	t.Run("available", func(t *testing.T) {
		c := build(t, hcFact(t, withConds(bypassing(), cond(condEtcdAvailable, event.ConditionTrue, "QuorumAvailable", "", at(13))), at(16)))
		want(t, c, at(60), RuleEtcdUnavailable, false)
	})
}

func TestProxyCAInvalid(t *testing.T) {
	const pem = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUSECRET\n-----END CERTIFICATE-----"
	withCA := func(b *event.CABundle, cs ...event.Condition) fact {
		s := withConds(bypassing(), cs...)
		s.TrustedCA = b
		return hcFact(t, s, at(16))
	}
	valid := &event.CABundle{ConfigMap: "user-ca-bundle", Found: true, Certificates: 2, NotAfter: at(60 * 24), Subject: "Corp Proxy CA"}
	expired := &event.CABundle{ConfigMap: "user-ca-bundle", Found: true, Certificates: 1, NotAfter: at(30), Subject: "Corp Proxy CA"}
	tests := []struct {
		name  string
		fact  fact
		fire  bool
		sev   Severity
		title string
	}{
		{"condition", withCA(nil, cond(condValidProxyConfiguration, event.ConditionFalse, "ProxyCABundleInvalid", "failed to parse the CA bundle: "+pem, at(15))), true, SeverityWarning, "HyperShift rejects the proxy CA bundle clusters/user-ca-bundle"},
		{"not found", withCA(&event.CABundle{ConfigMap: "user-ca-bundle"}), true, SeverityCritical, "Proxy CA ConfigMap clusters/user-ca-bundle of clusters/example on mgmt-east is missing"},
		{"unusable", withCA(&event.CABundle{ConfigMap: "user-ca-bundle", Found: true, Problem: "key ca-bundle.crt holds no parsable certificate"}), true, SeverityWarning, "is unusable"},
		{"expired", withCA(expired), true, SeverityCritical, `Proxy CA "Corp Proxy CA" in clusters/user-ca-bundle of clusters/example on mgmt-east expired at 2026-06-03T19:30:00Z`},
		{"valid", withCA(valid), false, "", ""},
		{"valid condition", withCA(valid, cond(condValidProxyConfiguration, event.ConditionTrue, "AsExpected", "", at(15))), false, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := build(t, tt.fact)
			d := want(t, c, at(60), RuleProxyCAInvalid, tt.fire)
			if !tt.fire {
				return
			}
			if d.Severity != tt.sev || !strings.Contains(d.Title, tt.title) {
				t.Errorf("severity %s, title %q", d.Severity, d.Title)
			}
			if out := render([]Diagnosis{d}); strings.Contains(out, "BEGIN CERTIFICATE") || strings.Contains(out, "SECRET") {
				t.Errorf("certificate contents in the diagnosis:\n%s", out)
			}
		})
	}
	t.Run("expiry is judged against now", func(t *testing.T) {
		c := build(t, withCA(expired))
		want(t, c, at(29), RuleProxyCAInvalid, false)
		d := want(t, c, at(31), RuleProxyCAInvalid, true)
		if !strings.Contains(render([]Diagnosis{d}), `the first to expire is "Corp Proxy CA", notAfter 2026-06-03T19:30:00Z (expired)`) {
			t.Errorf("evidence:\n%s", render([]Diagnosis{d}))
		}
	})
}

func TestKubeVirtVMs(t *testing.T) {
	live := cond(condLiveMigratable, event.ConditionFalse, "KubeVirtNodesNotLiveMigratable", "VMI example-np1-a is not live migratable: PVC example-np1-a is not shared (ReadWriteMany)", at(15))
	mtu := cond(condInfraMTU, event.ConditionFalse, "KubeVirtSuboptimalMTUDetected", "infra network MTU 1400 is lower than the recommended 1500", at(15))
	tests := []struct {
		name  string
		facts []fact
		fire  bool
		words []string
	}{
		{"not live-migratable", []fact{hcFact(t, withConds(bypassing(), live), at(16))}, true, []string{"cannot live-migrate", "ReadWriteMany"}},
		{"MTU", []fact{hcFact(t, withConds(bypassing(), mtu), at(16))}, true, []string{"MTU"}},
		{"both, with a Pending VM", []fact{hcFact(t, withConds(bypassing(), live, mtu), at(16)), launcherFact(t, nodeB, "Pending", at(17)), launcherFact(t, nodeA, "Running", at(17))},
			true, []string{"cannot live-migrate", "MTU", "1 virt-launcher pod is Pending, so its VM does not start", "free CPU and memory"}},
		{"Pending VM alone", []fact{hcFact(t, withConds(bypassing()), at(16)), launcherFact(t, nodeB, "Pending", at(17))}, false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := want(t, build(t, tt.facts...), at(60), RuleKubeVirtVMs, tt.fire)
			if !tt.fire {
				return
			}
			if d.Severity != SeverityWarning {
				t.Errorf("severity %s", d.Severity)
			}
			for _, w := range tt.words {
				if !strings.Contains(d.RootCause, w) {
					t.Errorf("root cause lacks %q: %s", w, d.RootCause)
				}
			}
		})
	}
}

// seed000All is seed 000 on a 4.21 release with everything HyperShift
// reports downstream of the tunnel: every node down, the operator
// crashlooping, ControlPlaneConnectionAvailable=False (KASAccessFailed),
// DataPlaneConnectionAvailable=False (NoWorkerNodesAvailable), and the
// NodePool's replacement machines not reaching ignition, which the same
// noProxy sends through the proxy.
func seed000All(t *testing.T) []fact {
	hc := withConds(withVersion(seedHC(tunnelNoProxy), "4.21.3"),
		// Every node down: both connection conditions
		// Unknown/NoWorkerNodesAvailable (resources.go:1675-1680, 1888-1892).
		cond(condControlPlaneConnection, event.ConditionUnknown, reasonNoWorkerNodes, "No worker nodes available to verify control plane connectivity", at(23)),
		cond(condDataPlaneConnection, event.ConditionUnknown, reasonNoWorkerNodes, "No worker nodes available", at(23)))
	return []fact{
		hcFact(t, hc, at(24)),
		nodeFact(t, nodeA, event.ConditionUnknown, at(20), at(21)),
		nodeFact(t, nodeB, event.ConditionFalse, at(22), at(22)),
		seedCrash(t, at(25)),
		apiProxyFact(t, nodeA, event.ProxyModeTunnel, true, at(23)),
		poolConds(t, "np1", at(26),
			cond("AllNodesHealthy", event.ConditionFalse, "NodeConditionsFailed", "Machine example-np1-a: NodeConditionsFailed", at(24)),
			notReached("ignitionNotReached", "machine example-np1-c has not fetched its ignition payload")),
	}
}

func TestSeed000AllSymptomsOneDiagnosis(t *testing.T) {
	c := build(t, seed000All(t)...)
	ds := Diagnose(c, at(60))
	if len(ds) != 1 || ds[0].Rule != RuleProxyTunnel {
		t.Fatalf("want exactly one proxy-tunnel diagnosis, got %v\n%s", rulesOf(ds), render(ds))
	}
	d := ds[0]
	for _, s := range []string{
		"cond/ControlPlaneConnectionAvailable", "cond/DataPlaneConnectionAvailable", "cond/nodepool/clusters/np1/ReachedIgnitionEndpoint",
		nodeKey(nodeA), nodeKey(nodeB), podKey(scaNamespace, scaPod), "nodepool/clusters/np1", "proxy/clusters/example",
	} {
		if !slices.Contains(d.Symptoms, s) {
			t.Errorf("symptoms lack %s: %v", s, d.Symptoms)
		}
	}
	out := render(ds)
	for _, s := range []string{
		"ControlPlaneConnectionAvailable=Unknown (NoWorkerNodesAvailable): No worker nodes available to verify control plane connectivity",
		"DataPlaneConnectionAvailable=Unknown (NoWorkerNodesAvailable)",
		"ReachedIgnitionEndpoint=False (ignitionNotReached)",
		"HyperShift reports ControlPlaneConnectionAvailable=Unknown, NoWorkerNodesAvailable",
		"ignition from " + ignitionHost + " goes through the proxy too",
		"HyperShift 4.21.3 applies the 4.14–4.22 rule",
	} {
		if !strings.Contains(out, s) {
			t.Errorf("diagnosis lacks %q:\n%s", s, out)
		}
	}
	if d.Fix == nil || !slices.Equal(d.Fix.Add, []string{"kubernetes", serviceCIDR, clusterCIDR, ignitionHost}) {
		t.Errorf("fix = %+v", d.Fix)
	}
	if !strings.Contains(d.Summary, "so its workers tunnel API traffic and fetch ignition through the HTTPS proxy") {
		t.Errorf("summary %q", d.Summary)
	}
	if d.Confidence.Level != ConfidenceHigh || d.Severity != SeverityCritical {
		t.Errorf("confidence %+v, severity %s", d.Confidence, d.Severity)
	}
}

func TestExplain(t *testing.T) {
	vs := Explain(build(t, seed000All(t)...), at(60))
	rules := DefaultRules()
	if len(vs) != len(rules) {
		t.Fatalf("%d verdicts for %d rules", len(vs), len(rules))
	}
	wantOutcome := map[string]Outcome{
		RuleProxyTunnel:         OutcomeFired,
		RuleRiskyProxyChange:    OutcomeNotSeen, // no proxy change was seen
		RuleIgnitionUnreachable: OutcomeExplained,
		RuleNodesNotReady:       OutcomeExplained,
		RuleNoWorkers:           OutcomeExplained,
		RuleOperatorCrashLoop:   OutcomeExplained,
	}
	for i, v := range vs {
		if v.Rule != rules[i].ID || v.LooksFor == "" || v.LooksFor != RuleInfo(v.Rule) {
			t.Errorf("verdict %d = %+v, want rule %s with what it looks for", i, v, rules[i].ID)
		}
		w, ok := wantOutcome[v.Rule]
		if !ok {
			w = OutcomeNotSeen
		}
		if v.Outcome != w {
			t.Errorf("%s: outcome %s, want %s (%+v)", v.Rule, v.Outcome, w, v)
		}
		switch v.Outcome {
		case OutcomeFired:
			if v.Title != "API traffic of clusters/example on mgmt-east is tunnelled through the HTTPS proxy" || v.ExplainedBy != "" {
				t.Errorf("fired verdict %+v", v)
			}
		case OutcomeExplained:
			if v.ExplainedBy != RuleProxyTunnel || v.Title != "" {
				t.Errorf("explained verdict %+v", v)
			}
		}
	}
}

// TestInhibitionTable checks the table of the package documentation: for
// each row, a state where both rules see their problem, and the earlier
// one explains the later.
func TestInhibitionTable(t *testing.T) {
	// Shapes from resources.go (HCCO) at 3ee9615: C5, D5, D2/C2, C1/D1.
	cp := cond(condControlPlaneConnection, event.ConditionFalse, "KASAccessFailed", "Data plane to control plane connection is not available: no successful connectivity check recorded", at(15))
	dp := cond(condDataPlaneConnection, event.ConditionFalse, "KonnectivityAgentPodsNotFound", "failed to read konnectivity-agent logs from data plane", at(15))
	noWorkers := cond(condDataPlaneConnection, event.ConditionUnknown, reasonNoWorkerNodes, "No worker nodes available", at(15))
	cpNoWorkers := cond(condControlPlaneConnection, event.ConditionUnknown, reasonNoWorkerNodes, "No worker nodes available to verify control plane connectivity", at(15))
	cpCount := cond(condControlPlaneConnection, event.ConditionUnknown, reasonReconcileError, "Unable to count worker nodes: failed to list nodes: Get \"https://kube-apiserver:6443/api/v1/nodes\": dial tcp 172.30.0.10:6443: connect: connection refused", at(15))
	dpCount := cond(condDataPlaneConnection, event.ConditionUnknown, reasonReconcileError, "Unable to count worker nodes: failed to list nodes: Get \"https://kube-apiserver:6443/api/v1/nodes\": dial tcp 172.30.0.10:6443: connect: connection refused", at(15))
	comps := cond(condAvailable, event.ConditionFalse, reasonComponentsNotAvailable, "Waiting for components to be available: kube-apiserver, openshift-apiserver", at(14))
	dns := cond(condExternalDNSReachable, event.ConditionFalse, "ExternalDNSHostNotReachable", "lookup api.example.corp on 172.30.0.10:53: no such host", at(14))
	etcd := cond(condEtcdAvailable, event.ConditionFalse, "EtcdWaitingForQuorum", "", at(13))
	kas := cond(condKubeAPIServerAvailable, event.ConditionFalse, "WaitingForAvailable", "", at(14))
	down := []fact{nodeFact(t, nodeA, event.ConditionFalse, at(14), at(14)), nodeFact(t, nodeB, event.ConditionFalse, at(14), at(14))}
	tests := []struct {
		by, explained string
		facts         []fact
	}{
		{RuleProxyTunnel, RuleControlPlaneUnreachable, []fact{hcFact(t, withConds(seedHC(tunnelNoProxy), cp), at(16))}},
		{RuleProxyTunnel, RuleIgnitionUnreachable, []fact{hcFact(t, withConds(seedHC(tunnelNoProxy)), at(16)), poolConds(t, "np1", at(16), notReached("ignitionNotReached", ""))}},
		{RuleProxyTunnel, RuleNodesNotReady, append([]fact{hcFact(t, withConds(seedHC(tunnelNoProxy)), at(16))}, down...)},
		{RuleProxyTunnel, RuleOperatorCrashLoop, []fact{hcFact(t, withConds(seedHC(tunnelNoProxy)), at(16)), seedCrash(t, at(25))}},
		{RuleProxyTunnel, RuleRiskyProxyChange, append([]fact{hcFact(t, withConds(seedHC(seedNoProxy)), at(2)), changeFact(t, proxySpec(seedNoProxy), proxySpec(tunnelNoProxy), at(5))}, down...)},
		{RuleProxyTunnel, RuleNoWorkers, append([]fact{hcFact(t, withConds(seedHC(tunnelNoProxy), noWorkers, cpNoWorkers), at(16))}, down...)},
		{RuleEtcdUnavailable, RuleControlPlaneUnreachable, []fact{hcFact(t, withConds(bypassing(), etcd, cp), at(16))}},
		{RuleEtcdUnavailable, RuleKonnectivityDown, []fact{hcFact(t, withConds(bypassing(), etcd, dp), at(16))}},
		{RuleEtcdUnavailable, RuleHostedAPIUnreachable, []fact{hcFact(t, withConds(bypassing(), etcd, kas), at(16))}},
		{RuleHostedAPIUnreachable, RuleControlPlaneUnreachable, []fact{hcFact(t, withConds(bypassing(), kas, cp), at(16))}},
		{RuleHostedAPIUnreachable, RuleKonnectivityDown, []fact{hcFact(t, withConds(bypassing(), kas, dp), at(16))}},
		{RuleHostedAPIUnreachable, RuleConnectionUnknown, []fact{hcFact(t, withConds(bypassing(), kas, cpCount), at(16))}},
		{RuleEtcdUnavailable, RuleConnectionUnknown, []fact{hcFact(t, withConds(bypassing(), etcd, dpCount), at(16))}},
		{RuleHostedAPIUnreachable, RuleControlPlaneComponents, []fact{hcFact(t, replaceAvailable(withConds(bypassing(), kas), comps), at(16))}},
		{RuleEtcdUnavailable, RuleHostedAPIUnreachable, []fact{hcFact(t, withConds(bypassing(), etcd, kas, dns), at(16))}},
		{RuleIgnitionUnreachable, RuleNodesNotReady, []fact{hcFact(t, withConds(bypassing()), at(16)), poolConds(t, "example-np1", at(16), notReached("ignitionNotReached", "")), notJoiningFact(t, nodeA, at(13), at(30))}},
		{RuleNodesNotReady, RuleNoWorkers, append([]fact{hcFact(t, withConds(bypassing(), noWorkers, cpNoWorkers), at(16))}, down...)},
	}
	order := map[string]int{}
	for i, r := range DefaultRules() {
		order[r.ID] = i
	}
	for _, tt := range tests {
		t.Run(tt.by+" explains "+tt.explained, func(t *testing.T) {
			if order[tt.by] >= order[tt.explained] {
				t.Fatalf("%s must come before %s in DefaultRules", tt.by, tt.explained)
			}
			c := build(t, tt.facts...)
			var got Verdict
			for _, v := range Explain(c, at(60)) {
				if v.Rule == tt.explained {
					got = v
				}
			}
			if got.Outcome != OutcomeExplained || got.ExplainedBy != tt.by {
				t.Errorf("%s: %+v, want explained by %s\n%s", tt.explained, got, tt.by, render(Diagnose(c, at(60))))
			}
		})
	}
}

func TestRuleDocs(t *testing.T) {
	for _, r := range DefaultRules() {
		if RuleSummary(r.ID) == "" || RuleInfo(r.ID) == "" || strings.Contains(RuleInfo(r.ID), "\n") {
			t.Errorf("%s: summary %q, info %q", r.ID, RuleSummary(r.ID), RuleInfo(r.ID))
		}
	}
	if RuleInfo(RuleIgnitionUnreachable) != "NodePool ReachedIgnitionEndpoint=False or IgnitionEndpointAvailable=False, or HostedCluster IgnitionEndpointAvailable=False (NotFound, WaitingForAvailable)" {
		t.Errorf("ignition-unreachable info %q", RuleInfo(RuleIgnitionUnreachable))
	}
}

// TestApplyKeepsIssue18Fields: a HostedCluster fact that changes only the
// ignition or konnectivity endpoint or the trusted CA summary is a
// change, kept (times normalised), not shared with the caller, and counted
// in ApproxBytes.
func TestApplyKeepsIssue18Fields(t *testing.T) {
	base := withConds(bypassing())
	c := build(t, hcFact(t, base, at(5)))
	before := c.ApproxBytes()
	var last fact
	for i, mod := range []func(*event.HostedClusterState){
		func(s *event.HostedClusterState) { s.IgnitionEndpoint = "ignition.other.example:443" },
		func(s *event.HostedClusterState) { s.KonnectivityEndpoint = "192.168.126.51:31000" },
		func(s *event.HostedClusterState) {
			s.TrustedCA = &event.CABundle{ConfigMap: "user-ca-bundle", Found: true, Certificates: 1, NotAfter: at(90).In(time.FixedZone("x", 3600)), Subject: "Corp Proxy CA"}
		},
	} {
		s := base
		mod(&s)
		last = hcFact(t, s, at(10+i))
		if !c.Apply(last.e, last.p) {
			t.Fatalf("change %d not reported", i)
		}
		base = s
	}
	hc, _ := c.HostedCluster()
	if hc.IgnitionEndpoint != "ignition.other.example:443" || hc.KonnectivityEndpoint != "192.168.126.51:31000" ||
		hc.TrustedCA == nil || hc.TrustedCA.Subject != "Corp Proxy CA" || hc.TrustedCA.NotAfter.Location() != time.UTC || !hc.TrustedCA.NotAfter.Equal(at(90)) {
		t.Fatalf("state %+v, CA %+v", hc, hc.TrustedCA)
	}
	last.p.(event.HostedClusterState).TrustedCA.Subject = "changed by the caller"
	if hc, _ := c.HostedCluster(); hc.TrustedCA.Subject != "Corp Proxy CA" {
		t.Error("the CA summary is shared with the caller's payload")
	}
	if c.ApproxBytes() <= before {
		t.Errorf("ApproxBytes %d, was %d", c.ApproxBytes(), before)
	}
	f := hcFact(t, base, at(20))
	f2 := hcFact(t, base, at(21))
	c.Apply(f.e, f.p)
	if c.Apply(f2.e, f2.p) {
		t.Error("the same state again is a change")
	}
}
