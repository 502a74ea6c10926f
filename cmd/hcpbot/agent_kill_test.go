package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/bot/approval"
	"github.com/hcpbot/hcpbot/bot/audit"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv/chaosreport"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
)

// `hcpbot agent` takes no config file and no lease-timing flags, so the
// replicas run with watchers.RunElected's defaults.
const (
	agentLeaseDuration = 15 * time.Second
	agentRetryPeriod   = 2 * time.Second
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

func (a *agentProc) log() string {
	b, _ := os.ReadFile(a.logPath)
	return string(b)
}

// Two `hcpbot agent` processes elect a leader through a Lease in the real
// management API server and publish to one NATS server outside both. The
// leader is SIGKILLed while a hosted cluster's nodes keep failing one by
// one: the other replica takes the lease within the lease duration (plus
// retry slack), every change ends up in the events stream, no event ID is
// stored twice, and an action requested right after the kill is executed
// once, by the new leader.
func TestChaosTwoAgentReplicasKill(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the hcpbot binary")
	}
	env.Need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
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
	if _, err := bus.EnsureStream(ctx, conn.JS, bus.EventsStream(1, 0, 0)); err != nil {
		t.Fatal(err)
	}
	source := "mgmt-" + ns
	// The bot's side of actions: the approval store and the signing key
	// the agents trust.
	alog, err := audit.Open(ctx, conn.JS)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := actions.NewEphemeralSigner()
	if err != nil {
		t.Fatal(err)
	}
	store, err := approval.NewStore(ctx, conn.JS, alog, approval.Policy{Approvers: []string{"UCHAOS02"}}, approval.WithSealer(signer))
	if err != nil {
		t.Fatal(err)
	}

	start := func(name string) *agentProc {
		a := &agentProc{name: name, addr: freeAddr(t), logPath: filepath.Join(dir, name+".log")}
		logf, err := os.Create(a.logPath)
		if err != nil {
			t.Fatal(err)
		}
		a.cmd = exec.Command(bin, "agent", "--kubeconfig", kubeconfig, "--source", source, "--nats-url", srv.ClientURL(),
			"--listen", a.addr, "--lease-namespace", ns, "--identity", name, "--log-format", "json", "--leader-elect",
			"--trusted-keys", signer.PublicKey())
		a.cmd.Env = append(os.Environ(), "HTTPS_PROXY=", "HTTP_PROXY=", "https_proxy=", "http_proxy=")
		a.cmd.Stdout, a.cmd.Stderr = logf, logf
		if err := a.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = a.cmd.Process.Kill()
			_ = a.cmd.Wait()
			logf.Close()
			if t.Failed() {
				t.Logf("%s log (tail):\n%s", name, tail(a.log(), 3000))
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
	// kill to after the takeover.
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

	if err := leader.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = leader.cmd.Wait()
	killedAt := time.Now()
	changedAtKill := changed.Load()

	// An action requested right after the kill: like the bot, it gets "no
	// responders" while nobody serves, and is sent again until a leader
	// answers. Only "no responders" is retried: that request reached
	// nobody.
	actionID := approval.NewID()
	req := actions.Request{ID: actionID, Type: actions.TypeNoProxyPatch, RequestedBy: "UCHAOS01",
		Cluster: actions.ClusterRef{Namespace: ns, Name: "ha"},
		NoProxy: &actions.NoProxyParams{Expected: spec.NoProxy, Add: []string{"kubernetes"}}}
	subject, err := event.ActionRequestSubject(source)
	if err != nil {
		t.Fatal(err)
	}
	p, err := store.Propose(ctx, req, req.RequestedBy, approval.ForSource(source))
	if err != nil {
		t.Fatal(err)
	}
	if p, err = store.Approve(ctx, p.ID, "UCHAOS02", time.Now()); err != nil {
		t.Fatal(err)
	}
	att, err := p.Attestation()
	if err != nil {
		t.Fatal(err)
	}
	data, err := signer.Seal(p.Request, att, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	request := func() (actions.Reply, int, error) {
		for attempt := 1; ; attempt++ {
			rctx, rcancel := context.WithTimeout(ctx, actions.ExecuteTimeout)
			msg, err := conn.NC.RequestWithContext(rctx, subject, data)
			rcancel()
			switch {
			case errors.Is(err, nats.ErrNoResponders):
				if time.Since(killedAt) > 2*time.Minute {
					return actions.Reply{}, attempt, err
				}
				time.Sleep(100 * time.Millisecond)
				continue
			case err != nil:
				return actions.Reply{}, attempt, err
			}
			var r actions.Reply
			return r, attempt, json.Unmarshal(msg.Data, &r)
		}
	}
	type answer struct {
		reply    actions.Reply
		attempts int
		err      error
		at       time.Time
	}
	answered := make(chan answer, 1)
	go func() {
		r, n, err := request()
		answered <- answer{r, n, err, time.Now()}
	}()

	var handover time.Duration
	waitFor(t, agentLeaseDuration+2*agentRetryPeriod+60*time.Second, "the follower to take the lease", func() bool {
		if follower.leader() {
			handover = time.Since(killedAt)
			return true
		}
		return false
	})
	if bound := agentLeaseDuration + 2*agentRetryPeriod + 10*time.Second; handover > bound {
		t.Errorf("handover took %s, more than the lease duration %s plus retry slack (%s)", handover, agentLeaseDuration, bound)
	}
	lease, err := env.Kube.CoordinationV1().Leases(ns).Get(ctx, "hcpbot-agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := lease.Spec.HolderIdentity; h == nil || *h != follower.name {
		t.Errorf("lease held by %v, want %s", h, follower.name)
	}

	var ans answer
	select {
	case ans = <-answered:
	case <-time.After(3 * time.Minute):
		t.Fatal("the action request was never answered")
	}
	if ans.err != nil || ans.reply.Err() != nil || ans.reply.Result == nil || ans.reply.Result.Outcome != actions.OutcomeApplied {
		t.Errorf("action after the kill: reply %+v, err %v (after %d attempts)", ans.reply, ans.err, ans.attempts)
	}
	// The same request again (a replayed or retried one) is not executed
	// again.
	if r, _, err := request(); err != nil || r.Result == nil || r.Err() != nil {
		t.Errorf("replayed action: reply %+v, err %v", r, err)
	}
	if err := <-changesDone; err != nil {
		t.Fatal(err)
	}
	hc, err := env.Dynamic.Resource(hypershift.HostedClusterGVR).Namespace(ns).Get(ctx, "ha", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if np, _, _ := unstructuredString(hc.Object, "spec", "configuration", "proxy", "noProxy"); np != spec.NoProxy+",kubernetes" {
		t.Errorf("noProxy after the action = %q, want %q", np, spec.NoProxy+",kubernetes")
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
	// Facts restated by the new leader keep their IDs, so each node's
	// NotReady transition is stored once.
	duplicateFacts := 0
	for n, c := range notReady {
		if c > 1 {
			duplicateFacts++
			t.Errorf("node %s: %d NotReady events", n, c)
		}
	}

	// Executed exactly once, by the new leader.
	executions := map[string]int{}
	for _, a := range replicas {
		for line := range strings.SplitSeq(a.log(), "\n") {
			if strings.Contains(line, `"action executed"`) && strings.Contains(line, actionID) {
				executions[a.name]++
			}
		}
	}
	if executions[follower.name] != 1 || executions[leader.name] != 0 {
		t.Errorf("action executions by replica: %v, want 1 by the new leader %s", executions, follower.name)
	}
	nodeEvents := 0
	for _, c := range notReady {
		nodeEvents += c
	}
	chaosreport.Log(t, "two-agent-replicas-kill", map[string]any{
		"lease_duration_s": agentLeaseDuration, "retry_period_s": agentRetryPeriod, "handover_s": handover,
		"changes": changes, "changes_before_kill": changedAtKill, "events_in_stream": len(evs), "node_change_events": nodeEvents,
		"duplicate_ids": duplicateIDs, "duplicate_facts": duplicateFacts,
		"actions_requested": 1, "action_request_attempts": ans.attempts, "action_answered_after_kill_s": ans.at.Sub(killedAt),
		"actions_executed": executions[follower.name] + executions[leader.name],
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
