package bot

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/bot/diagnose"
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
}

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
	}
	return unavailable(r.Command)
}

// HandleAction implements chatops.Handler: buttons map onto commands.
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
				return c.HandleCommand(ctx, chatops.Request{Origin: r.Origin, Command: chatops.FixNoProxy{Cluster: chatopsRef(inc.Cluster)}})
			}
		}
		return c.HandleCommand(ctx, chatops.Request{Origin: r.Origin, Command: chatops.Approve{ActionID: r.Value}})
	}
	return chatops.Reply{Text: "This button is not available yet."}
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

func (c *Commands) incidents() chatops.Reply {
	var b strings.Builder
	for _, inc := range c.Bot.Incidents() {
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
	if b.Len() == 0 {
		return chatops.Reply{Text: "No incidents."}
	}
	return chatops.Reply{Text: b.String()}
}

func (c *Commands) status(ref *chatops.ClusterRef) chatops.Reply {
	var b strings.Builder
	for _, k := range c.Bot.Clusters() {
		if ref != nil && (k.Cluster != event.ClusterRef{Namespace: ref.Namespace, Name: ref.Name} || (ref.Mgmt != "" && ref.Mgmt != k.Source)) {
			continue
		}
		diags, _ := c.Bot.Diagnose(k)
		state := "healthy"
		if len(diags) > 0 {
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
		for _, cl := range noproxy.Clients() {
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
