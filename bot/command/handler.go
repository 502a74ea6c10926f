package bot

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/bot/audit"
	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/bot/silence"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/noproxy"
	"github.com/hcpbot/hcpbot/redact"
)

// Actions carries out the commands that change clusters (fix, approve,
// reject, expose, rollback). Commands answers the read-only ones itself.
type Actions interface {
	// ProposeNoProxy proposes d's noProxy fix for a cluster on behalf of user.
	ProposeNoProxy(ctx context.Context, cluster diagnose.Key, fix *diagnose.Fix, add []string, user string) chatops.Reply
	Approve(ctx context.Context, id, user string) chatops.Reply
	Reject(ctx context.Context, id, reason, user string) chatops.Reply
}

// ExposeActions is implemented by Actions that can propose NodePort
// exposures (Approvals does); others answer `expose` as unavailable. It is
// separate from Actions so that simpler implementations (the demo's) need
// not change.
type ExposeActions interface {
	// ProposeExpose proposes publishing a hosted Service through NodePorts.
	// hc is the bot's view of the HostedCluster, nil if it has none.
	ProposeExpose(ctx context.Context, cluster diagnose.Key, hc *event.HostedClusterState, p actions.ExposeParams, user string) chatops.Reply
}

// RollbackActions is implemented by Actions that can undo executed
// actions (Approvals does, through an approved rollback proposal).
type RollbackActions interface {
	ProposeRollback(ctx context.Context, id, user string) chatops.Reply
}

