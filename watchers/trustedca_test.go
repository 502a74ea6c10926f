package watchers

import (
	"crypto/x509/pkix"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	listerscorev1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/internal/testenv/testcert"
)

// Unit tests of the trusted CA summary (trustedca.go). The certificates
// are made by the test (package testcert): no key material is committed.

func TestSummarizeCABundle(t *testing.T) {
	long, longAfter := testcert.CA(t, pkix.Name{CommonName: "Corp Root CA"}, 400*24*time.Hour)
	short, shortAfter := testcert.CA(t, pkix.Name{CommonName: "Corp Proxy CA"}, 10*24*time.Hour)
	expired, expiredAfter := testcert.CA(t, pkix.Name{CommonName: "Old Corp CA"}, -48*time.Hour)
	noCN, noCNAfter := testcert.CA(t, pkix.Name{Organization: []string{"Corp"}, OrganizationalUnit: []string{"Proxy"}}, 30*24*time.Hour)
	for _, tc := range []struct {
		name    string
		data    string
		present bool
		want    event.CABundle
	}{
		{"missing key", "", false, event.CABundle{Found: true, Problem: caProblemNoKey}},
		{"empty", "", true, event.CABundle{Found: true, Problem: caProblemEmpty}},
		{"garbage", "not a certificate\n", true, event.CABundle{Found: true, Problem: caProblemNoCerts}},
		{"PEM block that is no certificate", "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", true,
			event.CABundle{Found: true, Problem: caProblemNoCerts}},
		{"one certificate", long, true, event.CABundle{Found: true, Certificates: 1, NotAfter: longAfter, Subject: "Corp Root CA"}},
		{"two, the second expires first", long + short, true,
			event.CABundle{Found: true, Certificates: 2, NotAfter: shortAfter, Subject: "Corp Proxy CA"}},
		{"garbage between certificates is skipped", long + "junk\n" + short, true,
			event.CABundle{Found: true, Certificates: 2, NotAfter: shortAfter, Subject: "Corp Proxy CA"}},
		{"expired certificate", long + expired, true,
			event.CABundle{Found: true, Certificates: 2, NotAfter: expiredAfter, Subject: "Old Corp CA"}},
		{"no common name: the full subject", noCN, true,
			event.CABundle{Found: true, Certificates: 1, NotAfter: noCNAfter, Subject: "OU=Proxy,O=Corp"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := summarizeCABundle(tc.data, tc.present)
			if got != tc.want {
				t.Errorf("summary = %+v\nwant      %+v", got, tc.want)
			}
		})
	}
}

