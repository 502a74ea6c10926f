package bot_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv"
	"github.com/hcpbot/hcpbot/watchers"
)

// The hosted cluster's own evidence, read by the real agent from a real
// hosted API server, sharpens the conditions HyperShift writes on the
// HostedCluster (openshift/hypershift 3ee9615):
//   - konnectivity: DataPlaneConnectionAvailable=False,
//     KonnectivityAgentPodsNotFound, "failed to read konnectivity-agent
//     logs from data plane" (resources.go:1710-1713: agents run, the
//     tunnel to the kubelets does not), with the aggregated APIService
//     v1.apps.openshift.io not Available, as HyperShift registers it on
//     the selector-less Service default/openshift-apiserver
//     (…/resources/manifests/openshift_apiserver.go:12-51). kube-aggregator
//     writes the status itself: with no endpoints behind the Service it
//     says EndpointsNotFound without dialling anything
//     (remote_available_controller.go); through a broken tunnel it would
//     say FailedDiscoveryCheck (hypershift#313).
//   - the control-plane connection: ControlPlaneConnectionAvailable=False,
//     ConnectionCheckStale (resources.go:1928-1933), with the record
//     kube-system/control-plane-connectivity-check whose lastSucceeded
//     stopped 20 minutes ago (the checker stamps "%Y-%m-%dT%H:%M:%SZ",
//     resources.go:1762-1782).
func TestHostedEvidenceLive(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	hosted := env.HostedCluster(t, scenario.Healthy(ns, "evid"))

	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "openshift-apiserver"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 443}}}}
	if _, err := hosted.Kube.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	apiService := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": "v1.apps.openshift.io"},
		"spec": map[string]any{
			"group": "apps.openshift.io", "version": "v1", "groupPriorityMinimum": int64(9900), "versionPriority": int64(15),
			"insecureSkipTLSVerify": true,
			"service":               map[string]any{"namespace": "default", "name": "openshift-apiserver", "port": int64(443)},
		},
	}}
	if _, err := hosted.Dynamic.Resource(watchers.APIServiceGVR).Create(ctx, apiService, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	last := time.Now().Add(-20 * time.Minute).UTC().Format("2006-01-02T15:04:05Z")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "control-plane-connectivity-check"},
		Data: map[string]string{"lastSucceeded": last}}
	if _, err := hosted.Kube.CoreV1().ConfigMaps("kube-system").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := scenario.SetHostedClusterConditions(ctx, env.Dynamic, ns, "evid",
		scenario.Condition{Type: "DataPlaneConnectionAvailable", Status: "False", Reason: "KonnectivityAgentPodsNotFound",
			Message: "failed to read konnectivity-agent logs from data plane"},
		scenario.Condition{Type: "ControlPlaneConnectionAvailable", Status: "False", Reason: "ConnectionCheckStale",
			Message: "Data plane to control plane connection is not available: last successful check was at " + last + ", which is older than 5 minutes"},
	); err != nil {
		t.Fatal(err)
	}

	source := "mgmt-" + ns
	p := startPipeline(t, source)
	k := diagnose.Key{Source: source, Cluster: event.ClusterRef{Namespace: ns, Name: "evid"}}
	want := map[string]string{
		diagnose.RuleKonnectivityDown:        "v1.apps.openshift.io",
		diagnose.RuleControlPlaneUnreachable: "lastSucceeded " + last + ", stale",
	}
	var seen string
	testenv.Eventually(t, 90*time.Second, "konnectivity-down with the APIService, control-plane-unreachable with the record", func() bool {
		ds, _ := p.bot.Diagnose(k)
		found := 0
		seen = ""
		for _, d := range ds {
			text := d.Rule + ": " + d.RootCause
			for _, e := range d.Evidence {
				text += "\n  " + e.Kind + " " + e.Object + ": " + e.Text
			}
			seen += text + "\n"
			if w, ok := want[d.Rule]; ok && strings.Contains(text, w) {
				found++
			}
		}
		return found == len(want)
	})
	t.Logf("diagnoses:\n%s", seen)
}
