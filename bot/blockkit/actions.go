package blockkit

// Button action ids the bot puts on its messages. A button's value carries
// the id it acts on: an action id for approve, reject and rollback, an
// incident id for silence (the handler picks the duration) and details
// (bot/chatops checks its shape). Any other action id is refused
// (KnownAction).
const (
	ActionApprove  = "hcp_approve"
	ActionReject   = "hcp_reject"
	ActionRollback = "hcp_rollback"
	ActionSilence  = "hcp_silence"
	ActionDetails  = "hcp_details"
)

// KnownAction reports whether id is one of the Action* constants.
func KnownAction(id string) bool {
	switch id {
	case ActionApprove, ActionReject, ActionRollback, ActionSilence, ActionDetails:
		return true
	}
	return false
}
