package command_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/slack-go/slack"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bot"
	"github.com/hcpbot/hcpbot/bot/blockkit"
	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/bot/command"
	"github.com/hcpbot/hcpbot/bot/notify"
	"github.com/hcpbot/hcpbot/event"
)

var (
	anyActionID = regexp.MustCompile(`(act|rbk)-[a-z2-7]{16}`)
	rollbackIDs = regexp.MustCompile(`rbk-[a-z2-7]{16}`)
)

// hostedCluster is what the bot learns about one HostedCluster.
type hostedCluster struct {
	source, namespace, name string
	state                   event.HostedClusterState
}

// botKnowing returns a bot that has seen the given HostedClusters (and
// nothing else).
func botKnowing(t *testing.T, hcs ...hostedCluster) *bot.Bot {
	t.Helper()
	b := bot.New(bot.Config{Channel: "C0INCIDENTS"}, nil, notify.NewConsole(io.Discard), nil, zerolog.Nop())
	for i, hc := range hcs {
		ref := event.ClusterRef{Namespace: hc.namespace, Name: hc.name}
		e, err := event.New(hc.source, &ref, event.ObjectRef{Kind: "HostedCluster", Namespace: hc.namespace, Name: hc.name, UID: "uid-" + hc.name},
			hc.state, "hc", time.Date(2026, 12, 1, 8, 0, i, 0, time.UTC))
		if err != nil {
			t.Fatal(err)
		}
		data, err := event.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		b.Handle(context.Background(), data)
	}
	return b
}

func kubevirt(source, ns, name string) hostedCluster {
	return hostedCluster{source: source, namespace: ns, name: name, state: event.HostedClusterState{
		Platform: "KubeVirt", InfraID: name + "-x1y2z", ServiceNetwork: []string{"172.31.0.0/16"}, ClusterNetwork: []string{"10.132.0.0/14"},
	}}
}

// console runs one command line through chatops' console, as user, and
// returns what it printed: usage errors are answered there, the rest by c.
func console(t *testing.T, c *command.Handler, user, line string) string {
	t.Helper()
	var out bytes.Buffer
	if err := (&chatops.Console{In: strings.NewReader(line + "\n"), Out: &out, Handler: c, UserID: user}).Run(context.Background()); err != nil {
		t.Fatalf("console %q: %v", line, err)
	}
	return out.String()
}

func cmd(c *command.Handler, user string, command chatops.Command) chatops.Reply {
	return c.HandleCommand(context.Background(), chatops.Request{Origin: chatops.Origin{UserID: user}, Command: command})
}

func press(c *command.Handler, user, action, value string) chatops.Reply {
	return c.HandleAction(context.Background(), chatops.ActionRequest{Origin: chatops.Origin{UserID: user}, ActionID: action, Value: value})
}

// pressApprove presses a proposal's Approve button as user in a
// conversation of its own and checks the immediate answer (sentAtOnce,
// replacing the proposal); the outcome then comes into that
// conversation.
func pressApprove(t *testing.T, c *command.Handler, user, id, source string) *later {
	t.Helper()
	conv := &later{}
	start := time.Now()
	r := c.HandleAction(conv.ctx(), chatops.ActionRequest{Origin: chatops.Origin{UserID: user}, ActionID: blockkit.ActionApprove, Value: id})
	sentAtOnce(t, "Approve of "+id, r, time.Since(start), user, source)
	if !r.ReplaceOriginal {
		t.Errorf("Approve of %s does not replace the proposal: %+v", id, r)
	}
	return conv
}

// buttons returns the buttons of a reply as "action_id=value".
func buttons(r chatops.Reply) []string {
	var out []string
	for _, b := range r.Blocks {
		if ab, ok := b.(*slack.ActionBlock); ok && ab.Elements != nil {
			for _, e := range ab.Elements.ElementSet {
				if btn, ok := e.(*slack.ButtonBlockElement); ok {
					out = append(out, btn.ActionID+"="+btn.Value)
				}
			}
		}
	}
	return out
}

