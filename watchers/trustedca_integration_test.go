package watchers_test

import (
	"context"
	"crypto/x509/pkix"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv/syncbuf"
	"github.com/hcpbot/hcpbot/internal/testenv/testcert"
	"github.com/hcpbot/hcpbot/watchers"
)

// pemBody is a line of the PEM's base64 body: what would show if the
// bundle leaked anywhere.
func pemBody(pemText string) string {
	lines := strings.Split(strings.TrimSpace(pemText), "\n")
	return lines[len(lines)/2]
}

// The proxy's trusted CA ConfigMap through the real agent on a real API
// server: the HostedCluster's state carries a summary of it (a bundle
// that expires in 10 days), a renewed bundle (400 days) is a new event
// with the new NotAfter although the HostedCluster did not change, and a
// deleted ConfigMap is stated as not found. The PEM appears neither in
// the agent's logs nor on the stream.
func TestAgentTrustedCABundle(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	s := newStream(t)
	ns := env.Namespace(t)
	spec := scenario.BehindProxy(ns, "trusted")
	cluster := ns + "/trusted"
	cms := env.Kube.CoreV1().ConfigMaps(ns)

	soon, soonAfter := testcert.CA(t, pkix.Name{CommonName: "Corp Proxy CA 2026"}, 10*24*time.Hour)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: spec.TrustedCA},
		Data: map[string]string{watchers.CABundleKey: soon}}
	if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	env.HostedCluster(t, spec)

	// Everything the agent logs, at debug level, into logs (shown when
	// the test fails).
	logs := &syncbuf.Buffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent log:\n%s", logs.String())
			for _, e := range s.matching(isType[event.HostedClusterState](cluster)) {
				p, _ := e.DecodePayload()
				t.Logf("published %s: trusted CA %+v", e.ID, p.(event.HostedClusterState).TrustedCA)
			}
		}
	})
	startReplicaLogging(t, s, "agent-a", "mgmt-"+ns, zerolog.New(logs).Level(zerolog.DebugLevel).With().Timestamp().Logger())

	bundle := func(match func(*event.CABundle) bool) func(event.Event, event.Payload) bool {
		return func(e event.Event, p event.Payload) bool {
			hc, ok := p.(event.HostedClusterState)
			return ok && e.Cluster != nil && e.Cluster.String() == cluster && hc.TrustedCA != nil && match(hc.TrustedCA)
		}
	}
	expiring := func(at time.Time) func(*event.CABundle) bool {
		return func(b *event.CABundle) bool { return b.Found && b.NotAfter.Equal(at) }
	}
	got := s.waitFor(t, "the HostedCluster with the 10-day bundle", 1, bundle(expiring(soonAfter)))
	p, _ := got[0].DecodePayload()
	if b := p.(event.HostedClusterState).TrustedCA; *b != (event.CABundle{ConfigMap: spec.TrustedCA, Found: true, Certificates: 1,
		NotAfter: soonAfter, Subject: "Corp Proxy CA 2026"}) {
		t.Errorf("summary = %+v", b)
	}

	// Renewed: only the ConfigMap changes.
	later, laterAfter := testcert.CA(t, pkix.Name{CommonName: "Corp Proxy CA 2027"}, 400*24*time.Hour)
	cm.Data[watchers.CABundleKey] = later
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	renewed := s.waitFor(t, "a new HostedCluster event with the 400-day bundle", 1, bundle(expiring(laterAfter)))
	if renewed[0].ID == got[0].ID {
		t.Errorf("the renewed bundle repeats the event ID %s", got[0].ID)
	}

	if err := cms.Delete(ctx, cm.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "the HostedCluster with its ConfigMap not found", 1, bundle(func(b *event.CABundle) bool {
		return !b.Found && b.ConfigMap == spec.TrustedCA && b.Certificates == 0
	}))

	// Never the PEM: not in the logs, not on the stream.
	for _, secret := range []string{"BEGIN CERTIFICATE", pemBody(soon), pemBody(later)} {
		if strings.Contains(logs.String(), secret) {
			t.Errorf("the agent logged the bundle (%q)", secret)
		}
		if leaked := s.matching(func(e event.Event, _ event.Payload) bool {
			data, _ := event.Encode(e)
			return strings.Contains(string(data), secret)
		}); len(leaked) > 0 {
			t.Errorf("the bundle (%q) is in event %s", secret, leaked[0].ID)
		}
	}
	if logs.String() == "" {
		t.Error("nothing captured from the agent's log: the check above proves nothing")
	}
}

