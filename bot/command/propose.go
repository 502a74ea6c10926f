package command

import (
	"context"
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/bot/blockkit"
	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/noproxy"
)

// ProposeNoProxy proposes the diagnosis' noProxy
// fix, plus the entries the user added, computed from the value the
// diagnosis saw (fix.Before) so that the agent refuses it if the cluster
// has changed since. hc is the bot's view of the HostedCluster (nil if it
// has none): a paused one is said to roll the fix out only after the
// pause (pausedRollout).
func (a *Changes) ProposeNoProxy(ctx context.Context, k diagnose.Key, hc *event.HostedClusterState, fix *diagnose.Fix, add []string, user string, opts ...approval.ProposeOption) chatops.Reply {
	req := noProxyRequest(k, fix, add)
	p, warning, refused, ok := a.propose(ctx, k, req, user, opts...)
	if !ok {
		return refused
	}
	_, diff := noProxyDiff(req.NoProxy)
	text := fmt.Sprintf("%s proposes `%s` for %s: add %s to the noProxy.\n```%s```\n%s%s%s",
		blockkit.Mention(user), p.ID, esc(k.String()), esc(strings.Join(req.NoProxy.Add, ", ")), escCode(diff), howToDecide(p), pausedRollout(hc, req, time.Now()), warning)
	return proposalReply(p.ID, text)
}

// pausedRollout says, for a noProxy fix of a HostedCluster whose
// spec.pausedUntil pauses it now (event.ReadPausedUntil, HyperShift's
// reading), that the fix is written but reaches the nodes only once the
// pause ends, and how to lift it; "" otherwise. While paused, the
// HostedCluster controller returns before it passes the HostedCluster's
// spec to its control plane and pauses the CAPI Cluster
// (hypershift-operator/controllers/hostedcluster/hostedcluster_controller.go:1307-1317
// at openshift/hypershift 3ee9615); the command is HyperShift's own
// (docs/content/how-to/pause-reconciliation.md:23-26).
func pausedRollout(hc *event.HostedClusterState, req actions.Change, now time.Time) string {
	if hc == nil || req.NoProxy == nil || req.NoProxy.Target == actions.TargetProxy {
		return ""
	}
	pause := event.ReadPausedUntil(hc.PausedUntil, now)
	if !pause.Paused {
		return ""
	}
	until := "until `spec.pausedUntil` is removed"
	if !pause.Until.IsZero() {
		until = "until " + pause.Until.UTC().Format("2006-01-02 15:04 UTC")
	}
	return fmt.Sprintf("\n*HostedCluster %s is paused* (`spec.pausedUntil: %s`): HyperShift rolls nothing out %s, so once applied the new noProxy waits for the pause to end before it reaches the control plane and the nodes. To lift the pause: `%s`",
		esc(req.Cluster.String()), escCode(hc.PausedUntil), until,
		escCode(diagnose.PausedObject{Resource: "hostedclusters", Namespace: req.Cluster.Namespace, Name: req.Cluster.Name}.LiftCommand()))
}

// DiagnosisRequester is who requested a fix approved straight from its
// incident message without four-eyes: the diagnosis, not a person.
const DiagnosisRequester = approval.SystemRequesterPrefix + "diagnosis"

// fixPrefix names the proposals made by an incident's Approve button.
const fixPrefix = "fix-"

