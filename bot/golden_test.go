package bot_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/hcpbot/hcpbot/bot"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/bot/notify"
	"github.com/hcpbot/hcpbot/bot/storm"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv/golden"
)

// goldenAt is the fixed clock of the golden renderings.
var goldenAt = time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)

// goldenIncidents are seed 000's incidents, diagnosed by the real rules
// from the events agents publish for clusters behind a tunnelling proxy
// (scenario.Storm), without NATS or Slack.
func goldenIncidents(t *testing.T, clusters int) []bot.Incident {
	t.Helper()
	events, err := scenario.Storm("mgmt-1", "clusters", clusters, 2, goldenAt)
	if err != nil {
		t.Fatal(err)
	}
	b := bot.New(bot.Config{Channel: "C0INCIDENTS"}, nil, notify.NewConsole(io.Discard), nil, zerolog.Nop())
	for _, e := range events {
		data, err := event.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		b.Handle(context.Background(), data)
	}
	incs := b.Incidents()
	if len(incs) != clusters {
		t.Fatalf("%d incidents from %d clusters", len(incs), clusters)
	}
	for _, inc := range incs {
		if len(inc.Diagnoses) == 0 {
			t.Fatalf("incident %s without a diagnosis", inc.Key)
		}
	}
	return incs
}

// TestGoldenBlockKit renders every kind of message the correlator posts
// from fixed inputs at a fixed time and compares what Slack would receive
// with testdata/golden/<kind>.json (rewrite with -update), checking each
// against Block Kit's limits. Stress cases (huge evidence, many
// diagnoses, long names) show that what reaches the limits is clamped.
func TestGoldenBlockKit(t *testing.T) {
	incs := goldenIncidents(t, 3)
	inc := incs[0]
	now := goldenAt.Add(7 * time.Minute)

	t.Run("incident-open", func(t *testing.T) {
		text, blocks := bot.Render(&inc, now)
		golden.BlockKit(t, "incident-open", text, blocks)
	})
	t.Run("incident-silenced", func(t *testing.T) {
		s := inc
		s.Silence = &bot.SilenceInfo{ID: "sil-7f3a", By: "U0ALICE", Reason: "maintenance <window> & rollout", Until: goldenAt.Add(4 * time.Hour)}
		text, blocks := bot.Render(&s, now)
		golden.BlockKit(t, "incident-silenced", text, blocks)
	})
	t.Run("incident-storm-member", func(t *testing.T) {
		s := inc
		s.Storm = "storm-proxy-1"
		text, blocks := bot.Render(&s, now)
		golden.BlockKit(t, "incident-storm-member", text, blocks)
	})
	t.Run("incident-resolved", func(t *testing.T) {
		r := inc
		r.Resolved = goldenAt.Add(42 * time.Minute)
		text, blocks := bot.Render(&r, now)
		golden.BlockKit(t, "incident-resolved", text, blocks)
	})
	t.Run("incident-deleted", func(t *testing.T) {
		r := inc
		r.Resolved, r.Deleted = goldenAt.Add(42*time.Minute), true
		text, blocks := bot.Render(&r, now)
		golden.BlockKit(t, "incident-deleted", text, blocks)
	})
	remedy := func(status bot.Status, why string) *bot.Remedy {
		d := inc.Diagnoses[0]
		return &bot.Remedy{
			Remediation: bot.Remediation{ID: "fix-k3x9q2ab", Cluster: inc.Cluster, Kind: "noproxy-patch", Diff: d.Fix.Diff,
				Cause:       bot.Cause{Rule: d.Rule, Title: d.Title, RootCause: d.Short()},
				RequestedBy: "U0ALICE", ApprovedBy: "U0BOB", ProposedAt: goldenAt.Add(3 * time.Minute),
				ApprovedAt: goldenAt.Add(4 * time.Minute), ExecutedAt: goldenAt.Add(4*time.Minute + time.Second)},
			Status: status, Why: why,
			Rollout: diagnose.Rollout{ProxyPods: 3, ProxyDirect: 1, Nodes: diagnose.NodeCount{Total: 3, Ready: 0},
				Updating: []string{"np-1"}, Crashlooping: []string{"openshift-service-ca-operator/service-ca-operator-6d5f7b9c4-x2x9z"}},
		}
	}
	t.Run("incident-rolling-out", func(t *testing.T) {
		r := inc
		r.Remedy = remedy(bot.StatusRollingOut, "")
		text, blocks := bot.Render(&r, now)
		golden.BlockKit(t, "incident-rolling-out", text, blocks)
	})
	t.Run("incident-not-healed", func(t *testing.T) {
		r := inc
		r.Remedy = remedy(bot.StatusNotHealed, "not healed 30m0s after the fix")
		text, blocks := bot.Render(&r, now)
		golden.BlockKit(t, "incident-not-healed", text, blocks)
	})
	t.Run("incident-resolved-fixed", func(t *testing.T) {
		r := inc
		r.Remedy = remedy(bot.StatusRollingOut, "")
		r.Resolved = goldenAt.Add(42 * time.Minute)
		text, blocks := bot.Render(&r, now)
		golden.BlockKit(t, "incident-resolved-fixed", text, blocks)
	})
	t.Run("incident-timeline", func(t *testing.T) {
		r := inc
		r.Remedy = remedy(bot.StatusRollingOut, "")
		r.Resolved = goldenAt.Add(42 * time.Minute)
		golden.BlockKit(t, "incident-timeline", bot.TimelineText(&r, r.Timeline()), nil)
	})
	t.Run("incident-stress", func(t *testing.T) {
		text, blocks := bot.Render(stressIncident(inc), now)
		golden.BlockKit(t, "incident-stress", text, blocks)
	})

	members := make([]*bot.Incident, len(incs))
	for i := range incs {
		members[i] = &incs[i]
	}
	cause := storm.Cause{Kind: storm.ProxyChange, Value: scenario.StormProxy, Text: "send their API traffic through " + scenario.StormProxy}
	t.Run("storm-open", func(t *testing.T) {
		s := &bot.Storm{Key: "storm-proxy-1", Cause: cause, Channel: "C0INCIDENTS", Opened: goldenAt, Members: members}
		text, blocks := bot.RenderStorm(s, now)
		golden.BlockKit(t, "storm-open", text, blocks)
	})
	t.Run("storm-resolved", func(t *testing.T) {
		s := &bot.Storm{Key: "storm-proxy-1", Cause: cause, Channel: "C0INCIDENTS", Opened: goldenAt, Resolved: goldenAt.Add(time.Hour), Members: members}
		text, blocks := bot.RenderStorm(s, now)
		golden.BlockKit(t, "storm-resolved", text, blocks)
	})
	t.Run("storm-page", func(t *testing.T) {
		s := &bot.Storm{Key: "storm-proxy-1", Cause: cause, Channel: "C0INCIDENTS", Opened: goldenAt, Members: members}
		golden.BlockKit(t, "storm-page", bot.StormPage(s, 0, len(members)), nil)
	})
	t.Run("storm-stress", func(t *testing.T) {
		// Every member with a different, long diagnosis title.
		var many []*bot.Incident
		for i := range 300 {
			m := *stressIncident(inc)
			m.Key = fmt.Sprintf("inc-%03d", i)
			m.Diagnoses[0].Rule = fmt.Sprintf("rule-%03d", i)
			many = append(many, &m)
		}
		s := &bot.Storm{Key: "storm-proxy-1", Cause: storm.Cause{Kind: storm.ProxyChange, Value: "p", Text: strings.Repeat("all behind one proxy ", 300)},
			Channel: "C0INCIDENTS", Opened: goldenAt, Members: many}
		text, blocks := bot.RenderStorm(s, now)
		golden.BlockKit(t, "storm-stress", text, blocks)
	})
}

