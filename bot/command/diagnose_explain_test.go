package command_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/hcpbot/hcpbot/bot"
	"github.com/hcpbot/hcpbot/bot/blockkit"
	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/bot/command"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/bot/notify"
	"github.com/hcpbot/hcpbot/event"
)

// `/hcp diagnose` explains in one screen every rule: the one that fired,
// those it explains, those ruled out with what they look for, and the
// proactive warnings (a proxy CA about to expire).
func TestDiagnoseExplainsRules(t *testing.T) {
	at := time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC)
	b := bot.New(bot.Config{Channel: "C0INCIDENTS", Now: func() time.Time { return at.Add(time.Hour) }}, nil, notify.NewConsole(io.Discard), nil, zerolog.Nop())
	ref := event.ClusterRef{Namespace: "clusters", Name: "web"}
	hc := event.HostedClusterState{Platform: "KubeVirt", ServiceNetwork: []string{"172.31.0.0/16"}, ClusterNetwork: []string{"10.132.0.0/14"},
		Proxy:     event.ProxySpec{HTTPSProxy: "http://proxy.corp.example:3128", NoProxy: "kubernetes,.svc,172.31.0.0/16,10.132.0.0/14", TrustedCA: "corp-ca"},
		TrustedCA: &event.CABundle{ConfigMap: "corp-ca", Found: true, Certificates: 1, Subject: "Corp Root CA", NotAfter: at.Add(9 * 24 * time.Hour)},
		Conditions: []event.Condition{
			{Type: "EtcdAvailable", Status: event.ConditionFalse, Reason: "EtcdWaitingForQuorum", Message: "Waiting for etcd to reach quorum", LastTransitionTime: at},
			// HyperShift's message (hostedclusterconfigoperator resources.go:1911-1918 at 3ee9615).
			{Type: "ControlPlaneConnectionAvailable", Status: event.ConditionFalse, Reason: "KASAccessFailed", Message: "Data plane to control plane connection is not available: no successful connectivity check recorded", LastTransitionTime: at},
		}}
	feed(t, b, &ref, hc, "hc", at)
	c := &command.Handler{Bot: b, Now: func() time.Time { return at.Add(time.Hour) }}
	got := c.HandleCommand(context.Background(), chatops.Request{Command: chatops.Diagnose{Cluster: chatops.ClusterRef{Namespace: "clusters", Name: "web"}}}).Text
	for _, want := range []string{
		"`" + diagnose.RuleEtcdUnavailable + "` fired: etcd of clusters/web on mgmt-1 is unavailable",
		"`" + diagnose.RuleControlPlaneUnreachable + "` sees a problem explained by `" + diagnose.RuleEtcdUnavailable + "`",
		"`" + diagnose.RuleIgnitionUnreachable + "` ruled out, looks for: NodePool ReachedIgnitionEndpoint=False",
		"`" + diagnose.RuleProxyTunnel + "` ruled out",
		"`" + diagnose.WarnTrustedCAExpiring + "`",
		"in 8 days",
	} {
		if !strings.Contains(got, blockkit.EscapeText(want)) {
			t.Errorf("/hcp diagnose lacks %q:\n%s", want, got)
		}
	}
	if n := strings.Count(got, "\n"); n > 40 {
		t.Errorf("%d lines: more than one screen:\n%s", n, got)
	}
}
