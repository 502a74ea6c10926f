package watchers

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	listerscorev1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/hcpbot/hcpbot/event"
)

// fxAPIService is an APIService as the hosted kube-apiserver stores it:
// HyperShift's openshift APIServices (hostedclusterconfigoperator
// resources/manifests/openshift_apiserver.go:31-51) with the Available
// condition kube-aggregator's remote availability controller writes
// (k8s.io/kube-aggregator v0.37.2
// pkg/controllers/status/remote/remote_available_controller.go:357-361:
// False, FailedDiscoveryCheck, the last discovery error as message).
func fxAPIService(name, status, reason, message, rv string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{
			"name": name, "uid": "uid-" + name, "resourceVersion": rv,
			"annotations":   map[string]any{"service.alpha.openshift.io/inject-cabundle": "true"},
			"managedFields": []any{map[string]any{"manager": "kube-apiserver"}},
		},
		"spec": map[string]any{
			"group": "apps.openshift.io", "version": "v1", "groupPriorityMinimum": int64(9900), "versionPriority": int64(15),
			"caBundle": "LS0tLS1CRUdJTi...",
			"service":  map[string]any{"namespace": "default", "name": "openshift-apiserver", "port": int64(443)},
		},
	}}
	if status != "" {
		u.Object["status"] = map[string]any{"conditions": []any{map[string]any{
			"type": "Available", "status": status, "reason": reason, "message": message,
			"lastTransitionTime": "2026-07-22T08:00:00Z",
		}}}
	}
	return u
}

const failedDiscovery = `failing or missing response from https://172.30.0.20:443/apis/apps.openshift.io/v1: ` +
	`Get "https://172.30.0.20:443/apis/apps.openshift.io/v1": context deadline exceeded`

// An aggregated APIService is a problem while Available is not True; the
// state is (status, reason), so a new discovery error in the message is
// no news while a new reason is; True clears; a local APIService (no
// spec.service, kube-aggregator's local controller) states nothing.
func TestAPIServiceFact(t *testing.T) {
	view := func(u *unstructured.Unstructured) apiServiceView {
		out, err := transformAPIService(u)
		if err != nil {
			t.Fatal(err)
		}
		return readAPIService(out.(*unstructured.Unstructured))
	}
	failed := view(fxAPIService("v1.apps.openshift.io", "False", "FailedDiscoveryCheck", failedDiscovery, "100"))
	f, ok := apiServiceFact(failed)
	if !ok || !f.problem || f.state != "Available=False/FailedDiscoveryCheck" {
		t.Fatalf("FailedDiscoveryCheck: ok %v, %+v", ok, f)
	}
	want := event.APIServiceState{Name: "v1.apps.openshift.io", Service: "default/openshift-apiserver", Available: event.ConditionFalse,
		Reason: "FailedDiscoveryCheck", Message: failedDiscovery, LastTransitionTime: factT0}
	if f.payload != want {
		t.Errorf("payload = %+v, want %+v", f.payload, want)
	}
	e, _ := factEvent(t, apiServiceRef(failed), f)
	if !e.Object.Hosted || e.Object.Namespace != "" || e.Object.Kind != "APIService" {
		t.Errorf("object = %+v, want the hosted APIService without namespace", e.Object)
	}

	// Another dial error: same state.
	churn, _ := apiServiceFact(view(fxAPIService("v1.apps.openshift.io", "False", "FailedDiscoveryCheck", "failing or missing response from https://172.30.0.20:443/apis/apps.openshift.io/v1: dial tcp 172.30.0.20:443: connect: connection refused", "101")))
	if churn.state != f.state {
		t.Errorf("message churn changed the state: %q → %q", f.state, churn.state)
	}
	// kube-aggregator's other reasons (remote_available_controller.go:206-261).
	missing, _ := apiServiceFact(view(fxAPIService("v1.apps.openshift.io", "False", "MissingEndpoints",
		`endpointslices for service/openshift-apiserver in "default" have no addresses with port name "https"`, "102")))
	if missing.state == f.state || !missing.problem {
		t.Errorf("MissingEndpoints: %+v", missing)
	}
	passed, _ := apiServiceFact(view(fxAPIService("v1.apps.openshift.io", "True", "Passed", "all checks passed", "103")))
	if p := passed.payload.(event.APIServiceState); passed.problem || !p.Cleared || p.Available != event.ConditionTrue {
		t.Errorf("Passed: %+v", passed)
	}
	if _, ok := apiServiceFact(view(fxAPIService("v1.apps.openshift.io", "", "", "", "99"))); ok {
		t.Error("an APIService the aggregator has not judged yet states something")
	}
	local := fxAPIService("v1.apps", "True", "Local", "Local APIServices are always available", "5")
	delete(local.Object["spec"].(map[string]any), "service")
	if _, ok := apiServiceFact(view(local)); ok {
		t.Error("a local APIService states something")
	}
}

