package audit

import (
	"context"

	"github.com/hcpbot/hcpbot/actions"
)

// Refusals records the action requests an agent refused (actions.Auditor)
// in the audit trail, through a Log made by ForAgent.
type Refusals struct{ Log Appender }

var _ actions.Auditor = Refusals{}

// Refused implements actions.Auditor.
func (a Refusals) Refused(ctx context.Context, r actions.Refusal) error {
	reason := r.Reason
	if r.Key != "" {
		reason += " (signed by " + r.Key + ")"
	}
	id := r.ActionID
	if !actions.ValidID(id) {
		// Only an id the bot could have issued is kept as one; anything
		// else was already quoted, bounded, in the reason.
		id = ""
	}
	return a.Log.Append(ctx, Record{
		ID: NewID(), Time: r.Time, Actor: r.ApprovedBy, Kind: KindRefused, ActionID: id, Cluster: r.Cluster,
		Summary: RefusedByAgent + " (" + string(r.Code) + ")", Reason: reason,
	})
}

// RefusedByAgent starts the summary of every record Refusals writes.
const RefusedByAgent = "action request refused by the agent"
