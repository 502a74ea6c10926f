package bot_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"

	"github.com/hcpbot/hcpbot/bot"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/bot/notify"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
	"github.com/hcpbot/hcpbot/watchers"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

const channel = "C0INCIDENTS"

type pipeline struct {
	js    jetstream.JetStream
	slack *slackrec.Recorder
	bot   *bot.Bot
	reg   *prometheus.Registry
}

// testConfig groups and paces quickly enough for tests.
func testConfig() bot.Config {
	return bot.Config{Channel: channel, GroupWait: 500 * time.Millisecond, GroupInterval: time.Second}
}

// startPipeline runs agent → NATS → bot → Slack recorder, all real;
// opts adjust the bot's configuration (func(*bot.Config)) or the agent's
// (func(*watchers.Config)).
func startPipeline(t *testing.T, source string, opts ...any) *pipeline {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	srv := natstest.RunServer(t)
	log := natstest.Logger(t)
	conn, err := bus.Connect(ctx, bus.Config{URLs: []string{srv.ClientURL()}}, log)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bus.EnsureStream(ctx, conn.JS, bus.EventsStream(0, 0)); err != nil {
		t.Fatal(err)
	}
	rec := slackrec.New(t)
	store, err := notify.NewKVStore(ctx, conn.JS, notify.KVConfig{})
	if err != nil {
		t.Fatal(err)
	}
	n, err := notify.NewSlack(notify.SlackConfig{Client: notify.NewSlackClient("xoxb-test", rec.APIURL(), nil), Store: store, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	cfg := testConfig()
	var agentOpts []func(*watchers.Config)
	for _, o := range opts {
		switch o := o.(type) {
		case func(*bot.Config):
			o(&cfg)
		case func(*watchers.Config):
			agentOpts = append(agentOpts, o)
		default:
			t.Fatalf("startPipeline: option of type %T", o)
		}
	}
	b := bot.New(cfg, conn.JS, n, reg, log)
	var wg sync.WaitGroup
	wg.Go(func() { _ = n.Run(ctx) })
	wg.Go(func() { _ = b.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait(); conn.Close() })
	startAgent(t, conn.JS, source, agentOpts...)
	return &pipeline{js: conn.JS, slack: rec, bot: b, reg: reg}
}

// startAgent runs the agent of source on the test's management cluster,
// publishing to js, until the test ends; opts adjust its configuration.
func startAgent(t *testing.T, js jetstream.JetStream, source string, opts ...func(*watchers.Config)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	log := natstest.Logger(t)
	m := watchers.NewMetrics(nil)
	pub := watchers.NewJetStreamPublisher(js, 1000, m, log)
	acfg := watchers.Config{Source: source, SnapshotWait: 10 * time.Second}
	for _, o := range opts {
		o(&acfg)
	}
	kf, df := informers.NewSharedInformerFactory(env.Kube, 0), dynamicinformer.NewDynamicSharedInformerFactory(env.Dynamic, 0)
	agent, err := watchers.New(acfg, env.Kube, kf, df, pub, m, log)
	if err != nil {
		t.Fatal(err)
	}
	kf.Start(ctx.Done())
	df.Start(ctx.Done())
	var wg sync.WaitGroup
	wg.Go(func() { pub.Run(ctx) })
	wg.Go(func() { _ = agent.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// Seed 000 yields ONE Slack message for the hosted cluster, diagnosing the
// proxy tunnel with the `kubernetes` noProxy fix, updated (not re-posted) as
// more nodes go NotReady, and turned resolved after recovery.
func TestSeedIncidentOneSlackMessage(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	spec := scenario.BehindProxy(ns, "seed")
	hosted := env.HostedCluster(t, spec)
	nodes, err := scenario.Nodes(ctx, hosted.Kube, "seed-np", 3)
	if err != nil {
		t.Fatal(err)
	}
	pod, err := scenario.ServiceCAOperator(ctx, hosted.Kube, nodes[0])
	if err != nil {
		t.Fatal(err)
	}
	p := startPipeline(t, "mgmt-"+ns)

	if err := scenario.CrashLoop(ctx, hosted.Kube, pod.Namespace, pod.Name, 4, scenario.SeedConnectivityMessage); err != nil {
		t.Fatal(err)
	}
	if err := scenario.SetNodeReady(ctx, hosted.Kube, nodes[0], corev1.ConditionFalse, "KubeletNotReady", "x"); err != nil {
		t.Fatal(err)
	}
	var root slackrec.Message
	p.slack.WaitFor(t, 30*time.Second, func(r *slackrec.Recorder) bool {
		for _, m := range r.Messages(channel) {
			if m.ThreadTS == "" && strings.Contains(m.Text, ns+"/seed") && strings.Contains(m.Text, "tunnelled through the HTTPS proxy") {
				root = m
				return true
			}
		}
		return false
	})
	// More nodes fail: the same message is updated, not re-posted.
	for _, n := range nodes[1:] {
		if err := scenario.SetNodeReady(ctx, hosted.Kube, n, corev1.ConditionFalse, "KubeletNotReady", "x"); err != nil {
			t.Fatal(err)
		}
	}
	p.slack.WaitFor(t, 30*time.Second, func(r *slackrec.Recorder) bool {
		m, ok := r.Message(channel, root.TS)
		return ok && m.Updates > 0 && strings.Contains(string(m.Blocks), nodes[2])
	})
	// Recovery after the fix: the message turns resolved.
	for _, n := range nodes {
		if err := scenario.SetNodeReady(ctx, hosted.Kube, n, corev1.ConditionTrue, "KubeletReady", "ok"); err != nil {
			t.Fatal(err)
		}
	}
	if err := scenario.SetNoProxy(ctx, env.Dynamic, ns, "seed", scenario.SeedNoProxy+",kubernetes,172.31.0.0/16,10.132.0.0/14"); err != nil {
		t.Fatal(err)
	}
	if err := scenario.Recover(ctx, hosted.Kube, pod.Namespace, pod.Name); err != nil {
		t.Fatal(err)
	}
	p.slack.WaitFor(t, 30*time.Second, func(r *slackrec.Recorder) bool {
		m, ok := r.Message(channel, root.TS)
		return ok && strings.Contains(m.Text, "RESOLVED")
	})
	roots := 0
	for _, m := range p.slack.Messages(channel) {
		// Other tests' clusters share the management cluster.
		if m.ThreadTS == "" && strings.Contains(m.Text, ns+"/seed") {
			roots++
		}
	}
	if roots != 1 {
		t.Errorf("%d root messages about the cluster, want exactly 1", roots)
	}
	if v := p.slack.Violations(); v != 0 {
		t.Errorf("%d rate-limit violations", v)
	}
	t.Logf("Slack calls: %d postMessage, %d update", len(p.slack.CallsTo("chat.postMessage")), len(p.slack.CallsTo("chat.update")))
}

// A noProxy edit that removes `kubernetes` is reported at once as a
// warning with the fix, before any node fails.
func TestProactiveWarningOnRiskyEdit(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	spec := scenario.BehindProxy(ns, "edit")
	safe := scenario.SeedNoProxy + ",kubernetes,172.31.0.0/16,10.132.0.0/14"
	spec.NoProxy = safe
	hosted := env.HostedCluster(t, spec)
	nodes, err := scenario.Nodes(ctx, hosted.Kube, "edit-np", 2)
	if err != nil {
		t.Fatal(err)
	}
	p := startPipeline(t, "mgmt-"+ns)
	// Other tests' clusters share the management cluster: look at ours.
	ours := ns + "/edit"
	mine := func(r *slackrec.Recorder) []slackrec.Message {
		var out []slackrec.Message
		for _, m := range r.Messages(channel) {
			if m.ThreadTS == "" && strings.Contains(m.Text, ours) {
				out = append(out, m)
			}
		}
		return out
	}
	// The agent's first snapshot shows a healthy cluster: nothing to say.
	testenv.Eventually(t, 60*time.Second, "the bot knows the cluster", func() bool {
		_, ok := p.bot.HostedCluster(diagnose.Key{Source: "mgmt-" + ns, Cluster: event.ClusterRef{Namespace: ns, Name: "edit"}})
		return ok
	})
	if n := len(mine(p.slack)); n != 0 {
		t.Fatalf("%d messages about a healthy cluster", n)
	}

	if err := scenario.SetNoProxy(ctx, env.Dynamic, ns, "edit", scenario.SeedNoProxy); err != nil {
		t.Fatal(err)
	}
	var warning slackrec.Message
	p.slack.WaitFor(t, 60*time.Second, func(r *slackrec.Recorder) bool {
		for _, m := range mine(r) {
			if strings.Contains(m.Text, "WARNING") {
				warning = m
				return true
			}
		}
		return false
	})
	blocks := string(warning.Blocks)
	for _, want := range []string{"kubernetes", "172.31.0.0/16", "Approve fix"} {
		if !strings.Contains(blocks, want) {
			t.Errorf("warning lacks %q:\n%s", want, blocks)
		}
	}
	// Still before any symptom: the nodes are Ready.
	for _, n := range nodes {
		node, err := hosted.Kube.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
				t.Errorf("node %s is not Ready: the warning was not proactive", n)
			}
		}
	}
}

// Malformed and unknown events are dead-lettered (counted, skipped) and do
// not block the events behind them.
func TestDeadLetters(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	p := startPipeline(t, "mgmt-"+ns)
	for subject, data := range map[string]string{
		"hcpbot.events.x._._.node":          "not json",
		"hcpbot.events.x._._.crashloop":     `{"v":1,"id":"`,
		"hcpbot.events.x._._.future":        `{"v":1,"id":"0123456789abcdef0123456789abcdef","type":"future","time":"2026-01-01T00:00:00Z","source":"x","object":{"kind":"X","name":"x"},"payload":{}}`,
		"hcpbot.events.x._._.hostedcluster": `{"v":9,"id":"0123456789abcdef0123456789abcdee","type":"hostedcluster"}`,
	} {
		if _, err := p.js.Publish(ctx, subject, []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	// A real incident behind them still gets through.
	spec := scenario.BehindProxy(ns, "after")
	hosted := env.HostedCluster(t, spec)
	nodes, err := scenario.Nodes(ctx, hosted.Kube, "after-np", 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := scenario.SetNodeReady(ctx, hosted.Kube, nodes[0], corev1.ConditionFalse, "KubeletNotReady", "x"); err != nil {
		t.Fatal(err)
	}
	p.slack.WaitFor(t, 30*time.Second, func(r *slackrec.Recorder) bool { return len(r.Messages(channel)) > 0 })
	if total := deadLettered(t, p.reg); total != 4 {
		t.Errorf("dead-lettered %v events, want 4", total)
	}
}

// deadLettered sums hcpbot_bot_events_dead_lettered_total over its reasons.
func deadLettered(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	return metricSum(t, reg, "hcpbot_bot_events_dead_lettered_total")
}

// metricSum is the value of a counter or gauge, summed over its labels.
func metricSum(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var total float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				total += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return total
}
