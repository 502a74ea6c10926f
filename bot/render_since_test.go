package bot

import (
	"strings"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/bot/notify"
	"github.com/hcpbot/hcpbot/event"
)

// An incident's "Since" is when the cluster's own record says the problem
// began (Diagnosis.Began: a condition's lastTransitionTime, which
// HyperShift moves only when the status changes), not when the bot
// opened it; without such a record it is the opening.
func TestRenderSinceIsTheClustersRecord(t *testing.T) {
	opened := time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC)
	began := opened.Add(-72 * time.Hour)
	inc := &Incident{Key: "k", Cluster: diagnose.Key{Source: "mgmt", Cluster: event.ClusterRef{Namespace: "clusters", Name: "c"}}, Opened: opened,
		Diagnoses: []diagnose.Diagnosis{{Rule: diagnose.RuleEtcdUnavailable, Severity: diagnose.SeverityCritical, Title: "etcd down", RootCause: "etcd down.", Began: began}}}
	_, blocks := Render(inc, opened.Add(time.Minute))
	if got := shown(notify.Message{Blocks: blocks}); !strings.Contains(got, "2026-12-03 09:00 UTC (72h1m0s)") {
		t.Errorf("Since does not show the condition's start three days ago:\n%s", got)
	}
	inc.Diagnoses[0].Began = time.Time{}
	_, blocks = Render(inc, opened.Add(time.Minute))
	if got := shown(notify.Message{Blocks: blocks}); !strings.Contains(got, "2026-12-06 09:00 UTC (1m0s)") {
		t.Errorf("Since without a record is not the opening:\n%s", got)
	}
}
