package main

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv"
)

// agent.serviceNodePortRange takes effect in `hcpbot all`: with the
// management cluster's range given as 30000-30099,
// `/hcp expose ... nodeports 30100` (inside Kubernetes' default range) is
// refused when proposed (the agent's preflight, issue 29), before anyone
// approves and before anything is written, and the reply names that
// range and the command on the nearest free port inside it.
func TestAllAgentNodePortRange(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	ns, hosted, _, kubeconfig := allCluster(t, "range")
	app := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 8080}}},
	}
	if _, err := hosted.Kube.CoreV1().Services("default").Create(ctx, app, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	hcp, logs := startAllForActions(t, "range", ns, kubeconfig, func(signer string) string {
		return "  trustedKeys: [" + signer + "]\n  requireFourEyes: true\n  serviceNodePortRange: 30000-30099\n"
	}, "  approvers: [U0RANGE001, U0RANGE002]\n  fourEyes: true\n")
	hostedBefore, err := scenario.ServiceVersions(ctx, hosted.Kube)
	if err != nil {
		t.Fatal(err)
	}
	mgmtBefore, err := scenario.ServiceVersions(ctx, env.Kube)
	if err != nil {
		t.Fatal(err)
	}

	// Until the bot knows the cluster and the agent answers (a proposal
	// made before that carries a note and stays pending).
	var reply string
	testenv.Eventually(t, 60*time.Second, "exposure refused when proposed", func() bool {
		reply = hcp.run(ctx, "expose "+ns+"/range default/web nodeports 30100", "U0RANGE001", func(s string) bool {
			return actionIDPattern.MatchString(s) || strings.Contains(s, "Unknown cluster") || strings.Contains(s, "Cannot propose")
		})
		return strings.Contains(reply, "Cannot propose")
	})
	for _, want := range []string{"30100 is outside the node-port range 30000-30099", "nodeports 30099`"} {
		if !strings.Contains(reply, want) {
			t.Errorf("expose answered %q, want %q\n%s", reply, want, tail(logs.String(), 3000))
		}
	}
	if actionIDPattern.MatchString(reply) {
		t.Errorf("a refused exposure names a proposal: %q", reply)
	}
	if got, err := scenario.ServiceVersions(ctx, hosted.Kube); err != nil || !maps.Equal(got, hostedBefore) {
		t.Errorf("hosted Services changed (%v):\n got %v\nwant %v", err, got, hostedBefore)
	}
	if got, err := scenario.ServiceVersions(ctx, env.Kube); err != nil || !maps.Equal(got, mgmtBefore) {
		t.Errorf("management Services changed (%v):\n got %v\nwant %v", err, got, mgmtBefore)
	}
}
