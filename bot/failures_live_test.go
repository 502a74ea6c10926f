package bot_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/slack-go/slack"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
)

// failureCase is one hosted-cluster failure of domain.md, made on the
// management API server as HyperShift reports it.
type failureCase struct {
	name  string
	spec  func(ns string) scenario.Cluster
	setup func(ctx context.Context, t *testing.T, c scenario.Cluster)
	rule  string
	// evidence is in the diagnosis's evidence or root cause.
	evidence string
	fixAdds  string // a host the proposed noProxy fix adds; "" for no fix
}

// Each hosted-cluster failure beyond seed 000, shaped as HyperShift writes
// it (condition types and reasons exact), goes through the real agent on a
// real API server and is diagnosed by its own rule, in its own Slack
// message, with the evidence HyperShift gave and, where one is safe, the
// fix.
func TestHostedClusterFailuresLive(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	source := "mgmt-" + ns
	// The clusters share one hosted API server without nodes: these
	// failures are all reported on the management side.
	shared := env.HostedCluster(t, scenario.Healthy(ns, "shared"))
	kubeconfig, err := shared.Server.Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	hcConditions := func(conds ...scenario.Condition) func(context.Context, *testing.T, scenario.Cluster) {
		return func(ctx context.Context, t *testing.T, c scenario.Cluster) {
			t.Helper()
			if err := scenario.SetHostedClusterConditions(ctx, env.Dynamic, c.Namespace, c.Name, conds...); err != nil {
				t.Fatal(err)
			}
		}
	}
	cases := []failureCase{
		{
			name: "etcd", spec: func(ns string) scenario.Cluster { return scenario.Healthy(ns, "etcd") },
			setup: hcConditions(scenario.Condition{Type: "EtcdAvailable", Status: "False", Reason: "EtcdWaitingForQuorum", Message: "Waiting for etcd to reach quorum"},
				scenario.Condition{Type: "ControlPlaneConnectionAvailable", Status: "False", Reason: "KASAccessFailed", Message: "failed to reach the kube-apiserver"}),
			rule: diagnose.RuleEtcdUnavailable, evidence: "EtcdWaitingForQuorum",
		},
		{
			name: "konnectivity", spec: func(ns string) scenario.Cluster { return scenario.Healthy(ns, "konn") },
			setup: hcConditions(scenario.Condition{Type: "DataPlaneConnectionAvailable", Status: "False", Reason: "KonnectivityAgentPodsNotFound", Message: "konnectivity-agent pods not found in kube-system"}),
			rule:  diagnose.RuleKonnectivityDown, evidence: "KonnectivityAgentPodsNotFound",
		},
		{
			name: "control plane connection", spec: func(ns string) scenario.Cluster { return scenario.Healthy(ns, "cpconn") },
			setup: hcConditions(scenario.Condition{Type: "ControlPlaneConnectionAvailable", Status: "False", Reason: "ConnectionCheckStale", Message: "the last connection check is older than 5m0s"}),
			rule:  diagnose.RuleControlPlaneUnreachable, evidence: "ConnectionCheckStale",
		},
		{
			name: "kubevirt", spec: func(ns string) scenario.Cluster { return scenario.Healthy(ns, "virt") },
			setup: hcConditions(scenario.Condition{Type: "KubeVirtNodesLiveMigratable", Status: "False", Reason: "KubeVirtNodesNotLiveMigratable", Message: "VM virt-a-x7k2p is not live migratable: PVC rootvolume is not shared live migration requires that all PVCs must be shared (using ReadWriteMany access mode)"}),
			rule:  diagnose.RuleKubeVirtVMs, evidence: "KubeVirtNodesNotLiveMigratable",
		},
		{
			// An expired corporate CA: the agent reads the ConfigMap the
			// proxy names and the bot sees the certificate has expired.
			name: "proxy CA expired",
			spec: func(ns string) scenario.Cluster {
				c := scenario.BehindProxy(ns, "pca")
				c.NoProxy = "kubernetes,.svc,.cluster.local,localhost,127.0.0.1,172.31.0.0/16,10.132.0.0/14"
				c.TrustedCA = "pca-ca-bundle"
				return c
			},
			setup: func(ctx context.Context, t *testing.T, c scenario.Cluster) {
				t.Helper()
				if err := scenario.SetTrustedCA(ctx, env.Kube, c.Namespace, c.TrustedCA, "Corp Expired Root CA", time.Now().Add(-48*time.Hour)); err != nil {
					t.Fatal(err)
				}
			},
			rule: diagnose.RuleProxyCAInvalid, evidence: "Corp Expired Root CA",
		},
		{
			// Ignition fetched through the proxy: the NodePool does not
			// reach the ignition endpoint and noProxy does not bypass it.
			name: "ignition through the proxy",
			spec: func(ns string) scenario.Cluster {
				c := scenario.BehindProxy(ns, "ign")
				c.NoProxy = "kubernetes,.svc,.cluster.local,localhost,127.0.0.1,172.31.0.0/16,10.132.0.0/14"
				return c
			},
			setup: func(ctx context.Context, t *testing.T, c scenario.Cluster) {
				t.Helper()
				if err := scenario.SetHostedClusterStatusField(ctx, env.Dynamic, c.Namespace, c.Name, "ignitionEndpoint", "ignition-server-"+c.Namespace+"-ign.apps.mgmt.example.com"); err != nil {
					t.Fatal(err)
				}
				if err := scenario.NodePool(ctx, env.Dynamic, c, "ign-np", 2, true); err != nil {
					t.Fatal(err)
				}
				if err := scenario.SetNodePoolConditions(ctx, env.Dynamic, c.Namespace, "ign-np",
					scenario.Condition{Type: "ReachedIgnitionEndpoint", Status: "False", Reason: "ignitionNotReached", Message: "2 of 2 machines have not reached the ignition endpoint"}); err != nil {
					t.Fatal(err)
				}
			},
			rule: diagnose.RuleIgnitionUnreachable, evidence: "ignitionNotReached", fixAdds: "ignition-server-" + ns + "-ign.apps.mgmt.example.com",
		},
	}
	var clusters []scenario.Cluster
	for _, tc := range cases {
		c := tc.spec(ns)
		createHostedSharing(ctx, t, c, kubeconfig)
		clusters = append(clusters, c)
	}
	p := startPipeline(t, source)
	for i, tc := range cases {
		tc.setup(ctx, t, clusters[i])
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			k := diagnose.Key{Source: source, Cluster: event.ClusterRef{Namespace: ns, Name: clusters[i].Name}}
			var d diagnose.Diagnosis
			testenv.Eventually(t, 90*time.Second, tc.rule+" for "+k.String(), func() bool {
				ds, _ := p.bot.Diagnose(k)
				for _, x := range ds {
					if x.Rule == tc.rule {
						d = x
						return true
					}
				}
				return false
			})
			text := d.RootCause
			for _, e := range d.Evidence {
				text += "\n" + e.Text
			}
			if !strings.Contains(text, tc.evidence) {
				t.Errorf("%s: evidence lacks %q:\n%s", tc.rule, tc.evidence, text)
			}
			if len(d.NextSteps) == 0 {
				t.Errorf("%s: no next steps", tc.rule)
			}
			switch {
			case tc.fixAdds != "" && (d.Fix == nil || !slices.Contains(d.Fix.Add, tc.fixAdds)):
				t.Errorf("%s: fix %+v, want it to add %s", tc.rule, d.Fix, tc.fixAdds)
			case tc.fixAdds == "" && d.Fix != nil:
				t.Errorf("%s: unexpected fix %+v", tc.rule, d.Fix)
			}
			// Its own Slack message names the cluster and gives the root
			// cause (the header cuts a title this long, names and all).
			cause := d.Short()
			cause = chatops.EscapeText(cause[:min(len(cause), 40)])
			p.slack.WaitFor(t, 60*time.Second, func(r *slackrec.Recorder) bool {
				for _, m := range r.Messages(channel) {
					if m.ThreadTS != "" || !strings.Contains(m.Text, k.Cluster.String()) {
						continue
					}
					var blocks slack.Blocks
					if err := json.Unmarshal(m.Blocks, &blocks); err != nil {
						t.Fatal(err)
					}
					var body strings.Builder
					for _, b := range blocks.BlockSet {
						if sec, ok := b.(*slack.SectionBlock); ok && sec.Text != nil {
							body.WriteString(sec.Text.Text + "\n")
						}
					}
					if strings.Contains(body.String(), cause) {
						return true
					}
				}
				return false
			})
		})
	}
}

