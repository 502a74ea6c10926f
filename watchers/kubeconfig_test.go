//go:build unix

package watchers_test

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/hcpbot/hcpbot/bot/blockkit"
	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/bot/command"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv"
	"github.com/hcpbot/hcpbot/kubeconfig/kubeconfigtest"
)

// A watched hosted cluster's admin kubeconfig Secret is tampered with: an
// exec plugin that would create a file, then a tokenFile that is a FIFO.
// The real agent, against real API servers, stops watching, publishes one
// Unwatched reachability event per refusal saying precisely why (not again
// on a resync), never runs the plugin or opens the FIFO, and watches the
// cluster again once the Secret is restored. The real bot on the same
// stream posts it to Slack (the recorder) and `/hcp status` says why.
func TestFaultKubeconfigRefused(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	s := newStream(t)
	ns := env.Namespace(t)
	spec := scenario.Healthy(ns, "refused")
	hosted := env.HostedCluster(t, spec)
	deleteHostedClusterAtEnd(t, env.Dynamic, ns, spec.Name)
	cluster := ns + "/" + spec.Name
	good, err := hosted.Server.Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := clientcmd.Load(good)
	if err != nil {
		t.Fatal(err)
	}
	cl := parsed.Clusters[parsed.Contexts[parsed.CurrentContext].Cluster]
	// Aimed at the real hosted API server with its CA: honoured, they
	// would work.
	execData, marker := kubeconfigtest.ExecPlugin(t, cl.Server, cl.CertificateAuthorityData)
	fifoData, fifo := kubeconfigtest.TokenFIFO(t, cl.Server, cl.CertificateAuthorityData)
	secrets := env.Kube.CoreV1().Secrets(ns)
	setKubeconfig := func(data []byte) {
		t.Helper()
		sec, err := secrets.Get(ctx, spec.KubeconfigSecretName(), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sec.Data[hypershift.KubeconfigKey] = data
		if _, err := secrets.Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cb := startChaosBot(t, s.js)
	r := startFaultReplica(t, faultReplicaConfig{source: "mgmt-" + ns, js: s.js})
	s.waitFor(t, "the hosted cluster watched (its start-up snapshot)", 1, snapshotDone(cluster))
	key := diagnose.Key{Source: "mgmt-" + ns, Cluster: event.ClusterRef{Namespace: ns, Name: spec.Name}}
	status := func() string {
		return (&command.Handler{Bot: cb.bot}).HandleCommand(ctx, chatops.Request{Command: chatops.Status{
			Cluster: &chatops.ClusterRef{Mgmt: key.Source, Namespace: ns, Name: spec.Name}}}).Text
	}

	prefix := "admin kubeconfig refused: Secret " + ns + "/" + spec.KubeconfigSecretName() + ": "
	execReason := prefix + `user "admin" uses an exec plugin (exec); hcpbot runs no programs and accepts inline credentials only`
	fifoReason := prefix + `user "admin" reads its token from a file (tokenFile); hcpbot opens no files and accepts inline credentials only`
	refusal := func(why string) func(event.Event, event.Payload) bool {
		return func(e event.Event, p event.Payload) bool {
			return reachability(cluster, false)(e, p) && p.(event.Reachability).Unwatched && p.(event.Reachability).Error == why
		}
	}

	setKubeconfig(execData)
	s.waitFor(t, "the exec refusal", 1, refusal(execReason))
	kubeconfigtest.NotRun(t, marker)
	testenv.Eventually(t, 60*time.Second, "a Slack incident saying why the cluster is not watched", func() bool {
		for _, m := range cb.roots(cluster) {
			if strings.Contains(m.Text, "hcpbot does not watch") && strings.Contains(m.Text, "uses an exec plugin (exec)") {
				return true
			}
		}
		return false
	})
	testenv.Eventually(t, 30*time.Second, "/hcp status saying why", func() bool {
		return strings.Contains(status(), blockkit.EscapeText("not watched: "+execReason))
	})

	setKubeconfig(fifoData)
	s.waitFor(t, "the tokenFile refusal", 1, refusal(fifoReason))
	kubeconfigtest.NotOpened(t, fifo)

	// A resync runs every cluster's Secret sync again: the same refused
	// content is neither reported nor counted again.
	refusedBefore := r.counter(t, metricSyncErrors, "kubeconfig_refused")
	if refusedBefore < 2 {
		t.Errorf("kubeconfig_refused = %v, want at least 2", refusedBefore)
	}
	runs := len(s.matching(snapshotDone("")))
	r.agent.Resync()
	s.waitFor(t, "the resync's snapshot", runs+1, snapshotDone(""))
	if n := r.counter(t, metricSyncErrors, "kubeconfig_refused"); n != refusedBefore {
		t.Errorf("kubeconfig_refused went %v → %v on a resync", refusedBefore, n)
	}

	testenv.Eventually(t, 30*time.Second, "/hcp status saying the new reason", func() bool {
		return strings.Contains(status(), blockkit.EscapeText("not watched: "+fifoReason))
	})

	setKubeconfig(good)
	s.waitFor(t, "reachable once the Secret is restored", 1, reachability(cluster, true))
	testenv.Eventually(t, 30*time.Second, "/hcp status no longer saying not watched", func() bool {
		return !strings.Contains(status(), "not watched")
	})

	for _, why := range []string{execReason, fifoReason} {
		if n := len(s.matching(refusal(why))); n != 1 {
			t.Errorf("%d events saying %q, want 1", n, why)
		}
	}
	for _, e := range s.matching(isType[event.Reachability](cluster)) {
		p := mustReachability(t, e)
		if strings.Contains(p.Error, string(cl.CertificateAuthorityData[30:60])) || strings.Contains(p.Error, marker) || strings.Contains(p.Error, fifo) {
			t.Errorf("a reachability event quotes the kubeconfig: %q", p.Error)
		}
	}
	kubeconfigtest.NotRun(t, marker)
	kubeconfigtest.NotOpened(t, fifo)
	r.alive(t)
}
