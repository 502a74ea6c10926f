package digest_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/bot/digest"
	"github.com/hcpbot/hcpbot/bot/silence"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/testenv/golden"
)

// TestGoldenBlockKit renders a digest from fixed inputs at a fixed time —
// a compliant cluster, one with findings, an incident, a silence, an
// exposure and an action, one not watched, and a second digest with a
// trend — and compares the Slack (Compact) root and thread replies with
// testdata/golden (rewrite with -update), checking each against Block
// Kit's limits. A stress case has hundreds of findings.
func TestGoldenBlockKit(t *testing.T) {
	keyOff := diagnose.Key{Source: "mgmt-1", Cluster: event.ClusterRef{Namespace: "clusters", Name: "off"}}
	prev := digest.Snapshot{At: t0.Add(-24 * time.Hour)}
	in := digest.Input{
		Clients:  goCurlRequests,
		Previous: &prev,
		Clusters: []digest.Cluster{
			{Key: keyGood, HostedCluster: hc(compliantNoProxy)},
			{Key: keyBad, HostedCluster: hc(".corp.example,192.168.201.0/24"), Incident: "inc-f6eb697326d5",
				IncidentTitle: "API traffic of clusters/bad on mgmt-1 is tunnelled through the HTTPS proxy"},
			{Key: keyOff, HostedCluster: hc(compliantNoProxy), Unwatched: `admin kubeconfig refused: Secret clusters/off-admin-kubeconfig: user "admin" uses an exec plugin (exec)`},
		},
		Silences: []silence.Silence{{ID: "sil-7f3a", Incident: "inc-f6eb697326d5", Reason: "maintenance <window> & rollout",
			CreatedBy: "U0ALICE", CreatedAt: t0.Add(-time.Hour), ExpiresAt: t0.Add(3 * time.Hour)}},
		Exposures: []digest.Exposure{{Key: keyBad, ActionID: "act-1b2c", Service: "monitoring/prometheus",
			Ports:       []actions.ExposedPort{{Name: "web", Protocol: "TCP", Port: 9090, NodePort: 30990}},
			Created:     []actions.ObjectRef{{Cluster: "management", Kind: "Service", Namespace: "clusters-bad", Name: "expose-prometheus"}},
			RequestedBy: "U0ALICE", ApprovedBy: "U0BOB", ExecutedAt: t0.Add(-2 * time.Hour)}},
		Actions: []audit.Record{{Time: t0.Add(-30 * time.Minute), Kind: audit.KindExecuted, Cluster: "clusters/bad", Source: "mgmt-1",
			Actor: "U0BOB", Summary: "fix noproxy clusters/bad"}},
	}
	check := func(t *testing.T, prefix string, d digest.Digest) {
		t.Helper()
		root, replies := digest.Render(d, "daily", digest.Compact)
		golden.BlockKit(t, prefix+"-root", root.Text, root.Blocks)
		for _, r := range replies {
			golden.BlockKit(t, prefix+"-"+strings.NewReplacer("/", "-").Replace(r.ID), r.Text, r.Blocks)
		}
	}
	t.Run("digest", func(t *testing.T) { check(t, "digest", digest.Build(t0, in)) })
	t.Run("digest-stress", func(t *testing.T) {
		var np []string
		for i := range 400 {
			np = append(np, fmt.Sprintf("*.example%d.com", i), "10.0.0.0/33")
		}
		s := digest.Input{Clients: goCurlRequests, Clusters: []digest.Cluster{{Key: keyBad, HostedCluster: hc(strings.Join(np, ","))}}}
		for i := range 60 {
			s.Silences = append(s.Silences, silence.Silence{ID: fmt.Sprintf("sil-%02d", i), Cluster: keyBad.String(),
				Reason: strings.Repeat("a long reason ", 40), CreatedBy: "U0ALICE", CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)})
		}
		check(t, "digest-stress", digest.Build(t0, s))
	})
}
