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

	"github.com/hcpbot/hcpbot/bot/blockkit"
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
	// also are more texts the evidence or root cause holds.
	also    []string
	fixAdds string // a host the proposed noProxy fix adds; "" for no fix
	// waits is a text the fix's Waits holds (a paused cluster); "" for none.
	waits string
}

// The connection conditions' shapes as the hosted-cluster-config-operator
// writes them (control-plane-operator/hostedclusterconfigoperator/
// controllers/resources/resources.go at openshift/hypershift 3ee9615).
var (
	cpNeverSucceeded = scenario.Condition{Type: "ControlPlaneConnectionAvailable", Status: "False", Reason: "KASAccessFailed",
		Message: "Data plane to control plane connection is not available: no successful connectivity check recorded"} // :1911-1918
	dpNoWorkers = scenario.Condition{Type: "DataPlaneConnectionAvailable", Status: "Unknown", Reason: "NoWorkerNodesAvailable", Message: "No worker nodes available"}                                         // :1675-1680
	cpNoWorkers = scenario.Condition{Type: "ControlPlaneConnectionAvailable", Status: "Unknown", Reason: "NoWorkerNodesAvailable", Message: "No worker nodes available to verify control plane connectivity"} // :1888-1892
	// support/util/pausereconcile.go:52-59.
	pausedForever = scenario.Condition{Type: "ReconciliationActive", Status: "False", Reason: "ReconciliationPaused", Message: "Reconciliation paused until field removed"}
)