// exposeAgent makes the fake executor answer like the real one: an
// exposure with its Undo, a rollback that deleted the Services.
func exposeAgent(e *approvalsEnv) {
	e.agent.setAnswer(func(req actions.Change) (*actions.Result, error) {
		switch req.Type {
		case actions.TypeExposeNodePort:
			return &actions.Result{
				ActionID: req.ID, Type: req.Type, Outcome: actions.OutcomeApplied, Summary: "Exposed hosted Service petclinic/petclinic",
				Ports: []actions.ExposedPort{{Protocol: "TCP", Port: 8080, NodePort: 30080}},
				Undo:  &actions.Undo{ActionID: req.ID, Type: req.Type, Cluster: req.Cluster, Expose: &actions.ExposeUndo{HostedNamespace: req.Expose.Namespace}},
			}, nil
		case actions.TypeRollback:
			return &actions.Result{ActionID: req.Rollback.Undo.ActionID, Type: req.Type, Outcome: actions.OutcomeRolledBack, Summary: "Removed the exposure"}, nil
		}
		return nil, fmt.Errorf("%w: unexpected %s", actions.ErrInvalid, req.Type)
	})
}

func auditKinds(t *testing.T, l *audit.Log) map[audit.Kind]int {
	t.Helper()
	recs, err := l.Recent(context.Background(), 200)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[audit.Kind]int{}
	for _, r := range recs {
		kinds[r.Kind]++
	}
	return kinds
}

// Wrong or partial input answers with the command's usage, without
// reaching the handler.
func TestNewCommandsUsage(t *testing.T) {
	c := &command.Handler{Bot: botKnowing(t)}
	for line, want := range map[string]string{
		"expose":                                "/hcp expose <cluster> <namespace>/<service> [port,...] [nodeports N,...]",
		"expose clusters/web":                   "/hcp expose <cluster> <namespace>/<service> [port,...] [nodeports N,...]",
		"expose clusters/web web":               "/hcp expose <cluster> <namespace>/<service> [port,...] [nodeports N,...]",
		"expose clusters/web a/b nodeports 1,1": "/hcp expose",
		"expose clusters/web a/B_ad":            "/hcp expose",
		"expose clusters/web a/b 0":             "/hcp expose",
		"rollback":                              "/hcp rollback <action-id>",
		"rollback act-x y":                      "/hcp rollback <action-id>",
		"rollback NOT-AN-ID":                    "/hcp rollback <action-id>",
		"silence clusters/web":                  "/hcp silence <cluster|incident-id> <duration> [reason...]",
		"silence clusters/web forever":          "/hcp silence",
		"silence clusters/web 90d":              "/hcp silence",
		"silence what 2h":                       "/hcp silence",
		"audit x":                               "/hcp audit [n|verify]",
		"audit 0":                               "/hcp audit [n|verify]",
		"audit 1 2":                             "/hcp audit [n|verify]",
	} {
		out := console(t, c, "UREQ0001", line)
		// The console prints Slack's "Usage: `...`" as "usage: ...".
		if !strings.Contains(out, "usage: "+want) {
			t.Errorf("%q answered\n%s\nwant the usage %q", line, out, want)
		}
	}
	// Well-formed, but nothing configured: unavailable, not a crash.
	for _, line := range []string{"expose clusters/web default/web", "rollback act-abcdabcdabcdabcd", "silence clusters/web 2h", "audit"} {
		if out := console(t, c, "UREQ0001", line); !strings.Contains(out, "not available") && !strings.Contains(out, "Unknown cluster") {
			t.Errorf("%q without actions/silences/audit: %s", line, out)
		}
	}
}

