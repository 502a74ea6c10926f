package watchers_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"

	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/watchers"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// stream is the events stream on a real embedded JetStream, with a reader
// that collects everything published.
type stream struct {
	js     jetstream.JetStream
	mu     sync.Mutex
	events []event.Event
}

func newStream(t *testing.T) *stream {
	t.Helper()
	srv := natstest.RunServer(t)
	conn, err := bus.Connect(context.Background(), bus.Config{URLs: []string{srv.ClientURL()}}, natstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	if _, err := bus.EnsureStream(context.Background(), conn.JS, bus.EventsStream(time.Hour, 15*time.Minute)); err != nil {
		t.Fatal(err)
	}
	s := &stream{js: conn.JS}
	cons, err := conn.JS.OrderedConsumer(context.Background(), event.StreamName, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		e, err := event.Decode(m.Data())
		if err != nil {
			t.Errorf("undecodable event on the stream: %v", err)
			return
		}
		s.mu.Lock()
		s.events = append(s.events, e)
		s.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)
	return s
}

// matching returns the events for which match is true.
func (s *stream) matching(match func(event.Event, event.Payload) bool) []event.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []event.Event
	for _, e := range s.events {
		p, err := e.DecodePayload()
		if err == nil && match(e, p) {
			out = append(out, e)
		}
	}
	return out
}

func (s *stream) waitFor(t *testing.T, what string, n int, match func(event.Event, event.Payload) bool) []event.Event {
	t.Helper()
	var got []event.Event
	testenv.Eventually(t, 30*time.Second, what, func() bool {
		got = s.matching(match)
		return len(got) >= n
	})
	return got
}

type replica struct {
	cancel  context.CancelFunc
	done    chan struct{}
	metrics *watchers.Metrics
}

// startReplica runs one agent replica under leader election, as a
// Deployment with two replicas does.
func startReplica(t *testing.T, s *stream, identity string, source string) *replica {
	t.Helper()
	return startReplicaLogging(t, s, identity, source, natstest.Logger(t))
}

// startReplicaLogging is startReplica logging to log (a test that reads
// what the agent logs).
func startReplicaLogging(t *testing.T, s *stream, identity string, source string, log zerolog.Logger) *replica {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	m := watchers.NewMetrics(prometheus.NewRegistry())
	pub := watchers.NewJetStreamPublisher(s.js, 1000, m, log)
	agent := newEnvAgent(t, ctx, watchers.Config{Source: source, Identity: identity, SnapshotWait: 10 * time.Second, ProbeInterval: 300 * time.Millisecond},
		pub, m, log)
	pub.OnResync(agent.Resync)
	r := &replica{cancel: cancel, done: make(chan struct{}), metrics: m}
	var wg sync.WaitGroup
	wg.Go(func() { pub.Run(ctx) })
	go func() {
		defer close(r.done)
		lc := watchers.LeaderConfig{Namespace: "default", Name: "hcpbot-agent-" + source, Identity: identity,
			LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 200 * time.Millisecond}
		if err := watchers.RunElected(ctx, env.Kube, lc, m, log, func(ctx context.Context) {
			if err := agent.Run(ctx); err != nil && ctx.Err() == nil {
				t.Errorf("agent %s: %v", identity, err)
			}
		}); err != nil {
			t.Errorf("leader election: %v", err)
		}
		wg.Wait()
	}()
	t.Cleanup(r.stop)
	return r
}

// newAgent is watchers.New on fresh management informer factories, which
// it starts until ctx ends, as cmd/hcpbot does.
func newAgent(t *testing.T, ctx context.Context, cfg watchers.Config, kube kubernetes.Interface, dyn dynamic.Interface,
	pub watchers.Publisher, m *watchers.Metrics, log zerolog.Logger) *watchers.Agent {
	t.Helper()
	kf := informers.NewSharedInformerFactory(kube, 0)
	df := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
	return runAgentOn(t, ctx, cfg, kube, kf, df, pub, m, log)
}

