package command

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bot"
	"github.com/hcpbot/hcpbot/bot/blockkit"
	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/bot/notify"
	"github.com/hcpbot/hcpbot/bot/silence"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/identity"
)

// Correlator is what the commands read of the correlator (*bot.Bot): its
// current picture, never its internals. Every method is safe to call from
// any goroutine.
type Correlator interface {
	// Clusters lists the hosted clusters the bot knows.
	Clusters() []diagnose.Key
	// Diagnose is a hosted cluster's current diagnoses; ok is false for
	// an unknown cluster.
	Diagnose(k diagnose.Key) ([]diagnose.Diagnosis, bool)
	// Explain is what every rule made of a hosted cluster, in rule order.
	Explain(k diagnose.Key) ([]diagnose.Verdict, bool)
	// Unwatched says why the agent does not watch a hosted cluster.
	Unwatched(k diagnose.Key) (reason string, ok bool)
	// HostedCluster is a copy of a hosted cluster's newest state.
	HostedCluster(k diagnose.Key) (event.HostedClusterState, bool)
	// Incidents and Storms are every incident and storm, open ones first.
	Incidents() []bot.Incident
	Storms() []bot.StormState
	// Timeline is an incident's story; ok is false for an unknown key.
	Timeline(key string) (inc bot.Incident, steps []bot.Step, ok bool)
}

var _ Correlator = (*bot.Bot)(nil)

// Handler answers /hcp commands and buttons from the correlator's picture;
// the commands that change clusters go through Changes.
type Handler struct {
	Bot Correlator
	// Changes is nil while no approval flow is configured: commands that
	// change clusters then answer that they are unavailable.
	Changes *Changes
	// Digester posts the digest on demand; nil when no digest is
	// configured.
	Digester Digester
	// Silences stores silences; nil answers `silence` as unavailable.
	Silences *silence.Store
	// Audit reads the audit trail for `audit`; nil answers it as
	// unavailable. *audit.Log implements it.
	Audit audit.Reader
	// AuditVerifier checks the trail for `audit verify`; nil answers it as
	// unavailable. *audit.Verifier implements it.
	AuditVerifier AuditVerifier
	// Now is the clock for silences; nil means time.Now.
	Now func() time.Time
	// Delivery says which channels the bot cannot post to, for `status`;
	// nil shows none. *notify.Slack implements it.
	Delivery Delivery
	// Identities is the configuration's identities: `whoami` tells each
	// person theirs. Empty: the agent acts as itself.
	Identities identity.Map
	// Groups reads the members of the Slack user groups Identities names
	// (SlackGroups); nil: `whoami` says it cannot tell group entries.
	Groups approval.Groups
	// Emails reads the Slack e-mails emailPrefix entries need
	// (*SlackProfiles); nil: `whoami` says it cannot tell those.
	Emails Emails
}

// Delivery is the part of the notifier `status` reads.
type Delivery interface {
	// Unpostable lists the channels Slack refuses posts to.
	Unpostable() []notify.ChannelProblem
}

// Defaults of the commands that take an optional number or duration.
const (
	// DefaultAuditEntries is how many entries `audit` shows without n.
	DefaultAuditEntries = 10
	// ButtonSilence is how long the Silence button of an incident mutes it.
	ButtonSilence = 4 * time.Hour
)

// Digester posts the configured digests now; digest.Runner implements it.
type Digester interface {
	// DigestNow returns a line saying what was posted where.
	DigestNow(ctx context.Context) (string, error)
}

var _ chatops.Handler = (*Handler)(nil)

// HandleCommand implements chatops.Handler.
func (c *Handler) HandleCommand(ctx context.Context, r chatops.Request) chatops.Reply {
	return c.inView(ctx, func(c *Handler) chatops.Reply { return c.command(ctx, r) })
}