// expose: the proposal names both Services with their ports and selectors,
// carries Approve/Reject buttons with its id, and is refused for unknown
// and non-KubeVirt clusters. A stranger's Approve button changes nothing;
// an approver's replaces the proposal at once with the approval, then
// with the outcome, which offers a rollback.
func TestExposeCommand(t *testing.T) {
	e := newApprovals(t, "mgmt-1")
	exposeAgent(e)
	aws := kubevirt("mgmt-1", "clusters", "aws")
	aws.state.Platform = "AWS"
	c := &command.Handler{Bot: botKnowing(t, kubevirt("mgmt-1", "clusters", "web"), aws), Changes: e.approvals}

	r := cmd(c, requester, chatops.Expose{Cluster: chatops.ClusterRef{Namespace: "clusters", Name: "web"}, Namespace: "petclinic", Service: "petclinic", Ports: []int32{8080, 8443}})
	id := actionID.FindString(r.Text)
	if id == "" {
		t.Fatalf("no proposal id in %q", r.Text)
	}
	t.Logf("proposal:\n%s", chatops.PlainText(chatops.Reply{Text: r.Text}, nil))
	for _, want := range []string{
		"<@" + requester + ">", "mgmt-1/clusters/web",
		"`petclinic/petclinic-hcpbot-np`", "selecting the pods of `petclinic/petclinic`", "ports 8080, 8443",
		"`clusters-web/hcpbot-np-" + id + "`", "cluster.x-k8s.io/cluster-name=web-x1y2z,kubevirt.io=virt-launcher",
		"port = targetPort = nodePort", "hcpbot.io/action-id=" + id, "/hcp approve " + id,
	} {
		if !strings.Contains(r.Text, want) {
			t.Errorf("proposal lacks %q", want)
		}
	}
	if !r.InChannel || !slices.Equal(buttons(r), []string{blockkit.ActionApprove + "=" + id, blockkit.ActionReject + "=" + id}) {
		t.Errorf("proposal in channel %v with buttons %v", r.InChannel, buttons(r))
	}
	p, err := e.flow.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if p.Change.Type != actions.TypeExposeNodePort || p.Source != "mgmt-1" || p.Change.Expose.Namespace != "petclinic" ||
		p.Change.Expose.Service != "petclinic" || len(p.Change.Expose.Ports) != 2 || p.Change.Expose.Ports[1].Port != 8443 {
		t.Errorf("stored proposal: %+v", p.Change)
	}

	if r := cmd(c, requester, chatops.Expose{Cluster: chatops.ClusterRef{Namespace: "clusters", Name: "nope"}, Namespace: "a", Service: "b"}); !strings.Contains(r.Text, "Unknown cluster") {
		t.Errorf("unknown cluster: %q", r.Text)
	}
	before := auditKinds(t, e.log)[audit.KindRefused]
	r = cmd(c, requester, chatops.Expose{Cluster: chatops.ClusterRef{Namespace: "clusters", Name: "aws"}, Namespace: "a", Service: "b"})
	if !strings.Contains(r.Text, "Cannot propose") || !strings.Contains(r.Text, "KubeVirt") || anyActionID.MatchString(r.Text) {
		t.Errorf("non-KubeVirt cluster: %q", r.Text)
	}
	if after := auditKinds(t, e.log)[audit.KindRefused]; after != before+1 {
		t.Errorf("refused proposal audited %d times", after-before)
	}

	// A stranger's button: refused to them alone, audited, nothing runs.
	before = auditKinds(t, e.log)[audit.KindRefused]
	r = press(c, stranger, blockkit.ActionApprove, id)
	if !strings.Contains(r.Text, "not allowed") || r.InChannel || r.ReplaceOriginal {
		t.Errorf("stranger's Approve: %+v", r)
	}
	if after := auditKinds(t, e.log)[audit.KindRefused]; after != before+1 {
		t.Errorf("stranger's Approve audited %d times", after-before)
	}
	if s := stateOf(t, e.flow, id); s != approval.StatePending || e.agent.calls() != 0 {
		t.Fatalf("after a refused approval: %s, %d executions", s, e.agent.calls())
	}
	// An approver's button: answered at once, then executed; both replace
	// the proposal message.
	r = pressApprove(t, c, approver1, id, "mgmt-1").wait(t, "and applied")
	if !strings.HasPrefix(r.Text, "`"+id+"` (requested by <@"+requester+">) approved by <@"+approver1+"> and applied: Exposed hosted Service petclinic/petclinic") || !r.ReplaceOriginal || !r.InChannel {
		t.Errorf("approver's Approve: outcome %+v", r)
	}
	if !strings.Contains(r.Text, "/hcp rollback "+id) || !slices.Equal(buttons(r), []string{blockkit.ActionRollback + "=" + id}) {
		t.Errorf("outcome offers no rollback: %q %v", r.Text, buttons(r))
	}
	if n := e.agent.calls(); n != 1 {
		t.Errorf("executed %d times", n)
	}
	// A second press is refused and does not replace the result.
	if r := press(c, approver2, blockkit.ActionApprove, id); !strings.Contains(r.Text, "already decided") || r.ReplaceOriginal {
		t.Errorf("second Approve: %+v", r)
	}
	if c := (&command.Handler{Bot: c.Bot}); !strings.Contains(cmd(c, requester, chatops.Expose{Cluster: chatops.ClusterRef{Namespace: "clusters", Name: "web"}, Namespace: "a", Service: "b"}).Text, "not available") {
		t.Error("expose without actions is not unavailable")
	}
}

