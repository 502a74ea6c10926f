// Package command is the bot's chat layer: it answers the /hcp commands and
// buttons that bot/chatops parses, from the correlator's picture, and
// carries the commands that change clusters through the approval flow to
// the agents.
//
//	bot/chatops (Slack, console) ─▶ Handler ─▶ Correlator (read: *bot.Bot)
//	                                   └─▶ Changes ─▶ bot/approval (proposals, four-eyes, audit)
//	                                          └─▶ actions.Client ─▶ agent (actions.Serve)
//
// Handler reads the correlator through Correlator, a narrow read interface
// (clusters, diagnoses, incidents, storms, HostedCluster state): it never
// changes the correlator's state, and the correlator knows nothing of it.
// Handlers only answer or enqueue; nothing here posts incident messages.
//
// Changes is the approval flow: propose (propose.go), approve or reject
// (approve.go), send the approved request and follow its result
// (execute.go: the request is sealed and queued by actions.Client, the
// result read back by action id; RunRecovery re-sends what a dead replica
// left behind), roll back (rollback.go) and expire (RunExpiry). Only the
// approval that wins the proposal's compare-and-set in bot/approval sends
// the request; the agent verifies it again (actions.Verifier).
//
// RefusalNotices tells the channel about the requests agents refused.
package command