// countFailed is the HCCO's Unknown/ReconcileError on both connection
// conditions when it cannot list the hosted cluster's Nodes
// (resources.go:1668-1673, 1882-1887).
func countFailed(typ string) scenario.Condition {
	return scenario.Condition{Type: typ, Status: "Unknown", Reason: "ReconcileError",
		Message: "Unable to count worker nodes: failed to list nodes: Get \"https://kube-apiserver:6443/api/v1/nodes\": dial tcp 172.30.0.10:6443: connect: connection refused"}
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
				cpNeverSucceeded),
			rule: diagnose.RuleEtcdUnavailable, evidence: "EtcdWaitingForQuorum",
		},
		{
			name: "konnectivity", spec: func(ns string) scenario.Cluster { return scenario.Healthy(ns, "konn") },
			// Agents Running, their logs unreadable through the tunnel (resources.go:1710-1713).
			setup: hcConditions(scenario.Condition{Type: "DataPlaneConnectionAvailable", Status: "False", Reason: "KonnectivityAgentPodsNotFound", Message: "failed to read konnectivity-agent logs from data plane"}),
			rule:  diagnose.RuleKonnectivityDown, evidence: "KonnectivityAgentPodsNotFound", also: []string{"konnectivity-agent pods are Running"},
		},
		{
			name: "control plane connection", spec: func(ns string) scenario.Cluster { return scenario.Healthy(ns, "cpconn") },
			// resources.go:1928-1933: the workers fail to reach the API server.
			setup: hcConditions(scenario.Condition{Type: "ControlPlaneConnectionAvailable", Status: "False", Reason: "ConnectionCheckStale",
				Message: "Data plane to control plane connection is not available: last successful check was at 2026-12-06T10:00:00Z, which is older than 5 minutes"}),
			rule: diagnose.RuleControlPlaneUnreachable, evidence: "ConnectionCheckStale", also: []string{"the stamp stopped moving because their requests fail"},
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
		{
			// hostedcontrolplane_controller.go:797-803: the resolver's error.
			name: "external DNS", spec: func(ns string) scenario.Cluster { return scenario.Healthy(ns, "dns") },
			setup: hcConditions(scenario.Condition{Type: "ExternalDNSReachable", Status: "False", Reason: "ExternalDNSHostNotReachable",
				Message: "lookup api.dns.hypershift.example.com on 172.30.0.10:53: no such host"}),
			rule: diagnose.RuleHostedAPIUnreachable, evidence: "no such host", also: []string{"ExternalDNSReachable=False"},
		},
		{
			// hostedcontrolplane_controller.go:929-931, 1036-1043.
			name: "API load balancer", spec: func(ns string) scenario.Cluster { return scenario.Healthy(ns, "kaslb") },
			setup: hcConditions(scenario.Condition{Type: "Available", Status: "False", Reason: "KASLoadBalancerNotReachable",
				Message: "APIServer endpoint api.kaslb.hypershift.example.com is not healthy (status 503): failing health checks: etcd"}),
			rule: diagnose.RuleHostedAPIUnreachable, evidence: "KASLoadBalancerNotReachable", also: []string{"health check of the API endpoint fails"},
		},
		{
			// hostedcontrolplane_controller.go:935-937, during bring-up.
			name: "components", spec: func(ns string) scenario.Cluster { return scenario.Healthy(ns, "comps") },
			setup: hcConditions(scenario.Condition{Type: "Available", Status: "False", Reason: "ComponentsNotAvailable",
				Message: "Waiting for components to be available: kube-controller-manager, openshift-apiserver"}),
			rule: diagnose.RuleControlPlaneComponents, evidence: "kube-controller-manager, openshift-apiserver",
		},
		{
			// hostedcluster_controller.go:1146-1152.
			name: "ignition server missing", spec: func(ns string) scenario.Cluster { return scenario.Healthy(ns, "igns") },
			setup: hcConditions(scenario.Condition{Type: "IgnitionEndpointAvailable", Status: "False", Reason: "NotFound", Message: "Ignition server deployment not found"}),
			rule:  diagnose.RuleIgnitionUnreachable, evidence: "ignition-server Deployment does not exist",
		},
		{
			// proxy/validation.go:61-62: NotBefore in the future, not expired.
			name: "proxy CA not yet valid", spec: func(ns string) scenario.Cluster { return scenario.Healthy(ns, "pcanyv") },
			setup: hcConditions(scenario.Condition{Type: "ValidProxyConfiguration", Status: "False", Reason: "ProxyCABundleInvalid",
				Message: "Proxy CA bundle is invalid for HostedCluster " + ns + "/pcanyv: a configured certificate in the ca bundle is not yet valid: Corp Future Root CA"}),
			rule: diagnose.RuleProxyCAInvalid, evidence: "not valid yet", also: []string{"It is not expired"},
		},
		{
			// hostedcluster/network_policies.go:1099-1119, with a
			// pausedUntil the CRD accepts and RFC3339 does not
			// (pausereconcile.go:71-73): not paused.
			name: "kubevirt network policy RBAC", spec: func(ns string) scenario.Cluster { return scenario.Healthy(ns, "netpol") },
			setup: func(ctx context.Context, t *testing.T, c scenario.Cluster) {
				t.Helper()
				if _, err := scenario.SetPausedUntil(ctx, env.Dynamic, hypershift.HostedClusterGVR, c.Namespace, c.Name, new("2099-01-01T00:00:00")); err != nil {
					t.Fatal(err)
				}
				hcConditions(scenario.Condition{Type: "ValidKubeVirtInfraNetworkPolicyRBAC", Status: "False", Reason: "InfraClusterNetworkReadFailed",
					Message: "The external infrastructure kubeconfig lacks permission to read networks.config.openshift.io/cluster. The virt-launcher NetworkPolicy has been created without CIDR-based egress restrictions, resulting in weaker tenant isolation. Grant a ClusterRole with get on networks.config.openshift.io to the infra service account for full isolation. Error: networks.config.openshift.io \"cluster\" is forbidden"},
					scenario.Condition{Type: "ReconciliationActive", Status: "True", Reason: "InvalidPausedUntilValue", Message: "Invalid value provided for PausedUntil field"})(ctx, t, c)
			},
			rule: diagnose.RuleKubeVirtVMs, evidence: "weaker tenant isolation", also: []string{"InvalidPausedUntilValue"},
		},
		{
			// The HCCO cannot list the hosted cluster's nodes.
			name: "connections not evaluated", spec: func(ns string) scenario.Cluster { return scenario.Healthy(ns, "blind") },
			setup: hcConditions(countFailed("DataPlaneConnectionAvailable"), countFailed("ControlPlaneConnectionAvailable")),
			rule:  diagnose.RuleConnectionUnknown, evidence: "Unable to count worker nodes",
		},
		{
			// The HCCO has not created the connectivity-check ConfigMap
			// yet (resources.go:1894-1903); the shared hosted API server
			// indeed has none, and the agent says so.
			name: "connectivity check not reconciled", spec: func(ns string) scenario.Cluster { return scenario.Healthy(ns, "nocheck") },
			setup: hcConditions(scenario.Condition{Type: "ControlPlaneConnectionAvailable", Status: "Unknown", Reason: "ConfigMapNotFound",
				Message: "Connectivity check ConfigMap kube-system/control-plane-connectivity-check not found; the hosted cluster config operator may not have reconciled it yet"}),
			rule: diagnose.RuleConnectionUnknown, evidence: "ConfigMapNotFound",
		},
		{
			// A day-2 cluster whose workers are all gone (this hosted API
			// server has no Node), paused with "true": both connection
			// conditions Unknown/NoWorkerNodesAvailable, frozen.
			name: "no workers, paused", spec: func(ns string) scenario.Cluster { return scenario.Healthy(ns, "noworkers") },
			setup: func(ctx context.Context, t *testing.T, c scenario.Cluster) {
				t.Helper()
				if _, err := scenario.SetPausedUntil(ctx, env.Dynamic, hypershift.HostedClusterGVR, c.Namespace, c.Name, new("true")); err != nil {
					t.Fatal(err)
				}
				hcConditions(dpNoWorkers, cpNoWorkers, pausedForever)(ctx, t, c)
			},
			rule: diagnose.RuleNoWorkers, evidence: "NoWorkerNodesAvailable",
			also: []string{"Reconciliation is paused", "[frozen while paused]", `oc patch -n ` + ns + ` hostedclusters/noworkers --type=merge -p '{"spec":{"pausedUntil":null}}'`},
		},
		{
			// Ignition through the proxy on a cluster paused until a
			// future RFC3339 time: the fix waits for the pause.
			name: "ignition through the proxy, paused",
			spec: func(ns string) scenario.Cluster {
				c := scenario.BehindProxy(ns, "ignp")
				c.NoProxy = "kubernetes,.svc,.cluster.local,localhost,127.0.0.1,172.31.0.0/16,10.132.0.0/14"
				return c
			},
			setup: func(ctx context.Context, t *testing.T, c scenario.Cluster) {
				t.Helper()
				until := time.Now().Add(48 * time.Hour).UTC().Format(time.RFC3339)
				if _, err := scenario.SetPausedUntil(ctx, env.Dynamic, hypershift.HostedClusterGVR, c.Namespace, c.Name, new(until)); err != nil {
					t.Fatal(err)
				}
				if err := scenario.SetHostedClusterStatusField(ctx, env.Dynamic, c.Namespace, c.Name, "ignitionEndpoint", "ignition-server-"+c.Namespace+"-ignp.apps.mgmt.example.com"); err != nil {
					t.Fatal(err)
				}
				hcConditions(scenario.Condition{Type: "ReconciliationActive", Status: "False", Reason: "ReconciliationPaused", Message: "Reconciliation paused until: " + until})(ctx, t, c)
				if err := scenario.NodePool(ctx, env.Dynamic, c, "ignp-np", 2, true); err != nil {
					t.Fatal(err)
				}
				if err := scenario.SetNodePoolConditions(ctx, env.Dynamic, c.Namespace, "ignp-np",
					scenario.Condition{Type: "ReachedIgnitionEndpoint", Status: "False", Reason: "ignitionNotReached", Message: "2 of 2 machines have not reached the ignition endpoint"}); err != nil {
					t.Fatal(err)
				}
			},
			rule: diagnose.RuleIgnitionUnreachable, evidence: "ignitionNotReached", also: []string{"Reconciliation is paused"},
			fixAdds: "ignition-server-" + ns + "-ignp.apps.mgmt.example.com", waits: `oc patch -n ` + ns + ` hostedclusters/ignp --type=merge -p '{"spec":{"pausedUntil":null}}'`,
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
			for _, want := range append([]string{tc.evidence}, tc.also...) {
				if !strings.Contains(text+"\n"+strings.Join(d.NextSteps, "\n"), want) {
					t.Errorf("%s: evidence, root cause and next steps lack %q:\n%s", tc.rule, want, text)
				}
			}
			if tc.waits != "" && (d.Fix == nil || !strings.Contains(d.Fix.Waits, tc.waits)) {
				t.Errorf("%s: the fix does not wait for the pause with %q: %+v", tc.rule, tc.waits, d.Fix)
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
			cause = blockkit.EscapeText(cause[:min(len(cause), 40)])
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
// every node NotReady, so both connection conditions
// Unknown/NoWorkerNodesAvailable (resources.go:1675-1680, 1888-1892), the
// operator crashlooping — is ONE incident naming the proxy, through the
// real agent.
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
	if err := scenario.SetHostedClusterConditions(ctx, env.Dynamic, ns, "full", cpNoWorkers, dpNoWorkers); err != nil {
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
		return strings.Contains(ev.String(), "ControlPlaneConnectionAvailable=Unknown (NoWorkerNodesAvailable)") &&
			strings.Contains(ev.String(), "DataPlaneConnectionAvailable=Unknown (NoWorkerNodesAvailable)") &&
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

// A day-2 cluster that loses every worker, as HyperShift reports it:
// both connection conditions go True → Unknown/NoWorkerNodesAvailable
// (the lastTransitionTime moves with the status, here three days ago),
// the nodes are NotReady, then the hosted-cluster-config-operator cannot
// list the nodes: Unknown/ReconcileError with the lastTransitionTime
// unchanged (resources.go:1668-1680, 1882-1892; meta.SetStatusCondition).
// The incident is nodes-notready, critical, and its Since is the cluster's
// own record, not the bot's opening.
func TestDay2LostEveryWorkerLive(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	hosted := env.HostedCluster(t, scenario.Healthy(ns, "day2"))
	nodes, err := scenario.Nodes(ctx, hosted.Kube, "day2-np", 2)
	if err != nil {
		t.Fatal(err)
	}
	lost := time.Now().Add(-72 * time.Hour).UTC().Truncate(time.Second)
	healthy := []scenario.Condition{
		{Type: "DataPlaneConnectionAvailable", Status: "True", Reason: "AsExpected", Message: "All is well", Since: lost.Add(-7 * 24 * time.Hour)},
		{Type: "ControlPlaneConnectionAvailable", Status: "True", Reason: "AsExpected", Message: "All is well", Since: lost.Add(-7 * 24 * time.Hour)},
	}
	if err := scenario.SetHostedClusterConditions(ctx, env.Dynamic, ns, "day2", healthy...); err != nil {
		t.Fatal(err)
	}
	source := "mgmt-" + ns
	p := startPipeline(t, source)
	for _, n := range nodes {
		if err := scenario.SetNodeReady(ctx, hosted.Kube, n, corev1.ConditionUnknown, "NodeStatusUnknown", "Kubelet stopped posting node status."); err != nil {
			t.Fatal(err)
		}
	}
	dp, cp := dpNoWorkers, cpNoWorkers
	dp.Since, cp.Since = lost, lost
	if err := scenario.SetHostedClusterConditions(ctx, env.Dynamic, ns, "day2", dp, cp); err != nil {
		t.Fatal(err)
	}
	k := diagnose.Key{Source: source, Cluster: event.ClusterRef{Namespace: ns, Name: "day2"}}
	testenv.Eventually(t, 90*time.Second, "nodes-notready explaining both Unknown conditions", func() bool {
		ds, _ := p.bot.Diagnose(k)
		return len(ds) == 1 && ds[0].Rule == diagnose.RuleNodesNotReady && ds[0].Severity == diagnose.SeverityCritical &&
			slices.Contains(ds[0].Symptoms, "cond/DataPlaneConnectionAvailable") && slices.Contains(ds[0].Symptoms, "cond/ControlPlaneConnectionAvailable") &&
			ds[0].Began.Equal(lost)
	})
	// Its Slack message says since when: three days ago, not now.
	since := lost.Format("2006-01-02 15:04 UTC")
	p.slack.WaitFor(t, 60*time.Second, func(r *slackrec.Recorder) bool {
		for _, m := range r.Messages(channel) {
			if m.ThreadTS == "" && strings.Contains(m.Text, ns+"/day2") && strings.Contains(string(m.Blocks), since) {
				return true
			}
		}
		return false
	})
	// The HCCO loses the hosted API server: Unknown/ReconcileError, the
	// status and so the lastTransitionTime unchanged.
	if err := scenario.SetHostedClusterConditions(ctx, env.Dynamic, ns, "day2", countFailed("DataPlaneConnectionAvailable"), countFailed("ControlPlaneConnectionAvailable")); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 90*time.Second, "nodes-notready still the headline, connection-unknown since the same time", func() bool {
		ds, _ := p.bot.Diagnose(k)
		if len(ds) != 2 || ds[0].Rule != diagnose.RuleNodesNotReady || ds[1].Rule != diagnose.RuleConnectionUnknown {
			return false
		}
		return ds[1].Began.Equal(lost) && strings.Contains(ds[1].RootCause, "Unable to count worker nodes")
	})
	open := 0
	for _, inc := range p.bot.Incidents() {
		if inc.Cluster == k && inc.Open() {
			open++
		}
	}
	if open != 1 {
		t.Errorf("%d open incidents for the cluster, want 1", open)
	}
}