// The conditions and endpoints of issue 18, written as HyperShift writes
// them, reach the HostedCluster's event: the konnectivity Route hostname
// from spec.services, status.ignitionEndpoint, and IgnitionEndpointAvailable
// (NotFound: the ignition server Deployment is missing), EtcdAvailable,
// KubeVirtNodesLiveMigratable and ValidKubeVirtInfraNetworkMTU with
// HyperShift's reasons.
func TestAgentPublishesIgnitionKonnectivityAndConditions(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	s := newStream(t)
	ns := env.Namespace(t)
	spec := scenario.Healthy(ns, "endpoints")
	apps := ".apps.mgmt.example"
	spec.Services = []scenario.Service{
		{Service: hypershift.ServiceAPIServer, Type: hypershift.PublishLoadBalancer},
		{Service: hypershift.ServiceOAuthServer, Type: hypershift.PublishRoute},
		{Service: hypershift.ServiceKonnectivity, Type: hypershift.PublishRoute, Hostname: "konnectivity-" + ns + "-endpoints" + apps},
		{Service: hypershift.ServiceIgnition, Type: hypershift.PublishRoute, Hostname: "ignition-server-" + ns + "-endpoints" + apps},
	}
	env.HostedCluster(t, spec)
	cluster := ns + "/endpoints"
	startReplica(t, s, "agent-a", "mgmt-"+ns)
	state := func(match func(event.HostedClusterState) bool) func(event.Event, event.Payload) bool {
		return func(e event.Event, p event.Payload) bool {
			hc, ok := p.(event.HostedClusterState)
			return ok && e.Cluster != nil && e.Cluster.String() == cluster && match(hc)
		}
	}
	got := s.waitFor(t, "the HostedCluster state", 1, state(func(event.HostedClusterState) bool { return true }))
	p, _ := got[0].DecodePayload()
	if hc := p.(event.HostedClusterState); hc.KonnectivityEndpoint != "konnectivity-"+ns+"-endpoints"+apps || hc.IgnitionEndpoint != "" {
		t.Errorf("endpoints before the ignition server: konnectivity %q, ignition %q", hc.KonnectivityEndpoint, hc.IgnitionEndpoint)
	}

	if err := scenario.SetStatus(ctx, env.Dynamic, ns, "endpoints", "ignition-server-"+ns+"-endpoints"+apps,
		scenario.Condition{Type: "IgnitionEndpointAvailable", Status: "False", Reason: "NotFound", Message: "Ignition server deployment not found"},
		scenario.Condition{Type: "EtcdAvailable", Status: "False", Reason: "EtcdWaitingForQuorum", Message: "Waiting for etcd to reach quorum"},
		scenario.Condition{Type: "KubeVirtNodesLiveMigratable", Status: "False", Reason: "KubeVirtNodesNotLiveMigratable",
			Message: "Non-live-migratable node(s) have been found on the following NodePool(s) attached to this Hosted Cluster: endpoints-np. " +
				"It is recommended to use live-migratable nodes in order to improve cluster stability and downtime. " +
				"Check the reason for the non-live-migratability in the corresponding NodePool(s)."},
		scenario.Condition{Type: "ValidKubeVirtInfraNetworkMTU", Status: "False", Reason: "KubeVirtSuboptimalMTUDetected",
			Message: "A suboptimal MTU size has been detected. Due to performance, we recommend setting an MTU of 9000 bytes or greater for the " +
				"infra cluster that hosts the KubeVirt VirtualMachines."},
	); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"IgnitionEndpointAvailable":    "False/NotFound",
		"EtcdAvailable":                "False/EtcdWaitingForQuorum",
		"KubeVirtNodesLiveMigratable":  "False/KubeVirtNodesNotLiveMigratable",
		"ValidKubeVirtInfraNetworkMTU": "False/KubeVirtSuboptimalMTUDetected",
	}
	s.waitFor(t, "the ignition endpoint and the new conditions", 1, state(func(hc event.HostedClusterState) bool {
		if hc.IgnitionEndpoint != "ignition-server-"+ns+"-endpoints"+apps || hc.KonnectivityEndpoint == "" {
			return false
		}
		seen := 0
		for _, c := range hc.Conditions {
			if want[c.Type] == string(c.Status)+"/"+c.Reason {
				seen++
			}
		}
		return seen == len(want)
	}))
}
