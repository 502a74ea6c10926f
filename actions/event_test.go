package actions_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/internal/scenario"
)

// describedEvents lists the Events of an object as `kubectl describe` (and
// `oc describe`) finds them: core/v1, field selector on the involved
// object's name, namespace, kind and uid, in its namespace (all namespaces
// for a cluster-scoped one).
func describedEvents(t *testing.T, namespace, name, kind, uid string) []corev1.Event {
	t.Helper()
	ev := env.Kube.CoreV1().Events(namespace)
	sel := ev.GetFieldSelector(&name, &namespace, &kind, &uid)
	list, err := ev.List(context.Background(), metav1.ListOptions{FieldSelector: sel.String()})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// checkEvent: exactly one Event of ch on the object, as recorded.
func checkEvent(t *testing.T, what string, got []corev1.Event, ch actions.Change, reason string, who actions.Actors, summary string) {
	t.Helper()
	if len(got) != 1 {
		t.Fatalf("%s: %d Events on the object, want exactly 1: %+v", what, len(got), got)
	}
	e := got[0]
	if e.Type != corev1.EventTypeNormal || e.Reason != reason || e.Source.Component != actions.EventComponent ||
		e.ReportingController != actions.EventComponent || e.Count != 1 || e.LastTimestamp.IsZero() ||
		e.Labels[actions.LabelActionID] != ch.ID || e.Action != string(ch.Type) {
		t.Errorf("%s: Event %+v", what, e)
	}
	for _, s := range append([]string{ch.ID, who.RequestedBy, summary}, who.Approvers...) {
		if !strings.Contains(e.Message, s) {
			t.Errorf("%s: message %q does not name %q", what, e.Message, s)
		}
	}
	t.Logf("%s: %s %s/%s: %s", what, e.Reason, e.Namespace, e.Name, e.Message)
}

// Each execution records one Event on the object it changed, even when
// the execution (and so RecordEvent) runs again after the agent died.
func TestRecordEventNoProxy(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	c := scenario.BehindProxy(env.Namespace(t), "evented")
	hc := seedCluster(t, c)
	x, mgmt, _ := executor(t)
	who := actions.Actors{RequestedBy: "U0ALICE (alice)", Approvers: []string{"U0BOB (bob)", "U0CAROL (carol)"}}

	req := patchRequest("fix-0201abcd", c, scenario.SeedNoProxy)
	res, err := x.Execute(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	mgmt.take()
	for range 2 {
		if err := x.RecordEvent(ctx, req, res, who); err != nil {
			t.Fatalf("RecordEvent: %v", err)
		}
	}
	mgmt.expect(t, "record twice", "get hostedclusters", "create events", "get hostedclusters", "create events")
	checkEvent(t, "patch", describedEvents(t, c.Namespace, c.Name, "HostedCluster", string(hc.UID)), req, actions.EventReasonApplied, who, res.Summary)

	undo := actions.Change{ID: "undo-0201abcd", Type: actions.TypeRollback, Cluster: req.Cluster, RequestedBy: "bob",
		Rollback: &actions.RollbackParams{Undo: *res.Undo}}
	rb, err := x.Execute(ctx, undo)
	if err != nil {
		t.Fatal(err)
	}
	rbWho := actions.Actors{Approvers: []string{"U0CAROL (carol)"}}
	if err := x.RecordEvent(ctx, undo, rb, rbWho); err != nil {
		t.Fatal(err)
	}
	rbWho.RequestedBy = undo.RequestedBy // the default
	evs := describedEvents(t, c.Namespace, c.Name, "HostedCluster", string(hc.UID))
	if len(evs) != 2 {
		t.Fatalf("%d Events after the rollback, want 2", len(evs))
	}
	for _, e := range evs {
		if e.Labels[actions.LabelActionID] == undo.ID {
			checkEvent(t, "rollback", []corev1.Event{e}, undo, actions.EventReasonRolledBack, rbWho, rb.Summary)
		}
	}

	// Credentials in a summary (a proxy URL) never reach the Event; an
	// overlong summary is cut to the API server's limit.
	leaky := patchRequest("fix-0202abcd", c, scenario.SeedNoProxy)
	lr := &actions.Result{ActionID: leaky.ID, Type: leaky.Type, Outcome: actions.OutcomeUnchanged,
		Summary: "proxy http://proxyuser:s3cr3t@proxy.corp.example:3128 already bypassed. " + strings.Repeat("ü", 600)}
	if err := x.RecordEvent(ctx, leaky, lr, who); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range describedEvents(t, c.Namespace, c.Name, "HostedCluster", string(hc.UID)) {
		if e.Labels[actions.LabelActionID] != leaky.ID {
			continue
		}
		found = true
		if strings.Contains(e.Message, "s3cr3t") || strings.Contains(e.Message, "proxyuser") || !strings.Contains(e.Message, "proxy.corp.example:3128") {
			t.Errorf("credentials not redacted: %q", e.Message)
		}
		if len(e.Message) > 1024 || !strings.HasSuffix(e.Message, "…") || e.Reason != actions.EventReasonUnchanged {
			t.Errorf("long message: %d bytes, reason %s", len(e.Message), e.Reason)
		}
	}
	if !found {
		t.Error("no Event of the unchanged action")
	}
}

// Proxy/cluster is cluster-scoped: its Event lives in namespace default,
// where `kubectl describe proxy cluster` finds it.
func TestRecordEventOpenShiftProxy(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	ri := env.Dynamic.Resource(hypershift.ProxyGVR)
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"noProxy": ".corp.example"}}}
	u.SetAPIVersion("config.openshift.io/v1")
	u.SetKind("Proxy")
	u.SetName(hypershift.ProxyName)
	px, err := ri.Create(ctx, u, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ri.Delete(context.Background(), hypershift.ProxyName, metav1.DeleteOptions{}) })

	x, _, _ := executor(t)
	req := actions.Change{ID: "fix-0203abcd", Type: actions.TypeNoProxyPatch, RequestedBy: "alice",
		Cluster: actions.ClusterRef{Name: hypershift.ProxyName},
		NoProxy: &actions.NoProxyParams{Target: actions.TargetProxy, Expected: ".corp.example", Add: []string{"kubernetes"}}}
	res, err := x.Execute(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	who := actions.Actors{RequestedBy: "alice", Approvers: []string{"bob"}}
	for range 2 {
		if err := x.RecordEvent(ctx, req, res, who); err != nil {
			t.Fatal(err)
		}
	}
	evs := describedEvents(t, "", hypershift.ProxyName, "Proxy", string(px.GetUID()))
	checkEvent(t, "Proxy/cluster", evs, req, actions.EventReasonApplied, who, res.Summary)
	if evs[0].Namespace != metav1.NamespaceDefault {
		t.Errorf("Event in namespace %q, want default", evs[0].Namespace)
	}
	_ = env.Kube.CoreV1().Events(metav1.NamespaceDefault).Delete(ctx, evs[0].Name, metav1.DeleteOptions{})
}

