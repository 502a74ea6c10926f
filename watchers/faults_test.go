package watchers_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/internal/controlplane"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/watchers"
)

// Fault injection: a kubeconfig Secret that is missing or unusable, NATS
// going away (with the publish buffer overflowing meanwhile), and a
// HostedCluster the agent cannot read.

// faultSkipBug skips a test that demonstrates a known bug, unless
// HCPBOT_BUGS is set (HCPBOT_BUGS=1 go test -run ... reproduces it).
func faultSkipBug(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("HCPBOT_BUGS") == "" {
		t.Skip("bug: " + why)
	}
}

// faultNATS is an embedded JetStream server that a test stops and brings
// back on the same port and store, so the file-backed stream survives.
type faultNATS struct {
	cfg bus.EmbeddedConfig
	srv *bus.Embedded // nil while stopped
	url string
}

func startFaultNATS(t *testing.T) *faultNATS {
	t.Helper()
	n := &faultNATS{cfg: bus.EmbeddedConfig{StoreDir: t.TempDir(), Name: "faults", Open: true, Logger: natstest.Logger(t)}}
	n.start(t)
	u, err := url.Parse(n.srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	if n.cfg.Port, err = strconv.Atoi(u.Port()); err != nil {
		t.Fatal(err)
	}
	n.url = n.srv.ClientURL()
	t.Cleanup(n.stop)
	return n
}

func (n *faultNATS) start(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), natstest.Timeout)
	defer cancel()
	srv, err := bus.StartEmbedded(ctx, n.cfg)
	if err != nil {
		t.Fatalf("start NATS: %v", err)
	}
	n.srv = srv
}

func (n *faultNATS) stop() {
	if n.srv != nil {
		n.srv.Shutdown()
		n.srv = nil
	}
}

