package command

import (
	"context"
	"slices"

	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/bot"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/event"
)

// Remediations is where executed fixes go: the correlator (*bot.Bot), so
// that an incident follows its fix to the end.
type Remediations interface {
	RecordRemediation(r bot.Remediation)
}

var _ Remediations = (*bot.Bot)(nil)

// FollowFixes feeds the correlator every executed fix of the approval
// store, and every later change to one (its rollback), until ctx ends. It
// returns once the fixes already in the store were fed, so that a bot
// started afterwards replays its events knowing them: the timeline's
// rollout steps are then the same on every replica and after a restart.
func FollowFixes(ctx context.Context, flow *approval.Flow, to Remediations) error {
	return flow.Follow(ctx, func(p approval.Proposal) {
		if r, ok := RemediationOf(p); ok {
			to.RecordRemediation(r)
		}
	})
}

// RemediationOf is the correlator's view of a proposal: only a change
// proposed for a diagnosis (approval.ForDiagnosis) and executed is one.
func RemediationOf(p approval.Proposal) (bot.Remediation, bool) {
	if p.Cause == nil || (p.State != approval.StateExecuted && p.State != approval.StateRolledBack) || p.Executed().IsZero() {
		return bot.Remediation{}, false
	}
	r := bot.Remediation{
		ID:          p.ID,
		Cluster:     diagnose.Key{Source: p.Source, Cluster: event.ClusterRef{Namespace: p.Change.Cluster.Namespace, Name: p.Change.Cluster.Name}},
		Kind:        string(p.Change.Type),
		Cause:       bot.Cause{Rule: p.Cause.Rule, Title: p.Cause.Title, RootCause: p.Cause.Summary},
		RequestedBy: p.RequestedBy, ApprovedBy: p.DecidedBy,
		ProposedAt: p.CreatedAt, ApprovedAt: p.DecidedAt, ExecutedAt: p.Executed(),
		RolledBackBy: p.RolledBackBy, RolledBackAt: p.RolledBackAt,
	}
	for _, d := range p.Decisions {
		if d.Verdict == approval.VerdictApprove && slices.Contains(p.Approvers, d.By) && !slices.ContainsFunc(r.Approvals, func(a bot.Approval) bool { return a.By == d.By }) {
			r.Approvals = append(r.Approvals, bot.Approval{By: d.By, At: d.At})
		}
	}
	if p.Change.NoProxy != nil {
		_, r.Diff = noProxyDiff(p.Change.NoProxy)
	}
	return r, true
}
