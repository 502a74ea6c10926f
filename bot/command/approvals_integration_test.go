package command_test

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bot"
	"github.com/hcpbot/hcpbot/bot/blockkit"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/internal/scenario"
)

// From Slack, signed: `expose` proposes; a stranger's Approve button
// changes nothing; an approver's is answered at once (replacing the
// proposal) and its outcome, posted later into the same conversation,
// replaces that answer once the agent created both Services on the real
// API servers (ports and selectors lined up); `rollback` proposes the
// undo, whose approval deletes exactly them.
func TestExposeApproveRollbackLive(t *testing.T) {
	e := newLiveEnv(t)
	ctx := context.Background()
	cpNS := hypershift.ControlPlaneNamespace(e.ns, "kv")

	reply := e.slack.command("expose "+e.cluster+" "+appNS+"/petclinic 8080,8443", requester, hasID)
	id := actionID.FindString(reply)
	if id == "" || !strings.Contains(reply, "hcpbot-np-"+id) || !strings.Contains(reply, "petclinic-hcpbot-np") {
		t.Fatalf("expose proposal: %q", reply)
	}

	// A non-approver's button: ephemeral refusal, nothing created.
	call := e.slack.press(stranger, blockkit.ActionApprove, id, func(s string) bool { return strings.Contains(s, id) })
	if txt := call.Form.Get("text"); !strings.Contains(txt, "not allowed") || call.Form.Get("replace_original") == "true" || call.Form.Get("response_type") != "ephemeral" {
		t.Errorf("stranger's Approve answered %v", call.Form)
	}
	if list, err := e.hosted.Kube.CoreV1().Services(appNS).List(ctx, metav1.ListOptions{LabelSelector: actions.LabelActionID + "=" + id}); err != nil || len(list.Items) != 0 {
		t.Fatalf("after a stranger's Approve: %d Services, %v", len(list.Items), err)
	}
	if s := stateOf(t, e.flow, id); s != approval.StatePending {
		t.Fatalf("after a stranger's Approve the proposal is %s", s)
	}

	// The approver's button: answered at once, then executed; both
	// replace the message that carried the button.
	conv := e.slack.pressIn(approver1, blockkit.ActionApprove, id)
	if call := conv.approvedAtOnce(t, approver1, e.source); call.Form.Get("replace_original") != "true" {
		t.Errorf("approver's Approve answered %v", call.Form)
	}
	call = conv.posted(func(s string) bool { return strings.Contains(s, "and applied") || strings.Contains(s, "not applied") })
	if txt := call.Form.Get("text"); !strings.Contains(txt, "`"+id+"` (requested by <@"+requester+">) approved by <@"+approver1+"> and applied") || call.Form.Get("replace_original") != "true" {
		t.Fatalf("approver's Approve: outcome %v", call.Form)
	}
	if got := buttonsOf(t, call.Form.Get("blocks")); !slices.Equal(got, []string{blockkit.ActionRollback + "=" + id}) {
		t.Errorf("result buttons %v", got)
	}
	hsvc, err := e.hosted.Kube.CoreV1().Services(appNS).Get(ctx, actions.HostedServiceName("petclinic"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	msvc, err := env.Kube.CoreV1().Services(cpNS).Get(ctx, actions.ManagementServiceName(id), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if hsvc.Spec.Type != corev1.ServiceTypeNodePort || msvc.Spec.Type != corev1.ServiceTypeNodePort {
		t.Errorf("types %s / %s", hsvc.Spec.Type, msvc.Spec.Type)
	}
	if want := map[string]string{"app": "petclinic", "deployment": "petclinic"}; !maps.Equal(hsvc.Spec.Selector, want) {
		t.Errorf("hosted selector %v", hsvc.Spec.Selector)
	}
	if want := map[string]string{hypershift.LabelClusterName: e.c.InfraID, hypershift.LabelKubeVirt: hypershift.VirtLauncher}; !maps.Equal(msvc.Spec.Selector, want) {
		t.Errorf("management selector %v", msvc.Spec.Selector)
	}
	if len(hsvc.Spec.Ports) != 2 || len(msvc.Spec.Ports) != 2 {
		t.Fatalf("ports: hosted %v, management %v", hsvc.Spec.Ports, msvc.Spec.Ports)
	}
	for i, want := range []int32{8080, 8443} {
		hp, mp := hsvc.Spec.Ports[i], msvc.Spec.Ports[i]
		if hp.Port != want || hp.NodePort == 0 || mp.Port != hp.NodePort || mp.NodePort != hp.NodePort || mp.TargetPort != intstr.FromInt32(hp.NodePort) {
			t.Errorf("port %d: hosted %+v, management %+v", i, hp, mp)
		}
	}
	for _, s := range []*corev1.Service{hsvc, msvc} {
		if s.Labels[actions.LabelActionID] != id || s.Annotations[actions.AnnotationRequestedBy] != requester {
			t.Errorf("%s: labels %v annotations %v", s.Name, s.Labels, s.Annotations)
		}
	}
	// A second Approve changes nothing.
	call = e.slack.press(approver2, blockkit.ActionApprove, id, func(s string) bool { return strings.Contains(s, id) })
	if txt := call.Form.Get("text"); !strings.Contains(txt, "already decided") || call.Form.Get("replace_original") == "true" {
		t.Errorf("second Approve answered %v", call.Form)
	}

	// rollback: proposed, refused to the requester (four-eyes), approved.
	reply = e.slack.command("rollback "+id, requester, func(s string) bool { return rollbackIDs.MatchString(s) || strings.Contains(s, id) })
	rb := rollbackIDs.FindString(reply)
	if rb == "" {
		t.Fatalf("rollback proposal: %q", reply)
	}
	if r := e.slack.command("approve "+rb, requester, func(s string) bool { return strings.Contains(s, rb) }); !strings.Contains(r, "Four-eyes") {
		t.Errorf("requester approving their rollback: %q", r)
	}
	if _, err := env.Kube.CoreV1().Services(cpNS).Get(ctx, msvc.Name, metav1.GetOptions{}); err != nil {
		t.Fatalf("refused rollback removed the management Service: %v", err)
	}
	a, c := e.slack.send("approve "+rb, approver2)
	a.approvedAtOnce(t, approver2, e.source)
	r := c.posted(func(s string) bool { return strings.Contains(s, rb) }).Form.Get("text")
	if !strings.Contains(r, "approved by <@"+approver2+"> and rolled-back") || !strings.Contains(r, id+"` is now rolled back") {
		t.Fatalf("rollback approval: outcome %q", r)
	}
	if _, err := e.hosted.Kube.CoreV1().Services(appNS).Get(ctx, hsvc.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("hosted Service after rollback: %v", err)
	}
	if _, err := env.Kube.CoreV1().Services(cpNS).Get(ctx, msvc.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("management Service after rollback: %v", err)
	}
	if _, err := e.hosted.Kube.CoreV1().Services(appNS).Get(ctx, "petclinic", metav1.GetOptions{}); err != nil {
		t.Errorf("the app's own Service is gone: %v", err)
	}
	if p, _ := e.flow.Get(ctx, id); p.State != approval.StateRolledBack || p.RolledBackBy != approver2 {
		t.Errorf("original after rollback: %s by %q", p.State, p.RolledBackBy)
	}

	// The whole story is in the audit trail, and /hcp audit shows it:
	// each execution recorded by the bot and by the agent.
	kinds := auditKinds(t, e.log)
	if kinds[audit.KindProposed] != 2 || kinds[audit.KindApproved] != 2 || kinds[audit.KindExecuted] != 4 || kinds[audit.KindRolledBack] != 1 || kinds[audit.KindRefused] < 3 {
		t.Errorf("audit kinds %v", kinds)
	}
	if r := e.slack.command("audit 20", stranger, func(s string) bool { return strings.Contains(s, "audit entries") }); !strings.Contains(r, "rolled-back "+id) || !strings.Contains(r, "refused") {
		t.Errorf("/hcp audit:\n%s", r)
	}
}

// A HostedCluster edited between proposal and approval is not overwritten:
// the agent refuses the stale proposal and the outcome, posted after the
// immediate answer, asks for a new one.
func TestNoProxyEditedBeforeApprovalLive(t *testing.T) {
	e := newLiveEnv(t)
	ctx := context.Background()
	acts := e.cmds.Changes
	k := diagnose.Key{Source: "mgmt-" + e.ns, Cluster: event.ClusterRef{Namespace: e.ns, Name: "kv"}}
	fix := &diagnose.Fix{Kind: "noproxy", Target: "HostedCluster/" + e.ns + "/kv", Before: scenario.SeedNoProxy, Add: []string{"kubernetes", "172.31.0.0/16"}}
	r := acts.ProposeNoProxy(ctx, k, nil, fix, nil, requester)
	id := actionID.FindString(r.Text)
	if id == "" || !slices.Equal(buttons(r), []string{blockkit.ActionApprove + "=" + id, blockkit.ActionReject + "=" + id}) {
		t.Fatalf("proposal: %q %v", r.Text, buttons(r))
	}
	edited := scenario.SeedNoProxy + ",.edited.example"
	if err := scenario.SetNoProxy(ctx, env.Dynamic, e.ns, "kv", edited); err != nil {
		t.Fatal(err)
	}
	conv := e.slack.pressIn(approver1, blockkit.ActionApprove, id)
	conv.approvedAtOnce(t, approver1, e.source)
	call := conv.posted(func(s string) bool { return strings.Contains(s, "not applied") || strings.Contains(s, "and applied") })
	if txt := call.Form.Get("text"); !strings.Contains(txt, "`"+id+"` was not applied: the HostedCluster changed since the proposal") || !strings.Contains(txt, "fix noproxy "+e.cluster) {
		t.Errorf("stale approval: outcome %q", txt)
	}
	u, err := env.Dynamic.Resource(hypershift.HostedClusterGVR).Namespace(e.ns).Get(ctx, "kv", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, _, _ := unstructured.NestedString(u.Object, "spec", "configuration", "proxy", "noProxy"); got != edited {
		t.Errorf("noProxy %q, want the concurrent edit %q kept", got, edited)
	}
	if s := stateOf(t, e.flow, id); s != approval.StateFailed {
		t.Errorf("stale proposal is %s, want failed", s)
	}
}

// From the seed 000 incident: the Approve button of the incident message,
// pressed by two approvers (signed interaction payloads; four-eyes is on),
// is answered at once and then patches the HostedCluster's noProxy on the real API server so that it
// holds `kubernetes` and the service CIDR and keeps every earlier entry,
// and the audit trail records it. A non-approver's press changes nothing
// and proposes nothing; the first approver's press alone changes nothing.
func TestApproveButtonOnSeedIncidentLive(t *testing.T) {
	e := newLiveEnv(t)
	ctx := context.Background()
	seedSymptoms(t, e.cmds.Bot.(*bot.Bot), "mgmt-"+e.ns, e.ns, "kv")
	var inc bot.Incident
	for _, i := range e.cmds.Bot.Incidents() {
		if i.Open() && i.Cluster.Cluster.Name == "kv" && len(i.Diagnoses) > 0 && i.Diagnoses[0].Fix != nil {
			inc = i
		}
	}
	if inc.Key == "" {
		t.Fatalf("no seed incident with a fix: %+v", e.cmds.Bot.Incidents())
	}
	noProxy := func() string { return e.noProxy(t) }

	call := e.slack.press("U0STRANGER", blockkit.ActionApprove, inc.Key, func(s string) bool { return strings.Contains(s, "not allowed") })
	if call.JSON["replace_original"] == true {
		t.Error("a refusal replaced the incident message")
	}
	if got := noProxy(); got != scenario.SeedNoProxy {
		t.Fatalf("a non-approver's press changed noProxy to %q", got)
	}

	// Four-eyes: the first approver's press is one approval of two.
	call = e.slack.press(approver1, blockkit.ActionApprove, inc.Key, func(s string) bool { return strings.Contains(s, "1 of 2") })
	if txt := call.Form.Get("text"); !strings.Contains(txt, "<@"+approver1+">") || !strings.Contains(txt, "one more approver") {
		t.Errorf("first approval answered %q", txt)
	}
	if got := noProxy(); got != scenario.SeedNoProxy {
		t.Fatalf("one approver's press changed noProxy to %q", got)
	}
	conv := e.slack.pressIn(approver2, blockkit.ActionApprove, inc.Key)
	call = conv.approvedAtOnce(t, approver2, e.source)
	t.Logf("approve answered: %s", call.Form.Get("text"))
	call = conv.posted(func(s string) bool { return strings.Contains(s, "applied") || strings.Contains(s, "failed") })
	t.Logf("outcome: %s", call.Form.Get("text"))
	if txt := call.Form.Get("text"); !strings.Contains(txt, "(requested by <@"+approver1+">) approved by <@"+approver2+"> and applied") {
		t.Errorf("outcome %q", txt)
	}
	got := noProxy()
	entries := strings.Split(got, ",")
	if !strings.HasPrefix(got, scenario.SeedNoProxy+",") || !slices.Contains(entries, "kubernetes") || !slices.Contains(entries, "172.31.0.0/16") {
		t.Fatalf("noProxy after approval = %q", got)
	}
	recs, err := e.log.Recent(ctx, 20)
	if err != nil {
		t.Fatal(err)
	}
	executed := false
	for _, r := range recs {
		if r.Kind == audit.KindExecuted && strings.Contains(r.Cluster, "kv") && r.Actor != "" {
			executed = true
		}
	}
	if !executed {
		t.Errorf("no executed record in the audit trail: %+v", recs)
	}

	// The bot here does not watch the cluster, so it still shows the fix:
	// a later press proposes it again from the old value (one approval of
	// two), and a second approver's would meet the agent's refusal to
	// overwrite the changed HostedCluster.
	e.slack.press(approver1, blockkit.ActionApprove, inc.Key, func(s string) bool { return strings.Contains(s, "1 of 2") })
	e.slack.pressIn(approver2, blockkit.ActionApprove, inc.Key).posted(func(s string) bool {
		return strings.Contains(s, "not applied") || strings.Contains(s, "nothing to change")
	})
	if again := noProxy(); again != got {
		t.Errorf("a second press changed noProxy from %q to %q", got, again)
	}
}