// An exposure's Event goes to the management Service it created; its
// rollback's to the HostedCluster.
func TestRecordEventExposure(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	c := scenario.BehindProxy(env.Namespace(t), "kv-events")
	hosted := env.HostedCluster(t, c)
	petclinic(t, hosted.Kube)
	cpNS := hypershift.ControlPlaneNamespace(c.Namespace, c.Name)
	x, mgmt, _ := executor(t)
	who := actions.Actors{RequestedBy: "alice", Approvers: []string{"bob"}}

	req := exposeReq("expo-0201abcd", c)
	res, err := x.Execute(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := env.Kube.CoreV1().Services(cpNS).Get(ctx, actions.ManagementServiceName(req.ID), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mgmt.take()
	for range 2 {
		if err := x.RecordEvent(ctx, req, res, who); err != nil {
			t.Fatal(err)
		}
	}
	mgmt.expect(t, "record twice", "list services", "create events", "list services", "create events")
	checkEvent(t, "exposure", describedEvents(t, cpNS, svc.Name, "Service", string(svc.UID)), req, actions.EventReasonApplied, who, res.Summary)

	undo := actions.Change{ID: "undo-0201abcd", Type: actions.TypeRollback, Cluster: req.Cluster, RequestedBy: "alice",
		Rollback: &actions.RollbackParams{Undo: *res.Undo}}
	rb, err := x.Execute(ctx, undo)
	if err != nil {
		t.Fatal(err)
	}
	if err := x.RecordEvent(ctx, undo, rb, who); err != nil {
		t.Fatal(err)
	}
	checkEvent(t, "exposure rollback", describedEvents(t, c.Namespace, c.Name, "HostedCluster", string(hosted.Object.UID)), undo, actions.EventReasonRolledBack, who, rb.Summary)
}
