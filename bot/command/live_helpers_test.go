package command_test

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/nats-io/nkeys"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/slack-go/slack"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bot"
	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/bot/command"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/identity"
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

// conversation is one command's or press's: the posts to its response_url.
type conversation struct {
	f     *slackFront
	rch   string
	start time.Time
}

// posted waits for a post to the conversation's response_url that done
// accepts.
func (c conversation) posted(done func(string) bool) slackrec.Call {
	c.f.t.Helper()
	var got slackrec.Call
	c.f.rec.WaitFor(c.f.t, 2*time.Minute, func(r *slackrec.Recorder) bool {
		for _, call := range r.CallsTo(slackrec.MethodResponseURL) {
			if call.Channel == c.rch && done(call.Form.Get("text")) {
				got = call
				return true
			}
		}
		return false
	})
	return got
}

// answer is the HTTP answer to a command, and how long it took.
type answer struct {
	Text         string `json:"text"`
	ResponseType string `json:"response_type"`
	took         time.Duration
}

// send sends a signed /hcp command as user and returns the HTTP answer
// and the conversation its later replies go to.
func (f *slackFront) send(text, user string) (answer, conversation) {
	f.t.Helper()
	c := conversation{f: f, rch: f.responseChannel(), start: time.Now()}
	req, err := slackrec.CommandRequest(context.Background(), f.url+chatops.CommandsPath, slackSecret,
		slack.SlashCommand{Command: "/hcp", Text: text, UserID: user, ChannelID: opsChannel, ResponseURL: f.rec.ResponseURL(c.rch)}, time.Now())
	if err != nil {
		f.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	var a answer
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil || resp.StatusCode != http.StatusOK {
		f.t.Fatalf("/hcp %s: status %d, decode: %v", text, resp.StatusCode, err)
	}
	a.took = time.Since(c.start)
	return a, c
}

// command sends a signed /hcp command as user and returns the reply that
// done accepts: the HTTP answer, or a later post to its response_url.
func (f *slackFront) command(text, user string, done func(string) bool) string {
	f.t.Helper()
	a, c := f.send(text, user)
	if done(a.Text) {
		return a.Text
	}
	return c.posted(done).Form.Get("text")
}

// pressIn sends a signed button press on a message as user; its replies
// are posted to the conversation's response_url.
func (f *slackFront) pressIn(user, action, value string) conversation {
	f.t.Helper()
	c := conversation{f: f, rch: f.responseChannel(), start: time.Now()}
	payload := slackrec.ButtonPress(slackrec.Press{
		UserID: user, UserName: strings.ToLower(user), ChannelID: opsChannel, MessageTS: "1733140000.000100",
		ActionID: action, BlockID: "decide-" + value, Value: value, ResponseURL: f.rec.ResponseURL(c.rch),
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
	return c
}

// press sends a signed button press and returns the reply posted to its
// response_url that done accepts.
func (f *slackFront) press(user, action, value string, done func(string) bool) slackrec.Call {
	f.t.Helper()
	return f.pressIn(user, action, value).posted(done)
}

// approvedAtOnce checks the HTTP answer to `/hcp approve` (sentAtOnce).
func (a answer) approvedAtOnce(t *testing.T, approver, source string) {
	t.Helper()
	sentAtOnce(t, "/hcp approve", chatops.Reply{Text: a.Text, InChannel: a.ResponseType == slack.ResponseTypeInChannel}, a.took, approver, source)
}

// approvedAtOnce waits for the answer to an Approve pressed in c and
// checks it (sentAtOnce), timed from the press to Slack's receipt.
func (c conversation) approvedAtOnce(t *testing.T, approver, source string) slackrec.Call {
	t.Helper()
	call := c.posted(func(s string) bool {
		// Not the outcome, which may reach Slack first.
		return strings.Contains(s, "sent to the agent") || strings.Contains(s, "not allowed") || strings.Contains(s, "Four-eyes") || strings.Contains(s, "already")
	})
	r := chatops.Reply{Text: call.Form.Get("text"), InChannel: call.Form.Get("response_type") == slack.ResponseTypeInChannel}
	sentAtOnce(t, "the Approve button", r, call.Time.Sub(c.start), approver, source)
	return call
}

// liveEnv runs the whole action path against the test control plane: a
// KubeVirt hosted cluster with the seed 004 app, embedded NATS, the bot's
// flow with its loop, the agent (approval.Serve with the real executor),
// and the bot's Commands behind signed Slack HTTP.
type liveEnv struct {
	ns      string
	c       scenario.Cluster
	hosted  *testenv.Hosted
	flow    *approval.Flow
	log     *audit.Log
	cmds    *command.Handler
	slack   *slackFront
	cluster string // as commands name it
	source  string
	signer  *approval.Signer // the bot's key, trusted by the agent
	seal    nkeys.KeyPair    // the same key, for tests that forge with it
	botNC   *nats.Conn
	botJS   jetstream.JetStream
	// serveAgent (re)starts the agent; agentStop stops the one running.
	serveAgent func() (stop func())
	agentStop  func()
}

// liveOption changes what newLiveEnv starts.
type liveOption func(*liveConfig)

type liveConfig struct {
	identities identity.Map
	approvers  []string
}

// withIdentities deploys the agent as shipped, with the impersonation
// role for m (testenv.Env.DeployAgent): it authenticates as its
// ServiceAccount and makes each approved change as the approver's
// identity (actions.Executor.As), and answers the bot's identity checks
// (approval.ServeChecks); the flow checks each approval with it.
func withIdentities(m identity.Map) liveOption {
	return func(c *liveConfig) { c.identities = m }
}

// withApprovers adds approvers to the flow's policy.
func withApprovers(ids ...string) liveOption {
	return func(c *liveConfig) { c.approvers = append(c.approvers, ids...) }
}

func newLiveEnv(t *testing.T, opts ...liveOption) *liveEnv {
	t.Helper()
	var lc liveConfig
	for _, o := range opts {
		o(&lc)
	}
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
		cfg := bus.Config{URLs: []string{srv.ClientURL()}, Name: name}
		if name == "bot" {
			// As cmd/hcpbot's bot: the agent answers checks on a bot's
			// inbox only.
			cfg.InboxPrefix = event.BotInboxPrefix
		}
		conn, err := bus.Connect(cctx, cfg, natstest.Logger(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(conn.Close)
		return conn
	}
	botConn, agentConn := connect("bot"), connect("agent")
	log, err := audit.Open(ctx, botConn.JS)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, err := kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	signer, err := approval.NewSigner(seed)
	if err != nil {
		t.Fatal(err)
	}
	pol := fourEyes()
	pol.Approvers = append(pol.Approvers, lc.approvers...)
	x := &actions.Executor{Dynamic: env.Dynamic, Kube: env.Kube}
	var flowMods []func(*approval.Config)
	var agentMods []func(*approval.AgentConfig)
	// The agent answers exposure preflights always, identity checks when
	// it maps approvers (as cmd/hcpbot's agent does).
	checks := approval.CheckConfig{Source: source, Keys: []string{signer.PublicKey()}, Log: natstest.Logger(t)}
	if !lc.identities.Empty() {
		x = executorFor(t, env.DeployAgent(t, ns, lc.identities))
		m := lc.identities
		flowMods = append(flowMods, func(c *approval.Config) { c.Identities = m })
		agentMods = append(agentMods, func(c *approval.AgentConfig) {
			c.Identities = m
			c.As = func(id identity.Identity, extra map[string][]string) (approval.Executor, error) {
				return x.As(id, extra)
			}
		})
		checks.Identities, checks.Access = m, x.Access
	}
	checks.Preflight = x.Preflight
	runUntil(t, func(ctx context.Context) { _ = approval.ServeChecks(ctx, agentConn.NC, checks) })
	answering(t, botConn.NC, source)
	flow := runFlow(t, botConn.JS, signer, log, pol, flowMods...)
	start := func() func() { return serveAgent(t, agentConn.JS, source, signer, x, agentMods...) }
	stop := start()

	// What the agent's watchers would have reported about the cluster.
	b := botKnowing(t, hostedCluster{source: source, namespace: ns, name: "kv", state: event.HostedClusterState{
		Platform: "KubeVirt", InfraID: c.InfraID, Proxy: event.ProxySpec{HTTPProxy: c.HTTPProxy, HTTPSProxy: c.HTTPSProxy, NoProxy: c.NoProxy},
		ServiceNetwork: []string{"172.31.0.0/16"}, ClusterNetwork: []string{"10.132.0.0/14"},
	}})
	cmds := &command.Handler{Bot: b, Audit: log, Changes: &command.Changes{Flow: flow, Audit: log, Log: natstest.Logger(t)}}
	return &liveEnv{ns: ns, c: c, hosted: hosted, flow: flow, log: log, cmds: cmds, slack: newSlackFront(t, cmds), cluster: ns + "/kv",
		source: source, signer: signer, seal: kp, botNC: botConn.NC, botJS: botConn.JS, serveAgent: start, agentStop: stop}
}

// answering waits until the agent of source answers checks on nc.
func answering(t *testing.T, nc *nats.Conn, source string) {
	t.Helper()
	subject, err := event.IdentityCheckSubject(source)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the agent answering checks", func() bool {
		_, err := nc.Request(subject, []byte("{}"), time.Second)
		return err == nil
	})
}

// executorFor is the agent's executor on cfg: its clients, and cfg as the
// base of the clients As makes.
func executorFor(t *testing.T, cfg *rest.Config) *actions.Executor {
	t.Helper()
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &actions.Executor{Dynamic: dyn, Kube: kube, Config: cfg}
}

// noProxy reads the HostedCluster's noProxy from the API server.
func (e *liveEnv) noProxy(t *testing.T) string {
	t.Helper()
	u, err := env.Dynamic.Resource(hypershift.HostedClusterGVR).Namespace(e.ns).Get(context.Background(), "kv", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, _, _ := unstructured.NestedString(u.Object, "spec", "configuration", "proxy", "noProxy")
	return got
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
