package command_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/bot/command"
)

// collisionAgent makes the fake executor refuse every exposure with c, as
// the real one does when node ports are taken.
func collisionAgent(e *approvalsEnv, c actions.PortCollision) {
	e.agent.setAnswer(func(actions.Change) (*actions.Result, error) {
		return nil, &actions.PortCollisionError{NodePort: c.Ports[0].NodePort, PortCollision: c}
	})
}

// Seed 004 with node ports chosen: the proposal says which, the agent's
// executor gets them (after the agent's Permit), and a collision comes
// back, as the outcome of the approval, with the free alternatives and
// the command that proposes them.
func TestExposeChosenNodePortsCommand(t *testing.T) {
	e := newApprovals(t, "mgmt-1")
	c := &command.Handler{Bot: botKnowing(t, kubevirt("mgmt-1", "clusters", "web")), Changes: e.approvals}
	web := chatops.ClusterRef{Namespace: "clusters", Name: "web"}

	r := cmd(c, requester, chatops.Expose{Cluster: web, Namespace: "petclinic", Service: "petclinic", NodePorts: []int32{30001, 30002, 30003}})
	id := actionID.FindString(r.Text)
	if id == "" {
		t.Fatalf("no proposal id in %q", r.Text)
	}
	t.Logf("proposal:\n%s", chatops.PlainText(chatops.Reply{Text: r.Text}, nil))
	for _, want := range []string{
		"node ports 30001, 30002, 30003 for its ports in order",
		"only if `petclinic/petclinic` is not of type NodePort already",
		"port = targetPort = nodePort", "checked before anything is written",
	} {
		if !strings.Contains(r.Text, want) {
			t.Errorf("proposal lacks %q", want)
		}
	}
	if strings.Contains(r.Text, "outside the default range") {
		t.Errorf("proposal warns about the default range: %q", r.Text)
	}
	p, err := e.flow.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if x := p.Change.Expose; len(x.Ports) != 0 || !slices.Equal(x.NodePorts, []int32{30001, 30002, 30003}) {
		t.Errorf("stored request: %+v", x)
	}

	collisionAgent(e, actions.PortCollision{
		Ports: []actions.PortProblem{{NodePort: 30002, Reason: actions.PortAllocated, Holder: "other/holds-30002"}},
		Range: actions.DefaultNodePortRange, Alternatives: []int32{30004},
	})
	r = pressApprove(t, c, approver1, id, "mgmt-1").wait(t, "not applied")
	t.Logf("outcome:\n%s", chatops.PlainText(chatops.Reply{Text: r.Text}, nil))
	if sent := e.agent.lastChange(); sent.ID != id || !slices.Equal(sent.Expose.NodePorts, []int32{30001, 30002, 30003}) {
		t.Errorf("the agent got %+v", sent.Expose)
	}
	for _, want := range []string{
		"`" + id + "` was not applied",
		"30002 is already allocated in the management cluster (Service other/holds-30002)",
		"Propose again on free node ports: `/hcp expose mgmt-1:clusters/web petclinic/petclinic nodeports 30001,30004,30003`",
	} {
		if !strings.Contains(r.Text, want) {
			t.Errorf("collision reply lacks %q", want)
		}
	}
	if strings.Contains(r.Text, "/hcp rollback") || len(buttons(r)) != 0 {
		t.Errorf("a refused exposure offers a rollback: %q %v", r.Text, buttons(r))
	}

	// Node ports paired with listed ports; one outside the default range
	// is proposed with a note (the bot does not know the cluster's range).
	r = cmd(c, requester, chatops.Expose{Cluster: web, Namespace: "petclinic", Service: "petclinic", Ports: []int32{8080, 8443}, NodePorts: []int32{40000}})
	id = actionID.FindString(r.Text)
	if !strings.Contains(r.Text, "node ports 8080→40000, the hosted API server allocating the others") || !strings.Contains(r.Text, "node ports 40000 lie outside the default range 30000-32767") {
		t.Errorf("proposal: %q", r.Text)
	}
	collisionAgent(e, actions.PortCollision{
		Ports: []actions.PortProblem{{NodePort: 40000, Reason: actions.PortOutOfRange}},
		Range: actions.DefaultNodePortRange, Alternatives: []int32{32767},
	})
	r = pressApprove(t, c, approver1, id, "mgmt-1").wait(t, "not applied")
	if sent := e.agent.lastChange(); len(sent.Expose.Ports) != 2 || sent.Expose.Ports[0] != (actions.ExposePort{Port: 8080, NodePort: 40000}) || sent.Expose.Ports[1] != (actions.ExposePort{Port: 8443}) {
		t.Errorf("the agent got %+v", sent.Expose)
	}
	if !strings.Contains(r.Text, "40000 is outside the node-port range 30000-32767") ||
		!strings.Contains(r.Text, "`/hcp expose mgmt-1:clusters/web petclinic/petclinic 8080,8443 nodeports 32767`") {
		t.Errorf("out-of-range reply: %q", r.Text)
	}

	// The app's own NodePort Service collides (seed 004 as the runbook
	// does it): the advice is to move its node ports, not to choose.
	r = cmd(c, requester, chatops.Expose{Cluster: web, Namespace: "petclinic", Service: "petclinic"})
	id = actionID.FindString(r.Text)
	collisionAgent(e, actions.PortCollision{
		Ports: []actions.PortProblem{{NodePort: 30002, Reason: actions.PortAllocated, Holder: "other/holds-30002"}},
		Range: actions.DefaultNodePortRange, Alternatives: []int32{30004}, Forwarded: true,
	})
	r = pressApprove(t, c, approver1, id, "mgmt-1").wait(t, "not applied")
	if !strings.Contains(r.Text, "`petclinic/petclinic` is of type NodePort in the hosted cluster, so its own node ports are forwarded: give it free ones there (nearest: 30004)") ||
		strings.Contains(r.Text, "nodeports 30004") {
		t.Errorf("forwarded collision reply: %q", r.Text)
	}

	// More node ports than listed ports never becomes a proposal.
	r = cmd(c, requester, chatops.Expose{Cluster: web, Namespace: "petclinic", Service: "petclinic", Ports: []int32{8080}, NodePorts: []int32{30001, 30002}})
	if !strings.Contains(r.Text, "Cannot propose") || anyActionID.MatchString(r.Text) {
		t.Errorf("2 node ports for 1 port: %q", r.Text)
	}
}