// The cache keeps the name, spec.service and the Available condition only.
func TestTransformAPIServiceSlim(t *testing.T) {
	out, _ := transformAPIService(fxAPIService("v1.apps.openshift.io", "False", "FailedDiscoveryCheck", failedDiscovery, "100"))
	u := out.(*unstructured.Unstructured)
	if u.GetAnnotations() != nil || u.GetManagedFields() != nil {
		t.Errorf("metadata kept: %+v", u.Object["metadata"])
	}
	if _, found, _ := unstructured.NestedString(u.Object, "spec", "caBundle"); found {
		t.Error("spec.caBundle kept")
	}
	if v := readAPIService(u); v.service != "default/openshift-apiserver" || v.port != 443 || v.reason != "FailedDiscoveryCheck" || v.uid != "uid-v1.apps.openshift.io" {
		t.Errorf("view of the slim object = %+v", v)
	}
}

// The connectivity-check record as HyperShift leaves it: created empty
// by the hosted-cluster-config-operator (resources.go:1751-1755), then
// stamped by the checker with date -u +%Y-%m-%dT%H:%M:%SZ
// (resources.go:1762-1782); stale past 5 minutes (resources.go:1928-1933).
func TestConnectivityFact(t *testing.T) {
	stamp := factT0.Format("2006-01-02T15:04:05Z")
	cm := func(data map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ConnectivityCheckNamespace, Name: ConnectivityCheckName,
			UID: "uid-cc", ResourceVersion: "7"}, Data: data}
	}
	for _, tc := range []struct {
		name    string
		cm      *corev1.ConfigMap
		at      time.Time
		state   string
		problem bool
		want    event.ConnectivityCheck
	}{
		{"missing", nil, factT0, connMissing, true, event.ConnectivityCheck{Missing: true}},
		{"created empty", cm(nil), factT0, connNoRecord, true, event.ConnectivityCheck{Stale: true}},
		{"empty stamp", cm(map[string]string{"lastSucceeded": ""}), factT0, connNoRecord, true, event.ConnectivityCheck{Stale: true}},
		{"unparsable", cm(map[string]string{"lastSucceeded": "2026-07-22 08:00:00"}), factT0, connUnparsable, true,
			event.ConnectivityCheck{Raw: "2026-07-22 08:00:00", Stale: true}},
		{"fresh", cm(map[string]string{"lastSucceeded": stamp}), factT0.Add(time.Minute), connFresh, false,
			event.ConnectivityCheck{LastSucceeded: factT0}},
		{"5m exactly is not older than 5m", cm(map[string]string{"lastSucceeded": stamp}), factT0.Add(5 * time.Minute), connFresh, false,
			event.ConnectivityCheck{LastSucceeded: factT0}},
		{"stale", cm(map[string]string{"lastSucceeded": stamp}), factT0.Add(5*time.Minute + time.Second), connStale, true,
			event.ConnectivityCheck{LastSucceeded: factT0, Stale: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, obj := connectivityFact(tc.cm, tc.at, DefaultConnectivityStaleAfter, "6")
			tc.want.StaleAfter, tc.want.ObservedAt = DefaultConnectivityStaleAfter, tc.at
			if f.state != tc.state || f.problem != tc.problem || f.payload != tc.want {
				t.Errorf("got state %q problem %v %+v, want %q %v %+v", f.state, f.problem, f.payload, tc.state, tc.problem, tc.want)
			}
			if obj.Kind != "ConfigMap" || obj.Namespace != ConnectivityCheckNamespace || obj.Name != ConnectivityCheckName || !obj.Hosted {
				t.Errorf("object = %+v", obj)
			}
			factEvent(t, obj, f)
		})
	}
}

// recorder is a Publisher that keeps what it is given.
type recorder struct {
	mu     sync.Mutex
	events []event.Event
}

func (r *recorder) Publish(_ context.Context, e event.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
	return nil
}

func (r *recorder) PublishWait(ctx context.Context, e event.Event) error { return r.Publish(ctx, e) }

func (r *recorder) connectivity(t *testing.T) []event.ConnectivityCheck {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []event.ConnectivityCheck
	for _, e := range r.events {
		p, err := e.DecodePayload()
		if err != nil {
			t.Fatal(err)
		}
		if c, ok := p.(event.ConnectivityCheck); ok {
			out = append(out, c)
		}
	}
	return out
}