// stressIncident is inc at and beyond every limit a rendering meets: a
// title longer than a header, a root cause longer than a section, hundreds
// of evidence items, more diagnoses than a message has blocks.
func stressIncident(inc bot.Incident) *bot.Incident {
	s := inc
	d := inc.Diagnoses[0]
	d.Title = strings.Repeat("the API traffic of a cluster with a very long name is tunnelled ", 5)
	d.RootCause = strings.Repeat("A root cause that explains <at length> & in detail. ", 120)
	d.Evidence = nil
	for i := range 400 {
		d.Evidence = append(d.Evidence, diagnose.Evidence{At: goldenAt.Add(time.Duration(i) * time.Second), Kind: "node",
			Object: fmt.Sprintf("node/worker-%03d-%s", i, strings.Repeat("x", 40)), Text: strings.Repeat("NotReady: Kubelet stopped posting node status. ", 5)})
	}
	d.NextSteps = []string{strings.Repeat("check the proxy ", 300)}
	s.Diagnoses = []diagnose.Diagnosis{d}
	for i := range 80 {
		s.Diagnoses = append(s.Diagnoses, diagnose.Diagnosis{Rule: "other", Severity: diagnose.SeverityWarning, Title: fmt.Sprintf("other finding %d", i)})
	}
	return &s
}