// createHostedSharing creates a HostedCluster whose admin kubeconfig
// points at an existing hosted API server, gone with the test.
func createHostedSharing(ctx context.Context, t *testing.T, c scenario.Cluster, kubeconfig []byte) {
	t.Helper()
	if _, err := scenario.Create(ctx, env.Kube, env.Dynamic, c, kubeconfig); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		if err := env.Dynamic.Resource(hypershift.HostedClusterGVR).Namespace(c.Namespace).Delete(ctx, c.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete HostedCluster %s/%s: %v", c.Namespace, c.Name, err)
		}
	})
}

// Seed 000 with every downstream symptom HyperShift reports on the way —
// ControlPlaneConnectionAvailable=False (KASAccessFailed),
// DataPlaneConnectionAvailable=False (NoWorkerNodesAvailable), every node
// NotReady, the operator crashlooping — is ONE incident naming the proxy,
// through the real agent.
func TestSeed000AllSymptomsOneIncidentLive(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	spec := scenario.BehindProxy(ns, "full")
	hosted := env.HostedCluster(t, spec)
	nodes, err := scenario.Nodes(ctx, hosted.Kube, "full-np", 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if err := scenario.KubeAPIServerProxy(ctx, hosted.Kube, n, scenario.ModeTunnel); err != nil {
			t.Fatal(err)
		}
	}
	pod, err := scenario.ServiceCAOperator(ctx, hosted.Kube, nodes[0])
	if err != nil {
		t.Fatal(err)
	}
	source := "mgmt-" + ns
	p := startPipeline(t, source)
	if err := scenario.CrashLoop(ctx, hosted.Kube, pod.Namespace, pod.Name, 4, scenario.SeedConnectivityMessage); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if err := scenario.SetNodeReady(ctx, hosted.Kube, n, corev1.ConditionFalse, "KubeletNotReady", "container runtime network not ready"); err != nil {
			t.Fatal(err)
		}
	}
	if err := scenario.SetHostedClusterConditions(ctx, env.Dynamic, ns, "full",
		scenario.Condition{Type: "ControlPlaneConnectionAvailable", Status: "False", Reason: "KASAccessFailed", Message: "failed to reach the kube-apiserver from the data plane"},
		scenario.Condition{Type: "DataPlaneConnectionAvailable", Status: "False", Reason: "NoWorkerNodesAvailable", Message: "No worker nodes available"}); err != nil {
		t.Fatal(err)
	}
	k := diagnose.Key{Source: source, Cluster: event.ClusterRef{Namespace: ns, Name: "full"}}
	testenv.Eventually(t, 90*time.Second, "the proxy-tunnel diagnosis with the conditions as evidence", func() bool {
		ds, _ := p.bot.Diagnose(k)
		if len(ds) != 1 || ds[0].Rule != diagnose.RuleProxyTunnel {
			return false
		}
		var ev strings.Builder
		for _, e := range ds[0].Evidence {
			ev.WriteString(e.Text + "\n")
		}
		return strings.Contains(ev.String(), "KASAccessFailed") && strings.Contains(ev.String(), "NoWorkerNodesAvailable") &&
			strings.Count(ev.String(), "NotReady") >= 1
	})
	open := 0
	for _, inc := range p.bot.Incidents() {
		if inc.Cluster == k && inc.Open() {
			open++
		}
	}
	if open != 1 {
		t.Errorf("%d open incidents for the seed cluster, want 1", open)
	}
	// Slack: one root message for the cluster, naming the proxy.
	p.slack.WaitFor(t, 60*time.Second, func(r *slackrec.Recorder) bool {
		roots := 0
		for _, m := range r.Messages(channel) {
			if m.ThreadTS == "" && strings.Contains(m.Text, ns+"/full") {
				roots++
			}
		}
		return roots == 1
	})
	for _, m := range p.slack.Messages(channel) {
		if m.ThreadTS == "" && strings.Contains(m.Text, ns+"/full") && !strings.Contains(m.Text, "tunnelled through the HTTPS proxy") {
			t.Errorf("root message does not name the proxy: %s", m.Text)
		}
	}
}