// The cache holds a stub: no data, no labels, no managedFields, the
// summary as an annotation (replacing any the ConfigMap carried).
func TestTransformConfigMap(t *testing.T) {
	pemData, notAfter := testcert.CA(t, pkix.Name{CommonName: "Corp Proxy CA"}, 10*24*time.Hour)
	in := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "clusters", Name: "user-ca-bundle", ResourceVersion: "42", UID: "uid-cm",
			Labels:        map[string]string{"app": "x"},
			Annotations:   map[string]string{caSummaryAnnotation: `{"found":true,"certificates":9}`, "other": "y"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
		},
		Data:       map[string]string{CABundleKey: pemData, "other": "z"},
		BinaryData: map[string][]byte{"bin": []byte("b")},
	}
	out, err := transformConfigMap(in)
	if err != nil {
		t.Fatal(err)
	}
	cm := out.(*corev1.ConfigMap)
	if cm.Data != nil || cm.BinaryData != nil || cm.Labels != nil || cm.ManagedFields != nil || len(cm.Annotations) != 1 {
		t.Errorf("stub keeps more than it should: %+v", cm)
	}
	if cm.Name != "user-ca-bundle" || cm.Namespace != "clusters" || cm.ResourceVersion != "42" {
		t.Errorf("stub meta = %+v", cm.ObjectMeta)
	}
	if strings.Contains(cm.String(), "BEGIN CERTIFICATE") {
		t.Errorf("the PEM is in the stub")
	}
	// Idempotent: client-go may transform a stub again.
	if again, _ := transformConfigMap(cm); again != out || cm.Annotations[caSummaryAnnotation] == "" {
		t.Errorf("a stub transformed again: %+v", again)
	}

	// Read back through a lister, as the sync does.
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	_ = idx.Add(cm)
	noKey, _ := transformConfigMap(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "clusters", Name: "no-key", ResourceVersion: "7", UID: "uid-2"},
		Data: map[string]string{"other": "z"}})
	_ = idx.Add(noKey)
	l := listerscorev1.NewConfigMapLister(idx)
	named := func(name string) *hypershift.HostedCluster {
		return fxHostedCluster(func(hc *hypershift.HostedCluster) { hc.Spec.Configuration.Proxy.TrustedCA.Name = name })
	}
	for _, tc := range []struct {
		name string
		hc   *hypershift.HostedCluster
		want *trustedCA
		key  string
	}{
		{"found", named("user-ca-bundle"), &trustedCA{rv: "42", bundle: event.CABundle{ConfigMap: "user-ca-bundle", Found: true,
			Certificates: 1, NotAfter: notAfter, Subject: "Corp Proxy CA"}}, ";trustedCA:rv:42"},
		{"no key", named("no-key"), &trustedCA{rv: "7", bundle: event.CABundle{ConfigMap: "no-key", Found: true, Problem: caProblemNoKey}}, ";trustedCA:rv:7"},
		{"missing", named("gone"), &trustedCA{bundle: event.CABundle{ConfigMap: "gone"}}, ";trustedCA:absent"},
		{"none named", named(""), nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readTrustedCA(l, tc.hc)
			if err != nil {
				t.Fatal(err)
			}
			if (got == nil) != (tc.want == nil) || got != nil && *got != *tc.want {
				t.Errorf("trusted CA = %+v, want %+v", got, tc.want)
			}
			if k := got.key(); k != tc.key {
				t.Errorf("key = %q, want %q", k, tc.key)
			}
		})
	}
}

// A renewed bundle is news: a new state and a new event ID although the
// HostedCluster did not change.
func TestFactHostedClusterTrustedCA(t *testing.T) {
	hc := fxHostedCluster()
	obj := event.ObjectRef{Kind: "HostedCluster", Namespace: "clusters", Name: "example", UID: "uid-hc"}
	ca := func(rv string, notAfter time.Time) *trustedCA {
		return &trustedCA{rv: rv, bundle: event.CABundle{ConfigMap: "user-ca-bundle", Found: true, Certificates: 1, NotAfter: notAfter, Subject: "Corp Proxy CA"}}
	}
	before := hostedClusterFact(hc, ca("10", factT0.Add(10*24*time.Hour)))
	renewed := hostedClusterFact(hc, ca("11", factT0.Add(400*24*time.Hour)))
	gone := hostedClusterFact(hc, &trustedCA{bundle: event.CABundle{ConfigMap: "user-ca-bundle"}})
	facts := []fact{before, renewed, gone}
	states, ids := map[string]bool{}, map[string]bool{}
	for _, f := range facts {
		e, _ := factEvent(t, obj, f)
		states[f.state], ids[e.ID] = true, true
	}
	if len(states) != len(facts) || len(ids) != len(facts) {
		t.Errorf("%d states, %d IDs for %d different bundles", len(states), len(ids), len(facts))
	}
	p := renewed.payload.(event.HostedClusterState)
	if p.TrustedCA == nil || !p.TrustedCA.NotAfter.Equal(factT0.Add(400*24*time.Hour)) {
		t.Errorf("TrustedCA = %+v", p.TrustedCA)
	}
	if p := hostedClusterFact(hc, nil).payload.(event.HostedClusterState); p.TrustedCA != nil {
		t.Errorf("no ConfigMap named, TrustedCA = %+v", p.TrustedCA)
	}
}

