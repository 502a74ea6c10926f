package diagnose

import (
	"bytes"
	"encoding/gob"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/event"
)

// checkpointFacts fill every table of a Cluster (and the management
// scope's), with a tombstone, a proxy edit and a snapshot's end among
// them; tail are facts after the checkpoint.
func checkpointFacts(t *testing.T) (head, tail []fact) {
	t.Helper()
	hc := seedHC(tunnelNoProxy)
	hc.APIServer = &event.Endpoint{Host: "172.20.0.1", Port: 6443}
	hc.TrustedCA = &event.CABundle{ConfigMap: "user-ca-bundle", Found: true, Certificates: 1, NotAfter: at(60 * 24 * 90), Subject: "corp-ca"}
	hc.Labels = map[string]string{"region": "eu", "tier": "gold"}
	hc.Conditions = []event.Condition{{Type: "Available", Status: event.ConditionTrue, Reason: "AsExpected", LastTransitionTime: at(-60)}}
	check := func(p event.ConnectivityCheck, when time.Time) fact {
		return hosted(t, event.ObjectRef{Kind: "ConfigMap", Namespace: "kube-system", Name: "control-plane-connectivity-check", Hosted: true}, p, "cm-"+when.Format("150405"), when)
	}
	apiSvc := func(name string, when time.Time) fact {
		p := event.APIServiceState{Name: name, Service: "openshift-apiserver/api", Available: event.ConditionFalse, Reason: "FailedDiscoveryCheck",
			Message: "failing or missing response from https://172.30.0.20:443/apis/apps.openshift.io/v1: dial timeout", LastTransitionTime: at(4)}
		return hosted(t, event.ObjectRef{Kind: "APIService", Name: name, Hosted: true}, p, "as-"+name+when.Format("150405"), when)
	}
	ocp := newFact(t, nil, event.ObjectRef{Kind: "Proxy", Name: "cluster", UID: "proxy-uid"}, event.OpenShiftProxy{
		Spec:   event.ProxySpec{HTTPProxy: seedProxy, HTTPSProxy: seedProxy, NoProxy: ".corp.example"},
		Status: event.ProxyStatus{HTTPProxy: seedProxy, HTTPSProxy: seedProxy, NoProxy: ".cluster.local,.svc,.corp.example"},
	}, "rv-1", at(0))
	head = []fact{
		hcFact(t, seedHC(seedNoProxy), at(0)),
		changeFact(t, proxySpec(seedNoProxy), proxySpec(tunnelNoProxy), at(1)),
		hcFact(t, hc, at(1)),
		nodeFact(t, "example-np1-a", event.ConditionUnknown, at(2), at(2)),
		nodeFact(t, "example-np1-b", event.ConditionTrue, at(0), at(2)),
		nodeFact(t, "example-np1-c", event.ConditionUnknown, at(2), at(2)),
		nodeDeleted(t, "example-np1-c", at(3)),
		seedCrash(t, at(3)),
		crashFact(t, "openshift-dns", "dns-default-x", "E0603 19:38:28.981007 1 dial tcp: i/o timeout", 3, at(3)),
		crashCleared(t, "openshift-dns", "dns-default-x", at(4)),
		apiProxyFact(t, "example-np1-a", event.ProxyModeTunnel, true, at(3)),
		poolFact(t, "np1", false, at(3), at(3)),
		reachFact(t, true, at(0), at(3)),
		launcherFact(t, "example-np1-a", "Running", at(3)),
		summaryFact(t, event.NodeSummary{Total: 3, Ready: 1, Unknown: 1, NotJoining: 1, JoinGrace: 10 * time.Minute}, at(4)),
		check(event.ConnectivityCheck{LastSucceeded: at(2), Stale: true, StaleAfter: 5 * time.Minute, ObservedAt: at(4)}, at(4)),
		apiSvc("v1.apps.openshift.io", at(4)),
		ocp,
		snapshotDone(t, nil, 5, []event.Type{event.TypeNode}, event.ObjectRef{Kind: "Node", Name: "example-np1-a", UID: "uid-example-np1-a", Hosted: true}),
	}
	tail = []fact{
		nodeFact(t, "example-np1-a", event.ConditionTrue, at(8), at(8)),
		apiProxyFact(t, "example-np1-a", event.ProxyModeHAProxy, false, at(8)),
		crashCleared(t, scaNamespace, scaPod, at(9)),
		changeFact(t, proxySpec(tunnelNoProxy), proxySpec(seedNoProxy), at(9)),
		hcFact(t, seedHC(seedNoProxy), at(9)),
		summaryFact(t, event.NodeSummary{Total: 3, Ready: 3}, at(10)),
	}
	return head, tail
}

