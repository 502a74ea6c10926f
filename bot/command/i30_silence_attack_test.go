package command_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bot/chatops"
)

// A Slack user who is no approver, in a channel where the app answers
// but not the one the cluster's incidents are posted to (botKnowing
// posts to C0INCIDENTS): as documented (docs/security.md, "Any Slack
// user … may silence"), they silence the cluster for up to 7 days — no
// approver, no channel check: the command handler knows no route. What
// holds: the silence names them, is announced in the channel they typed
// it in (InChannel), and its audit record names them; no command ends a
// silence, theirs or another's (hcpbot has no early end). The team of
// the cluster's channel is not told: a residual risk, in
// docs/security.md.
func TestI30AttackNonApproverSilencesFromAnotherChannel(t *testing.T) {
	e := newSilences(t)
	web := chatops.ClusterRef{Namespace: "clusters", Name: "web"}
	r := e.cmds.HandleCommand(context.Background(), chatops.Request{
		Origin:  chatops.Origin{UserID: stranger, ChannelID: "C0ELSEWHERE"},
		Command: chatops.Silence{Cluster: &web, Duration: 7 * 24 * time.Hour, Reason: "quiet please"},
	})
	if !strings.Contains(r.Text, "<@"+stranger+"> silenced cluster mgmt-1/clusters/web for 7d") || !r.InChannel {
		t.Errorf("silence from another channel: %+v", r)
	}
	sil, ok := e.store.Match("mgmt-1/clusters/web", "", e.now)
	if !ok || sil.CreatedBy != stranger {
		t.Fatalf("stored %+v, %v; want the stranger's silence", sil, ok)
	}
	recs, err := e.log.Recent(context.Background(), 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].Kind != audit.KindSilenced || recs[0].Actor != stranger || recs[0].ActionID != sil.ID {
		t.Errorf("audit %+v: want the stranger's silence", recs)
	}
	for _, line := range []string{"unsilence " + sil.ID, "silence " + sil.ID + " 1m", "expire " + sil.ID} {
		// "unknown command", or the id taken for an unknown incident.
		if out := console(t, e.cmds, approver1, line); !strings.Contains(strings.ToLower(out), "unknown") {
			t.Errorf("%q: %s", line, out)
		}
	}
	if got, ok := e.store.Match("mgmt-1/clusters/web", "", e.now.Add(7*24*time.Hour-time.Minute)); !ok || got.ID != sil.ID {
		t.Errorf("the stranger's silence ended early: %+v, %v", got, ok)
	}
}