func (c *Handler) command(ctx context.Context, r chatops.Request) chatops.Reply {
	switch cmd := r.Command.(type) {
	case chatops.Incidents:
		return c.incidents()
	case chatops.Status:
		return c.status(cmd.Cluster, cmd.Mgmt)
	case chatops.Diagnose:
		if cmd.IncidentID != "" {
			return c.HandleAction(ctx, chatops.ActionRequest{Origin: r.Origin, ActionID: blockkit.ActionDetails, Value: cmd.IncidentID})
		}
		k, reply, ok := c.resolve(cmd.Cluster)
		if !ok {
			return reply
		}
		return c.diagnose(k)
	case chatops.FixNoProxy:
		k, reply, ok := c.resolve(cmd.Cluster)
		if !ok {
			return reply
		}
		if c.Changes == nil {
			return unavailable(cmd)
		}
		diags, _ := c.Bot.Diagnose(k)
		for _, d := range diags {
			if d.Fix != nil && d.Fix.Kind == "noproxy" {
				return c.Changes.ProposeNoProxy(ctx, k, c.hostedCluster(k), d.Fix, cmd.Add, r.UserID, forDiagnosis(d), approval.InChannel(r.ChannelID))
			}
		}
		return chatops.Reply{Text: fmt.Sprintf("No noProxy fix is proposed for %s: its noProxy already makes HyperShift bypass the proxy, or no proxy is set.", k)}
	case chatops.Approve:
		if c.Changes == nil {
			return unavailable(cmd)
		}
		if strings.HasPrefix(cmd.ActionID, bot.IncidentKeyPrefix) {
			// An open incident's key approves its fix, as its button
			// does: the console shows the button as this command.
			for _, inc := range c.Bot.Incidents() {
				if inc.Key == cmd.ActionID && inc.Open() {
					return c.approveIncidentFix(ctx, chatops.ActionRequest{Origin: r.Origin}, inc)
				}
			}
		}
		return c.Changes.Approve(ctx, cmd.ActionID, r.UserID, approval.DecidedIn(r.ChannelID))
	case chatops.Reject:
		if c.Changes == nil {
			return unavailable(cmd)
		}
		return c.Changes.Reject(ctx, cmd.ActionID, cmd.Reason, r.UserID)
	case chatops.DigestNow:
		if c.Digester == nil {
			return unavailable(cmd)
		}
		text, err := c.Digester.DigestNow(ctx)
		if err != nil {
			return chatops.Reply{Text: blockkit.EscapeText("The digest could not be posted: " + err.Error())}
		}
		return chatops.Reply{Text: text}
	case chatops.NoProxyCheck:
		k, reply, ok := c.resolve(cmd.Cluster)
		if !ok {
			return reply
		}
		return c.noProxyCheck(k, cmd.Host, cmd.Port)
	case chatops.Expose:
		return c.expose(ctx, cmd, r.UserID, r.ChannelID)
	case chatops.Rollback:
		if c.Changes == nil {
			return unavailable(cmd)
		}
		return c.Changes.ProposeRollback(ctx, cmd.ActionID, r.UserID, approval.InChannel(r.ChannelID))
	case chatops.Silence:
		return c.silence(ctx, cmd, r.UserID)
	case chatops.Audit:
		return c.audit(ctx, cmd.N)
	case chatops.AuditVerify:
		return c.auditVerify(ctx)
	case chatops.Timeline:
		return c.timeline(ctx, cmd.IncidentID)
	case chatops.Whoami:
		return c.whoami(ctx, r.UserID)
	}
	return unavailable(r.Command)
}

// HandleAction implements chatops.Handler: buttons map onto commands.
//
// Approve on an open incident's message proposes its fix (a new message);
// Approve and Reject on a proposal decide it, and the decision replaces the
// proposal message (its buttons go with it). A refusal (not an approver,
// already decided, ...) is shown to the presser alone and leaves the
// message as it was. Roll back on an executed action's message proposes
// the rollback; Silence on an incident mutes it for ButtonSilence.
func (c *Handler) HandleAction(ctx context.Context, r chatops.ActionRequest) chatops.Reply {
	return c.inView(ctx, func(c *Handler) chatops.Reply { return c.action(ctx, r) })
}

func (c *Handler) action(ctx context.Context, r chatops.ActionRequest) chatops.Reply {
	switch r.ActionID {
	case blockkit.ActionDetails:
		for _, inc := range c.Bot.Incidents() {
			if inc.Key == r.Value {
				return c.diagnose(inc.Cluster)
			}
		}
		return chatops.Reply{Text: "That incident is no longer known."}
	case blockkit.ActionApprove:
		for _, inc := range c.Bot.Incidents() {
			if inc.Key == r.Value && inc.Open() {
				return c.approveIncidentFix(ctx, r, inc)
			}
		}
		return decision(c.HandleCommand(decidedLater(ctx), chatops.Request{Origin: r.Origin, Command: chatops.Approve{ActionID: r.Value}}))
	case blockkit.ActionReject:
		return decision(c.HandleCommand(ctx, chatops.Request{Origin: r.Origin, Command: chatops.Reject{ActionID: r.Value}}))
	case blockkit.ActionRollback:
		return c.HandleCommand(ctx, chatops.Request{Origin: r.Origin, Command: chatops.Rollback{ActionID: r.Value}})
	case blockkit.ActionSilence:
		return c.HandleCommand(ctx, chatops.Request{Origin: r.Origin, Command: chatops.Silence{IncidentID: r.Value, Duration: ButtonSilence, Reason: "Silence button"}})
	}
	return chatops.Reply{Text: "This button is not available yet."}
}

