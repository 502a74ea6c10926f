package command_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/identity"
	"github.com/hcpbot/hcpbot/internal/controlplane"
	"github.com/hcpbot/hcpbot/internal/testenv"
)

// approver3 is an approver no identity is mapped for.
const approver3 = "UAPP0003"

// The path, from Slack to the API server's audit log, with
// identities.required: the agent runs as its ServiceAccount with the
// shipped RBAC and the generated impersonation role (`hcpbot rbac`).
//
//   - approver2 is mapped to dave, who may only read HostedClusters: the
//     approval is refused at once, naming the missing patch; nothing
//     changes and the proposal stays pending.
//   - approver3 has no identity: refused, naming identities.required.
//   - approver1 is mapped to alice, who may patch: applied, and the API
//     server's audit log has the patch made by the agent as alice with the
//     action id and the requester.
//   - The rollback, approved by alice while she still may patch, runs
//     after her permission was taken away: the API server's Forbidden,
//     reported as not applied with its reason, on the trail as failed; the
//     cluster keeps the fix, and the agent's own right to patch is not
//     used instead.
func TestImpersonationThroughSlackLive(t *testing.T) {
	ids := identity.Map{Required: true, Entries: []identity.Entry{
		{Slack: approver1, User: "alice", Groups: []string{"platform-ops"}},
		{Slack: approver2, User: "dave"},
	}}
	e := newLiveEnv(t, withIdentities(ids), withApprovers(approver3))
	ctx := context.Background()
	group := hypershift.HostedClusterGVR.Group
	revokeAlice := env.Grant(t, e.ns, "alice", group, "hostedclusters", "patch")
	env.Grant(t, e.ns, "dave", group, "hostedclusters", "get")
	before := e.noProxy(t)

	e.seedIncident(t)
	reply := e.slack.command("fix noproxy "+e.cluster, requester, func(s string) bool { return anyID.MatchString(s) })
	id := anyID.FindString(reply)
	if id == "" {
		t.Fatalf("fix proposal: %q", reply)
	}

	r := e.slack.command("approve "+id, approver2, func(s string) bool { return strings.Contains(s, id) })
	if !strings.Contains(r, "does not count") || !strings.Contains(r, "identity (dave)") || !strings.Contains(r, "patch hostedclusters."+group) {
		t.Errorf("dave's approval answered %q; want it refused naming the missing patch", r)
	}
	r = e.slack.command("approve "+id, approver3, func(s string) bool { return strings.Contains(s, id) })
	if !strings.Contains(r, "does not count") || !strings.Contains(r, "identities.required") {
		t.Errorf("an unmapped approver's approval answered %q; want it refused", r)
	}
	if s := stateOf(t, e.flow, id); s != approval.StatePending {
		t.Fatalf("after refused approvals the proposal is %s", s)
	}
	if got := e.noProxy(t); got != before {
		t.Fatalf("noProxy changed to %q by refused approvals", got)
	}

	a, conv := e.slack.send("approve "+id, approver1)
	a.approvedAtOnce(t, approver1, e.source)
	out := conv.posted(func(s string) bool { return strings.Contains(s, "applied") }).Form.Get("text")
	if !strings.Contains(out, "approved by <@"+approver1+"> and applied") || !strings.Contains(out, "written as Kubernetes user `alice`") {
		t.Fatalf("alice's approval: outcome %q", out)
	}
	testenv.Eventually(t, 10*time.Second, "the Event of the fix", func() bool {
		evs, err := env.Kube.CoreV1().Events(e.ns).List(ctx, metav1.ListOptions{LabelSelector: actions.LabelActionID + "=" + id})
		return err == nil && len(evs.Items) == 1 && strings.Contains(evs.Items[0].Message, "written as Kubernetes user alice")
	})
	if got := e.noProxy(t); !strings.Contains(got, "kubernetes") {
		t.Fatalf("noProxy after the fix: %q", got)
	}
	patch := impersonatedWrites(t, e.ns, "kv", id, 1, func(ev controlplane.AuditEvent) bool {
		return ev.ResponseStatus != nil && ev.ResponseStatus.Code == 200 && !strings.Contains(ev.RequestURI, "dryRun=")
	})[0]
	if patch.Verb != "patch" || patch.ImpersonatedUser.Username != "alice" ||
		!slices.Contains(patch.ImpersonatedUser.Groups, "platform-ops") ||
		!slices.Equal(patch.ImpersonatedUser.Extra[identity.ExtraRequester], authenticationv1.ExtraValue{requester}) ||
		!slices.Equal(patch.ImpersonatedUser.Extra[identity.ExtraApprovers], authenticationv1.ExtraValue{approver1}) {
		t.Errorf("the fix's write in the audit log: %s by %q as %+v", patch.Verb, patch.User.Username, patch.ImpersonatedUser)
	}

	// The rollback: approved while alice may patch, run once she may not.
	reply = e.slack.command("rollback "+id, requester, func(s string) bool { return rollbackIDs.MatchString(s) || strings.Contains(s, id) })
	rb := rollbackIDs.FindString(reply)
	if rb == "" {
		t.Fatalf("rollback proposal: %q", reply)
	}
	e.agentStop()
	a, conv = e.slack.send("approve "+rb, approver1)
	a.approvedAtOnce(t, approver1, e.source)
	revokeAlice()
	e.agentStop = e.serveAgent()
	out = conv.posted(func(s string) bool { return strings.Contains(s, rb) && strings.Contains(s, "not applied") }).Form.Get("text")
	if !strings.Contains(strings.ToLower(out), "forbidden") || !strings.Contains(out, "alice") {
		t.Errorf("the rollback without the permission: outcome %q; want not applied, naming the Forbidden", out)
	}
	if got := e.noProxy(t); !strings.Contains(got, "kubernetes") {
		t.Errorf("noProxy after the refused rollback: %q; the agent wrote with its own rights", got)
	}
	denied := impersonatedWrites(t, e.ns, "kv", rb, 1, func(ev controlplane.AuditEvent) bool {
		return ev.ResponseStatus != nil && ev.ResponseStatus.Code == 403
	})
	if denied[0].ImpersonatedUser.Username != "alice" {
		t.Errorf("the refused rollback in the audit log: %+v", denied[0].ImpersonatedUser)
	}
	if p, _ := e.flow.Get(ctx, rb); p.State != approval.StateFailed || p.Code != approval.CodeRejected {
		t.Errorf("the rollback reads %s (%s), want failed (rejected)", p.State, p.Code)
	}
	testenv.Eventually(t, 10*time.Second, "the failed rollback on the trail", func() bool {
		recs, err := e.log.Recent(ctx, 200)
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(recs, func(r audit.Record) bool {
			return r.ActionID == rb && r.Kind == audit.KindFailed && strings.Contains(strings.ToLower(r.Reason), "forbidden")
		})
	})
}

// impersonatedWrites waits until the management API server's audit log
// holds want writes of HostedCluster ns/name made by the agent's
// ServiceAccount impersonating someone for action, that match, and
// returns them.
func impersonatedWrites(t *testing.T, ns, name, action string, want int, match func(controlplane.AuditEvent) bool) []controlplane.AuditEvent {
	t.Helper()
	path := env.CP.Management.AuditLogPath()
	var got []controlplane.AuditEvent
	testenv.Eventually(t, 10*time.Second, "the writes of "+action+" in the audit log", func() bool {
		all, err := controlplane.AuditEvents(path)
		if err != nil {
			t.Fatal(err)
		}
		got = slices.DeleteFunc(all, func(ev controlplane.AuditEvent) bool {
			return ev.User.Username != testenv.AgentUser || ev.ImpersonatedUser == nil || ev.ObjectRef == nil ||
				ev.ObjectRef.Resource != "hostedclusters" || ev.ObjectRef.Namespace != ns || ev.ObjectRef.Name != name ||
				!slices.Equal(ev.ImpersonatedUser.Extra[identity.ExtraAction], authenticationv1.ExtraValue{action}) || !match(ev)
		})
		return len(got) >= want
	})
	return got
}
