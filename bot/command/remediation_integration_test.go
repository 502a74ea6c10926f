package command_test

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/hcpbot/hcpbot/bot"
	"github.com/hcpbot/hcpbot/bot/blockkit"
	"github.com/hcpbot/hcpbot/bot/command"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv"
)

// The fix loop on real parts: the seed 000 incident's Approve button,
// pressed by two approvers, patches the HostedCluster; the bot learns the
// executed fix from the proposals bucket (command.FollowFixes) and keeps
// the root cause it was approved for. A node lost after the fix makes it
// "fix applied, not healed" with a Roll back button carrying the fix's id;
// that button, approved by the other approver, restores the noProxy on the
// API server, and the incident says the fix was rolled back. The timeline
// has every step with its actor.
func TestFixNotHealedRollbackLive(t *testing.T) {
	e := newLiveEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	b := e.cmds.Bot.(*bot.Bot)
	seedSymptoms(t, b, e.source, e.ns, "kv")
	if err := command.FollowFixes(ctx, e.flow, b); err != nil {
		t.Fatal(err)
	}
	inc := openIncident(t, b, "kv")
	cause := inc.Diagnoses[0]
	if cause.Fix == nil {
		t.Fatalf("seed incident without a fix: %+v", cause)
	}
	// Details, as the console spells it: the diagnosis by incident key.
	if r := e.slack.command("diagnose "+inc.Key, stranger, func(s string) bool { return strings.Contains(s, "kv") }); !strings.Contains(r, "tunnelled") {
		t.Errorf("/hcp diagnose %s answered:\n%s", inc.Key, r)
	}
	noProxy := func() string { return e.noProxy(t) }

	first := e.slack.press(approver1, blockkit.ActionApprove, inc.Key, func(s string) bool { return strings.Contains(s, "1 of 2") })
	fixID := regexp.MustCompile("fix-[a-z2-7]+").FindString(first.Form.Get("text"))
	// The requester approving again is refused (four-eyes), and audited.
	if r := e.slack.command("approve "+fixID, approver1, func(s string) bool { return strings.Contains(s, fixID) }); !strings.Contains(r, "Four-eyes") {
		t.Fatalf("requester approving their own fix: %q", r)
	}
	// The second approval as the console spells the Approve button: the
	// command with the incident's key, answered at once, the outcome later.
	a, c := e.slack.send("approve "+inc.Key, approver2)
	a.approvedAtOnce(t, approver2, e.source)
	if r := c.posted(outcomeOf(fixID)).Form.Get("text"); !strings.Contains(r, "and applied") {
		t.Fatalf("the fix's outcome: %q", r)
	}
	if got := noProxy(); !strings.Contains(got, "kubernetes") {
		t.Fatalf("noProxy after the approvals = %q", got)
	}
	var remedy *bot.Remedy
	testenv.Eventually(t, 30*time.Second, "the bot to learn the executed fix from the proposals bucket", func() bool {
		inc = openIncident(t, b, "kv")
		remedy = inc.Remedy
		return remedy != nil
	})
	if remedy.Status != bot.StatusRollingOut || remedy.Cause.Title != cause.Title || remedy.ApprovedBy != approver2 || remedy.RequestedBy != approver1 {
		t.Fatalf("remedy %+v, want rolling out, cause %q, approved by %s, requested by %s", remedy, cause.Title, approver2, approver1)
	}

	// A node lost after the fix: not healed, at once.
	ref := event.ClusterRef{Namespace: e.ns, Name: "kv"}
	lost := time.Now()
	ev, err := event.New(e.source, &ref, event.ObjectRef{Kind: "Node", Name: "kv-np-9", UID: "uid-kv-np-9", Hosted: true},
		event.NodeReadiness{Node: "kv-np-9", Ready: event.ConditionFalse, Reason: "KubeletNotReady", Message: "container runtime is down", LastTransitionTime: lost},
		event.TransitionAt("Ready=False", lost), lost)
	if err != nil {
		t.Fatal(err)
	}
	data, err := event.Encode(ev)
	if err != nil {
		t.Fatal(err)
	}
	b.Handle(ctx, data)
	inc = openIncident(t, b, "kv")
	if inc.Remedy == nil || inc.Remedy.Status != bot.StatusNotHealed {
		t.Fatalf("after a node was lost: %+v", inc.Remedy)
	}
	text, blocks := bot.Render(&inc, time.Now())
	if !strings.Contains(text, "NOT HEALED") || !strings.Contains(text, cause.Title) {
		t.Errorf("not healed headline: %q", text)
	}
	var rollbackID string
	for _, bl := range blocks {
		if a, ok := bl.(*slack.ActionBlock); ok {
			for _, el := range a.Elements.ElementSet {
				if btn, ok := el.(*slack.ButtonBlockElement); ok && btn.ActionID == blockkit.ActionRollback {
					rollbackID = btn.Value
				}
			}
		}
	}
	if rollbackID != remedy.ID {
		t.Fatalf("Roll back button carries %q, want the fix %q", rollbackID, remedy.ID)
	}

	// The button proposes the rollback; the other approver runs it.
	call := e.slack.press(approver1, blockkit.ActionRollback, rollbackID, func(s string) bool { return rollbackIDs.MatchString(s) })
	rb := rollbackIDs.FindString(call.Form.Get("text"))
	if rb == "" {
		t.Fatalf("Roll back answered %v", call.Form)
	}
	if r := e.slack.command("approve "+rb, approver2, outcomeOf(rb)); !strings.Contains(r, "is now rolled back") {
		t.Fatalf("the rollback's outcome: %q", r)
	}
	if got := noProxy(); got != scenario.SeedNoProxy {
		t.Fatalf("noProxy after the rollback = %q, want %q", got, scenario.SeedNoProxy)
	}
	testenv.Eventually(t, 30*time.Second, "the incident to say the fix was rolled back", func() bool {
		inc = openIncident(t, b, "kv")
		return inc.Remedy != nil && inc.Remedy.Status == bot.StatusRolledBack && inc.Remedy.RolledBackBy == approver2
	})
	if text, _ := bot.Render(&inc, time.Now()); !strings.Contains(text, "ROLLED BACK") {
		t.Errorf("after the rollback: %q", text)
	}
	_, steps, ok := b.Timeline(inc.Key)
	if !ok {
		t.Fatal("no timeline")
	}
	story := bot.TimelineText(&inc, steps)
	for _, want := range []string{"first symptom", "proposed", "<@" + approver1 + ">", "approved — <@" + approver2 + ">", "executed by the agent", "rolled back — <@" + approver2 + ">"} {
		if !strings.Contains(story, want) {
			t.Errorf("timeline lacks %q:\n%s", want, story)
		}
	}
	r := e.slack.command("timeline "+inc.Key, stranger, func(s string) bool { return strings.Contains(s, "Timeline of") })
	if !strings.Contains(r, "rolled back") || !strings.Contains(r, "fix `"+fixID+"` refused") {
		t.Errorf("/hcp timeline answered:\n%s", r)
	}
	t.Logf("/hcp timeline:\n%s", r)
}

func openIncident(t *testing.T, b *bot.Bot, name string) bot.Incident {
	t.Helper()
	for _, i := range b.Incidents() {
		if i.Open() && i.Cluster.Cluster.Name == name {
			return i
		}
	}
	t.Fatalf("no open incident of %s", name)
	return bot.Incident{}
}