// The endpoints workers reach and the conditions of issue 18.
func TestFactHostedClusterEndpointsAndConditions(t *testing.T) {
	svc := func(service, typ string, set func(*hypershift.ServicePublishingStrategy)) hypershift.ServicePublishingStrategyMapping {
		m := hypershift.ServicePublishingStrategyMapping{Service: service, ServicePublishingStrategy: hypershift.ServicePublishingStrategy{Type: typ}}
		if set != nil {
			set(&m.ServicePublishingStrategy)
		}
		return m
	}
	route := func(h string) func(*hypershift.ServicePublishingStrategy) {
		return func(s *hypershift.ServicePublishingStrategy) {
			s.Route = &hypershift.RoutePublishingStrategy{Hostname: h}
		}
	}
	nodePort := func(addr string, port int32) func(*hypershift.ServicePublishingStrategy) {
		return func(s *hypershift.ServicePublishingStrategy) {
			s.NodePort = &hypershift.NodePortPublishingStrategy{Address: addr, Port: port}
		}
	}
	for _, tc := range []struct {
		name     string
		services []hypershift.ServicePublishingStrategyMapping
		want     string
	}{
		{"none", nil, ""},
		{"route", []hypershift.ServicePublishingStrategyMapping{
			svc(hypershift.ServiceAPIServer, hypershift.PublishLoadBalancer, nil),
			svc(hypershift.ServiceKonnectivity, hypershift.PublishRoute, route("konnectivity-example.apps.mgmt.example")),
		}, "konnectivity-example.apps.mgmt.example"},
		{"route without hostname", []hypershift.ServicePublishingStrategyMapping{svc(hypershift.ServiceKonnectivity, hypershift.PublishRoute, nil)}, ""},
		{"nodePort", []hypershift.ServicePublishingStrategyMapping{
			svc(hypershift.ServiceIgnition, hypershift.PublishNodePort, nodePort("192.168.1.10", 30001)),
			svc(hypershift.ServiceKonnectivity, hypershift.PublishNodePort, nodePort("192.168.1.10", 30002)),
		}, "192.168.1.10:30002"},
		{"nodePort, port assigned later", []hypershift.ServicePublishingStrategyMapping{
			svc(hypershift.ServiceKonnectivity, hypershift.PublishNodePort, nodePort("192.168.1.10", 0))}, "192.168.1.10"},
		{"loadBalancer", []hypershift.ServicePublishingStrategyMapping{svc(hypershift.ServiceKonnectivity, hypershift.PublishLoadBalancer,
			func(s *hypershift.ServicePublishingStrategy) {
				s.LoadBalancer = &hypershift.LoadBalancerPublishingStrategy{Hostname: "konnectivity.example.com"}
			})}, "konnectivity.example.com"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hc := fxHostedCluster(func(hc *hypershift.HostedCluster) { hc.Spec.Services = tc.services })
			if got := hostedClusterState(hc).KonnectivityEndpoint; got != tc.want {
				t.Errorf("KonnectivityEndpoint = %q, want %q", got, tc.want)
			}
		})
	}

	hc := fxHostedCluster(func(hc *hypershift.HostedCluster) {
		hc.Status.IgnitionEndpoint = "ignition-server-clusters-example.apps.mgmt.example"
		for _, c := range []metav1.Condition{
			{Type: "IgnitionEndpointAvailable", Status: metav1.ConditionFalse, Reason: "NotFound", Message: "Ignition server deployment not found"},
			{Type: "EtcdAvailable", Status: metav1.ConditionFalse, Reason: "EtcdWaitingForQuorum"},
			{Type: "KubeVirtNodesLiveMigratable", Status: metav1.ConditionFalse, Reason: "KubeVirtNodesNotLiveMigratable"},
			{Type: "ValidKubeVirtInfraNetworkMTU", Status: metav1.ConditionFalse, Reason: "KubeVirtSuboptimalMTUDetected"},
		} {
			c.LastTransitionTime = metav1.NewTime(factT1)
			hc.Status.Conditions = append(hc.Status.Conditions, c)
		}
	})
	p := hostedClusterState(hc)
	if p.IgnitionEndpoint != "ignition-server-clusters-example.apps.mgmt.example" {
		t.Errorf("IgnitionEndpoint = %q", p.IgnitionEndpoint)
	}
	got := map[string]string{}
	for _, c := range p.Conditions {
		got[c.Type] = string(c.Status) + "/" + c.Reason
	}
	for typ, want := range map[string]string{
		"IgnitionEndpointAvailable": "False/NotFound", "EtcdAvailable": "False/EtcdWaitingForQuorum",
		"KubeVirtNodesLiveMigratable": "False/KubeVirtNodesNotLiveMigratable", "ValidKubeVirtInfraNetworkMTU": "False/KubeVirtSuboptimalMTUDetected",
	} {
		if got[typ] != want {
			t.Errorf("condition %s = %q, want %q", typ, got[typ], want)
		}
	}
}
