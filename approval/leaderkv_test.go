package approval_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/bus"
)

// The agent reads the approval store from its stream leader: a direct
// get, which any replica answers, may come from a follower that has not
// yet stored the approval, and the request would be dropped as premature
// (leaderkv.go). Denied every direct get on the store from the start, the
// agent still runs an approved fix once, at its first reading.
func TestAgentReadsTheApprovalStoreFromItsLeader(t *testing.T) {
	e := newEnv(t)
	cut := agentPermissions(t)
	b := "KV_" + bus.ProposalsBucket
	cut.Publish.Deny = append(cut.Publish.Deny, "$JS.API.DIRECT.GET."+b+".>", "$JS.API.DIRECT.GET."+b)
	e.setAgentPermissions(cut) // before anything reads (see setAgentPermissions)
	f := e.flow(fourEyes())
	reg := prometheus.NewRegistry()
	e.serve(func(c *approval.AgentConfig) { c.Registerer = reg })
	var got outcome
	p := approved(t, f, &got)
	waitFor(t, 60*time.Second, "the outcome", func() bool { return len(got.got()) == 1 })
	if o := got.got()[0]; o.State != approval.StateExecuted || e.x.runs(p.ID) != 1 {
		t.Fatalf("outcome %+v after %d runs", o, e.x.runs(p.ID))
	}
	if n := gathered(t, reg, "hcpbot_agent_action_requests_total", "result", "handed-back"); n != 0 {
		t.Errorf("%v hand-backs: the store was not read at the first delivery", n)
	}
}
