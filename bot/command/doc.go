// Package command is the bot's chat layer: it answers the /hcp commands and
// buttons that bot/chatops parses, from the correlator's picture, and words
// what the approval flow answers for the commands that change clusters.
//
//	bot/chatops (Slack, console) ─▶ Handler ─▶ Correlator (read: *bot.Bot)
//	                                   └─▶ Changes ─▶ approval.Flow (propose, decide; its loop runs the rest)
//
// Handler reads the correlator through Correlator, a narrow read interface
// (clusters, diagnoses, incidents, storms, HostedCluster state): it never
// changes the correlator's state, and the correlator knows nothing of it.
// Handlers only answer or enqueue; nothing here posts incident messages.
//
// Changes decides nothing itself: who may change a cluster is package
// approval's (Permit). It proposes (propose.go), approves or rejects
// (approve.go) and proposes rollbacks (rollback.go) through the flow, and
// answers at once; the outcome is worded by Outcome when the flow's loop
// has it, in the conversation that approved it (chatops.Later).
//
// RefusalNotices tells the channel about the requests agents refused.
//
// `whoami` tells a person their Kubernetes identity per management cluster
// from the configuration's identities (Handler.Identities), reading their
// Slack user groups (Handler.Groups, SlackGroups) and e-mail
// (Handler.Emails, SlackProfiles: users.info, cached) only as far as the
// entries need; what it cannot read it says it cannot tell.
package command
