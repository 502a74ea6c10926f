package bot_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"

	"github.com/hcpbot/hcpbot/bot"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
)

// restartConfig resolves after a short ResolveTimeout, so the incidents
// go through "signals clear, not yet resolved" within the test.
func restartConfig() bot.Config {
	cfg := testConfig()
	cfg.GroupWait = 300 * time.Millisecond
	cfg.GroupInterval = 500 * time.Millisecond
	cfg.ResolveTimeout = 2 * time.Second
	return cfg
}

const restartNodes = 30

// nodeEvents are the facts of a cluster of restartNodes nodes.
func nodeEvents(t *testing.T, source, ns, name string, at time.Time, notReady ...int) []event.Event {
	t.Helper()
	events, err := scenario.NodeFleet(source, ns, name, restartNodes, at, notReady...)
	if err != nil {
		t.Fatal(err)
	}
	return events
}

// nodeEvent is node n of the cluster turning Ready (or NotReady) at at.
func nodeEvent(t *testing.T, source, ns, name string, n int, ready bool, at time.Time) event.Event {
	t.Helper()
	e, err := scenario.NodeReady(source, ns, name, n, ready, at)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// unhealthy reports whether a posted or updated text shows an open
// incident.
func unhealthy(c slackrec.Call) bool {
	s := c.Form.Get("text") + c.Form.Get("blocks")
	for _, mark := range []string{"WARNING", "CRITICAL", "🟠", "🔴", "Evidence"} {
		if strings.Contains(s, mark) {
			return true
		}
	}
	return false
}

// A bot restarted while its clusters are healthy sends nothing that shows
// an unhealthy state (issue 14): it replays the events stream from its
// start, so before the fix it re-rendered every incident it had resolved
// as "🟠 WARNING · 1 of 30 nodes NotReady" until the resolve timeout.
// Three clusters, one bot stopped and a new one started on the same NATS
// and Slack:
//   - resolved: its incident was resolved (and said so) before the stop;
//     after the restart no call touches it at all;
//   - healed: its incident was open at the stop and the node came back
//     while the bot was down; after the restart its message is updated to
//     resolved, never to anything unhealthy;
//   - open: still NotReady; after the restart it is left as it is (no new
//     root, no update), and its resolution later still gets through.
func TestRestartSendsNothingUnhealthy(t *testing.T) {
	ctx := context.Background()
	js := natsJS(t)
	rec := slackrec.New(t)
	const source, ns = "mgmt-restart", "clusters"
	names := []string{"resolved", "healed", "open"}

	first := startBot(t, js, rec, restartConfig())
	start := time.Now()
	var events []event.Event
	for _, name := range names {
		events = append(events, nodeEvents(t, source, ns, name, start, 7)...)
	}
	if err := scenario.Publish(ctx, js, events); err != nil {
		t.Fatal(err)
	}
	rootOf := map[string]string{} // cluster name → root ts
	rec.WaitFor(t, 30*time.Second, func(r *slackrec.Recorder) bool {
		for _, m := range roots(r) {
			for _, name := range names {
				if strings.Contains(m.Text, ns+"/"+name) && strings.Contains(m.Text, "1 of 30 nodes NotReady") {
					rootOf[name] = m.TS
				}
			}
		}
		return len(rootOf) == len(names)
	})
	resolvedMsg := func(r *slackrec.Recorder, name string) bool {
		m, ok := r.Message(channel, rootOf[name])
		return ok && strings.Contains(m.Text, "RESOLVED")
	}

	// "resolved" recovers and is resolved before the stop.
	if err := scenario.Publish(ctx, js, []event.Event{nodeEvent(t, source, ns, "resolved", 7, true, time.Now())}); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, 30*time.Second, func(r *slackrec.Recorder) bool { return resolvedMsg(r, "resolved") })
	// Its thread reply says so too; let it land before the stop.
	rec.WaitFor(t, 30*time.Second, func(r *slackrec.Recorder) bool {
		for _, m := range r.Thread(channel, rootOf["resolved"]) {
			if strings.Contains(m.Text, "Resolved at") {
				return true
			}
		}
		return false
	})
	first.cancel()

	// "healed" recovers while no bot runs.
	if err := scenario.Publish(ctx, js, []event.Event{nodeEvent(t, source, ns, "healed", 7, true, time.Now())}); err != nil {
		t.Fatal(err)
	}
	mark := len(rec.Calls())
	second := startBot(t, js, rec, restartConfig())
	after := func() []slackrec.Call { return rec.Calls()[mark:] }
	t.Cleanup(func() {
		if t.Failed() {
			for _, c := range after() {
				t.Logf("after restart: %s ts=%s thread_ts=%s: %.160s", c.Method, c.Form.Get("ts"), c.Form.Get("thread_ts"), c.Form.Get("text"))
			}
		}
	})

	// "healed" turns resolved ...
	rec.WaitFor(t, 30*time.Second, func(r *slackrec.Recorder) bool { return resolvedMsg(r, "healed") })
	// ... and all three incidents were handed to the notifier, which had
	// nothing to change in the two others.
	testenv.Eventually(t, 30*time.Second, "the renderings of the other two found unchanged", func() bool {
		return metricSum(t, second.reg, "hcpbot_slack_unchanged_total") >= 2 && metricSum(t, second.reg, "hcpbot_slack_queue_depth") == 0
	})
	for _, c := range after() {
		if unhealthy(c) {
			t.Errorf("after the restart, %s shows an unhealthy state: %.200s", c.Method, c.Form.Get("text"))
		}
		if c.Method == "chat.postMessage" && c.Form.Get("thread_ts") == "" {
			t.Errorf("after the restart, a new root: %.200s", c.Form.Get("text"))
		}
		if target := c.Form.Get("ts") + c.Form.Get("thread_ts"); target == rootOf["resolved"] || target == rootOf["open"] {
			t.Errorf("after the restart, %s touched a message that was up to date: %.200s", c.Method, c.Form.Get("text"))
		}
	}
	if m, _ := rec.Message(channel, rootOf["open"]); !strings.Contains(m.Text, "1 of 30 nodes NotReady") {
		t.Errorf("the open incident's message changed: %s", m.Text)
	}
	open := 0
	for _, inc := range second.bot.Incidents() {
		if inc.Open() {
			open++
		}
	}
	if open != 1 {
		t.Errorf("%d open incidents after the restart, want 1", open)
	}

	// The restarted bot goes on as usual: "open" heals and is resolved.
	if err := scenario.Publish(ctx, js, []event.Event{nodeEvent(t, source, ns, "open", 7, true, time.Now())}); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, 30*time.Second, func(r *slackrec.Recorder) bool { return resolvedMsg(r, "open") })
	if rs := roots(rec); len(rs) != len(names) {
		t.Errorf("%d roots, want %d", len(rs), len(names))
	}
	for _, c := range after() {
		if unhealthy(c) {
			t.Errorf("after the restart, %s shows an unhealthy state: %.200s", c.Method, c.Form.Get("text"))
		}
		if target := c.Form.Get("ts") + c.Form.Get("thread_ts"); target == rootOf["resolved"] {
			t.Errorf("after the restart, %s touched the incident resolved before it: %.200s", c.Method, c.Form.Get("text"))
		}
	}
	if v := rec.Violations(); v != 0 {
		t.Errorf("%d rate-limit violations", v)
	}
	t.Logf("after the restart: %d Slack calls", len(after()))
}