// The Reject button withdraws a proposal and replaces it; afterwards the
// Approve button only tells the presser.
func TestRejectButton(t *testing.T) {
	e := newApprovals(t, "mgmt-1")
	c := &command.Handler{Bot: botKnowing(t, kubevirt("mgmt-1", "clusters", "c1")), Changes: e.approvals}
	id, _ := e.propose(t, "mgmt-1")
	if r := press(c, stranger, blockkit.ActionReject, id); !strings.Contains(r.Text, "not allowed") || r.ReplaceOriginal {
		t.Errorf("stranger's Reject: %+v", r)
	}
	if r := press(c, requester, blockkit.ActionReject, id); !strings.Contains(r.Text, "rejected by") || !r.ReplaceOriginal {
		t.Errorf("requester's Reject: %+v", r)
	}
	if r := press(c, approver1, blockkit.ActionApprove, id); !strings.Contains(r.Text, "already decided") || r.ReplaceOriginal {
		t.Errorf("Approve after Reject: %+v", r)
	}
	time.Sleep(1500 * time.Millisecond)
	if n := e.agent.calls(); n != 0 {
		t.Errorf("executed %d times", n)
	}
}

// rollback proposes undoing an executed action; the rollback needs an
// approver (four-eyes too), runs the Undo the agent recorded and marks
// the original rolled back; its outcome, posted after the immediate
// answer, says so. Every step is audited.
func TestRollbackCommand(t *testing.T) {
	e := newApprovals(t, "mgmt-1")
	exposeAgent(e)
	c := &command.Handler{Bot: botKnowing(t, kubevirt("mgmt-1", "clusters", "web")), Changes: e.approvals}
	ref := chatops.ClusterRef{Namespace: "clusters", Name: "web"}
	id := actionID.FindString(cmd(c, requester, chatops.Expose{Cluster: ref, Namespace: "petclinic", Service: "petclinic"}).Text)

	if r := cmd(c, requester, chatops.Rollback{ActionID: id}); !strings.Contains(r.Text, "only executed actions") {
		t.Errorf("rollback of a pending proposal: %q", r.Text)
	}
	if r := cmd(c, requester, chatops.Rollback{ActionID: "act-aaaaaaaaaaaaaaaa"}); !strings.Contains(r.Text, "There is no action") {
		t.Errorf("rollback of an unknown id: %q", r.Text)
	}
	var conv later
	start := time.Now()
	r := c.HandleCommand(conv.ctx(), chatops.Request{Origin: chatops.Origin{UserID: approver1}, Command: chatops.Approve{ActionID: id}})
	sentAtOnce(t, "/hcp approve", r, time.Since(start), approver1, "mgmt-1")
	conv.wait(t, "and applied")

	// The Roll back button proposes, like the command.
	r = press(c, requester, blockkit.ActionRollback, id)
	rb := rollbackIDs.FindString(r.Text)
	if rb == "" || !strings.Contains(r.Text, "roll back `"+id+"`") || !strings.Contains(r.Text, "delete the Services labelled hcpbot.io/action-id="+id) ||
		!slices.Equal(buttons(r), []string{blockkit.ActionApprove + "=" + rb, blockkit.ActionReject + "=" + rb}) || r.ReplaceOriginal {
		t.Fatalf("rollback proposal: %q %v", r.Text, buttons(r))
	}
	if r := cmd(c, approver2, chatops.Rollback{ActionID: id}); !strings.Contains(r.Text, "already proposed as `"+rb+"`") {
		t.Errorf("second rollback proposal: %q", r.Text)
	}
	if n := e.agent.calls(); n != 1 {
		t.Fatalf("proposing a rollback executed: %d executions", n)
	}
	for user, want := range map[string]string{requester: "Four-eyes", stranger: "not allowed"} {
		if r := press(c, user, blockkit.ActionApprove, rb); !strings.Contains(r.Text, want) || r.ReplaceOriginal {
			t.Errorf("rollback approved by %s: %q", user, r.Text)
		}
	}
	if s := stateOf(t, e.flow, rb); s != approval.StatePending || e.agent.calls() != 1 {
		t.Fatalf("refused rollback: %s, %d executions", s, e.agent.calls())
	}
	r = pressApprove(t, c, approver2, rb, "mgmt-1").wait(t, "rolled")
	if !strings.HasPrefix(r.Text, "`"+rb+"` (requested by <@"+requester+">) approved by <@"+approver2+"> and rolled-back: Removed the exposure") ||
		!strings.Contains(r.Text, "`"+id+"` is now rolled back") || !r.ReplaceOriginal || len(buttons(r)) != 0 {
		t.Errorf("rollback approval: outcome %q %v", r.Text, buttons(r))
	}
	if sent := e.agent.lastChange(); sent.Type != actions.TypeRollback || sent.ID != rb || sent.Rollback.Undo.ActionID != id || sent.Rollback.Undo.Expose.HostedNamespace != "petclinic" {
		t.Errorf("agent ran %+v", sent)
	}
	orig, err := e.flow.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if orig.State != approval.StateRolledBack || orig.RolledBackBy != approver2 {
		t.Errorf("original after rollback: %s by %s", orig.State, orig.RolledBackBy)
	}
	if r := cmd(c, requester, chatops.Rollback{ActionID: id}); !strings.Contains(r.Text, "already rolled back") {
		t.Errorf("rollback again: %q", r.Text)
	}
	if r := cmd(c, requester, chatops.Rollback{ActionID: rb}); !strings.Contains(r.Text, "itself a rollback") {
		t.Errorf("rollback of a rollback: %q", r.Text)
	}
	// Each execution is recorded by the bot and by the agent.
	kinds := auditKinds(t, e.log)
	if kinds[audit.KindProposed] != 2 || kinds[audit.KindApproved] != 2 || kinds[audit.KindExecuted] != 4 || kinds[audit.KindRolledBack] != 1 || kinds[audit.KindRefused] < 2 {
		t.Errorf("audit kinds: %v", kinds)
	}
}

// buttonsOf decodes the blocks of a recorded Slack payload (JSON text).
func buttonsOf(t *testing.T, blocksJSON string) []string {
	t.Helper()
	var blocks slack.Blocks
	if err := json.Unmarshal([]byte(blocksJSON), &blocks); err != nil {
		t.Fatalf("blocks: %v", err)
	}
	return buttons(chatops.Reply{Blocks: blocks.BlockSet})
}