// connect is a client that reconnects quickly, so that the test does not
// wait out bus's production back-off after the server returns.
func (n *faultNATS) connect(t *testing.T, name string) *bus.Conn {
	t.Helper()
	conn, err := bus.Connect(context.Background(), bus.Config{
		URLs: []string{n.url}, Name: name, ReconnectWait: 50 * time.Millisecond, MaxReconnectWait: 200 * time.Millisecond,
	}, natstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	return conn
}

// pollStream fills a stream (the type of agent_test.go, so waitFor and
// matching work) by reading the stream message by message. Unlike a
// consumer it needs no state on the server, so it carries on by itself
// after the server restarts.
func pollStream(t *testing.T, js jetstream.JetStream) *stream {
	t.Helper()
	if _, err := bus.EnsureStream(context.Background(), js, bus.EventsStream(time.Hour, 15*time.Minute)); err != nil {
		t.Fatal(err)
	}
	s := &stream{js: js}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var badMu sync.Mutex
	var bad []error
	go func() {
		defer close(done)
		next := uint64(1)
		for ctx.Err() == nil {
			str, err := js.Stream(ctx, event.StreamName)
			for err == nil {
				var m *jetstream.RawStreamMsg
				if m, err = str.GetMsg(ctx, next); err != nil {
					break
				}
				next++
				e, derr := event.Decode(m.Data)
				if derr != nil {
					badMu.Lock()
					bad = append(bad, derr)
					badMu.Unlock()
					continue
				}
				s.mu.Lock()
				s.events = append(s.events, e)
				s.mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-time.After(25 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		for _, err := range bad {
			t.Errorf("undecodable event on the stream: %v", err)
		}
	})
	return s
}

type faultReplicaConfig struct {
	source string
	// js is where events go; buffer the publisher's size (default 1000).
	js     jetstream.JetStream
	buffer int
	// conn, if set, resyncs the agent on every reconnect, as cmd/hcpbot does.
	conn *bus.Conn
	// kube and dyn default to the shared management cluster.
	kube kubernetes.Interface
	dyn  dynamic.Interface
}

// faultReplica is one agent run directly (no leader election): Run
// returning before the test stops it is the crash these tests look for.
type faultReplica struct {
	cancel  context.CancelFunc
	done    chan struct{}
	exited  atomic.Bool
	agent   *watchers.Agent
	metrics *watchers.Metrics
	reg     *prometheus.Registry
}

func startFaultReplica(t *testing.T, c faultReplicaConfig) *faultReplica {
	t.Helper()
	if c.buffer == 0 {
		c.buffer = 1000
	}
	if c.kube == nil {
		c.kube, c.dyn = env.Kube, env.Dynamic
	}
	log := natstest.Logger(t)
	r := &faultReplica{done: make(chan struct{}), reg: prometheus.NewRegistry()}
	r.metrics = watchers.NewMetrics(r.reg)
	pub := watchers.NewJetStreamPublisher(c.js, c.buffer, r.metrics, log)
	// SnapshotWait is short: HostedClusters of earlier tests, whose API
	// servers are gone, hold up every snapshot for that long.
	ctx, cancel := context.WithCancel(context.Background())
	agent := newAgent(t, ctx, watchers.Config{Source: c.source, Identity: "faults", SnapshotWait: 2 * time.Second,
		ProbeInterval: 300 * time.Millisecond}, c.kube, c.dyn, pub, r.metrics, log)
	r.agent = agent
	pub.OnResync(agent.Resync)
	if c.conn != nil {
		c.conn.OnReconnect(agent.Resync)
	}
	r.cancel = cancel
	var wg sync.WaitGroup
	wg.Go(func() { pub.Run(ctx) })
	go func() {
		defer close(r.done)
		err := agent.Run(ctx)
		if ctx.Err() == nil {
			r.exited.Store(true)
			t.Errorf("agent returned while running: %v", err)
		}
		wg.Wait()
	}()
	t.Cleanup(func() {
		cancel()
		<-r.done
	})
	return r
}

// alive fails the test if the agent's Run has returned.
func (r *faultReplica) alive(t *testing.T) {
	t.Helper()
	select {
	case <-r.done:
		t.Fatal("the agent stopped")
	default:
	}
	if r.exited.Load() {
		t.Fatal("the agent returned")
	}
}

// counter reads a counter of the replica's metrics by name and label value
// ("" for a counter without labels).
func (r *faultReplica) counter(t *testing.T, name, label string) float64 {
	t.Helper()
	return counterOf(t, r.reg, name, label)
}

// counterOf reads a counter of reg by name and label value ("" for a
// counter without labels).
func counterOf(t *testing.T, reg prometheus.Gatherer, name, label string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label == "" {
				return m.GetCounter().GetValue()
			}
			for _, lp := range m.GetLabel() {
				if lp.GetValue() == label {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

const (
	metricPublishErrors = "hcpbot_agent_publish_errors_total"
	metricSyncErrors    = "hcpbot_agent_sync_errors_total"
	metricDuplicates    = "hcpbot_agent_events_duplicate_total"
)

func reachability(cluster string, reachable bool) func(event.Event, event.Payload) bool {
	return func(e event.Event, p event.Payload) bool {
		r, ok := p.(event.Reachability)
		return ok && e.Cluster != nil && e.Cluster.String() == cluster && r.Reachable == reachable
	}
}

// snapshotDone matches the SnapshotDone of a hosted cluster ("" for the
// management cluster's scope).
func snapshotDone(cluster string) func(event.Event, event.Payload) bool {
	return func(e event.Event, p event.Payload) bool {
		_, ok := p.(event.SnapshotDone)
		if !ok {
			return false
		}
		if cluster == "" {
			return e.Cluster == nil
		}
		return e.Cluster != nil && e.Cluster.String() == cluster
	}
}

// deleteHostedClusterAtEnd keeps the HostedCluster from outliving the test:
// later agents watch every HostedCluster, and one whose API server is gone
// holds up their snapshots.
func deleteHostedClusterAtEnd(t *testing.T, dyn dynamic.Interface, namespace, name string) {
	t.Helper()
	t.Cleanup(func() {
		_ = dyn.Resource(hypershift.HostedClusterGVR).Namespace(namespace).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// The admin kubeconfig Secret a HostedCluster names does not exist yet (as
// while HyperShift is still creating the control plane), then holds a
// kubeconfig that does not parse, then a real one: the agent reports each
// once, never with the Secret's content, and starts watching the hosted
// cluster without a restart.
func TestFaultKubeconfigSecretMissing(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	start := time.Now()
	s := newStream(t)
	ns := env.Namespace(t)
	spec := scenario.Healthy(ns, "nosecret")
	hosted := env.HostedCluster(t, spec)
	deleteHostedClusterAtEnd(t, env.Dynamic, ns, spec.Name)
	cluster := ns + "/" + spec.Name
	kubeconfig, err := hosted.Server.Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	kc, err := clientcmd.Load(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	token := kc.AuthInfos["admin"].Token
	if token == "" {
		t.Fatal("the hosted kubeconfig has no token")
	}
	secrets := env.Kube.CoreV1().Secrets(ns)
	if err := secrets.Delete(ctx, spec.KubeconfigSecretName(), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	r := startFaultReplica(t, faultReplicaConfig{source: "mgmt-" + ns, js: s.js})

	// Each state of the Secret, in turn; what it must (not) be reported as.
	const fakeToken = "sha256~FAKE-TOKEN-must-not-leak"
	broken := []byte("apiVersion: v1\nkind: Config\nusers:\n- name: admin\n  user:\n    token: " + fakeToken + "\nclusters: [ {server: https://127.0.0.1:1\n")
	for _, step := range []struct {
		name   string
		apply  func() error
		report string // in the Reachability error; "" for a working kubeconfig
	}{
		{"no Secret", func() error { return nil }, "admin kubeconfig Secret " + ns + "/" + spec.KubeconfigSecretName() + " not found"},
		{"kubeconfig does not parse", func() error {
			_, err := secrets.Create(ctx, &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: spec.KubeconfigSecretName()},
				Data:       map[string][]byte{hypershift.KubeconfigKey: broken},
			}, metav1.CreateOptions{})
			return err
		}, "admin kubeconfig unusable"},
		{"the real kubeconfig", func() error {
			sec, err := secrets.Get(ctx, spec.KubeconfigSecretName(), metav1.GetOptions{})
			if err != nil {
				return err
			}
			sec.Data[hypershift.KubeconfigKey] = kubeconfig
			_, err = secrets.Update(ctx, sec, metav1.UpdateOptions{})
			return err
		}, ""},
	} {
		if err := step.apply(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if step.report != "" {
			got := s.waitFor(t, step.name+" reported", 1, func(e event.Event, p event.Payload) bool {
				return reachability(cluster, false)(e, p) && strings.Contains(p.(event.Reachability).Error, step.report)
			})
			t.Logf("%s: %q after %v", step.name, mustReachability(t, got[0]).Error, time.Since(start).Round(time.Millisecond))
			continue
		}
		// Working: a problem in the hosted cluster is published.
		nodes, err := scenario.Nodes(ctx, hosted.Kube, "late", 1)
		if err != nil {
			t.Fatal(err)
		}
		if err := scenario.SetNodeReady(ctx, hosted.Kube, nodes[0], corev1.ConditionFalse, "KubeletNotReady", "x"); err != nil {
			t.Fatal(err)
		}
		s.waitFor(t, "NotReady node once the kubeconfig works", 1, nodeState(cluster, nodes[0], event.ConditionFalse))
		s.waitFor(t, "reachable once the kubeconfig works", 1, reachability(cluster, true))
		t.Logf("%s: watching after %v", step.name, time.Since(start).Round(time.Millisecond))
	}

	// Everything published before the NotReady is on the stream by now
	// (the publisher keeps order): each state was reported exactly once.
	for _, report := range []string{"not found", "unusable"} {
		got := s.matching(func(e event.Event, p event.Payload) bool {
			return reachability(cluster, false)(e, p) && strings.Contains(p.(event.Reachability).Error, report)
		})
		if len(got) != 1 {
			t.Errorf("%d unreachable events saying %q, want 1", len(got), report)
		}
	}
	for _, e := range s.matching(func(event.Event, event.Payload) bool { return true }) {
		data, err := event.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		for _, secret := range []string{token, fakeToken, "BEGIN CERTIFICATE", "certificate-authority-data"} {
			if strings.Contains(string(data), secret) {
				t.Errorf("a %s event contains the kubeconfig's %q: %s", e.Type, secret, data)
			}
		}
	}
	runs := map[string]bool{}
	for _, e := range s.matching(snapshotDone("")) {
		runs[e.Snapshot] = true
	}
	if len(runs) != 1 {
		t.Errorf("%d snapshot runs, want the start-up one only (no restart)", len(runs))
	}
	// Counted too (at least once: the counters are not per cluster, and
	// the shared management cluster may hold others in the same state).
	for _, reason := range []string{"kubeconfig_missing", "kubeconfig_invalid"} {
		if n := r.counter(t, metricSyncErrors, reason); n < 1 {
			t.Errorf("%s errors = %v, want at least 1", reason, n)
		}
	}
	r.alive(t)
}

func mustReachability(t *testing.T, e event.Event) event.Reachability {
	t.Helper()
	p, err := e.DecodePayload()
	if err != nil {
		t.Fatal(err)
	}
	return p.(event.Reachability)
}

// NATS goes away for longer than a publish attempt: a node that goes
// NotReady meanwhile is published once NATS is back on the same port and
// store (retried, exactly once on the stream), the reconnect resyncs, and
// the agent keeps running and publishing.
func TestFaultNATSOutage(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	srv := startFaultNATS(t)
	s := pollStream(t, srv.connect(t, "reader").JS)
	agentConn := srv.connect(t, "agent")
	ns := env.Namespace(t)
	spec := scenario.Healthy(ns, "natsdown")
	hosted := env.HostedCluster(t, spec)
	deleteHostedClusterAtEnd(t, env.Dynamic, ns, spec.Name)
	cluster := ns + "/" + spec.Name
	nodes, err := scenario.Nodes(ctx, hosted.Kube, "nd", 2)
	if err != nil {
		t.Fatal(err)
	}
	r := startFaultReplica(t, faultReplicaConfig{source: "mgmt-" + ns, js: agentConn.JS, conn: agentConn})
	first := s.waitFor(t, "start-up snapshot of the hosted cluster", 1, snapshotDone(cluster))[0].Snapshot

	srv.stop()
	down := time.Now()
	testenv.Eventually(t, 10*time.Second, "the agent's client to notice", func() bool { return agentConn.NC.Status() != nats.CONNECTED })
	if err := scenario.SetNodeReady(ctx, hosted.Kube, nodes[0], corev1.ConditionFalse, "KubeletNotReady", "while NATS is down"); err != nil {
		t.Fatal(err)
	}
	// Stay down until a publish attempt has failed, so the event can only
	// arrive through the publisher's retry.
	testenv.Eventually(t, 20*time.Second, "a failed publish attempt", func() bool {
		return r.counter(t, metricPublishErrors, "nats") >= 1
	})
	r.alive(t)
	srv.start(t)
	t.Logf("NATS down for %v", time.Since(down).Round(time.Millisecond))
	back := time.Now()

	s.waitFor(t, "NotReady from the outage", 1, nodeState(cluster, nodes[0], event.ConditionFalse))
	t.Logf("published %v after NATS returned", time.Since(back).Round(time.Millisecond))
	s.waitFor(t, "the reconnect's resync", 1, func(e event.Event, p event.Payload) bool {
		return snapshotDone(cluster)(e, p) && e.Snapshot != first
	})
	if err := scenario.SetNodeReady(ctx, hosted.Kube, nodes[1], corev1.ConditionFalse, "KubeletNotReady", "after NATS returned"); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "NotReady after the outage", 1, nodeState(cluster, nodes[1], event.ConditionFalse))
	if n := len(s.matching(nodeState(cluster, nodes[0], event.ConditionFalse))); n != 1 {
		t.Errorf("%d NotReady events for %s, want exactly 1 (retries are deduplicated)", n, nodes[0])
	}
	if n := r.counter(t, metricPublishErrors, "buffer_full"); n != 0 {
		t.Errorf("%v events dropped with a 1000-event buffer", n)
	}
	r.alive(t)
}

// privateManagement starts a management cluster of the test's own (an API
// server with the HyperShift CRDs): tests that count events must not see
// the shared cluster's HostedClusters of other tests, which every agent
// watches and restates. It also plays the hosted cluster of a
// HostedCluster it holds, whose kubeconfig points back at it.
func privateManagement(t *testing.T, name string) (kubernetes.Interface, dynamic.Interface, []byte) {
	t.Helper()
	_, kube, dyn, kubeconfig := privateManagementServer(t, name)
	return kube, dyn, kubeconfig
}

// privateManagementServer is privateManagement with its API server, for
// tests that stop and restart it.
func privateManagementServer(t *testing.T, name string) (*controlplane.APIServer, kubernetes.Interface, dynamic.Interface, []byte) {
	t.Helper()
	ctx := context.Background()
	srv, err := env.CP.AddAPIServer(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.CP.RemoveAPIServer(name) })
	if err := controlplane.InstallCRDs(ctx, srv.RESTConfig(), hypershift.CRDs, "crds/*.yaml"); err != nil {
		t.Fatal(err)
	}
	kube, dyn, err := srv.Clients()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := srv.Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	return srv, kube, dyn, kubeconfig
}

// With NATS down, more changes happen than the publish buffer holds: the
// excess is dropped and counted, and once NATS is back and the backlog is
// out, the publisher asks for a resync whose snapshot restates the current
// problems, closed by a SnapshotDone of a second run. (The reconnect
// resync of cmd/hcpbot is not wired here, so the overflow alone must
// trigger it.)
func TestFaultPublishBufferOverflow(t *testing.T) {
	env.Need(t)
	for _, tc := range []struct {
		name   string
		buffer int
		nodes  int
		bug    string
	}{
		// The resync snapshot (HostedCluster, nodes, two SnapshotDones)
		// fits in the half of the buffer that is free when it starts.
		{name: "snapshot fits", buffer: 16, nodes: 4},
		// It does not: the snapshot overflows the buffer it is meant to
		// repair, which asks for another resync, and so on.
		{name: "snapshot larger than the buffer", buffer: 4, nodes: 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.bug != "" {
				faultSkipBug(t, tc.bug)
			}
			ctx := context.Background()
			start := time.Now()
			ns := env.Namespace(t)
			kube, dyn, kubeconfig := privateManagement(t, "faults-"+ns)
			spec := scenario.Healthy(ns, "overflow")
			if _, err := scenario.Create(ctx, kube, dyn, spec, kubeconfig); err != nil {
				t.Fatal(err)
			}
			cluster := ns + "/" + spec.Name
			nodes, err := scenario.Nodes(ctx, kube, "of", tc.nodes)
			if err != nil {
				t.Fatal(err)
			}
			srv := startFaultNATS(t)
			s := pollStream(t, srv.connect(t, "reader").JS)
			r := startFaultReplica(t, faultReplicaConfig{source: "mgmt-" + ns, js: srv.connect(t, "agent").JS, buffer: tc.buffer, kube: kube, dyn: dyn})
			first := s.waitFor(t, "start-up snapshot", 1, snapshotDone(cluster))[0].Snapshot
			t.Logf("agent up after %v", time.Since(start).Round(time.Millisecond))

			srv.stop()
			// Flip every node until the buffer overflows; end NotReady.
			ready := corev1.ConditionFalse
			rounds := 0
			testenv.Eventually(t, 20*time.Second, "dropped events", func() bool {
				for _, n := range nodes {
					if err := scenario.SetNodeReady(ctx, kube, n, ready, "Flap", fmt.Sprintf("round %d", rounds)); err != nil {
						t.Fatal(err)
					}
				}
				rounds++
				if ready == corev1.ConditionFalse {
					ready = corev1.ConditionTrue
				} else {
					ready = corev1.ConditionFalse
				}
				return ready == corev1.ConditionTrue && r.counter(t, metricPublishErrors, "buffer_full") > 0
			})
			dropped := r.counter(t, metricPublishErrors, "buffer_full")
			t.Logf("%v events dropped after %d rounds of flips", dropped, rounds)
			// The facts the resync has to restate: each node NotReady
			// since its last transition.
			want := map[string]time.Time{}
			for _, n := range nodes {
				node, err := kube.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				for _, c := range node.Status.Conditions {
					if c.Type == corev1.NodeReady && c.Status == corev1.ConditionFalse {
						want[n] = c.LastTransitionTime.Time
					}
				}
			}
			if len(want) != len(nodes) {
				t.Fatalf("nodes not all NotReady: %v", want)
			}
			r.alive(t)
			srv.start(t)
			back := time.Now()

			t.Cleanup(func() {
				t.Logf("at the end: %v events dropped, %v deduplicated", r.counter(t, metricPublishErrors, "buffer_full"), r.counter(t, metricDuplicates, ""))
			})
			done := s.waitFor(t, "SnapshotDone of a resync", 1, func(e event.Event, p event.Payload) bool {
				return snapshotDone(cluster)(e, p) && e.Snapshot != first
			})[0]
			t.Logf("resync closed %v after NATS returned", time.Since(back).Round(time.Millisecond))
			p, _ := done.DecodePayload()
			var listed []string
			for _, o := range p.(event.SnapshotDone).Problems {
				listed = append(listed, o.Name)
			}
			// A consumer reading up to the SnapshotDone has every problem
			// it lists: each node's current NotReady, exactly once.
			before := eventsBefore(s, done.ID)
			for n, since := range want {
				if !slices.Contains(listed, n) {
					t.Errorf("resync SnapshotDone lists %v, not %s", listed, n)
				}
				var got int
				for _, e := range before {
					p, err := e.DecodePayload()
					if nr, ok := p.(event.NodeReadiness); err == nil && ok && nr.Node == n && nr.Ready == event.ConditionFalse &&
						nr.LastTransitionTime.Equal(since.Truncate(time.Second)) {
						got++
					}
				}
				if got != 1 {
					t.Errorf("%s NotReady since %v: %d events before the SnapshotDone, want 1", n, since.Format(time.TimeOnly), got)
				}
			}
			// With nothing changing any more, one resync is enough: the
			// drops stop.
			last, lastChange := r.counter(t, metricPublishErrors, "buffer_full"), time.Now()
			testenv.Eventually(t, 10*time.Second, "the resync to settle (no more drops)", func() bool {
				if n := r.counter(t, metricPublishErrors, "buffer_full"); n != last {
					last, lastChange = n, time.Now()
				}
				return time.Since(lastChange) > time.Second
			})
			r.alive(t)
		})
	}
}

// eventsBefore returns the events on the stream before the one with id.
func eventsBefore(s *stream, id string) []event.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, e := range s.events {
		if e.ID == id {
			return slices.Clone(s.events[:i])
		}
	}
	return nil
}

// HostedClusters the CRD accepts but the agent's types cannot read: the
// CRD validates status.conditions[].lastTransitionTime as an OpenAPI
// date-time, which allows RFC 3339's lower-case "t" and "z"; metav1.Time
// parses with Go's time.RFC3339 layout, which does not. One is unreadable
// when the agent starts, one becomes so while it watches: the agent skips
// them (counted, not retried in a loop), keeps serving the other clusters,
// and reads them again once they are fixed.
func TestFaultUnreadableHostedCluster(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	s := newStream(t)
	ns := env.Namespace(t)
	good := scenario.Healthy(ns, "good")
	hosted := env.HostedCluster(t, good)
	deleteHostedClusterAtEnd(t, env.Dynamic, ns, good.Name)
	nodes, err := scenario.Nodes(ctx, hosted.Kube, "good", 1)
	if err != nil {
		t.Fatal(err)
	}
	hcs := env.Dynamic.Resource(hypershift.HostedClusterGVR).Namespace(ns)
	const badTime, goodTime = "2026-07-22t08:00:00z", "2026-07-22T08:00:00Z"
	setTime := func(name, at string) error {
		u, err := hcs.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		if len(conds) == 0 {
			conds = []any{map[string]any{"type": "Available", "status": "True", "reason": "AsExpected"}}
		}
		conds[0].(map[string]any)["lastTransitionTime"] = at
		if err := unstructured.SetNestedSlice(u.Object, conds, "status", "conditions"); err != nil {
			return err
		}
		u, err = hcs.UpdateStatus(ctx, u, metav1.UpdateOptions{})
		if err != nil {
			return err
		}
		if _, cerr := hypershift.FromUnstructured[hypershift.HostedCluster](u); (cerr != nil) != (at == badTime) {
			return fmt.Errorf("stored with %q: conversion error %v", at, cerr)
		}
		return nil
	}
	create := func(name string) {
		t.Helper()
		spec := scenario.Healthy(ns, name)
		if _, err := scenario.Create(ctx, env.Kube, env.Dynamic, spec, []byte("not a kubeconfig")); err != nil {
			t.Fatal(err)
		}
		deleteHostedClusterAtEnd(t, env.Dynamic, ns, name)
	}
	create("broken-at-start")
	if err := setTime("broken-at-start", badTime); err != nil {
		if strings.Contains(err.Error(), "Invalid value") {
			t.Skipf("the API server rejects %q now: no unreadable-but-valid HostedCluster to test with: %v", badTime, err)
		}
		t.Fatal(err)
	}

	r := startFaultReplica(t, faultReplicaConfig{source: "mgmt-" + ns, js: s.js})
	s.waitFor(t, "hosted snapshot of the good cluster", 1, snapshotDone(ns+"/"+good.Name))

	// One more, readable at first, then not.
	create("broken-later")
	s.waitFor(t, "broken-later while readable", 1, isType[event.HostedClusterState](ns+"/broken-later"))
	if err := setTime("broken-later", badTime); err != nil {
		t.Fatal(err)
	}
	// Skipped: broken-at-start by the start-up sync and again for the
	// informer's add, broken-later for its update.
	testenv.Eventually(t, 10*time.Second, "both unreadable clusters skipped", func() bool {
		return r.counter(t, metricSyncErrors, "malformed_object") >= 3
	})
	if n := len(s.matching(isType[event.HostedClusterState](ns + "/broken-at-start"))); n != 0 {
		t.Errorf("%d HostedCluster states of an unreadable cluster", n)
	}

	// The good cluster is still served.
	if err := scenario.SetNodeReady(ctx, hosted.Kube, nodes[0], corev1.ConditionFalse, "KubeletNotReady", "x"); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, "NotReady in the good cluster", 1, nodeState(ns+"/"+good.Name, nodes[0], event.ConditionFalse))

	// Fixed, both are read again.
	for _, name := range []string{"broken-at-start", "broken-later"} {
		if err := setTime(name, goodTime); err != nil {
			t.Fatal(err)
		}
	}
	fixedAt, _ := time.Parse(time.RFC3339, goodTime)
	for _, name := range []string{"broken-at-start", "broken-later"} {
		s.waitFor(t, name+" once fixed", 1, func(e event.Event, p event.Payload) bool {
			h, ok := p.(event.HostedClusterState)
			return ok && isType[event.HostedClusterState](ns+"/"+name)(e, p) && len(h.Conditions) > 0 && h.Conditions[0].LastTransitionTime.Equal(fixedAt)
		})
	}
	// Skipped once per change, not retried in a loop.
	if n := r.counter(t, metricSyncErrors, "malformed_object"); n > 10 {
		t.Errorf("malformed_object = %v: retried in a loop?", n)
	}
	r.alive(t)
}

// The seed 000 mistake made, fixed and made again: each edit must reach the
// bot. The second removal is the same fact as the first (same old and new
// spec), keyed by the same fingerprint, so JetStream drops it as a
// duplicate; and the HostedCluster state after the fix equals the first one
// and is dropped too, leaving the bot with the broken configuration.
func TestFaultProxyEditRepeated(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	s := newStream(t)
	ns := env.Namespace(t)
	spec := scenario.BehindProxy(ns, "repeated")
	withKubernetes, without := "kubernetes,.corp.example,172.31.0.0/16", ".corp.example,172.31.0.0/16"
	spec.NoProxy = withKubernetes
	env.HostedCluster(t, spec)
	deleteHostedClusterAtEnd(t, env.Dynamic, ns, spec.Name)
	cluster := ns + "/" + spec.Name
	startFaultReplica(t, faultReplicaConfig{source: "mgmt-" + ns, js: s.js})
	s.waitFor(t, "HostedCluster state", 1, isType[event.HostedClusterState](cluster))
	for i, np := range []string{without, withKubernetes, without} {
		if err := scenario.SetNoProxy(ctx, env.Dynamic, ns, spec.Name, np); err != nil {
			t.Fatal(err)
		}
		// Short waits: under the bug the event never comes.
		testenv.Eventually(t, 10*time.Second, fmt.Sprintf("proxy change %d (noProxy %q)", i+1, np), func() bool {
			return len(s.matching(isType[event.ProxyChange](cluster))) >= i+1
		})
		testenv.Eventually(t, 5*time.Second, fmt.Sprintf("HostedCluster state %d (noProxy %q)", i+2, np), func() bool {
			return len(s.matching(isType[event.HostedClusterState](cluster))) >= i+2
		})
	}
}
