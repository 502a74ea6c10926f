package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv/chaosreport"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
)

// The replicas run with short lease timings (flags), so that twenty
// handovers fit in a test.
const (
	agentLeaseDuration = 4 * time.Second
	agentRenewDeadline = 2 * time.Second
	agentRetryPeriod   = 500 * time.Millisecond
)

// agentProc is one `hcpbot agent` process.
type agentProc struct {
	name, addr, logPath string
	cmd                 *exec.Cmd
}

func (a *agentProc) metrics() string {
	_, body := get("http://" + a.addr + "/metrics")
	return body
}

func (a *agentProc) leader() bool { return strings.Contains(a.metrics(), "\nhcpbot_agent_leader 1") }

// follows reports whether the replica runs and is not the leader.
func (a *agentProc) follows() bool { return strings.Contains(a.metrics(), "\nhcpbot_agent_leader 0") }

func (a *agentProc) log() string {
	b, _ := os.ReadFile(a.logPath)
	return string(b)
}

// Two `hcpbot agent` processes elect a leader through a Lease in the real
// management API server, publish to one NATS server outside both and
// consume the action requests the bot queues there. Twenty times, the
// leader is SIGKILLed and an action approved right after the kill (through
// the bot's own Approvals, over the durable queue); the other replica
// takes the lease, and each action is executed exactly once, within the
// handover plus 10 s; none is lost. The killed replica is started again
// each time, so the pair is the same shape for the next kill. Meanwhile a
// hosted cluster's nodes keep failing one by one: every change ends up in
// the events stream and no event ID is stored twice.
func TestChaosTwoAgentReplicasKill(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the hcpbot binary")
	}
	env.Need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 9*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin := buildBinary(t, dir)
	ns := env.Namespace(t)
	spec := scenario.BehindProxy(ns, "ha")
	hosted := env.HostedCluster(t, spec)
	changes := chaosreport.Pick(12, 40)
	nodes, err := scenario.Nodes(ctx, hosted.Kube, "ha-np", changes)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := env.CP.Management.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	srv := natstest.RunServer(t)
	conn, err := bus.Connect(ctx, bus.Config{URLs: []string{srv.ClientURL()}}, natstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// The bot's side: the streams and buckets it owns, the approval store,
	// the signing key the agents trust, and its Approvals.
	if _, err := bus.EnsureStream(ctx, conn.JS, bus.EventsStream(0, 0)); err != nil {
		t.Fatal(err)
	}
	if _, err := bus.EnsureStream(ctx, conn.JS, bus.ActionsStream()); err != nil {
		t.Fatal(err)
	}
	if _, err := bus.EnsureKV(ctx, conn.JS, bus.ActionResultsKV()); err != nil {
		t.Fatal(err)
	}
	source := "mgmt-" + ns
	alog, err := audit.Open(ctx, conn.JS)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := approval.NewEphemeralSigner()
	if err != nil {
		t.Fatal(err)
	}
	store, err := approval.NewFlow(ctx, conn.JS, approval.Config{Signer: signer, Trail: alog, Log: natstest.Logger(t),
		Policy: approval.Policy{Approvers: []string{"UCHAOS02"}}})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = store.Run(ctx) }()

	// The lease timings are file-only settings (agent.leaderElection).
	agentConfig := filepath.Join(dir, "agent.yaml")
	if err := os.WriteFile(agentConfig, fmt.Appendf(nil, "agent:\n  source: %s\n  leaderElection:\n    leaseDuration: %s\n    renewDeadline: %s\n    retryPeriod: %s\n",
		source, agentLeaseDuration, agentRenewDeadline, agentRetryPeriod), 0o600); err != nil {
		t.Fatal(err)
	}
	starts := map[string]int{}
	var procs []*agentProc // every process started, for the logs
	start := func(name string) *agentProc {
		starts[name]++
		a := &agentProc{name: name, addr: freeAddr(t), logPath: filepath.Join(dir, fmt.Sprintf("%s-%d.log", name, starts[name]))}
		logf, err := os.Create(a.logPath)
		if err != nil {
			t.Fatal(err)
		}
		a.cmd = exec.Command(bin, "agent", "--config", agentConfig, "--kubeconfig", kubeconfig, "--nats-url", srv.ClientURL(),
			"--listen", a.addr, "--lease-namespace", ns, "--identity", name, "--log-format", "json", "--leader-elect",
			"--trusted-keys", signer.PublicKey())
		a.cmd.Env = append(os.Environ(), "HTTPS_PROXY=", "HTTP_PROXY=", "https_proxy=", "http_proxy=")
		a.cmd.Stdout, a.cmd.Stderr = logf, logf
		if err := a.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, a)
		t.Cleanup(func() {
			_ = a.cmd.Process.Kill()
			_ = a.cmd.Wait()
			logf.Close()
			if t.Failed() {
				t.Logf("%s log (tail):\n%s", filepath.Base(a.logPath), tail(a.log(), 3000))
			}
		})
		return a
	}
	replicas := []*agentProc{start("agent-a"), start("agent-b")}
	var leader, follower *agentProc
	waitFor(t, 90*time.Second, "one leader among the two agents", func() bool {
		la, lb := replicas[0].leader(), replicas[1].leader()
		switch {
		case la && !lb:
			leader, follower = replicas[0], replicas[1]
		case lb && !la:
			leader, follower = replicas[1], replicas[0]
		default:
			return false
		}
		return true
	})
	// The leader has read the hosted cluster: its HostedCluster is on the
	// stream.
	waitFor(t, 90*time.Second, "the leader's first events", func() bool {
		evs, _ := streamEvents(t, ctx, conn.JS)
		for _, e := range evs {
			if e.Type == event.TypeHostedCluster && e.Cluster != nil && e.Cluster.Namespace == ns {
				return true
			}
		}
		return false
	})

	// Changes: node i goes NotReady, one every interval, from before the
	// first kill to after the first takeovers.
	interval := chaosreport.Pick(1500*time.Millisecond, 1200*time.Millisecond)
	var changed atomic.Int32
	changesDone := make(chan error, 1)
	go func() {
		for i, n := range nodes {
			if err := scenario.SetNodeReady(ctx, hosted.Kube, n, corev1.ConditionFalse, "KubeletNotReady", fmt.Sprintf("change %d", i)); err != nil {
				changesDone <- err
				return
			}
			changed.Add(1)
			select {
			case <-time.After(interval):
			case <-ctx.Done():
				changesDone <- ctx.Err()
				return
			}
		}
		changesDone <- nil
	}()
	waitFor(t, 60*time.Second, "the first changes", func() bool { return changed.Load() >= 3 })
	changedAtKill := changed.Load()

	// Kill, approve, take over, restart: each action adds its own entry.
	const kills = 20
	noProxy := spec.NoProxy
	var ids []string
	var handovers, executedAfter []time.Duration
	for i := range kills {
		if err := leader.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = leader.cmd.Wait()
		killedAt := time.Now()

		entry := fmt.Sprintf("kill-%02d.example", i)
		req := actions.Change{Type: actions.TypeNoProxyPatch, Cluster: actions.ClusterRef{Namespace: ns, Name: "ha"},
			NoProxy: &actions.NoProxyParams{Expected: noProxy, Add: []string{entry}}}
		p, err := store.Propose(ctx, req, "UCHAOS01", approval.ForSource(source))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, p.ID)
		answered := make(chan time.Time, 1)
		var reply string
		if _, err := store.Approve(ctx, p.ID, "UCHAOS02", approval.OnOutcome(func(o approval.Proposal) {
			reply = string(o.State) + ": " + o.Reason
			answered <- time.Now()
		})); err != nil {
			t.Fatal(err)
		}

		var handover time.Duration
		waitFor(t, agentLeaseDuration+60*time.Second, fmt.Sprintf("kill %d: the follower to take the lease", i), func() bool {
			if follower.leader() {
				handover = time.Since(killedAt)
				return true
			}
			return false
		})
		var at time.Time
		select {
		case at = <-answered:
		case <-time.After(2 * time.Minute):
			t.Fatalf("kill %d: action %s never answered", i, p.ID)
		}
		got, err := store.Get(ctx, p.ID)
		if err != nil || got.State != approval.StateExecuted || got.Result == nil || got.Result.Outcome != actions.OutcomeApplied {
			t.Fatalf("kill %d: %s is %s (%v), reply %q", i, p.ID, got.State, err, reply)
		}
		took := at.Sub(killedAt)
		if bound := handover + 10*time.Second; took > bound {
			t.Errorf("kill %d: executed %s after the kill, more than the handover %s + 10s", i, took.Round(time.Millisecond), handover.Round(time.Millisecond))
		}
		handovers, executedAfter = append(handovers, handover), append(executedAfter, took)
		noProxy += "," + entry

		// The killed replica comes back as the follower.
		restarted := start(leader.name)
		leader, follower = follower, restarted
		waitFor(t, 60*time.Second, fmt.Sprintf("kill %d: %s running again", i, restarted.name), restarted.follows)
	}
	lease, err := env.Kube.CoordinationV1().Leases(ns).Get(ctx, "hcpbot-agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := lease.Spec.HolderIdentity; h == nil || *h != leader.name {
		t.Errorf("lease held by %v, want %s", h, leader.name)
	}
	if err := <-changesDone; err != nil {
		t.Fatal(err)
	}
	hc, err := env.Dynamic.Resource(hypershift.HostedClusterGVR).Namespace(ns).Get(ctx, "ha", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if np, _, _ := unstructuredString(hc.Object, "spec", "configuration", "proxy", "noProxy"); np != noProxy {
		t.Errorf("noProxy after the actions = %q, want %q (each entry once)", np, noProxy)
	}

	// Every change is on the stream: one Ready=False event per node.
	var evs []event.Event
	var msgIDs map[string]int
	notReady := map[string]int{}
	waitFor(t, 90*time.Second, "an event for every change", func() bool {
		evs, msgIDs = streamEvents(t, ctx, conn.JS)
		clear(notReady)
		for _, e := range evs {
			if e.Type != event.TypeNode || e.Cluster == nil || e.Cluster.Namespace != ns {
				continue
			}
			p, err := e.DecodePayload()
			if err != nil {
				continue
			}
			if n, ok := p.(event.NodeReadiness); ok && n.Ready == event.ConditionFalse {
				notReady[n.Node]++
			}
		}
		for _, n := range nodes {
			if notReady[n] == 0 {
				return false
			}
		}
		return true
	})
	perID := map[string]int{}
	for _, e := range evs {
		perID[e.ID]++
	}
	duplicateIDs := 0
	for id, n := range perID {
		if n > 1 {
			duplicateIDs++
			t.Errorf("event %s stored %d times", id, n)
		}
	}
	for id, n := range msgIDs {
		if n > 1 {
			t.Errorf("Nats-Msg-Id %s stored %d times", id, n)
		}
	}
	// Facts restated by the new leaders keep their IDs, so each node's
	// NotReady transition is stored once.
	duplicateFacts := 0
	for n, c := range notReady {
		if c > 1 {
			duplicateFacts++
			t.Errorf("node %s: %d NotReady events", n, c)
		}
	}

	// Each action executed exactly once, over every process's log.
	executions := map[string]int{}
	for _, a := range procs {
		for line := range strings.SplitSeq(a.log(), "\n") {
			if !strings.Contains(line, `"action executed"`) {
				continue
			}
			for _, id := range ids {
				if strings.Contains(line, id) {
					executions[id]++
				}
			}
		}
	}
	total := 0
	for _, id := range ids {
		if executions[id] != 1 {
			t.Errorf("action %s executed %d times, want 1", id, executions[id])
		}
		total += executions[id]
	}
	nodeEvents := 0
	for _, c := range notReady {
		nodeEvents += c
	}
	chaosreport.Log(t, "two-agent-replicas-kill", map[string]any{
		"lease_duration_s": agentLeaseDuration, "retry_period_s": agentRetryPeriod, "kills": kills,
		"handover_max_s": slices.Max(handovers), "handover_min_s": slices.Min(handovers),
		"executed_after_kill_max_s": slices.Max(executedAfter), "executed_after_kill_min_s": slices.Min(executedAfter),
		"changes": changes, "changes_before_first_kill": changedAtKill, "events_in_stream": len(evs), "node_change_events": nodeEvents,
		"duplicate_ids": duplicateIDs, "duplicate_facts": duplicateFacts,
		"actions_approved": len(ids), "actions_executed": total,
	})
}

// waitFor polls cond every 100ms until it holds, failing the test after
// timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// streamEvents reads the whole events stream: the decoded events, and how
// many messages carry each Nats-Msg-Id.
func streamEvents(t *testing.T, ctx context.Context, js jetstream.JetStream) ([]event.Event, map[string]int) {
	t.Helper()
	s, err := js.Stream(ctx, event.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []event.Event
	ids := map[string]int{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue
			}
			t.Fatal(err)
		}
		if id := m.Header.Get(jetstream.MsgIDHeader); id != "" {
			ids[id]++
		}
		e, err := event.Decode(m.Data)
		if err != nil {
			t.Errorf("undecodable event at %d: %v", seq, err)
			continue
		}
		out = append(out, e)
	}
	return out, ids
}

func unstructuredString(obj map[string]any, fields ...string) (string, bool, error) {
	cur := any(obj)
	for _, f := range fields {
		m, ok := cur.(map[string]any)
		if !ok {
			return "", false, nil
		}
		cur, ok = m[f]
		if !ok {
			return "", false, nil
		}
	}
	s, ok := cur.(string)
	return s, ok, nil
}