// Commands answers /hcp commands and buttons from the bot's state.
type Commands struct {
	Bot *Bot
	// Source is the management cluster assumed when a command names none
	// and the bot knows several (then the command must name it).
	Source string
	// Actions is nil while no approval flow is configured: commands that
	// change clusters then answer that they are unavailable.
	Actions Actions
	// Digester posts the digest on demand; nil when no digest is
	// configured.
	Digester Digester
	// Silences stores silences; nil answers `silence` as unavailable.
	Silences *silence.Store
	// Audit reads the audit trail for `audit`; nil answers it as
	// unavailable. *audit.Log implements it.
	Audit audit.Reader
	// Now is the clock for silences; nil means time.Now.
	Now func() time.Time
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

var _ chatops.Handler = (*Commands)(nil)

// HandleCommand implements chatops.Handler.
func (c *Commands) HandleCommand(ctx context.Context, r chatops.Request) chatops.Reply {
	switch cmd := r.Command.(type) {
	case chatops.Incidents:
		return c.incidents()
	case chatops.Status:
		return c.status(cmd.Cluster)
	case chatops.Diagnose:
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
		if c.Actions == nil {
			return unavailable(cmd)
		}
		diags, _ := c.Bot.Diagnose(k)
		for _, d := range diags {
			if d.Fix != nil && d.Fix.Kind == "noproxy" {
				return c.Actions.ProposeNoProxy(ctx, k, d.Fix, cmd.Add, r.UserID)
			}
		}
		return chatops.Reply{Text: fmt.Sprintf("No noProxy fix is proposed for %s: its noProxy already makes HyperShift bypass the proxy, or no proxy is set.", k)}
	case chatops.Approve:
		if c.Actions == nil {
			return unavailable(cmd)
		}
		return c.Actions.Approve(ctx, cmd.ActionID, r.UserID)
	case chatops.Reject:
		if c.Actions == nil {
			return unavailable(cmd)
		}
		return c.Actions.Reject(ctx, cmd.ActionID, cmd.Reason, r.UserID)
	case chatops.DigestNow:
		if c.Digester == nil {
			return unavailable(cmd)
		}
		text, err := c.Digester.DigestNow(ctx)
		if err != nil {
			return chatops.Reply{Text: chatops.EscapeText("The digest could not be posted: " + err.Error())}
		}
		return chatops.Reply{Text: text}
	case chatops.NoProxyCheck:
		k, reply, ok := c.resolve(cmd.Cluster)
		if !ok {
			return reply
		}
		return c.noProxyCheck(k, cmd.Host, cmd.Port)
	case chatops.Expose:
		return c.expose(ctx, cmd, r.UserID)
	case chatops.Rollback:
		ra, ok := c.Actions.(RollbackActions)
		if !ok {
			return unavailable(cmd)
		}
		return ra.ProposeRollback(ctx, cmd.ActionID, r.UserID)
	case chatops.Silence:
		return c.silence(ctx, cmd, r.UserID)
	case chatops.Audit:
		return c.audit(ctx, cmd.N)
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
func (c *Commands) HandleAction(ctx context.Context, r chatops.ActionRequest) chatops.Reply {
	switch r.ActionID {
	case chatops.ActionDetails:
		for _, inc := range c.Bot.Incidents() {
			if inc.Key == r.Value {
				return c.diagnose(inc.Cluster)
			}
		}
		return chatops.Reply{Text: "That incident is no longer known."}
	case chatops.ActionApprove:
		for _, inc := range c.Bot.Incidents() {
			if inc.Key == r.Value && inc.Open() {
				return c.approveIncidentFix(ctx, r, inc)
			}
		}
		return decision(c.HandleCommand(decidedLater(ctx), chatops.Request{Origin: r.Origin, Command: chatops.Approve{ActionID: r.Value}}))
	case chatops.ActionReject:
		return decision(c.HandleCommand(ctx, chatops.Request{Origin: r.Origin, Command: chatops.Reject{ActionID: r.Value}}))
	case chatops.ActionRollback:
		return c.HandleCommand(ctx, chatops.Request{Origin: r.Origin, Command: chatops.Rollback{ActionID: r.Value}})
	case chatops.ActionSilence:
		return c.HandleCommand(ctx, chatops.Request{Origin: r.Origin, Command: chatops.Silence{IncidentID: r.Value, Duration: ButtonSilence, Reason: "Silence button"}})
	}
	return chatops.Reply{Text: "This button is not available yet."}
}

// FixApprover approves an incident's diagnosed fix in one step; Approvals
// implements it. Without it the incident's Approve button proposes the fix.
type FixApprover interface {
	ApproveFix(ctx context.Context, k diagnose.Key, fix *diagnose.Fix, user string) chatops.Reply
}

// approveIncidentFix answers the Approve button of an incident message.
func (c *Commands) approveIncidentFix(ctx context.Context, r chatops.ActionRequest, inc Incident) chatops.Reply {
	fa, ok := c.Actions.(FixApprover)
	if !ok {
		return c.HandleCommand(ctx, chatops.Request{Origin: r.Origin, Command: chatops.FixNoProxy{Cluster: chatopsRef(inc.Cluster)}})
	}
	diags, _ := c.Bot.Diagnose(inc.Cluster)
	for _, d := range diags {
		if d.Fix != nil && d.Fix.Kind == "noproxy" {
			return fa.ApproveFix(ctx, inc.Cluster, d.Fix, r.UserID)
		}
	}
	return chatops.Reply{Text: fmt.Sprintf("No fix to approve for %s any more: its noProxy no longer needs one.", esc(inc.Cluster.String()))}
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

func (c *Commands) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// expose proposes a NodePort exposure of a hosted Service.
func (c *Commands) expose(ctx context.Context, cmd chatops.Expose, user string) chatops.Reply {
	k, reply, ok := c.resolve(cmd.Cluster)
	if !ok {
		return reply
	}
	ea, ok := c.Actions.(ExposeActions)
	if !ok {
		return unavailable(cmd)
	}
	var hc *event.HostedClusterState
	if s, ok := c.Bot.HostedCluster(k); ok {
		hc = &s
	}
	p := actions.ExposeParams{Namespace: cmd.Namespace, Service: cmd.Service}
	for _, port := range cmd.Ports {
		p.Ports = append(p.Ports, actions.ExposePort{Port: port})
	}
	return ea.ProposeExpose(ctx, k, hc, p, user)
}

// silence mutes a known cluster or incident.
func (c *Commands) silence(ctx context.Context, cmd chatops.Silence, user string) chatops.Reply {
	if c.Silences == nil {
		return unavailable(cmd)
	}
	sil := silence.Silence{Reason: cmd.Reason, CreatedBy: user, ExpiresAt: c.now().Add(cmd.Duration)}
	var what string
	if cmd.Cluster != nil {
		k, reply, ok := c.resolve(*cmd.Cluster)
		if !ok {
			return reply
		}
		sil.Cluster, what = k.String(), "cluster "+k.String()
	} else {
		known := false
		for _, inc := range c.Bot.Incidents() {
			// A storm's key silences the storm's message.
			if inc.Key == cmd.IncidentID || (inc.Storm != "" && inc.Storm == cmd.IncidentID) {
				known = true
				break
			}
		}
		if !known {
			return chatops.Reply{Text: fmt.Sprintf("Unknown incident `%s`; `/hcp incidents` lists them.", esc(cmd.IncidentID))}
		}
		sil.Incident, what = cmd.IncidentID, "incident "+cmd.IncidentID
	}
	if maxD := c.Silences.MaxDuration(); cmd.Duration > maxD {
		return chatops.Reply{Text: fmt.Sprintf("A silence lasts at most %s on this bot.\nUsage: `%s`", formatSpan(maxD), esc(chatops.Usage("silence")))}
	}
	sil, err := c.Silences.Add(ctx, sil)
	warning := ""
	switch {
	case errors.Is(err, silence.ErrAudit):
		warning = "\n_Warning: the audit record of this silence could not be written._"
	case errors.Is(err, silence.ErrInvalid):
		return chatops.Reply{Text: "Cannot silence that: " + errText(err)}
	case err != nil:
		return chatops.Reply{Text: "Could not store the silence: " + errText(err)}
	}
	text := fmt.Sprintf("%s silenced %s for %s, until %s (`%s`).", mention(user), esc(what),
		formatSpan(sil.ExpiresAt.Sub(sil.CreatedAt)), sil.ExpiresAt.UTC().Format("2006-01-02 15:04 UTC"), sil.ID)
	if sil.Reason != "" {
		text += " Reason: " + esc(sil.Reason)
	}
	return chatops.Reply{Text: text + warning, InChannel: true}
}

// formatSpan renders a duration the way people type it: 2h, 90m, 3d.
func formatSpan(d time.Duration) string {
	d = d.Round(time.Minute)
	switch {
	case d >= 24*time.Hour && d%(24*time.Hour) == 0:
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	case d >= time.Hour && d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	}
	return fmt.Sprintf("%dm", d/time.Minute)
}

// auditLineRunes and auditTextRunes keep `audit` within what one Slack
// message shows: each entry on one line of at most auditLineRunes, all in
// one code block of at most auditTextRunes (a section block's limit).
const (
	auditLineRunes = 400
	auditTextRunes = 2900
)

// audit shows the newest n entries of the audit trail, newest first,
// redacted, as many as fit one message.
func (c *Commands) audit(ctx context.Context, n int) chatops.Reply {
	if c.Audit == nil {
		return unavailable(chatops.Audit{N: n})
	}
	if n <= 0 {
		n = DefaultAuditEntries
	}
	recs, err := c.Audit.Recent(ctx, n)
	if err != nil {
		return chatops.Reply{Text: "Could not read the audit trail: " + errText(err)}
	}
	if len(recs) == 0 {
		return chatops.Reply{Text: "The audit trail is empty."}
	}
	var b strings.Builder
	shown := 0
	for _, r := range recs {
		line := strings.Join(strings.Fields(audit.Redact(r).String()), " ")
		if rs := []rune(line); len(rs) > auditLineRunes {
			line = string(rs[:auditLineRunes-1]) + "…"
		}
		// Escaped for mrkdwn; backticks would end the code block.
		line = esc(strings.ReplaceAll(line, "`", "'"))
		if utf8.RuneCountInString(b.String())+utf8.RuneCountInString(line)+1 > auditTextRunes {
			break
		}
		b.WriteString(line + "\n")
		shown++
	}
	head := fmt.Sprintf("Last %d audit entries, newest first:", shown)
	if shown < len(recs) {
		head = fmt.Sprintf("Last %d audit entries, newest first (%d more did not fit; ask for fewer):", shown, len(recs)-shown)
	}
	return chatops.Reply{Text: head + "\n```\n" + b.String() + "```"}
}

func unavailable(cmd chatops.Command) chatops.Reply {
	return chatops.Reply{Text: fmt.Sprintf("`%s` is not available yet on this bot.", cmd.Name())}
}

// resolve maps a command's cluster onto a known hosted cluster.
func (c *Commands) resolve(ref chatops.ClusterRef) (diagnose.Key, chatops.Reply, bool) {
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

// incidents lists storms (one line each: their members are listed in the
// storm's thread) and then every other incident, within one Slack reply.
func (c *Commands) incidents() chatops.Reply {
	var b strings.Builder
	for _, s := range c.Bot.Storms() {
		state := "OPEN"
		if !s.Resolved.IsZero() {
			state = "resolved"
		}
		fmt.Fprintf(&b, "%s  %-8s storm of %d clusters: all %s (each listed in its thread; `/hcp diagnose <cluster>` for one)\n",
			s.Key, state, len(s.Members), s.Cause.Text)
	}
	left := 0
	for _, inc := range c.Bot.Incidents() {
		if inc.Storm != "" {
			continue
		}
		if b.Len() > maxReply {
			left++
			continue
		}
		state := "OPEN"
		if !inc.Open() {
			state = "resolved"
		}
		title := ""
		if len(inc.Diagnoses) > 0 {
			title = inc.Diagnoses[0].Title
		}
		fmt.Fprintf(&b, "%s  %-8s %s — %s\n", inc.Key, state, inc.Cluster, chatops.EscapeText(title))
	}
	if left > 0 {
		fmt.Fprintf(&b, "… and %d more incidents; `/hcp status <cluster>` shows one\n", left)
	}
	if b.Len() == 0 {
		return chatops.Reply{Text: "No incidents."}
	}
	return chatops.Reply{Text: b.String()}
}

// maxReply keeps a listing inside one readable Slack message.
const maxReply = 3500

func (c *Commands) status(ref *chatops.ClusterRef) chatops.Reply {
	var b strings.Builder
	for _, k := range c.Bot.Clusters() {
		if ref != nil && (k.Cluster != event.ClusterRef{Namespace: ref.Namespace, Name: ref.Name} || (ref.Mgmt != "" && ref.Mgmt != k.Source)) {
			continue
		}
		diags, _ := c.Bot.Diagnose(k)
		state := "healthy"
		if why, ok := c.Bot.Unwatched(k); ok {
			// Why the bot is blind there comes first, in full.
			state = "not watched: " + why
			diags = slices.DeleteFunc(diags, func(d diagnose.Diagnosis) bool { return d.Rule == diagnose.RuleHostedNotWatched })
			if len(diags) > 0 {
				state += "; also " + string(diags[0].Severity) + ": " + diags[0].Title
			}
		} else if len(diags) > 0 {
			state = string(diags[0].Severity) + ": " + diags[0].Title
		}
		fmt.Fprintf(&b, "%s: %s\n", k, chatops.EscapeText(state))
	}
	if b.Len() == 0 {
		return chatops.Reply{Text: "No hosted clusters known yet."}
	}
	return chatops.Reply{Text: b.String()}
}

func (c *Commands) diagnose(k diagnose.Key) chatops.Reply {
	diags, ok := c.Bot.Diagnose(k)
	if !ok {
		return chatops.Reply{Text: "Unknown cluster " + k.String()}
	}
	if len(diags) == 0 {
		return chatops.Reply{Text: k.String() + ": no problem found."}
	}
	d := diags[0]
	text := fmt.Sprintf("*%s*\n%s\nConfidence: %s — %s", d.Title, d.RootCause, d.Confidence.Level, d.Confidence.Why)
	if d.Fix != nil {
		text += "\nProposed fix:\n```" + d.Fix.Diff + "```"
	}
	return chatops.Reply{Text: chatops.EscapeText(text)}
}

func chatopsRef(k diagnose.Key) chatops.ClusterRef {
	return chatops.ClusterRef{Mgmt: k.Source, Namespace: k.Cluster.Namespace, Name: k.Cluster.Name}
}

// noProxyCheck answers, from the cluster's live noProxy, whether each client
// family sends https:// and http:// requests to host:port through the
// proxy. Proxy URLs are shown as event stored them (credentials masked).
func (c *Commands) noProxyCheck(k diagnose.Key, host string, port int32) chatops.Reply {
	hc, ok := c.Bot.HostedCluster(k)
	if !ok {
		return chatops.Reply{Text: fmt.Sprintf("No HostedCluster state for %s yet.", k)}
	}
	p := hc.Proxy
	var b strings.Builder
	target := host
	if port != 0 {
		target = net.JoinHostPort(host, portOr(port, 0))
	}
	fmt.Fprintf(&b, "*%s* → `%s`, noProxy `%s`\n", k, target, redact.RedactText(p.NoProxy))
	for _, s := range []struct {
		scheme, proxy string
		port          int32
	}{{"https", p.HTTPSProxy, 443}, {"http", p.HTTPProxy, 80}} {
		u := s.scheme + "://" + net.JoinHostPort(host, portOr(port, s.port))
		if s.proxy == "" {
			fmt.Fprintf(&b, "• `%s`: no %s proxy configured, every client goes direct\n", u, s.scheme)
			continue
		}
		fmt.Fprintf(&b, "• `%s` (proxy `%s`):\n", u, redact.RedactURL(s.proxy))
		for _, cl := range noproxy.AllClients() {
			v, err := noproxy.Explain(cl, p.NoProxy, u)
			if err != nil {
				fmt.Fprintf(&b, "    %s: cannot tell (%v)\n", cl, err)
				continue
			}
			line := fmt.Sprintf("    %s: *%s*", cl, v.Decision)
			if v.Entry != "" {
				line += fmt.Sprintf(" (entry `%s`)", v.Entry)
			}
			if v.Why != "" {
				line += " — " + v.Why
			}
			b.WriteString(line + "\n")
		}
	}
	return chatops.Reply{Text: chatops.EscapeText(redact.RedactText(b.String()))}
}

func portOr(port, def int32) string {
	if port == 0 {
		port = def
	}
	return strconv.Itoa(int(port))
}