func applyAll(m *Model, facts []fact) {
	for _, f := range facts {
		m.ApplyDecoded(f.e, f.p)
	}
}

// roundTrip encodes and decodes a model's checkpoint as the bot does.
func roundTrip(t *testing.T, m *Model) *Model {
	t.Helper()
	var buf bytes.Buffer
	if err := m.Checkpoint().Encode(gob.NewEncoder(&buf)); err != nil {
		t.Fatal(err)
	}
	cp, err := DecodeModelCheckpoint(gob.NewDecoder(&buf))
	if err != nil {
		t.Fatal(err)
	}
	return cp.Model(nil)
}

// A Model restored from its checkpoint is the Model it was: the same
// checkpoint, the same diagnoses; and the facts after it leave both in
// the same state, which is what a full replay builds.
func TestCheckpointRestoresTheModel(t *testing.T) {
	head, tail := checkpointFacts(t)
	full := NewModel()
	applyAll(full, head)
	restored := roundTrip(t, full)
	if d := full.Checkpoint().Diff(restored.Checkpoint()); d != nil {
		t.Fatalf("restored model differs:\n%s", strings.Join(d, "\n"))
	}
	same := func(when time.Time) {
		t.Helper()
		for _, k := range full.Keys() {
			want, got := Diagnose(full.Cluster(k), when), Diagnose(restored.Cluster(k), when)
			if !reflect.DeepEqual(want, got) {
				t.Errorf("%s at %s: diagnoses differ\nfull replay:\n%s\nrestored:\n%s", k, when, render(want), render(got))
			}
		}
	}
	same(at(6))
	if rules := rulesOf(Diagnose(full.Cluster(hcKey), at(6))); len(rules) == 0 {
		t.Fatal("the head's cluster has no diagnosis: the test checks nothing")
	}
	applyAll(full, tail)
	applyAll(restored, tail)
	if d := full.Checkpoint().Diff(restored.Checkpoint()); d != nil {
		t.Fatalf("after the tail:\n%s", strings.Join(d, "\n"))
	}
	same(at(12))

	// Diff names what differs.
	applyAll(restored, []fact{nodeFact(t, "example-np1-b", event.ConditionFalse, at(13), at(13))})
	d := full.Checkpoint().Diff(restored.Checkpoint())
	if len(d) != 1 || !strings.Contains(d[0], hcKey.String()) || !strings.Contains(d[0], "example-np1-b") {
		t.Errorf("Diff after a change = %q", d)
	}
}

// Every field of a Cluster and of its records has a place in the
// checkpoint: a field added without one fails here, not as an incident
// that a restarted bot gets wrong.
func TestCheckpointCoversCluster(t *testing.T) {
	fields := func(v any) []string {
		var out []string
		for f := range reflect.TypeOf(v).Fields() {
			out = append(out, strings.ToLower(f.Name))
		}
		slices.Sort(out)
		return out
	}
	// Not in the checkpoint: clientsOf (the configuration's, given on
	// restore) and memo (a cache).
	want := []string{"apiproxies", "apiservices", "changes", "clientsof", "connectivity", "crashes", "hc", "key", "launchers",
		"memo", "nodepools", "nodes", "ocp", "reach", "summary"}
	if got := fields(Cluster{}); !slices.Equal(got, want) {
		t.Errorf("Cluster's fields %v, the checkpoint knows %v: add the new ones to clusterCP", got, want)
	}
	for _, pair := range []struct {
		rec, cp any
		extra   int // fields of the mirror the record does not have
	}{
		{stamp{}, stampCP{}, 0}, {objRef{}, refCP{}, 0}, {entry[nodeRec]{}, entryCP[nodeCP]{}, 1},
		{hcState{}, hcCP{}, 6}, {proxyChange{}, changeCP{}, 0}, {nodeRec{}, nodeCP{}, 0}, {crashRec{}, crashCP{}, 0},
		{apiProxyRec{}, apiProxyCP{}, 0}, {launcherRec{}, launcherCP{}, 0}, {reachRec{}, reachCP{}, 0},
		{ocpRec{}, ocpCP{}, 0}, {nodePoolRec{}, nodePoolCP{}, 0}, {apiServiceRec{}, apiServiceCP{}, 0},
		{connectivityRec{}, connectivityCP{}, 0},
	} {
		if got, want := len(fields(pair.cp))-pair.extra, len(fields(pair.rec)); got != want {
			t.Errorf("%T has %d fields, its checkpoint %T %d: add the new ones", pair.rec, want, pair.cp, got)
		}
	}
}
