package command_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/slack-go/slack"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/bot"
	"github.com/hcpbot/hcpbot/bot/approval"
	"github.com/hcpbot/hcpbot/bot/audit"
	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/bot/command"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
)

const (
	slackSecret = "test-signing-secret"
	opsChannel  = "C0OPSCHAN1"
	appNS       = "petclinic"
)

// slackFront is the bot's Slack side in a test: Commands behind chatops'
// signed HTTP server, replies recorded by a Slack recorder.
type slackFront struct {
	t   *testing.T
	url string
	rec *slackrec.Recorder
	n   int
	mu  sync.Mutex
}

func newSlackFront(t *testing.T, h chatops.Handler) *slackFront {
	t.Helper()
	rec := slackrec.New(t)
	u, err := url.Parse(rec.APIURL())
	if err != nil {
		t.Fatal(err)
	}
	responder, err := chatops.NewResponder(u.Scheme+"://"+u.Host+"/", &http.Client{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := chatops.NewServer(slackSecret, h, chatops.WithResponder(responder), chatops.WithLogger(natstest.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(func() {
		hs.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return &slackFront{t: t, url: hs.URL, rec: rec}
}

// responseChannel returns a fresh pseudo channel whose response_url posts
// are told apart from the others'.
func (f *slackFront) responseChannel() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	return fmt.Sprintf("R%s%d", opsChannel, f.n)
}

// posted waits for a post to rch's response_url that done accepts.
func (f *slackFront) posted(rch string, done func(string) bool) slackrec.Call {
	f.t.Helper()
	var got slackrec.Call
	f.rec.WaitFor(f.t, 2*time.Minute, func(r *slackrec.Recorder) bool {
		for _, c := range r.CallsTo(slackrec.MethodResponseURL) {
			if c.Channel == rch && done(c.Form.Get("text")) {
				got = c
				return true
			}
		}
		return false
	})
	return got
}

// command sends a signed /hcp command as user and returns the reply that
// done accepts: the HTTP answer, or the later post to its response_url.
func (f *slackFront) command(text, user string, done func(string) bool) string {
	f.t.Helper()
	rch := f.responseChannel()
	req, err := slackrec.CommandRequest(context.Background(), f.url+chatops.CommandsPath, slackSecret,
		slack.SlashCommand{Command: "/hcp", Text: text, UserID: user, ChannelID: opsChannel, ResponseURL: f.rec.ResponseURL(rch)}, time.Now())
	if err != nil {
		f.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct{ Text string }
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusOK {
		f.t.Fatalf("/hcp %s: status %d, decode: %v", text, resp.StatusCode, err)
	}
	if done(body.Text) {
		return body.Text
	}
	return f.posted(rch, done).Form.Get("text")
}

// press sends a signed button press on a message and returns the reply
// posted to its response_url.
func (f *slackFront) press(user, action, value string, done func(string) bool) slackrec.Call {
	f.t.Helper()
	rch := f.responseChannel()
	payload := slackrec.ButtonPress(slackrec.Press{
		UserID: user, UserName: strings.ToLower(user), ChannelID: opsChannel, MessageTS: "1733140000.000100",
		ActionID: action, BlockID: "decide-" + value, Value: value, ResponseURL: f.rec.ResponseURL(rch),
	})
	req, err := slackrec.InteractionRequest(context.Background(), f.url+chatops.ActionsPath, slackSecret, payload, time.Now())
	if err != nil {
		f.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		f.t.Fatalf("press %s %s: status %d", action, value, resp.StatusCode)
	}
	return f.posted(rch, done)
}

// liveEnv runs the whole action path against the test control plane: a
// KubeVirt hosted cluster with the seed 004 app, embedded NATS, the agent
// serving actions with the real executor, and the bot's Commands behind
// signed Slack HTTP.
type liveEnv struct {
	ns      string
	c       scenario.Cluster
	hosted  *testenv.Hosted
	store   *approval.Store
	log     *audit.Log
	cmds    *command.Handler
	slack   *slackFront
	cluster string // as commands name it
	source  string
	signer  *actions.Signer // the bot's key, trusted by the agent
	botNC   *nats.Conn
	queue   *actions.Client
	botJS   jetstream.JetStream
}

func newLiveEnv(t *testing.T) *liveEnv {
	t.Helper()
	env.Need(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	c := scenario.BehindProxy(ns, "kv")
	hosted := env.HostedCluster(t, c)
	petclinic(t, hosted)
	nodes, err := scenario.Nodes(ctx, hosted.Kube, "kv-np", 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := scenario.VirtLaunchers(ctx, env.Kube, c, "kv-np", nodes); err != nil {
		t.Fatal(err)
	}

	source := "mgmt-" + ns
	srv := natstest.RunServer(t)
	connect := func(name string) *bus.Conn {
		cctx, cancel := context.WithTimeout(ctx, natstest.Timeout)
		defer cancel()
		conn, err := bus.Connect(cctx, bus.Config{URLs: []string{srv.ClientURL()}, Name: name}, natstest.Logger(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(conn.Close)
		return conn
	}
	botConn, agentConn := connect("bot"), connect("agent")
	queue := ensureQueue(t, botConn.JS)

	// The agent: actions.Serve with the executor on the real API servers.
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	x := &actions.Executor{Dynamic: env.Dynamic, Kube: env.Kube}
	signer, verifier := agentKeys(t, agentConn.JS, source)
	refusals, err := audit.ForAgent(agentConn.JS, source)
	if err != nil {
		t.Fatal(err)
	}
	wg.Go(func() {
		if err := actions.Serve(runCtx, agentConn.JS, actions.ServeConfig{
			Source: source, Executor: x, Verifier: verifier, Audit: audit.Refusals{Log: refusals}, Log: natstest.Logger(t),
		}); err != nil {
			t.Errorf("actions.Serve: %v", err)
		}
	})

	log, err := audit.Open(ctx, botConn.JS)
	if err != nil {
		t.Fatal(err)
	}
	store, err := approval.NewStore(ctx, botConn.JS, log, approval.Policy{Approvers: []string{approver1, approver2}, FourEyes: true}, approval.WithSealer(signer))
	if err != nil {
		t.Fatal(err)
	}
	// What the agent's watchers would have reported about the cluster.
	b := botKnowing(t, hostedCluster{source: source, namespace: ns, name: "kv", state: event.HostedClusterState{
		Platform: "KubeVirt", InfraID: c.InfraID, Proxy: event.ProxySpec{HTTPProxy: c.HTTPProxy, HTTPSProxy: c.HTTPSProxy, NoProxy: c.NoProxy},
		ServiceNetwork: []string{"172.31.0.0/16"}, ClusterNetwork: []string{"10.132.0.0/14"},
	}})
	cmds := &command.Handler{
		Bot: b, Audit: log,
		Changes: &command.Changes{Store: store, Audit: log, Queue: queue, Signer: signer, Timeout: 2 * time.Minute},
	}
	return &liveEnv{ns: ns, c: c, hosted: hosted, store: store, log: log, cmds: cmds, slack: newSlackFront(t, cmds), cluster: ns + "/kv",
		source: source, signer: signer, botNC: botConn.NC, botJS: botConn.JS, queue: queue}
}

// petclinic is the seed 004 app in the hosted cluster.
func petclinic(t *testing.T, hosted *testenv.Hosted) {
	t.Helper()
	ctx := context.Background()
	if _, err := hosted.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: appNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: appNS, Name: "petclinic"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "petclinic", "deployment": "petclinic"},
			Ports: []corev1.ServicePort{
				{Name: "8080-tcp", Port: 8080, TargetPort: intstr.FromInt32(8080)},
				{Name: "8443-tcp", Port: 8443, TargetPort: intstr.FromInt32(8443)},
				{Name: "8778-tcp", Port: 8778, TargetPort: intstr.FromInt32(8778)},
			},
		},
	}
	if _, err := hosted.Kube.CoreV1().Services(appNS).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func hasID(s string) bool { return anyActionID.MatchString(s) }

// From Slack, signed: `expose` proposes; a stranger's Approve button
// changes nothing; an approver's creates both Services on the real API
// servers (ports and selectors lined up) and replaces the proposal;
// `rollback` proposes the undo, whose approval deletes exactly them.
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
	call := e.slack.press(stranger, chatops.ActionApprove, id, func(s string) bool { return strings.Contains(s, id) })
	if txt := call.Form.Get("text"); !strings.Contains(txt, "not allowed") || call.Form.Get("replace_original") == "true" || call.Form.Get("response_type") != "ephemeral" {
		t.Errorf("stranger's Approve answered %v", call.Form)
	}
	if list, err := e.hosted.Kube.CoreV1().Services(appNS).List(ctx, metav1.ListOptions{LabelSelector: actions.LabelActionID + "=" + id}); err != nil || len(list.Items) != 0 {
		t.Fatalf("after a stranger's Approve: %d Services, %v", len(list.Items), err)
	}
	if p, _ := e.store.Get(ctx, id); p.State != approval.StatePending {
		t.Fatalf("after a stranger's Approve the proposal is %s", p.State)
	}

	// The approver's button: executed, the proposal message replaced.
	call = e.slack.press(approver1, chatops.ActionApprove, id, func(s string) bool { return strings.Contains(s, id) })
	if txt := call.Form.Get("text"); !strings.Contains(txt, "and applied") || call.Form.Get("replace_original") != "true" {
		t.Fatalf("approver's Approve answered %v", call.Form)
	}
	if got := buttonsOf(t, call.Form.Get("blocks")); !slices.Equal(got, []string{chatops.ActionRollback + "=" + id}) {
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
	call = e.slack.press(approver2, chatops.ActionApprove, id, func(s string) bool { return strings.Contains(s, id) })
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
	r := e.slack.command("approve "+rb, approver2, func(s string) bool { return strings.Contains(s, rb) })
	if !strings.Contains(r, "rolled-back") || !strings.Contains(r, id+"` is now rolled back") {
		t.Fatalf("rollback approval: %q", r)
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
	if p, _ := e.store.Get(ctx, id); p.State != approval.StateRolledBack || p.RolledBackBy != approver2 {
		t.Errorf("original after rollback: %s by %q", p.State, p.RolledBackBy)
	}

	// The whole story is in the audit trail, and /hcp audit shows it.
	kinds := auditKinds(t, e.log)
	if kinds[audit.KindProposed] != 2 || kinds[audit.KindApproved] != 2 || kinds[audit.KindExecuted] != 2 || kinds[audit.KindRolledBack] != 1 || kinds[audit.KindRefused] < 3 {
		t.Errorf("audit kinds %v", kinds)
	}
	if r := e.slack.command("audit 20", stranger, func(s string) bool { return strings.Contains(s, "audit entries") }); !strings.Contains(r, "rolled-back "+id) || !strings.Contains(r, "refused") {
		t.Errorf("/hcp audit:\n%s", r)
	}
}

// A HostedCluster edited between proposal and approval is not overwritten:
// the agent refuses the stale proposal and the reply asks for a new one.
func TestNoProxyEditedBeforeApprovalLive(t *testing.T) {
	e := newLiveEnv(t)
	ctx := context.Background()
	acts := e.cmds.Changes
	k := diagnose.Key{Source: "mgmt-" + e.ns, Cluster: event.ClusterRef{Namespace: e.ns, Name: "kv"}}
	fix := &diagnose.Fix{Kind: "noproxy", Target: "HostedCluster/" + e.ns + "/kv", Before: scenario.SeedNoProxy, Add: []string{"kubernetes", "172.31.0.0/16"}}
	r := acts.ProposeNoProxy(ctx, k, fix, nil, requester)
	id := actionID.FindString(r.Text)
	if id == "" || !slices.Equal(buttons(r), []string{chatops.ActionApprove + "=" + id, chatops.ActionReject + "=" + id}) {
		t.Fatalf("proposal: %q %v", r.Text, buttons(r))
	}
	edited := scenario.SeedNoProxy + ",.edited.example"
	if err := scenario.SetNoProxy(ctx, env.Dynamic, e.ns, "kv", edited); err != nil {
		t.Fatal(err)
	}
	call := e.slack.press(approver1, chatops.ActionApprove, id, func(s string) bool { return strings.Contains(s, id) })
	if txt := call.Form.Get("text"); !strings.Contains(txt, "changed since the proposal") || !strings.Contains(txt, "fix noproxy "+e.cluster) {
		t.Errorf("stale approval answered %q", txt)
	}
	u, err := env.Dynamic.Resource(hypershift.HostedClusterGVR).Namespace(e.ns).Get(ctx, "kv", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, _, _ := unstructured.NestedString(u.Object, "spec", "configuration", "proxy", "noProxy"); got != edited {
		t.Errorf("noProxy %q, want the concurrent edit %q kept", got, edited)
	}
	if p, _ := e.store.Get(ctx, id); p.State != approval.StateFailed {
		t.Errorf("stale proposal is %s, want failed", p.State)
	}
}

// seedSymptoms feeds b what the agent reports when seed 000 strikes the
// cluster: nodes NotReady and the service-ca-operator crashlooping.
func seedSymptoms(t *testing.T, b *bot.Bot, source, ns, name string) {
	t.Helper()
	ref := event.ClusterRef{Namespace: ns, Name: name}
	now := time.Now().Add(-time.Minute)
	var events []event.Event
	for i := range 2 {
		node := fmt.Sprintf("%s-np-%d", name, i)
		e, err := event.New(source, &ref, event.ObjectRef{Kind: "Node", Name: node, UID: "uid-" + node, Hosted: true},
			event.NodeReadiness{Node: node, Ready: event.ConditionUnknown, Reason: "NodeStatusUnknown", LastTransitionTime: now},
			event.TransitionAt("Ready=Unknown", now), now)
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, e)
	}
	pod := "service-ca-operator-6d5f7b9c4-x2x9z"
	e, err := event.New(source, &ref, event.ObjectRef{Kind: "Pod", Namespace: "openshift-service-ca-operator", Name: pod, UID: "uid-sca", Hosted: true},
		event.PodCrashLoop{Namespace: "openshift-service-ca-operator", Pod: pod, Container: "service-ca-operator", RestartCount: 7,
			WaitingReason: "CrashLoopBackOff", LastTerminationMessage: scenario.SeedConnectivityMessage, ExitCode: 255, FinishedAt: now},
		"crashloop:service-ca-operator:7", now)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range append(events, e) {
		data, err := event.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		b.Handle(context.Background(), data)
	}
}

// From the seed 000 incident: the Approve button of the incident message,
// pressed by two approvers (signed interaction payloads; four-eyes is on),
// patches the HostedCluster's noProxy on the real API server so that it
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
	noProxy := func() string {
		u, err := env.Dynamic.Resource(hypershift.HostedClusterGVR).Namespace(e.ns).Get(ctx, "kv", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got, _, _ := unstructured.NestedString(u.Object, "spec", "configuration", "proxy", "noProxy")
		return got
	}

	call := e.slack.press("U0STRANGER", chatops.ActionApprove, inc.Key, func(s string) bool { return strings.Contains(s, "not allowed") })
	if call.JSON["replace_original"] == true {
		t.Error("a refusal replaced the incident message")
	}
	if got := noProxy(); got != scenario.SeedNoProxy {
		t.Fatalf("a non-approver's press changed noProxy to %q", got)
	}

	// Four-eyes: the first approver's press is one approval of two.
	call = e.slack.press(approver1, chatops.ActionApprove, inc.Key, func(s string) bool { return strings.Contains(s, "1 of 2") })
	if txt := call.Form.Get("text"); !strings.Contains(txt, "<@"+approver1+">") || !strings.Contains(txt, "one more approver") {
		t.Errorf("first approval answered %q", txt)
	}
	if got := noProxy(); got != scenario.SeedNoProxy {
		t.Fatalf("one approver's press changed noProxy to %q", got)
	}
	call = e.slack.press(approver2, chatops.ActionApprove, inc.Key, func(s string) bool { return strings.Contains(s, "approved by") })
	t.Logf("approve answered: %s", call.Form.Get("text"))
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
	e.slack.press(approver1, chatops.ActionApprove, inc.Key, func(s string) bool { return strings.Contains(s, "1 of 2") })
	e.slack.press(approver2, chatops.ActionApprove, inc.Key, func(s string) bool {
		return strings.Contains(s, "not applied") || strings.Contains(s, "nothing to change")
	})
	if again := noProxy(); again != got {
		t.Errorf("a second press changed noProxy from %q to %q", got, again)
	}
}