// The periodic pass judges every cached stamp at the agent's clock: a
// stamp that stops moving turns stale with no change in the API, once;
// repeated passes and fresh stamps publish nothing; the next stamp is
// fresh again; a deleted record is missing. While the cluster's API
// server is unreachable the cached stamp is not judged.
func TestConnectivityPeriodicPass(t *testing.T) {
	clock := factT0
	pub := &recorder{}
	a := &Agent{cfg: Config{Source: "mgmt-east"}, pub: pub, log: zerolog.Nop(), metrics: NewMetrics(nil),
		now: func() time.Time { return clock }, hosted: map[event.ClusterRef]*hostedCluster{}, states: map[key]string{}}
	if err := a.cfg.defaults(); err != nil {
		t.Fatal(err)
	}
	ref := *factCluster
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	conn := &hostedConn{connCheck: listerscorev1.NewConfigMapLister(idx)}
	hc := &hostedCluster{ref: ref, conn: conn}
	a.hosted[ref] = hc
	stampAt := func(at time.Time, rv string) {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ConnectivityCheckNamespace, Name: ConnectivityCheckName, UID: "uid-cc", ResourceVersion: rv},
			Data: map[string]string{ConnectivityCheckKey: at.UTC().Format("2006-01-02T15:04:05Z")}}
		if err := idx.Update(cm); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	pass := func(n int) {
		for range n {
			a.judgeAllConnectivity(ctx)
		}
	}
	want := func(n int, what string) []event.ConnectivityCheck {
		t.Helper()
		got := pub.connectivity(t)
		if len(got) != n {
			t.Fatalf("%s: %d events, want %d: %+v", what, len(got), n, got)
		}
		return got
	}

	stampAt(clock, "1")
	// Stamped every minute for ten minutes: fresh throughout, no news.
	for i := range 10 {
		clock = factT0.Add(time.Duration(i) * time.Minute)
		stampAt(clock, itoa(2+i))
		pass(1)
	}
	want(0, "fresh stamps")
	last := clock
	// The stamp stops moving; the pass runs every 30 s.
	for clock.Sub(last) <= DefaultConnectivityStaleAfter+DefaultConnectivityInterval {
		clock = clock.Add(DefaultConnectivityInterval)
		pass(1)
	}
	got := want(1, "a stamp that stopped moving")
	if c := got[0]; !c.Stale || !c.LastSucceeded.Equal(last) || c.ObservedAt.Sub(last) <= DefaultConnectivityStaleAfter ||
		c.ObservedAt.Sub(last) > DefaultConnectivityStaleAfter+DefaultConnectivityInterval {
		t.Errorf("stale event = %+v (last stamp %s)", c, last)
	}
	pass(5)
	want(1, "repeated passes over a stale stamp")

	// Unreachable: the cache cannot move, so nothing is judged.
	hc.reach = reachability{known: true, reachable: false}
	stampAt(clock, "50")
	pass(1)
	want(1, "an unreachable cluster")
	hc.reach = reachability{known: true, reachable: true}
	pass(1)
	if got := want(2, "the next stamp"); got[1].Stale || !got[1].LastSucceeded.Equal(clock) {
		t.Errorf("fresh again = %+v", got[1])
	}
	if err := idx.Delete(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ConnectivityCheckNamespace, Name: ConnectivityCheckName}}); err != nil {
		t.Fatal(err)
	}
	pass(2)
	if got := want(3, "the record deleted"); !got[2].Missing {
		t.Errorf("deleted = %+v", got[2])
	}
}

// BenchmarkConnectivityPass2000 is one periodic pass over 2,000 hosted
// clusters' cached records, all fresh (the steady state: nothing to
// publish), the agent's whole cost of judging staleness on its own clock.
func BenchmarkConnectivityPass2000(b *testing.B) {
	clock := factT0
	a := &Agent{cfg: Config{Source: "mgmt-east"}, pub: &recorder{}, log: zerolog.Nop(), metrics: NewMetrics(nil),
		now: func() time.Time { return clock }, hosted: map[event.ClusterRef]*hostedCluster{}, states: map[key]string{}}
	if err := a.cfg.defaults(); err != nil {
		b.Fatal(err)
	}
	for i := range 2000 {
		idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
		_ = idx.Add(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ConnectivityCheckNamespace, Name: ConnectivityCheckName, ResourceVersion: "1"},
			Data: map[string]string{ConnectivityCheckKey: factT0.Format("2006-01-02T15:04:05Z")}})
		ref := event.ClusterRef{Namespace: "clusters", Name: "hc-" + itoa(i)}
		a.hosted[ref] = &hostedCluster{ref: ref, conn: &hostedConn{connCheck: listerscorev1.NewConfigMapLister(idx)}}
	}
	ctx := context.Background()
	a.judgeAllConnectivity(ctx)
	b.ReportAllocs()
	for b.Loop() {
		a.judgeAllConnectivity(ctx)
	}
	if n := len(a.pub.(*recorder).events); n != 0 {
		b.Fatalf("%d events for fresh records", n)
	}
}
