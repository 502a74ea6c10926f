package digest_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/bot/digest"
	"github.com/hcpbot/hcpbot/bot/notify"
	"github.com/hcpbot/hcpbot/bot/silence"
	"github.com/hcpbot/hcpbot/event"
)

// The stores the bot wires in implement the digest's inputs.
var (
	_ digest.Exposures = (*approval.Flow)(nil)
	_ digest.Silences  = (*silence.Store)(nil)
)

func exposure(k diagnose.Key, id, svc string, nodePort int32, at time.Time) digest.Exposure {
	return digest.Exposure{
		Key: k, ActionID: id, Service: "shop/" + svc,
		Ports:       []actions.ExposedPort{{Protocol: "TCP", Port: 8080, NodePort: nodePort}},
		Created:     []actions.ObjectRef{{Cluster: actions.ClusterHosted, Kind: "Service", Namespace: "shop", Name: "hcpbot-" + id}},
		RequestedBy: "U0REQ0001", ApprovedBy: "U0APP0001", ExecutedAt: at,
	}
}

// text joins a reply's section texts.
func text(rp notify.Reply) string {
	var b strings.Builder
	for _, bl := range rp.Blocks {
		if s, ok := bl.(*slack.SectionBlock); ok && s.Text != nil {
			b.WriteString(s.Text.Text + "\n")
		}
	}
	return b.String()
}

func replyByID(replies []notify.Reply, id string) (notify.Reply, bool) {
	for _, r := range replies {
		if r.ID == id {
			return r, true
		}
	}
	return notify.Reply{}, false
}

func sectionsText(bs []slack.Block) string { return text(notify.Reply{Blocks: bs}) }

// ExposureOf carries who, when and what from an executed expose proposal.
func TestExposureOf(t *testing.T) {
	at := t0.Add(-time.Hour)
	p := approval.Proposal{
		ID: "act-abcd1234", Source: "mgmt-1", RequestedBy: "U0REQ0001", DecidedBy: "U0APP0001", DecidedAt: at.Add(-time.Second), ExecutedAt: at,
		State: approval.StateExecuted,
		Change: actions.Change{ID: "act-abcd1234", Type: actions.TypeExposeNodePort, Cluster: actions.ClusterRef{Namespace: "clusters", Name: "good"},
			Expose: &actions.ExposeParams{Namespace: "shop", Service: "web"}},
		Result: &actions.Result{Ports: []actions.ExposedPort{{Protocol: "TCP", Port: 8080, NodePort: 30080}}},
	}
	e := digest.ExposureOf(p)
	if e.Key != keyGood || e.Service != "shop/web" || e.ActionID != p.ID || e.RequestedBy != "U0REQ0001" || e.ApprovedBy != "U0APP0001" ||
		!e.ExecutedAt.Equal(at) || len(e.Ports) != 1 || e.Ports[0].NodePort != 30080 {
		t.Errorf("exposure %+v", e)
	}
	p.ExecutedAt = time.Time{} // stored before ExecutedAt was kept
	if e := digest.ExposureOf(p); !e.ExecutedAt.Equal(p.DecidedAt) {
		t.Errorf("executed at %v, want the approval time %v", e.ExecutedAt, p.DecidedAt)
	}
}

