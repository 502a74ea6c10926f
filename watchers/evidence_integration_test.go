package watchers_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/watchers"
)

// fakeOpenShiftAPIServer is a loopback TLS server standing in for
// openshift-apiserver behind the aggregated APIService: it answers
// kube-aggregator's discovery check (GET /apis/<group>/<version>) with
// 503 until healthy is set. Its certificate is for
// openshift-apiserver.default.svc, the server name kube-aggregator checks
// (remote_available_controller.go:171), signed by the CA it returns for
// the APIService's caBundle, as HyperShift sets one (oapi/reconcile.go:19-34).
func fakeOpenShiftAPIServer(t *testing.T, healthy *atomic.Bool) (port int32, caPEM []byte) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "openshift-apiserver test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "openshift-apiserver"},
		DNSNames: []string{"openshift-apiserver.default.svc"}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !healthy.Load() {
			http.Error(w, "openshift-apiserver not ready", http.StatusServiceUnavailable)
			return
		}
		if r.URL.Path != "/apis/apps.openshift.io/v1" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"apps.openshift.io/v1","resources":[]}`))
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	// kube-aggregator's parallel checks hang up on slower handshakes: not
	// the test's business.
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	_, p, _ := net.SplitHostPort(srv.Listener.Addr().String())
	n, _ := strconv.Atoi(p)
	return int32(n), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
}

func apiServiceIs(cluster, name string, match func(event.APIServiceState) bool) func(event.Event, event.Payload) bool {
	return func(e event.Event, p event.Payload) bool {
		s, ok := p.(event.APIServiceState)
		return ok && e.Cluster != nil && e.Cluster.String() == cluster && s.Name == name && e.Object.Kind == "APIService" &&
			e.Object.Hosted && e.Object.Namespace == "" && match(s)
	}
}

// HyperShift's aggregated APIService v1.apps.openshift.io
// (hostedclusterconfigoperator resources/manifests/openshift_apiserver.go:31-51,
// oapi/reconcile.go:19-34: default/openshift-apiserver, port 443, group
// priority 9900, version priority 15, a caBundle) in a real hosted
// kube-apiserver, whose own kube-aggregator judges it (k8s.io/kube-aggregator
// v0.37.2 pkg/controllers/status/remote/remote_available_controller.go):
// a backend answering 503 is Available=False with reason
// FailedDiscoveryCheck (l.357-361, the konnectivity symptom of
// hypershift#313) and the agent publishes it; healthy again (Passed,
// l.373-374) it is Cleared; failing again, then deleted, it is cleared.
//
// One deviation, so that the API server dials only loopback: HyperShift's
// Service is a selector-less ClusterIP whose Endpoints hold the control
// plane's service IP; here it is an ExternalName "localhost" Service,
// which kube-aggregator resolves to localhost:<spec.service.port>
// (k8s.io/apiserver pkg/util/proxy ResolveCluster), so the APIService's
// port is the test server's rather than 443.
func TestAgentAggregatedAPIService(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	s := newStream(t)
	ns := env.Namespace(t)
	hosted := env.HostedCluster(t, scenario.Healthy(ns, "apis"))
	cluster := ns + "/apis"
	var healthy atomic.Bool
	port, caPEM := fakeOpenShiftAPIServer(t, &healthy)

	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "openshift-apiserver"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "localhost",
			Ports: []corev1.ServicePort{{Name: "https", Port: port}}}}
	if _, err := hosted.Kube.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const name = "v1.apps.openshift.io"
	apis := hosted.Dynamic.Resource(watchers.APIServiceGVR)
	apiService := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": name},
		"spec": map[string]any{
			"group": "apps.openshift.io", "version": "v1", "groupPriorityMinimum": int64(9900), "versionPriority": int64(15),
			"caBundle": base64.StdEncoding.EncodeToString(caPEM), "service": map[string]any{"namespace": "default", "name": "openshift-apiserver", "port": int64(port)},
		},
	}}
	if _, err := apis.Create(ctx, apiService, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// kube-aggregator re-checks an APIService when its Service changes
	// (remote_available_controller.go, the Service handlers): a touch of
	// the Service makes it judge the backend's new answer at once rather
	// than at its next resync or backoff.
	touch := func(i int) {
		t.Helper()
		patch := []byte(`{"metadata":{"annotations":{"hcpbot.test/touch":"` + strconv.Itoa(i) + `"}}}`)
		if _, err := hosted.Kube.CoreV1().Services("default").Patch(ctx, svc.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	startAgent(t, s, watchers.Config{Source: "mgmt-" + ns, Identity: "apis", SnapshotWait: 30 * time.Second})
	got := s.waitFor(t, "the APIService Available=False/FailedDiscoveryCheck", 1, apiServiceIs(cluster, name, func(p event.APIServiceState) bool {
		return p.Available == event.ConditionFalse && p.Reason == "FailedDiscoveryCheck"
	}))
	p, _ := got[0].DecodePayload()
	failed := p.(event.APIServiceState)
	if failed.Service != "default/openshift-apiserver" || failed.Cleared || failed.LastTransitionTime.IsZero() ||
		!strings.Contains(failed.Message, "bad status from https://localhost:"+strconv.Itoa(int(port))+"/apis/apps.openshift.io/v1: 503") {
		t.Errorf("failed APIService = %+v", failed)
	}

	healthy.Store(true)
	touch(1)
	s.waitFor(t, "the APIService cleared (Available=True)", 1, apiServiceIs(cluster, name, func(p event.APIServiceState) bool {
		return p.Cleared && p.Available == event.ConditionTrue && p.Reason == "Passed"
	}))

	healthy.Store(false)
	touch(2)
	s.waitFor(t, "the APIService failing again", 2, apiServiceIs(cluster, name, func(p event.APIServiceState) bool {
		return p.Available == event.ConditionFalse && !p.Cleared
	}))
	if err := apis.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "the deleted APIService cleared", 1, apiServiceIs(cluster, name, func(p event.APIServiceState) bool {
		return p.Cleared && p.Available == event.ConditionUnknown
	}))
	// The kube-apiserver's own (local) APIServices are not aggregated:
	// nothing is published for them.
	if local := s.matching(func(e event.Event, p event.Payload) bool {
		st, ok := p.(event.APIServiceState)
		return ok && st.Name != name
	}); len(local) > 0 {
		t.Errorf("published for a local APIService: %+v", local[0].Object)
	}
}

func connectivityIs(cluster string, match func(event.ConnectivityCheck) bool) func(event.Event, event.Payload) bool {
	return func(e event.Event, p event.Payload) bool {
		c, ok := p.(event.ConnectivityCheck)
		return ok && e.Cluster != nil && e.Cluster.String() == cluster && e.Object.Kind == "ConfigMap" && e.Object.Hosted &&
			e.Object.Namespace == watchers.ConnectivityCheckNamespace && e.Object.Name == watchers.ConnectivityCheckName && match(c)
	}
}

// The connectivity-check record through the real agent on a real hosted
// API server, as HyperShift writes it: absent (an older HyperShift, or the
// hosted-cluster-config-operator not there yet: missing), created empty
// (resources.go:1751-1755: no record), stamped by the checker pods with
// `date -u +%Y-%m-%dT%H:%M:%SZ` (resources.go:1762-1782: fresh, and more
// fresh stamps are no news), then left alone: stale once older than
// StaleAfter (HyperShift's 5 minutes, resources.go:1928-1933; 6 s here),
// found by the agent's own periodic pass since nothing in the API
// changes; deleted: missing again.
func TestAgentConnectivityCheck(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	s := newStream(t)
	ns := env.Namespace(t)
	hosted := env.HostedCluster(t, scenario.Healthy(ns, "conncheck"))
	cluster := ns + "/conncheck"
	const staleAfter = 6 * time.Second
	startAgent(t, s, watchers.Config{Source: "mgmt-" + ns, Identity: "conncheck", SnapshotWait: 30 * time.Second,
		ConnectivityStaleAfter: staleAfter, ConnectivityInterval: 200 * time.Millisecond})
	missing := s.waitFor(t, "the record missing", 1, connectivityIs(cluster, func(c event.ConnectivityCheck) bool { return c.Missing }))
	// Nothing fires for an object that is not there: the start-up
	// snapshot states it, a problem of its scope.
	if missing[0].Snapshot == "" {
		t.Errorf("the missing record was not stated by the snapshot: %+v", missing[0])
	}
	done := s.waitFor(t, "the hosted cluster's SnapshotDone", 1, func(e event.Event, p event.Payload) bool {
		_, ok := p.(event.SnapshotDone)
		return ok && e.Cluster != nil && e.Cluster.String() == cluster
	})
	dp, _ := done[0].DecodePayload()
	sd := dp.(event.SnapshotDone)
	if !slices.Contains(sd.Types, event.TypeConnectivity) || !slices.Contains(sd.Types, event.TypeAPIService) ||
		!slices.ContainsFunc(sd.Problems, func(o event.ObjectRef) bool { return o.Kind == "ConfigMap" && o.Name == watchers.ConnectivityCheckName }) {
		t.Errorf("SnapshotDone types %v, problems %v: want apiservice and connectivity covered, the record a problem", sd.Types, sd.Problems)
	}

	cms := hosted.Kube.CoreV1().ConfigMaps(watchers.ConnectivityCheckNamespace)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: watchers.ConnectivityCheckNamespace, Name: watchers.ConnectivityCheckName}}
	if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "no check recorded yet", 1, connectivityIs(cluster, func(c event.ConnectivityCheck) bool {
		return !c.Missing && c.Stale && c.LastSucceeded.IsZero() && c.Raw == "" && c.StaleAfter == staleAfter
	}))

	// The checker's PATCH of data.lastSucceeded, three stamps a second
	// apart.
	var last time.Time
	for i := range 3 {
		if i > 0 {
			time.Sleep(time.Second)
		}
		last = time.Now().UTC().Truncate(time.Second)
		patch := []byte(`{"data":{"lastSucceeded":"` + last.Format("2006-01-02T15:04:05Z") + `"}}`)
		if _, err := cms.Patch(ctx, cm.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	stale := s.waitFor(t, "the stamp stale", 1, connectivityIs(cluster, func(c event.ConnectivityCheck) bool {
		return c.Stale && c.LastSucceeded.Equal(last)
	}))
	sp, _ := stale[0].DecodePayload()
	if c := sp.(event.ConnectivityCheck); c.ObservedAt.Sub(c.LastSucceeded) <= staleAfter {
		t.Errorf("stale at %s, %s after the last stamp: not older than %s", c.ObservedAt, c.ObservedAt.Sub(c.LastSucceeded), staleAfter)
	}
	fresh := s.matching(connectivityIs(cluster, func(c event.ConnectivityCheck) bool { return !c.Stale && !c.Missing }))
	if len(fresh) != 1 {
		t.Errorf("%d fresh events for 3 fresh stamps, want 1 (fresh → fresh is no news)", len(fresh))
	}

	if err := cms.Delete(ctx, cm.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "the record missing again", 2, connectivityIs(cluster, func(c event.ConnectivityCheck) bool { return c.Missing }))
}

// Paused reconciliation through the real agent: spec.pausedUntil as
// `oc patch` sets it (validated by HyperShift's CRD rule,
// hostedcluster_types.go:791-799, nodepool_types.go:207-215: a value that
// is neither a date nor a boolean is refused), and ReconciliationActive
// as HyperShift writes it (support/util/pausereconcile.go:52-82, for the
// NodePool nodepool/conditions.go:127-160): False/ReconciliationPaused
// with "Reconciliation paused until field removed" for "true" on the
// HostedCluster, "Reconciliation paused until: <value>" for a future
// RFC3339 time on the NodePool, observedGeneration the object's
// generation. Both reach NATS with PausedUntil, Generation and
// observedGeneration.
func TestAgentPausedReconciliation(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	s := newStream(t)
	ns := env.Namespace(t)
	spec := scenario.Healthy(ns, "paused")
	env.HostedCluster(t, spec)
	cluster := ns + "/paused"
	if err := scenario.NodePool(ctx, env.Dynamic, spec, "paused-np", 2, true); err != nil {
		t.Fatal(err)
	}
	bad := "next tuesday"
	if _, err := scenario.SetPausedUntil(ctx, env.Dynamic, hypershift.HostedClusterGVR, ns, "paused", &bad); err == nil ||
		!strings.Contains(err.Error(), "PausedUntil must be a date in RFC3339 format") {
		t.Fatalf("pausedUntil %q: %v, want the CRD's refusal", bad, err)
	}
	yes := "true"
	hcGen, err := scenario.SetPausedUntil(ctx, env.Dynamic, hypershift.HostedClusterGVR, ns, "paused", &yes)
	if err != nil {
		t.Fatal(err)
	}
	until := time.Now().Add(48 * time.Hour).UTC().Truncate(time.Second).Format(time.RFC3339)
	npGen, err := scenario.SetPausedUntil(ctx, env.Dynamic, hypershift.NodePoolGVR, ns, "paused-np", &until)
	if err != nil {
		t.Fatal(err)
	}
	if err := scenario.SetHostedClusterConditions(ctx, env.Dynamic, ns, "paused", scenario.Condition{Type: "ReconciliationActive",
		Status: "False", Reason: "ReconciliationPaused", Message: "Reconciliation paused until field removed"}); err != nil {
		t.Fatal(err)
	}
	if err := scenario.SetNodePoolConditions(ctx, env.Dynamic, ns, "paused-np", scenario.Condition{Type: "ReconciliationActive",
		Status: "False", Reason: "ReconciliationPaused", Message: "Reconciliation paused until: " + until}); err != nil {
		t.Fatal(err)
	}
	startAgent(t, s, watchers.Config{Source: "mgmt-" + ns, Identity: "paused", SnapshotWait: 30 * time.Second})

	paused := func(cs []event.Condition, gen int64, msg string) bool {
		for _, c := range cs {
			if c.Type == "ReconciliationActive" && c.Status == event.ConditionFalse && c.Reason == "ReconciliationPaused" &&
				c.Message == msg && c.ObservedGeneration == gen && !c.LastTransitionTime.IsZero() {
				return true
			}
		}
		return false
	}
	s.waitFor(t, "the HostedCluster paused until the field is removed", 1, func(e event.Event, p event.Payload) bool {
		hc, ok := p.(event.HostedClusterState)
		return ok && e.Cluster != nil && e.Cluster.String() == cluster && hc.PausedUntil == "true" && hc.Generation == hcGen &&
			paused(hc.Conditions, hcGen, "Reconciliation paused until field removed")
	})
	got := s.waitFor(t, "the NodePool paused until a date", 1, func(e event.Event, p event.Payload) bool {
		np, ok := p.(event.NodePoolState)
		return ok && e.Cluster != nil && e.Cluster.String() == cluster && np.Name == "paused-np" && np.PausedUntil == until &&
			np.Generation == npGen && paused(np.Conditions, npGen, "Reconciliation paused until: "+until)
	})
	p, _ := got[0].DecodePayload()
	if pause := event.ReadPausedUntil(p.(event.NodePoolState).PausedUntil, time.Now()); !pause.Paused || pause.Invalid || pause.Until.IsZero() {
		t.Errorf("ReadPausedUntil(%q) = %+v, want paused until a time", until, pause)
	}
	if hcGen < 2 || npGen < 2 {
		t.Errorf("generations %d, %d: the spec change did not bump them", hcGen, npGen)
	}
}
