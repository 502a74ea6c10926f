package command_test

import (
	"context"
	"strings"
	"testing"

	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/bot/command"
	"github.com/hcpbot/hcpbot/event"
)

// Issue 29: a noProxy fix proposed for a HostedCluster whose
// spec.pausedUntil pauses it says that the fix reaches the nodes only
// once the pause ends, with HyperShift's command that lifts it
// (docs/content/how-to/pause-reconciliation.md:23-26 at openshift/hypershift
// 3ee9615). Paused as HyperShift reads the field
// (support/util/pausereconcile.go:31-48): "true", or an RFC3339 time still
// ahead; a past time and a value without a zone (which the CRD lets
// through, hostedcluster_types.go:791-799, and HyperShift reports as
// InvalidPausedUntilValue) pause nothing. Both ways a fix is proposed: the
// command, and the first approval of the incident's button.
func TestFixProposedForAPausedCluster(t *testing.T) {
	e := newApprovals(t, "mgmt-1")
	cases := []struct {
		name, pausedUntil, until string // until "": not paused
	}{
		{"paused", "true", "until `spec.pausedUntil` is removed"},
		{"until", "2099-01-01T00:00:00Z", "until 2099-01-01 00:00 UTC"},
		{"over", "2020-01-01T00:00:00Z", ""},
		{"nozone", "2099-01-01T00:00:00", ""},
		{"unpaused", "false", ""},
	}
	var known []hostedCluster
	for _, tc := range cases {
		known = append(known, hostedCluster{source: "mgmt-1", namespace: "clusters", name: tc.name, state: event.HostedClusterState{
			Platform: "KubeVirt", InfraID: tc.name + "-x1y2z", ServiceNetwork: []string{"172.31.0.0/16"}, ClusterNetwork: []string{"10.132.0.0/14"},
			Proxy:       event.ProxySpec{HTTPProxy: "http://proxy.corp.example:3128", HTTPSProxy: "http://proxy.corp.example:3128", NoProxy: ".corp.example"},
			PausedUntil: tc.pausedUntil,
		}})
	}
	b := botKnowing(t, known...)
	c := &command.Handler{Bot: b, Changes: e.approvals}
	for _, tc := range cases {
		seedSymptoms(t, b, "mgmt-1", "clusters", tc.name)
		k := key("mgmt-1")
		k.Cluster.Name = tc.name
		r := cmd(c, requester, chatops.FixNoProxy{Cluster: chatops.ClusterRef{Namespace: "clusters", Name: tc.name}})
		if !hasID(r.Text) {
			t.Fatalf("%s: no proposal: %q", tc.name, r.Text)
		}
		hc, _ := b.HostedCluster(k)
		diags, _ := b.Diagnose(k)
		var button chatops.Reply
		for _, d := range diags {
			if d.Fix != nil {
				button = e.approvals.ApproveFix(context.Background(), k, &hc, d.Fix, approver1)
			}
		}
		for way, text := range map[string]string{"fix noproxy": r.Text, "Approve fix": button.Text} {
			if tc.until == "" {
				if strings.Contains(text, "is paused") || strings.Contains(text, "oc patch") {
					t.Errorf("%s (%s), not paused: %q", tc.name, way, text)
				}
				continue
			}
			for _, want := range []string{
				"*HostedCluster clusters/" + tc.name + " is paused* (`spec.pausedUntil: " + tc.pausedUntil + "`): HyperShift rolls nothing out " + tc.until,
				"waits for the pause to end before it reaches the control plane and the nodes",
				"`oc patch -n clusters hostedclusters/" + tc.name + ` --type=merge -p '{"spec":{"pausedUntil":null}}'` + "`",
			} {
				if !strings.Contains(text, want) {
					t.Errorf("%s (%s): %q lacks %q", tc.name, way, text, want)
				}
			}
		}
		if tc.name == "paused" {
			t.Logf("proposal:\n%s", chatops.PlainText(chatops.Reply{Text: r.Text}, nil))
		}
	}
}