// Build places exposures and silences on their clusters (a silence by
// cluster key or by the cluster's open incident); the rest are "other";
// expired silences are dropped. Render shows them per management cluster
// in both modes.
func TestExposuresAndSilences(t *testing.T) {
	keyOther := diagnose.Key{Source: "mgmt-2", Cluster: event.ClusterRef{Namespace: "clusters", Name: "gone"}}
	sil := func(id, cluster, incident, reason string, until time.Duration) silence.Silence {
		return silence.Silence{ID: id, Cluster: cluster, Incident: incident, Reason: reason, CreatedBy: "U0OPS0001",
			CreatedAt: t0.Add(-time.Hour), ExpiresAt: t0.Add(until)}
	}
	in := digest.Input{
		Clusters: []digest.Cluster{
			{Key: keyGood, HostedCluster: hc(compliantNoProxy)},
			{Key: keyBad, HostedCluster: hc(".corp.example"), Incident: "inc-bad1", IncidentTitle: "API unreachable"},
		},
		Exposures: []digest.Exposure{
			exposure(keyGood, "act-web00001", "web", 30080, t0.Add(-2*time.Hour)),
			// No source recorded: placed by cluster name.
			exposure(diagnose.Key{Cluster: keyGood.Cluster}, "act-api00001", "api", 30081, t0.Add(-3*time.Hour)),
			exposure(keyOther, "act-old00001", "old", 30082, t0.Add(-48*time.Hour)),
		},
		Silences: []silence.Silence{
			sil("sil-good", keyGood.String(), "", "maintenance <!channel> http://u:hunter2@proxy.example", 2*time.Hour),
			sil("sil-inc", "", "inc-bad1", "known, ticket OPS-1", time.Hour),
			sil("sil-storm", "", "storm-xyz", "storm", 3*time.Hour),
			sil("sil-over", keyBad.String(), "", "expired", -time.Minute),
		},
	}
	d := digest.Build(t0, in)
	good, bad := report(t, d, keyGood), report(t, d, keyBad)
	if len(good.Exposures) != 2 || good.Exposures[0].ActionID != "act-api00001" || good.Exposures[1].ActionID != "act-web00001" {
		t.Errorf("good exposures %+v, want api then web (by execution)", good.Exposures)
	}
	if len(good.Silences) != 1 || good.Silences[0].ID != "sil-good" || len(bad.Silences) != 1 || bad.Silences[0].ID != "sil-inc" {
		t.Errorf("silences good %+v bad %+v", good.Silences, bad.Silences)
	}
	if len(d.OtherExposures) != 1 || d.OtherExposures[0].ActionID != "act-old00001" || len(d.OtherSilences) != 1 || d.OtherSilences[0].ID != "sil-storm" {
		t.Errorf("other exposures %+v, silences %+v", d.OtherExposures, d.OtherSilences)
	}

	for _, mode := range []digest.Mode{digest.Compact, digest.Full} {
		root, replies := digest.Render(d, "daily", mode)
		summary := sectionsText(root.Blocks)
		if !strings.Contains(summary, "• *mgmt-1*: needs action: `clusters/bad` (") ||
			!strings.Contains(summary, " · 🚨 1 open incident · 🔕 2 silences · 🔌 2 NodePort exposures\n") ||
			!strings.Contains(summary, "• On no cluster the bot knows: 🔌 1 NodePort exposure · 🔕 1 silence\n") {
			t.Errorf("mode %d summary:\n%s", mode, summary)
		}
		// The compliant cluster has exposures and a silence: it gets a
		// reply in Slack too.
		g, ok := replyByID(replies, "cluster/"+keyGood.String())
		if !ok {
			t.Fatalf("mode %d: no reply for the compliant cluster with exposures", mode)
		}
		gt := text(g)
		for _, want := range []string{
			"🔌 NodePort exposure of Service `shop/web` (8080→30080/TCP), requested by <@U0REQ0001>, approved by <@U0APP0001>, executed 2026-12-01T05:00:00Z (`act-web00001`)",
			"🔕 Silenced cluster `mgmt-1/clusters/good` by <@U0OPS0001> until 2026-12-01T09:00:00Z: maintenance &lt;!channel&gt;",
		} {
			if !strings.Contains(gt, want) {
				t.Errorf("mode %d: good reply lacks %q:\n%s", mode, want, gt)
			}
		}
		if strings.Contains(gt, "hunter2") || strings.Contains(gt, "<!channel>") {
			t.Errorf("mode %d: reason not redacted/escaped:\n%s", mode, gt)
		}
		if full := strings.Contains(gt, "created Service shop/hcpbot-act-web00001 (hosted cluster)"); full != (mode == digest.Full) {
			t.Errorf("mode %d: created objects shown %v:\n%s", mode, full, gt)
		}
		b, _ := replyByID(replies, "cluster/"+keyBad.String())
		if bt := text(b); !strings.Contains(bt, "🚨 Open incident `inc-bad1`: API unreachable") || !strings.Contains(bt, "🔕 Silenced incident `inc-bad1` by <@U0OPS0001> until 2026-12-01T08:00:00Z: known, ticket OPS-1") {
			t.Errorf("mode %d: bad reply:\n%s", mode, bt)
		}
		o, ok := replyByID(replies, "other")
		if ot := text(o); !ok || !strings.Contains(ot, "Service `shop/old` on `mgmt-2/clusters/gone`") || !strings.Contains(ot, "incident `storm-xyz`") {
			t.Errorf("mode %d: other reply:\n%s", mode, ot)
		}
	}
}

// A cluster with many exposures and silences stays within the compact
// bounds in Slack; the console lists all of them.
func TestExposuresCompactBounded(t *testing.T) {
	in := digest.Input{Clusters: []digest.Cluster{{Key: keyGood, HostedCluster: hc(compliantNoProxy)}}, ExposuresIncomplete: true}
	for i := range 100 {
		in.Exposures = append(in.Exposures, exposure(keyGood, fmt.Sprintf("act-n%07d", i), fmt.Sprintf("svc%d", i), int32(30000+i), t0.Add(-time.Duration(i)*time.Minute)))
		in.Silences = append(in.Silences, silence.Silence{ID: fmt.Sprintf("sil-%d", i), Cluster: keyGood.String(), Reason: strings.Repeat("r", 400),
			CreatedBy: "U0OPS0001", ExpiresAt: t0.Add(time.Duration(i+1) * time.Minute)})
	}
	d := digest.Build(t0, in)
	root, replies := digest.Render(d, "daily", digest.Compact)
	if !strings.Contains(sectionsText(root.Blocks), "could not all be read") {
		t.Errorf("summary does not say the exposure list is incomplete")
	}
	if len(replies) != 1 || len(replies[0].Blocks) > 4 {
		t.Fatalf("%d replies, first with %d blocks; want 1 with at most 4", len(replies), len(replies[0].Blocks))
	}
	rt := text(replies[0])
	if !strings.Contains(rt, "… and 90 more NodePort exposures") || !strings.Contains(rt, "… and 90 more silences") || strings.Contains(rt, strings.Repeat("r", 201)) {
		t.Errorf("compact reply not bounded as expected:\n%.2000s", rt)
	}
	_, full := digest.Render(d, "daily", digest.Full)
	ft := text(full[0])
	if n := strings.Count(ft, "🔌 NodePort exposure"); n != 100 {
		t.Errorf("full reply lists %d exposures, want 100", n)
	}
	if n := strings.Count(ft, "🔕 Silenced"); n != 100 {
		t.Errorf("full reply lists %d silences, want 100", n)
	}
}