// A storm open at the stop whose clusters all healed while the bot was
// down: after the restart its message is updated to resolved, and nothing
// shows it open again; no new root, no second listing of its clusters.
func TestRestartResolvesStormHealedWhileDown(t *testing.T) {
	ctx := context.Background()
	js := natsJS(t)
	rec := slackrec.New(t)
	cfg := stormConfig()
	cfg.ResolveTimeout = 2 * time.Second
	const clusters = 20
	first := startBot(t, js, rec, cfg)
	events, err := scenario.Storm("mgmt-restart-storm", "clusters", clusters, 2, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := scenario.Publish(ctx, js, events); err != nil {
		t.Fatal(err)
	}
	var stormTS string
	rec.WaitFor(t, 30*time.Second, func(r *slackrec.Recorder) bool {
		for _, m := range roots(r) {
			if strings.Contains(m.Text, "STORM") {
				stormTS = m.TS
				return len(listed(r, stormTS)) == clusters
			}
		}
		return false
	})
	first.cancel()

	var healed []event.Event
	for i := range clusters {
		ev, err := recoverEvents("mgmt-restart-storm", "clusters", fmt.Sprintf("hc-%d", i), 2, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		healed = append(healed, ev...)
	}
	if err := scenario.Publish(ctx, js, healed); err != nil {
		t.Fatal(err)
	}
	mark := len(rec.Calls())
	startBot(t, js, rec, cfg)
	rec.WaitFor(t, 30*time.Second, func(r *slackrec.Recorder) bool {
		m, ok := r.Message(channel, stormTS)
		return ok && strings.Contains(m.Text, "RESOLVED")
	})
	after := rec.Calls()[mark:]
	for _, c := range after {
		t.Logf("after restart: %s ts=%s thread_ts=%s: %.160s", c.Method, c.Form.Get("ts"), c.Form.Get("thread_ts"), c.Form.Get("text"))
		if unhealthy(c) || strings.Contains(c.Form.Get("text"), "STORM") {
			t.Errorf("after the restart, %s shows the storm open: %.200s", c.Method, c.Form.Get("text"))
		}
		if c.Method == "chat.postMessage" {
			t.Errorf("after the restart, a post: %.200s", c.Form.Get("text"))
		}
	}
	if rs := roots(rec); len(rs) != 1 {
		t.Errorf("%d roots, want the storm only", len(rs))
	}
}

// The case of the issue, on a real API server with the real agent: a
// hosted cluster of 30 nodes loses one (an incident, resolved while the
// bot runs), then another (an incident open when the bot stops, healed
// while it is down). (The bot counts the nodes the agent told it about:
// "1 of 1 node" here until issue 21.) The restarted bot updates the second one's message
// to resolved and sends nothing else: before the fix it set both messages
// back to "🟠 WARNING · 1 of 30 nodes NotReady" although every node was
// Ready.
func TestRestartAfterHealOnAPIServer(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	hosted := env.HostedCluster(t, scenario.Healthy(ns, "rs"))
	nodes, err := scenario.Nodes(ctx, hosted.Kube, "rs-np", restartNodes)
	if err != nil {
		t.Fatal(err)
	}
	js := natsJS(t)
	rec := slackrec.New(t)
	startAgent(t, js, "mgmt-"+ns)
	first := startBot(t, js, rec, restartConfig())
	ours := ns + "/rs"
	t.Cleanup(func() {
		if t.Failed() {
			for _, m := range rec.Messages(channel) {
				t.Logf("message %s thread=%q: %.200s", m.TS, m.ThreadTS, m.Text)
			}
		}
	})
	setReady := func(node string, ready bool) {
		t.Helper()
		status, reason := corev1.ConditionTrue, "KubeletReady"
		if !ready {
			status, reason = corev1.ConditionFalse, "KubeletNotReady"
		}
		if err := scenario.SetNodeReady(ctx, hosted.Kube, node, status, reason, "x"); err != nil {
			t.Fatal(err)
		}
	}
	// waitRoot waits for a root about the cluster other than those known.
	waitRoot := func(known ...string) string {
		t.Helper()
		var ts string
		rec.WaitFor(t, 60*time.Second, func(r *slackrec.Recorder) bool {
			for _, m := range roots(r) {
				if strings.Contains(m.Text, ours) && strings.Contains(m.Text, "NotReady") && !slices.Contains(known, m.TS) {
					ts = m.TS
					return true
				}
			}
			return false
		})
		return ts
	}
	resolved := func(ts string) func(*slackrec.Recorder) bool {
		return func(r *slackrec.Recorder) bool {
			m, ok := r.Message(channel, ts)
			return ok && strings.Contains(m.Text, "RESOLVED")
		}
	}

	setReady(nodes[0], false)
	before := waitRoot()
	setReady(nodes[0], true)
	rec.WaitFor(t, 60*time.Second, resolved(before))
	setReady(nodes[1], false)
	open := waitRoot(before)
	first.cancel()
	setReady(nodes[1], true)
	// The agent has published the recovery before the new bot starts.
	testenv.Eventually(t, 60*time.Second, "the recovery is on the stream", func() bool { return readyOnStream(t, js, nodes[1]) })

	mark := len(rec.Calls())
	second := startBot(t, js, rec, restartConfig())
	check := func() {
		t.Helper()
		for _, c := range rec.Calls()[mark:] {
			if unhealthy(c) {
				t.Errorf("after the restart, %s shows an unhealthy state: %.200s", c.Method, c.Form.Get("text"))
			}
			if c.Method == "chat.postMessage" && c.Form.Get("thread_ts") == "" {
				t.Errorf("after the restart, a new root: %.200s", c.Form.Get("text"))
			}
			if c.Form.Get("ts")+c.Form.Get("thread_ts") == before {
				t.Errorf("after the restart, %s touched the incident resolved before the stop", c.Method)
			}
		}
	}
	rec.WaitFor(t, 60*time.Second, resolved(open))
	check()
	testenv.Eventually(t, 30*time.Second, "the resolved incident's rendering found unchanged", func() bool {
		return metricSum(t, second.reg, "hcpbot_slack_unchanged_total") >= 1 && metricSum(t, second.reg, "hcpbot_slack_queue_depth") == 0
	})
	check()
	t.Logf("after the restart: %d Slack calls", len(rec.Calls())-mark)
}

// readyOnStream reports whether one of the newest events on the stream
// says node is Ready.
func readyOnStream(t *testing.T, js jetstream.JetStream, node string) bool {
	t.Helper()
	ctx := context.Background()
	s, err := js.Stream(ctx, event.StreamName)
	if err != nil {
		return false
	}
	last := s.CachedInfo().State.LastSeq
	for seq := last; seq > 0 && seq+200 > last; seq-- {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			continue
		}
		if _, p, err := event.DecodeAll(m.Data); err == nil {
			if r, ok := p.(event.NodeReadiness); ok && r.Node == node && r.Ready == event.ConditionTrue {
				return true
			}
		}
	}
	return false
}