// newEnvAgent is newAgent on the shared management API server with the
// factories cmd/hcpbot uses (watchers.NewInformerFactories).
func newEnvAgent(t *testing.T, ctx context.Context, cfg watchers.Config, pub watchers.Publisher, m *watchers.Metrics, log zerolog.Logger) *watchers.Agent {
	t.Helper()
	kf, df, err := watchers.NewInformerFactories(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	return runAgentOn(t, ctx, cfg, env.Kube, kf, df, pub, m, log)
}

func runAgentOn(t *testing.T, ctx context.Context, cfg watchers.Config, kube kubernetes.Interface,
	kf informers.SharedInformerFactory, df dynamicinformer.DynamicSharedInformerFactory,
	pub watchers.Publisher, m *watchers.Metrics, log zerolog.Logger) *watchers.Agent {
	t.Helper()
	agent, err := watchers.New(cfg, kube, kf, df, pub, m, log)
	if err != nil {
		t.Fatal(err)
	}
	kf.Start(ctx.Done())
	df.Start(ctx.Done())
	return agent
}

func (r *replica) stop() {
	r.cancel()
	<-r.done
}

func isType[P event.Payload](cluster string) func(event.Event, event.Payload) bool {
	return func(e event.Event, p event.Payload) bool {
		_, ok := p.(P)
		return ok && e.Cluster != nil && e.Cluster.String() == cluster
	}
}

func nodeState(cluster, node string, ready event.ConditionStatus) func(event.Event, event.Payload) bool {
	return func(e event.Event, p event.Payload) bool {
		n, ok := p.(event.NodeReadiness)
		return ok && e.Cluster != nil && e.Cluster.String() == cluster && n.Node == node && n.Ready == ready && !n.Deleted
	}
}

// Seed 000 replayed on a management and a hosted control plane, with two
// agent replicas and the leader killed half-way: every fact reaches the
// stream exactly once, and recovery produces the matching Ready events.
func TestSeedIncidentEventsExactlyOnce(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	s := newStream(t)
	ns := env.Namespace(t)
	spec := scenario.BehindProxy(ns, "example")
	hosted := env.HostedCluster(t, spec)
	cluster := ns + "/example"
	if err := scenario.NodePool(ctx, env.Dynamic, spec, "example-np", 3, true); err != nil {
		t.Fatal(err)
	}
	nodes, err := scenario.Nodes(ctx, hosted.Kube, "example-np", 3)
	if err != nil {
		t.Fatal(err)
	}
	pod, err := scenario.ServiceCAOperator(ctx, hosted.Kube, nodes[0])
	if err != nil {
		t.Fatal(err)
	}

	replicas := map[string]*replica{
		"agent-a": startReplica(t, s, "agent-a", "mgmt-"+ns),
		"agent-b": startReplica(t, s, "agent-b", "mgmt-"+ns),
	}

	// The proxy configuration, with a noProxy lacking `kubernetes`.
	hcs := s.waitFor(t, "HostedCluster state", 1, isType[event.HostedClusterState](cluster))
	p, _ := hcs[0].DecodePayload()
	if np := p.(event.HostedClusterState).Proxy.NoProxy; np != scenario.SeedNoProxy || strings.Contains(np, "kubernetes") {
		t.Fatalf("noProxy = %q", np)
	}
	s.waitFor(t, "hosted cluster snapshot", 1, func(e event.Event, p event.Payload) bool {
		_, ok := p.(event.SnapshotDone)
		return ok && e.Cluster != nil && e.Cluster.String() == cluster
	})

	// Symptoms: two nodes NotReady, the operator crashlooping.
	for _, n := range nodes[:2] {
		if err := scenario.SetNodeReady(ctx, hosted.Kube, n, corev1.ConditionFalse, "KubeletNotReady", "container runtime network not ready"); err != nil {
			t.Fatal(err)
		}
	}
	if err := scenario.CrashLoop(ctx, hosted.Kube, pod.Namespace, pod.Name, 5, scenario.SeedConnectivityMessage); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes[:2] {
		s.waitFor(t, n+" NotReady", 1, nodeState(cluster, n, event.ConditionFalse))
	}
	crash := s.waitFor(t, "crashloop", 1, isType[event.PodCrashLoop](cluster))
	cp, _ := crash[0].DecodePayload()
	if c := cp.(event.PodCrashLoop); c.Signature != event.SignatureAPIServerConnectivity ||
		!strings.Contains(c.LastTerminationMessage, "failed checking apiserver connectivity") || c.ExitCode != 255 {
		t.Errorf("crashloop payload: %+v", c)
	}

	// Kill whichever replica leads; the other takes over and restates.
	lease, err := env.Kube.CoordinationV1().Leases("default").Get(ctx, "hcpbot-agent-mgmt-"+ns, metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil {
		t.Fatalf("lease: %v", err)
	}
	leader := *lease.Spec.HolderIdentity
	follower := "agent-a"
	if leader == "agent-a" {
		follower = "agent-b"
	}
	replicas[leader].stop()
	testenv.Eventually(t, 20*time.Second, "the new leader's snapshot", func() bool {
		return len(s.matching(func(e event.Event, p event.Payload) bool {
			_, ok := p.(event.SnapshotDone)
			return ok && e.Cluster != nil && strings.Contains(e.Snapshot, follower)
		})) >= 1
	})

	// A new fact after the handover, then recovery.
	if err := scenario.SetNodeReady(ctx, hosted.Kube, nodes[2], corev1.ConditionUnknown, "NodeStatusUnknown", "Kubelet stopped posting node status."); err != nil {
		t.Fatal(err)
	}
	s.waitFor(t, nodes[2]+" Unknown", 1, nodeState(cluster, nodes[2], event.ConditionUnknown))
	for _, n := range nodes {
		if err := scenario.SetNodeReady(ctx, hosted.Kube, n, corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"); err != nil {
			t.Fatal(err)
		}
	}
	if err := scenario.Recover(ctx, hosted.Kube, pod.Namespace, pod.Name); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		s.waitFor(t, n+" Ready again", 1, nodeState(cluster, n, event.ConditionTrue))
	}
	s.waitFor(t, "crashloop cleared", 1, func(e event.Event, p event.Payload) bool {
		c, ok := p.(event.PodCrashLoop)
		return ok && c.Cleared
	})

	// Exactly once, across the handover: one event per fact.
	for what, match := range map[string]func(event.Event, event.Payload) bool{
		"HostedCluster state":  isType[event.HostedClusterState](cluster),
		nodes[0] + " NotReady": nodeState(cluster, nodes[0], event.ConditionFalse),
		nodes[1] + " NotReady": nodeState(cluster, nodes[1], event.ConditionFalse),
		nodes[2] + " Unknown":  nodeState(cluster, nodes[2], event.ConditionUnknown),
		"crashloop":            func(e event.Event, p event.Payload) bool { c, ok := p.(event.PodCrashLoop); return ok && !c.Cleared },
	} {
		if n := len(s.matching(match)); n != 1 {
			t.Errorf("%s: %d events on the stream, want exactly 1", what, n)
		}
	}
	for _, n := range nodes {
		if got := len(s.matching(nodeState(cluster, n, event.ConditionTrue))); got != 1 {
			t.Errorf("%s Ready: %d events, want 1", n, got)
		}
	}
}
