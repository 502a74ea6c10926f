package watchers_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/hcpbot/hcpbot/bot"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/bot/notify"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv"
	"github.com/hcpbot/hcpbot/internal/testenv/chaosreport"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
)

// Fault cases of issue 9 with the whole pipeline: the real agent, the real
// bot and its Slack notifier (to the Slack recorder), on real NATS and real
// API servers. Each logs its figures with chaosreport.

const chaosChannel = "C0CHAOS"

// chaosBot is one bot process: correlator and Slack notifier, both on js.
type chaosBot struct {
	bot *bot.Bot
	rec *slackrec.Recorder
}

// startChaosBot runs a bot like `hcpbot bot` on js (the events stream must
// exist), notifying the Slack recorder; it stops when the test ends.
func startChaosBot(t *testing.T, js jetstream.JetStream) *chaosBot {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	log := natstest.Logger(t)
	rec := slackrec.New(t)
	store, err := notify.NewKVStore(ctx, js, notify.KVConfig{})
	if err != nil {
		t.Fatal(err)
	}
	n, err := notify.NewSlack(notify.SlackConfig{Client: notify.NewSlackClient("xoxb-test", rec.APIURL(), nil), Store: store, Log: log,
		Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	b := bot.New(bot.Config{Channel: chaosChannel, GroupWait: 500 * time.Millisecond, GroupInterval: time.Second}, js, n, prometheus.NewRegistry(), log)
	var wg sync.WaitGroup
	wg.Go(func() { _ = n.Run(ctx) })
	wg.Go(func() {
		if err := b.Run(ctx); err != nil && ctx.Err() == nil {
			t.Errorf("bot: %v", err)
		}
		if ctx.Err() == nil {
			t.Errorf("the bot stopped while running")
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
	return &chaosBot{bot: b, rec: rec}
}

// openIncident returns the bot's open incident of k, if any.
func (c *chaosBot) openIncident(k diagnose.Key) (bot.Incident, bool) {
	for _, inc := range c.bot.Incidents() {
		if inc.Cluster == k && inc.Open() {
			return inc, true
		}
	}
	return bot.Incident{}, false
}

// roots returns the root messages whose text names cluster (ns/name).
func (c *chaosBot) roots(cluster string) []slackrec.Message {
	var out []slackrec.Message
	for _, m := range c.rec.Messages(chaosChannel) {
		if m.ThreadTS == "" && strings.Contains(m.Text, cluster) {
			out = append(out, m)
		}
	}
	return out
}

// duplicateReplies counts thread replies posted again with the same text
// under the same root.
func (c *chaosBot) duplicateReplies() int {
	seen := map[string]bool{}
	dups := 0
	for _, m := range c.rec.Messages(chaosChannel) {
		if m.ThreadTS == "" {
			continue
		}
		k := m.ThreadTS + "\x00" + m.Text
		if seen[k] {
			dups++
		}
		seen[k] = true
	}
	return dups
}

// symptoms returns the incident's symptom keys with prefix ("node/",
// "pod/"), without the prefix, sorted.
func symptoms(inc bot.Incident, prefix string) []string {
	var out []string
	for _, d := range inc.Diagnoses {
		for _, s := range d.Symptoms {
			if name, ok := strings.CutPrefix(s, prefix); ok && !slices.Contains(out, name) {
				out = append(out, name)
			}
		}
	}
	sort.Strings(out)
	return out
}

// sum adds up every series of a counter of the replica's metrics.
func (r *faultReplica) sum(t *testing.T, name string) float64 {
	t.Helper()
	mfs, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var total float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

// notReadyNodes lists the nodes whose Ready condition is not True, as the
// API server has them now: the truth the bot must converge on.
func notReadyNodes(t *testing.T, kube kubernetes.Interface) []string {
	t.Helper()
	list, err := kube.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range list.Items {
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
				out = append(out, n.Name)
			}
		}
	}
	sort.Strings(out)
	return out
}

// lastSeq is the events stream's last sequence number.
func lastSeq(t *testing.T, js jetstream.JetStream) uint64 {
	t.Helper()
	var seq uint64
	testenv.Eventually(t, 30*time.Second, "events stream info", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		str, err := js.Stream(ctx, event.StreamName)
		if err != nil {
			return false
		}
		info, err := str.Info(ctx)
		if err != nil {
			return false
		}
		seq = info.State.LastSeq
		return true
	})
	return seq
}

// NATS is entirely down (the only server, stopped and brought back on its
// port and store) while a hosted cluster changes: nodes go NotReady, some
// recover, the service-ca-operator crashloops; in the long variant enough
// nodes flap to overflow the publisher's buffer, so that the recoveries are
// dropped and only the resync's snapshot can clear them. The agent keeps
// watching; once NATS is back, the bot (its consumer resuming on the
// restarted server) converges on what is true now, with one Slack root
// message for the cluster and no reply posted twice.
func TestChaosNATSOutage(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	outage := chaosreport.Pick(8*time.Second, 30*time.Second)
	const buffer = 64
	nDown, nBack, nFlap := chaosreport.Pick(3, 4), chaosreport.Pick(2, 3), chaosreport.Pick(0, 8)

	ns := env.Namespace(t)
	// A management cluster of its own (also playing the hosted cluster):
	// nothing of other tests is restated or diagnosed.
	kube, dyn, kubeconfig := privateManagement(t, "chaos-"+ns)
	spec := scenario.Healthy(ns, "natsdown")
	if _, err := scenario.Create(ctx, kube, dyn, spec, kubeconfig); err != nil {
		t.Fatal(err)
	}
	cluster := ns + "/" + spec.Name
	source := "mgmt-" + ns
	key := diagnose.Key{Source: source, Cluster: event.ClusterRef{Namespace: ns, Name: spec.Name}}
	// Distinct prefixes: no node's name is part of another's.
	down, err := scenario.Nodes(ctx, kube, "down", nDown)
	if err != nil {
		t.Fatal(err)
	}
	back, err := scenario.Nodes(ctx, kube, "back", nBack)
	if err != nil {
		t.Fatal(err)
	}
	flap, err := scenario.Nodes(ctx, kube, "flap", nFlap)
	if err != nil {
		t.Fatal(err)
	}
	pod, err := scenario.ServiceCAOperator(ctx, kube, down[0])
	if err != nil {
		t.Fatal(err)
	}

	srv := startFaultNATS(t)
	reader := srv.connect(t, "reader")
	s := pollStream(t, reader.JS) // creates the events stream
	cb := startChaosBot(t, srv.connect(t, "bot").JS)
	agentConn := srv.connect(t, "agent")
	r := startFaultReplica(t, faultReplicaConfig{source: source, js: agentConn.JS, conn: agentConn, buffer: buffer, kube: kube, dyn: dyn})
	first := s.waitFor(t, "start-up snapshot", 1, snapshotDone(cluster))[0].Snapshot
	testenv.Eventually(t, 60*time.Second, "the bot to know the cluster", func() bool {
		_, ok := cb.bot.HostedCluster(key)
		return ok
	})
	if inc, ok := cb.openIncident(key); ok {
		t.Fatalf("an incident for a healthy cluster: %+v", inc.Diagnoses)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, m := range cb.rec.Messages(chaosChannel) {
			t.Logf("slack %s thread=%q updates=%d: %.300s", m.TS, m.ThreadTS, m.Updates, m.Text)
		}
		for _, inc := range cb.bot.Incidents() {
			t.Logf("incident %s %s open=%v nodes=%v pods=%v", inc.Key, inc.Cluster, inc.Open(), symptoms(inc, "node/"), symptoms(inc, "pod/"))
		}
	})
	seqBefore := lastSeq(t, reader.JS)

	// NATS goes away.
	srv.stop()
	downAt := time.Now()
	testenv.Eventually(t, 10*time.Second, "the agent's client to notice", func() bool { return agentConn.NC.Status() != nats.CONNECTED })
	changes := 0
	set := func(node string, status corev1.ConditionStatus, why string) {
		t.Helper()
		reason := "KubeletReady"
		if status != corev1.ConditionTrue {
			reason = "KubeletNotReady"
		}
		if err := scenario.SetNodeReady(ctx, kube, node, status, reason, why); err != nil {
			t.Fatal(err)
		}
		changes++
	}
	for _, n := range append(slices.Clone(down), back...) {
		set(n, corev1.ConditionFalse, "container runtime network not ready")
	}
	if err := scenario.CrashLoop(ctx, kube, pod.Namespace, pod.Name, 5, scenario.SeedConnectivityMessage); err != nil {
		t.Fatal(err)
	}
	changes++
	// Long variant: flap nodes until the buffer overflows, so that what
	// follows is dropped and only the resync can restate it.
	if nFlap > 0 {
		round := 0
		testenv.Eventually(t, 60*time.Second, "the publish buffer to overflow", func() bool {
			status := corev1.ConditionFalse
			if round%2 == 1 {
				status = corev1.ConditionTrue
			}
			for _, n := range flap {
				set(n, status, fmt.Sprintf("flap round %d", round))
			}
			round++
			return round%2 == 0 && r.counter(t, metricPublishErrors, "buffer_full") > 0
		})
		t.Logf("buffer overflowed after %d rounds of %d flapping nodes", round, nFlap)
	}
	// Some nodes recover while NATS is still down.
	for _, n := range back {
		set(n, corev1.ConditionTrue, "kubelet is posting ready status")
	}
	// The outage lasts at least one failed publish attempt, and its set
	// length (the fault injected, not a condition awaited).
	testenv.Eventually(t, 30*time.Second, "a failed publish attempt", func() bool {
		return r.counter(t, metricPublishErrors, "nats") >= 1
	})
	if rest := outage - time.Since(downAt); rest > 0 {
		time.Sleep(rest)
	}
	r.alive(t)
	srv.start(t)
	outageLen := time.Since(downAt)
	backAt := time.Now()
	changesDuringOutage := changes
	t.Logf("NATS down for %v; %d changes meanwhile", outageLen.Round(time.Millisecond), changes)

	// The truth now, and what the bot must come to hold.
	wantNodes := notReadyNodes(t, kube)
	if !slices.Equal(wantNodes, down) {
		t.Fatalf("NotReady nodes in the cluster: %v, want %v", wantNodes, down)
	}
	wantPod := pod.Namespace + "/" + pod.Name
	var gotNodes, gotPods []string
	var converged time.Duration
	testenv.Eventually(t, 120*time.Second, "the bot to converge on the cluster's state", func() bool {
		inc, ok := cb.openIncident(key)
		if !ok {
			return false
		}
		gotNodes, gotPods = symptoms(inc, "node/"), symptoms(inc, "pod/")
		if !slices.Equal(gotNodes, wantNodes) || !slices.Equal(gotPods, []string{wantPod}) {
			return false
		}
		// Slack shows it: the root's newest rendering names no node that
		// recovered.
		rs := cb.roots(cluster)
		if len(rs) == 0 {
			return false
		}
		m, _ := cb.rec.Message(chaosChannel, rs[0].TS)
		shown := m.Text + string(m.Blocks)
		for _, n := range append(slices.Clone(back), flap...) {
			if strings.Contains(shown, n) {
				return false
			}
		}
		converged = time.Since(backAt)
		return true
	})
	t.Logf("converged %v after NATS returned: nodes %v, pods %v", converged.Round(time.Millisecond), gotNodes, gotPods)
	resyncs := s.matching(func(e event.Event, p event.Payload) bool { return snapshotDone(cluster)(e, p) && e.Snapshot != first })
	seqAfter := lastSeq(t, reader.JS)
	dropped := r.counter(t, metricPublishErrors, "buffer_full")

	// The agent still watches: a change after the outage reaches the bot.
	set(down[0], corev1.ConditionTrue, "recovered after the outage")
	testenv.Eventually(t, 60*time.Second, down[0]+" cleared in the bot after the outage", func() bool {
		inc, ok := cb.openIncident(key)
		return ok && !slices.Contains(symptoms(inc, "node/"), down[0])
	})

	rootPosts := len(cb.roots(cluster))
	dupReplies := cb.duplicateReplies()
	if rootPosts != 1 {
		t.Errorf("%d root messages about %s, want 1", rootPosts, cluster)
	}
	if dupReplies != 0 {
		t.Errorf("%d thread replies posted twice", dupReplies)
	}
	if len(resyncs) == 0 {
		t.Errorf("no resync snapshot after NATS returned")
	}
	if nFlap > 0 && dropped == 0 {
		t.Errorf("the long variant dropped nothing: the resync path was not taken")
	}
	if v := cb.rec.Violations(); v != 0 {
		t.Errorf("%d Slack rate-limit violations", v)
	}
	r.alive(t)
	restarts := 0
	if r.exited.Load() {
		restarts = 1
	}
	chaosreport.Log(t, "nats-outage", map[string]any{
		"outage_s":                      outageLen,
		"changes_during_outage":         changesDuringOutage,
		"events_published_after_return": seqAfter - seqBefore,
		"buffer":                        buffer,
		"buffer_dropped":                dropped,
		"deduplicated_by_jetstream":     r.counter(t, metricDuplicates, ""),
		"resync":                        len(resyncs) > 0,
		"time_to_converge_s":            converged,
		"slack_posts":                   len(cb.rec.CallsTo("chat.postMessage")),
		"root_posts":                    rootPosts,
		"duplicate_posts":               rootPosts - 1 + dupReplies,
		"agent_restarts":                restarts,
	})
}

// The management API server restarts, then a hosted cluster's API server is
// unreachable for a while. The same agent (never restarted) publishes
// changes made after the restart in both clusters; the unreachable cluster
// is reported once when it goes and once when it is back, not at every
// probe (every 300 ms here); Slack gets one incident message for it,
// updated to resolved, never posted again.
func TestChaosAPIServerFaults(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	unreachableFor := chaosreport.Pick(10*time.Second, 40*time.Second)
	const probe = 300 * time.Millisecond // faultReplica's ProbeInterval

	ns := env.Namespace(t)
	mgmt, mkube, mdyn, _ := privateManagementServer(t, "chaos-mgmt-"+ns)
	hostedName := "chaos-hosted-" + ns
	hosted, err := env.CP.AddAPIServer(ctx, hostedName)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.CP.RemoveAPIServer(hostedName) })
	hkube, _, err := hosted.Clients()
	if err != nil {
		t.Fatal(err)
	}
	hostedKubeconfig, err := hosted.Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	spec := scenario.Healthy(ns, "apifaults")
	if _, err := scenario.Create(ctx, mkube, mdyn, spec, hostedKubeconfig); err != nil {
		t.Fatal(err)
	}
	cluster := ns + "/" + spec.Name
	source := "mgmt-" + ns
	key := diagnose.Key{Source: source, Cluster: event.ClusterRef{Namespace: ns, Name: spec.Name}}
	nodes, err := scenario.Nodes(ctx, hkube, "api", 2)
	if err != nil {
		t.Fatal(err)
	}

	s := newStream(t)
	cb := startChaosBot(t, s.js)
	r := startFaultReplica(t, faultReplicaConfig{source: source, js: s.js, kube: mkube, dyn: mdyn})
	s.waitFor(t, "start-up snapshot", 1, snapshotDone(cluster))
	testenv.Eventually(t, 60*time.Second, "the bot to know the cluster", func() bool {
		_, ok := cb.bot.HostedCluster(key)
		return ok
	})
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, m := range cb.rec.Messages(chaosChannel) {
			t.Logf("slack %s thread=%q updates=%d: %.300s", m.TS, m.ThreadTS, m.Updates, m.Text)
		}
		for _, e := range s.matching(func(e event.Event, _ event.Payload) bool { return e.Type == event.TypeReachability }) {
			p, _ := e.DecodePayload()
			t.Logf("reachability event %s at %s: %+v", e.ID, e.Time.Format(time.StampMilli), p)
		}
	})

	// 1. The management API server restarts (same port, credentials and
	// etcd): the agent's informers reconnect by themselves.
	restartAt := time.Now()
	mgmt.Stop() // SIGTERM, SIGKILL after 10 s of graceful shutdown
	mgmtGone := time.Now()
	if err := mgmt.Start(ctx); err != nil {
		t.Fatalf("restart the management API server: %v", err)
	}
	upAt := time.Now()
	mgmtRestart, mgmtDown := upAt.Sub(restartAt), upAt.Sub(mgmtGone)
	// Changes after the restart, in the management cluster (an unhealthy
	// NodePool) and in the hosted one (a NotReady node).
	if err := scenario.NodePool(ctx, mdyn, spec, "chaos-np", 2, false); err != nil {
		t.Fatal(err)
	}
	if err := scenario.SetNodeReady(ctx, hkube, nodes[0], corev1.ConditionFalse, "KubeletNotReady", "after the management restart"); err != nil {
		t.Fatal(err)
	}
	// Reflectors back off up to 30 s between retries: wait well beyond.
	testenv.Eventually(t, 120*time.Second, "the NodePool made after the restart to be published", func() bool {
		return len(s.matching(isType[event.NodePoolState](cluster))) > 0
	})
	watchRecovered := time.Since(upAt)
	s.waitFor(t, "the NotReady node after the restart", 1, nodeState(cluster, nodes[0], event.ConditionFalse))
	t.Logf("management API server restarted in %v (gone for %v); watches published a change %v after it was back",
		mgmtRestart.Round(time.Millisecond), mgmtDown.Round(time.Millisecond), watchRecovered.Round(time.Millisecond))
	// Heal both, so that the next incident is the unreachability alone.
	if err := scenario.SetNodePoolHealth(ctx, mdyn, ns, "chaos-np", true); err != nil {
		t.Fatal(err)
	}
	if err := scenario.SetNodeReady(ctx, hkube, nodes[0], corev1.ConditionTrue, "KubeletReady", "healed"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "the incident of the restart phase to resolve", func() bool {
		if _, open := cb.openIncident(key); open {
			return false
		}
		for _, m := range cb.roots(cluster) {
			if !strings.Contains(m.Text, "RESOLVED") {
				return false
			}
		}
		return true
	})
	before := map[string]bool{}
	for _, m := range cb.roots(cluster) {
		before[m.TS] = true
	}
	newRoots := func() []slackrec.Message {
		var out []slackrec.Message
		for _, m := range cb.roots(cluster) {
			if !before[m.TS] {
				out = append(out, m)
			}
		}
		return out
	}

	// 2. The hosted API server goes away for a while.
	downAt := time.Now()
	hosted.Stop() // SIGTERM: /readyz fails at once; SIGKILL after 10 s
	goneAt := time.Now()
	ev := s.waitFor(t, "the hosted cluster reported unreachable", 1, reachability(cluster, false))[0]
	reportedAfter := ev.Time.Sub(downAt) // the agent's own time of the report
	testenv.Eventually(t, 60*time.Second, "a Slack message about the unreachable API", func() bool {
		for _, m := range newRoots() {
			if strings.Contains(m.Text, "unreachable") {
				return true
			}
		}
		return false
	})
	// The outage's set length, with the process gone (the fault
	// injected, not a condition awaited).
	if rest := unreachableFor - time.Since(goneAt); rest > 0 {
		time.Sleep(rest)
	}
	unreachableDuringOutage := len(s.matching(reachability(cluster, false)))
	startAt := time.Now()
	if err := hosted.Start(ctx); err != nil {
		t.Fatalf("restart the hosted API server: %v", err)
	}
	returnedAt := time.Now() // ready: /readyz answers
	hostedDown, hostedStop := startAt.Sub(goneAt), goneAt.Sub(downAt)
	ev = s.waitFor(t, "the hosted cluster reachable again", 1, reachability(cluster, true))[0]
	// From the restart of the process: the probe may see it ready before
	// Start's own check does.
	reachableAfter := ev.Time.Sub(startAt)
	testenv.Eventually(t, 60*time.Second, "the Slack message to turn resolved", func() bool {
		rs := newRoots()
		return len(rs) > 0 && strings.Contains(rs[len(rs)-1].Text, "RESOLVED")
	})
	// A change after the outage is published by the same agent.
	if err := scenario.SetNodeReady(ctx, hkube, nodes[1], corev1.ConditionFalse, "KubeletNotReady", "after the hosted outage"); err != nil {
		t.Fatal(err)
	}
	// The agent rebuilds the hosted informers when the probe sees the API
	// again: left alone, the reflectors would wait out client-go's watch
	// back-off (30 s, jittered up to 60 s), then a 410 and a relist.
	testenv.Eventually(t, 180*time.Second, "the NotReady node after the hosted outage to be published", func() bool {
		return len(s.matching(nodeState(cluster, nodes[1], event.ConditionFalse))) > 0
	})
	hostedWatchRecovered := time.Since(returnedAt)
	t.Logf("hosted API server stopping for %v, then gone for %v: reported %v after SIGTERM, reachable again %v after its restart and a change published %v after it was ready",
		hostedStop.Round(time.Millisecond), hostedDown.Round(time.Millisecond), reportedAfter.Round(time.Millisecond),
		reachableAfter.Round(time.Millisecond), hostedWatchRecovered.Round(time.Millisecond))

	const freshWithin = 20 * time.Second
	if hostedWatchRecovered > freshWithin {
		t.Errorf("a hosted change was published %v after the API server returned (reported reachable %v after its restart), want within %v",
			hostedWatchRecovered.Round(time.Millisecond), reachableAfter.Round(time.Millisecond), freshWithin)
	}
	unreachable := len(s.matching(reachability(cluster, false)))
	reachable := len(s.matching(reachability(cluster, true)))
	if unreachable != 1 || unreachableDuringOutage != 1 {
		t.Errorf("unreachable reported %d times (%d during the outage), want once (outage of %v, a probe every %v)",
			unreachable, unreachableDuringOutage, (hostedStop + hostedDown).Round(time.Second), probe)
	}
	if reachable != 1 {
		t.Errorf("reachable again reported %d times, want once", reachable)
	}
	rs := newRoots()
	updates := 0
	for _, m := range rs {
		updates += m.Updates
	}
	if len(rs) != 1 {
		t.Errorf("%d root messages about the unreachable cluster, want 1 (updated, not re-posted)", len(rs))
	} else if rs[0].Updates == 0 {
		t.Errorf("the unreachable cluster's message was never updated")
	}
	if d := cb.duplicateReplies(); d != 0 {
		t.Errorf("%d thread replies posted twice", d)
	}
	runs := map[string]bool{}
	for _, e := range s.matching(snapshotDone("")) {
		runs[e.Snapshot] = true
	}
	if len(runs) != 1 {
		t.Errorf("%d snapshot runs, want the start-up one only (no restart, no resync)", len(runs))
	}
	r.alive(t)
	restarts := 0
	if r.exited.Load() {
		restarts = 1
	}
	chaosreport.Log(t, "apiserver-faults", map[string]any{
		"mgmt_restart_s":                     mgmtRestart,
		"mgmt_down_s":                        mgmtDown,
		"hosted_stop_s":                      hostedStop,
		"watch_recovered_s":                  watchRecovered,
		"hosted_unreachable_s":               hostedDown,
		"unreachable_reported_after_s":       reportedAfter,
		"reachable_reported_after_restart_s": reachableAfter,
		"hosted_watch_recovered_s":           hostedWatchRecovered,
		"probes_during_outage":               int((hostedStop + hostedDown) / probe),
		"unreachable_events":                 unreachable,
		"reachable_events":                   reachable,
		"slack_root_posts":                   len(rs),
		"slack_root_updates":                 updates,
		"agent_restarts":                     restarts,
		"snapshot_runs":                      len(runs),
	})
}