// ApproveFix answers the Approve button of an incident
// message, whose diff the approver is looking at. A non-approver is
// refused before anything is proposed (and audited).
//
// Without four-eyes the presser's approval is enough: the fix is proposed
// on the diagnosis' behalf and approved as user in one step.
//
// With four-eyes two people must approve, and the diagnosis is not one of
// them: the first press proposes the fix with the presser as requester (their
// approval) and says that one more approver is needed; a press by another
// approver, on this button or the proposal's, approves it and runs it. The
// proposal of a fix has an id derived from its content, so that every
// press on the incident meets the same pending proposal.
func (a *Changes) ApproveFix(ctx context.Context, k diagnose.Key, hc *event.HostedClusterState, fix *diagnose.Fix, user string, opts ...approval.ProposeOption) chatops.Reply {
	if err := a.Flow.Authorize(ctx, user); err != nil {
		a.auditRefusal(ctx, k, user, fmt.Errorf("approve the diagnosed fix: %w", err))
		text, _ := refusal("approve", "the fix of "+esc(k.String()), approval.Proposal{}, err)
		return chatops.Reply{Text: text}
	}
	req := noProxyRequest(k, fix, nil)
	if !a.Flow.FourEyes() {
		p, warning, refused, ok := a.propose(ctx, k, req, DiagnosisRequester, opts...)
		if !ok {
			return refused
		}
		r := a.Approve(ctx, p.ID, user)
		r.Text += pausedRollout(hc, req, time.Now()) + warning
		return r
	}
	// The proposal of this fix is the first of its ids (fixID, by
	// generation) that is not decided yet: every press meets the same
	// pending one, and a fix needed again after a rejection or expiry
	// gets the next id. Two attempts per id: a concurrent first press by
	// someone else may create it between our read and our write.
	for gen, attempt := 0, 0; gen < maxFixGenerations; {
		req.ID = fixID(k, req, gen)
		p, err := a.Flow.Get(ctx, req.ID)
		switch {
		case err == nil && p.State == approval.StatePending && !p.Expired(time.Now()):
			if p.RequestedBy == user {
				return chatops.Reply{Text: fmt.Sprintf("You already approved the fix of %s (`%s`). Four-eyes rule: another approver has to approve it too.", esc(k.String()), esc(p.ID))}
			}
			return a.Approve(ctx, p.ID, user)
		case err == nil:
			gen, attempt = gen+1, 0
			continue
		case !errors.Is(err, approval.ErrNotFound):
			return chatops.Reply{Text: "Could not read the proposal: " + errText(err)}
		}
		p, err = a.Flow.Propose(ctx, req, user, append(opts, approval.ForSource(k.Source))...)
		if errors.Is(err, approval.ErrExists) && attempt == 0 {
			attempt++
			continue
		}
		return a.firstApproval(ctx, k, hc, req, p, user, err)
	}
	return chatops.Reply{Text: fmt.Sprintf("The fix of %s was proposed %d times already; propose it with `/hcp fix noproxy %s`.", esc(k.String()), maxFixGenerations, esc(k.Cluster.String()))}
}

// maxFixGenerations bounds how often one diagnosed fix is proposed from
// its incident's button (each rejection or expiry moves to the next id).
const maxFixGenerations = 16

// firstApproval answers the first press under four-eyes: the proposal
// Propose stored (or why not).
func (a *Changes) firstApproval(ctx context.Context, k diagnose.Key, hc *event.HostedClusterState, req actions.Change, p approval.Proposal, user string, err error) chatops.Reply {
	warning, refused, ok := a.stored(ctx, k, user, p, err, "Could not store the proposal: ")
	if !ok {
		return refused
	}
	_, diff := noProxyDiff(req.NoProxy)
	// The presser is the requester: every approval the policy asks for
	// comes from someone else.
	more := "one more approver is needed"
	if n := p.Needed(); n > 1 {
		more = fmt.Sprintf("%d more approvers are needed", n)
	}
	text := fmt.Sprintf("%s approved the fix of %s as `%s` (1 of %d approvals): add %s to the noProxy.\n```%s```\n"+
		"Four-eyes rule: %s — press Approve (here or on the incident) or `/hcp approve %s`; reject with `/hcp reject %s &lt;reason&gt;`. Expires %s.%s%s",
		blockkit.Mention(user), esc(k.String()), p.ID, p.Needed()+1, esc(strings.Join(req.NoProxy.Add, ", ")), escCode(diff), more, p.ID, p.ID,
		p.ExpiresAt.UTC().Format("15:04 UTC"), pausedRollout(hc, req, time.Now()), warning)
	return proposalReply(p.ID, text)
}

// fixID is the id of generation gen of the proposal of a diagnosed fix:
// the same cluster, starting value and entries give the same ids.
func fixID(k diagnose.Key, req actions.Change, gen int) string {
	h := sha256.New()
	for _, s := range []string{k.Source, req.Cluster.String(), string(req.NoProxy.Target), req.NoProxy.Expected, strings.Join(req.NoProxy.Add, ","), strconv.Itoa(gen)} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return fixPrefix + fixIDEncoding.EncodeToString(h.Sum(nil)[:10])
}

var fixIDEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// noProxyRequest is the action that applies fix, plus the entries the user
// added, computed from the value the diagnosis saw (fix.Before) so that the
// agent refuses it if the cluster has changed since.
func noProxyRequest(k diagnose.Key, fix *diagnose.Fix, add []string) actions.Change {
	req := actions.Change{
		Type:    actions.TypeNoProxyPatch,
		Cluster: actions.ClusterRef{Namespace: k.Cluster.Namespace, Name: k.Cluster.Name},
		NoProxy: &actions.NoProxyParams{Expected: fix.Before, Add: mergeEntries(fix.Before, fix.Add, add)},
	}
	if strings.HasPrefix(fix.Target, "Proxy/") {
		req.Cluster = actions.ClusterRef{Name: hypershift.ProxyName}
		req.NoProxy.Target = actions.TargetProxy
	}
	return req
}

// mergeEntries returns fix's entries followed by the user's extra ones,
// without duplicates or entries the value already holds.
func mergeEntries(before string, fix, extra []string) []string {
	have := map[string]bool{}
	for _, e := range noproxy.Parse(before) {
		have[e.Text] = true
	}
	out := make([]string, 0, len(fix)+len(extra))
	for _, e := range slices.Concat(fix, extra) {
		if e = strings.TrimSpace(e); e == "" || have[e] {
			continue
		}
		have[e] = true
		out = append(out, e)
	}
	return out
}

// noProxyDiff shows the proposed value change the way approval's audit
// records do.
func noProxyDiff(n *actions.NoProxyParams) (after, diff string) {
	after = strings.Join(n.Add, ",")
	if n.Expected != "" {
		after = n.Expected + "," + after
	}
	return after, fmt.Sprintf("- noProxy: %s\n+ noProxy: %s", n.Expected, after)
}

// ProposeExpose proposes publishing the hosted
// Service p names through NodePorts (seed 004) and shows exactly which two
// Services the agent will create. hc is the bot's view of the
// HostedCluster (nil if it has none yet): a cluster known not to run on
// KubeVirt is refused here rather than after the approval.
func (a *Changes) ProposeExpose(ctx context.Context, k diagnose.Key, hc *event.HostedClusterState, params actions.ExposeParams, user string, opts ...approval.ProposeOption) chatops.Reply {
	if hc != nil && hc.Platform != "" && hc.Platform != hypershift.PlatformKubeVirt {
		err := fmt.Errorf("%w: %s runs on platform %s; NodePort exposure forwards to KubeVirt virt-launcher pods, which only the KubeVirt platform has", actions.ErrNotKubeVirt, k, hc.Platform)
		a.auditRefusal(ctx, k, user, err)
		return chatops.Reply{Text: "Cannot propose that change: " + errText(err)}
	}
	// The id is chosen here because the management Service is named
	// after it, and the proposal shows that name.
	req := actions.Change{
		ID:      approval.NewID(),
		Type:    actions.TypeExposeNodePort,
		Cluster: actions.ClusterRef{Namespace: k.Cluster.Namespace, Name: k.Cluster.Name},
		Expose:  &params,
	}
	p, err := a.Flow.Propose(ctx, req, user, append(opts, approval.ForSource(k.Source))...)
	if pc := (*actions.PortCollisionError)(nil); errors.As(err, &pc) {
		// Found by the agent's preflight: nothing is proposed, so the
		// reply names no id; the words are the execution's refusal's.
		a.auditRefusal(ctx, k, user, err)
		p := approval.Proposal{Source: k.Source, Change: req}
		return chatops.Reply{Text: fmt.Sprintf("Cannot propose exposing `%s/%s` of %s: %s%s",
			esc(params.Namespace), esc(params.Service), esc(k.String()), errText(pc), collisionAdvice(p, pc))}
	}
	warning, refused, ok := a.stored(ctx, k, user, p, err, "Could not store the proposal: ")
	if !ok {
		return refused
	}
	if p.PreflightNote != "" {
		warning = "\n" + esc(p.PreflightNote) + warning
	}
	infraID := "&lt;spec.infraID&gt;"
	if hc != nil && hc.InfraID != "" {
		infraID = esc(hc.InfraID)
	}
	text := fmt.Sprintf("%s proposes `%s` for %s: expose Service `%s/%s` of the hosted cluster through NodePorts.\n%s\n%s%s",
		blockkit.Mention(user), p.ID, esc(k.String()), esc(params.Namespace), esc(params.Service),
		exposePlan(p.ID, k, params, infraID), howToDecide(p), warning)
	return proposalReply(p.ID, text)
}