// approveIncidentFix answers the Approve button of an incident message.
func (c *Handler) approveIncidentFix(ctx context.Context, r chatops.ActionRequest, inc bot.Incident) chatops.Reply {
	if c.Changes == nil {
		// Answered as the command is: unavailable.
		return c.HandleCommand(ctx, chatops.Request{Origin: r.Origin, Command: chatops.FixNoProxy{Cluster: chatopsRef(inc.Cluster)}})
	}
	diags, _ := c.Bot.Diagnose(inc.Cluster)
	for _, d := range diags {
		if d.Fix != nil && d.Fix.Kind == "noproxy" {
			return c.Changes.ApproveFix(ctx, inc.Cluster, c.hostedCluster(inc.Cluster), d.Fix, r.UserID, forDiagnosis(d), approval.InChannel(r.ChannelID))
		}
	}
	return chatops.Reply{Text: fmt.Sprintf("No fix to approve for %s any more: its noProxy no longer needs one.", esc(inc.Cluster.String()))}
}

// forDiagnosis records on a proposal the diagnosis it fixes, for the
// incident that follows the fix (bot.Remediation).
func forDiagnosis(d diagnose.Diagnosis) approval.ProposeOption {
	return approval.ForDiagnosis(d.Rule, d.Title, d.Short())
}

// decision makes the reply to a decided proposal replace the message that
// carried the button. Decisions are shown to the channel; refusals only
// to the presser, so they must not replace the proposal.
// decidedLater makes a reply posted later (the outcome of an approval that
// was queued) replace the proposal's message as well: the message that
// said "queued" then shows the outcome.
func decidedLater(ctx context.Context) context.Context {
	later := chatops.Later(ctx)
	if later == nil {
		return ctx
	}
	return chatops.WithLater(ctx, func(r chatops.Reply) { later(decision(r)) })
}

func decision(r chatops.Reply) chatops.Reply {
	if r.InChannel {
		r.ReplaceOriginal = true
	}
	return r
}

func (c *Handler) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// expose proposes a NodePort exposure of a hosted Service.
func (c *Handler) expose(ctx context.Context, cmd chatops.Expose, user, channel string) chatops.Reply {
	k, reply, ok := c.resolve(cmd.Cluster)
	if !ok {
		return reply
	}
	if c.Changes == nil {
		return unavailable(cmd)
	}
	p, err := exposeParams(cmd)
	if err != nil {
		return chatops.Reply{Text: "Cannot propose that change: " + errText(err)}
	}
	return c.Changes.ProposeExpose(ctx, k, c.hostedCluster(k), p, user, approval.InChannel(channel))
}

// hostedCluster is the bot's view of k's HostedCluster, nil if it has none.
func (c *Handler) hostedCluster(k diagnose.Key) *event.HostedClusterState {
	if s, ok := c.Bot.HostedCluster(k); ok {
		return &s
	}
	return nil
}

// exposeParams turns the command into the request's parameters: chosen
// node ports pair with the listed ports in order, or, without ports, with
// the Service's ports (ExposeParams.NodePorts).
func exposeParams(cmd chatops.Expose) (actions.ExposeParams, error) {
	p := actions.ExposeParams{Namespace: cmd.Namespace, Service: cmd.Service}
	if len(cmd.Ports) == 0 {
		p.NodePorts = cmd.NodePorts
		return p, nil
	}
	if len(cmd.NodePorts) > len(cmd.Ports) {
		return p, fmt.Errorf("%w: %d node ports for %d ports", actions.ErrInvalid, len(cmd.NodePorts), len(cmd.Ports))
	}
	for i, port := range cmd.Ports {
		ep := actions.ExposePort{Port: port}
		if i < len(cmd.NodePorts) {
			ep.NodePort = cmd.NodePorts[i]
		}
		p.Ports = append(p.Ports, ep)
	}
	return p, nil
}

func unavailable(cmd chatops.Command) chatops.Reply {
	return chatops.Reply{Text: fmt.Sprintf("`%s` is not available yet on this bot.", cmd.Name())}
}

// resolve maps a command's cluster onto a known hosted cluster.
func (c *Handler) resolve(ref chatops.ClusterRef) (diagnose.Key, chatops.Reply, bool) {
	want := event.ClusterRef{Namespace: ref.Namespace, Name: ref.Name}
	var found []diagnose.Key
	for _, k := range c.Bot.Clusters() {
		if k.Cluster == want && (ref.Mgmt == "" || ref.Mgmt == k.Source) {
			found = append(found, k)
		}
	}
	switch len(found) {
	case 1:
		return found[0], chatops.Reply{}, true
	case 0:
		return diagnose.Key{}, chatops.Reply{Text: fmt.Sprintf("Unknown cluster %s/%s (no events about it yet).", ref.Namespace, ref.Name)}, false
	}
	var names []string
	for _, k := range found {
		names = append(names, k.Source+":"+k.Cluster.String())
	}
	return diagnose.Key{}, chatops.Reply{Text: "Ambiguous cluster; name the management cluster: " + strings.Join(names, ", ")}, false
}

func chatopsRef(k diagnose.Key) chatops.ClusterRef {
	return chatops.ClusterRef{Mgmt: k.Source, Namespace: k.Cluster.Namespace, Name: k.Cluster.Name}
}