// exposePlan lists the Services actions.Expose will create for request id.
// infraID must be escaped already.
func exposePlan(id string, k diagnose.Key, params actions.ExposeParams, infraID string) string {
	ports := "all ports of the Service"
	if len(params.Ports) > 0 {
		ps := make([]string, len(params.Ports))
		for i, p := range params.Ports {
			ps[i] = fmt.Sprint(p.Port)
		}
		ports = "port " + strings.Join(ps, ", ")
		if len(ps) > 1 {
			ports = "ports " + strings.Join(ps, ", ")
		}
	}
	cpNS := hypershift.ControlPlaneNamespace(k.Cluster.Namespace, k.Cluster.Name)
	return fmt.Sprintf("Will create, labelled `%s=%s`:\n"+
		"• management cluster: Service `%s/%s`, type NodePort, selecting `%s=%s,%s=%s` (the cluster's virt-launcher pods), one port per hosted node port N with port = targetPort = nodePort = N\n"+
		"• hosted cluster, only if `%s/%s` is not of type NodePort already (if it is, its own node ports are the ones forwarded and nothing is created there%s): Service `%s/%s`, type NodePort, selecting the pods of `%s/%s` (its selector), %s; %s\n"+
		"Reachable afterwards on any management node at those node ports. Node ports are checked before anything is written: one outside the management cluster's node-port range or already allocated (there, or in the hosted cluster when chosen) is refused, with the nearest free ones.%s",
		actions.LabelActionID, id,
		esc(cpNS), esc(actions.ManagementServiceName(id)),
		hypershift.LabelClusterName, infraID, hypershift.LabelKubeVirt, hypershift.VirtLauncher,
		esc(params.Namespace), esc(params.Service), ownOnly(params),
		esc(params.Namespace), esc(actions.HostedServiceName(params.Service)), esc(params.Namespace), esc(params.Service), ports,
		chosenNodePorts(params), outsideDefaultRange(params))
}

// ownOnly: chosen node ports of a Service that has its own must be those.
func ownOnly(params actions.ExposeParams) string {
	if len(params.ChosenNodePorts()) == 0 {
		return ""
	}
	return "; the node ports chosen here must then be its own"
}

// chosenNodePorts says which node ports the hosted Service is asked for.
func chosenNodePorts(params actions.ExposeParams) string {
	const allocated = "the hosted API server allocates a node port for each"
	if len(params.NodePorts) > 0 {
		s := "node ports " + actions.JoinPorts(params.NodePorts) + " for its ports in order"
		return s + ", the hosted API server allocating any further ones"
	}
	var pairs []string
	for _, p := range params.Ports {
		if p.NodePort != 0 {
			pairs = append(pairs, fmt.Sprintf("%d→%d", p.Port, p.NodePort))
		}
	}
	if len(pairs) == 0 {
		return allocated
	}
	s := "node ports " + strings.Join(pairs, ", ")
	if len(pairs) < len(params.Ports) {
		s += ", the hosted API server allocating the others"
	}
	return s
}

// outsideDefaultRange warns about chosen node ports outside Kubernetes'
// default range: the bot does not know the management cluster's.
func outsideDefaultRange(params actions.ExposeParams) string {
	var out []int32
	for _, n := range params.ChosenNodePorts() {
		if !actions.DefaultNodePortRange.Contains(n) {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return ""
	}
	return fmt.Sprintf("\nNote: node ports %s lie outside the default range %s: refused unless the management cluster's range was widened to include them.",
		actions.JoinPorts(out), actions.DefaultNodePortRange)
}
