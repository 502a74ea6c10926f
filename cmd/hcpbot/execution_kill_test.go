package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv/chaosreport"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
)

// Twenty times, the agent leader is SIGKILLed at a point of an execution
// chosen at random: before its write, after the write and before its
// answer is recorded, or after the answer and before the request is
// acknowledged. The agents are built with the chaos tag, which stops the
// process that reaches the point there (approval's chaosPoint) so that
// the kill lands exactly on it; no kill races a delivery. The other
// replica takes the lease and the request over. Every fix is in the
// cluster exactly once (the noProxy holds each entry once, in order) and
// reported applied exactly once (one outcome, with its Roll back data;
// one "executed" record of the bot in the trail), and each rollback data
// is the agent's own.
func TestChaosAgentKilledDuringExecution(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the hcpbot binary")
	}
	env.Need(t)
	trials := 20
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "hcpbot-chaos")
	if out, err := exec.Command("go", "build", "-tags", "chaos", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build -tags chaos: %v\n%s", err, out)
	}
	ns := env.Namespace(t)
	spec := scenario.BehindProxy(ns, "cx")
	env.HostedCluster(t, spec)
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
	if _, err := bus.EnsureStream(ctx, conn.JS, bus.EventsStream(0, 0)); err != nil {
		t.Fatal(err)
	}
	source := "mgmt-" + ns
	trail, err := audit.Open(ctx, conn.JS)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := approval.NewEphemeralSigner()
	if err != nil {
		t.Fatal(err)
	}
	flow, err := approval.NewFlow(ctx, conn.JS, approval.Config{Signer: signer, Trail: trail, Log: natstest.Logger(t),
		Policy: approval.Policy{Approvers: []string{"UCX00001", "UCX00002"}, FourEyes: true}})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = flow.Run(ctx) }()

	chaos := t.TempDir()
	agentConfig := filepath.Join(dir, "agent.yaml")
	if err := os.WriteFile(agentConfig, fmt.Appendf(nil, "agent:\n  source: %s\n  actionAckWait: 2s\n  leaderElection:\n    leaseDuration: %s\n    renewDeadline: %s\n    retryPeriod: %s\n",
		source, agentLeaseDuration, agentRenewDeadline, agentRetryPeriod), 0o600); err != nil {
		t.Fatal(err)
	}
	starts := map[string]int{}
	start := func(name string) *agentProc {
		starts[name]++
		a := &agentProc{name: name, addr: freeAddr(t), logPath: filepath.Join(dir, fmt.Sprintf("%s-%d.log", name, starts[name]))}
		logf, err := os.Create(a.logPath)
		if err != nil {
			t.Fatal(err)
		}
		a.cmd = exec.Command(bin, "agent", "--config", agentConfig, "--kubeconfig", kubeconfig, "--nats-url", srv.ClientURL(),
			"--listen", a.addr, "--lease-namespace", ns, "--identity", fmt.Sprintf("%s-%d", name, starts[name]), "--log-format", "json", "--leader-elect",
			"--trusted-keys", signer.PublicKey())
		a.cmd.Env = append(os.Environ(), "HCPBOT_CHAOS_DIR="+chaos, "HTTPS_PROXY=", "HTTP_PROXY=", "https_proxy=", "http_proxy=")
		a.cmd.Stdout, a.cmd.Stderr = logf, logf
		if err := a.cmd.Start(); err != nil {
			t.Fatal(err)
		}
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
	replicas := map[string]*agentProc{"agent-a": start("agent-a"), "agent-b": start("agent-b")}
	waitFor(t, 90*time.Second, "one leader among the two agents", func() bool {
		return replicas["agent-a"].leader() != replicas["agent-b"].leader()
	})

	seed := uint64(time.Now().UnixNano())
	t.Logf("chaos seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	points := []string{approval.ChaosBeforeWrite, approval.ChaosAfterWrite, approval.ChaosAfterAnswer}
	noProxy := spec.NoProxy
	killedAt := map[string]int{}
	var takeovers []time.Duration
	for i := range trials {
		point := points[rng.IntN(len(points))]
		if err := os.WriteFile(filepath.Join(chaos, "pause-"+point), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		entry := fmt.Sprintf("cx-%02d.example", i)
		p, err := flow.Propose(ctx, actions.Change{Type: actions.TypeNoProxyPatch, Cluster: actions.ClusterRef{Namespace: ns, Name: "cx"},
			NoProxy: &actions.NoProxyParams{Expected: noProxy, Add: []string{entry}}}, "UCX00001", approval.ForSource(source))
		if err != nil {
			t.Fatal(err)
		}
		outcomes := make(chan approval.Proposal, 4)
		if _, err := flow.Approve(ctx, p.ID, "UCX00002", approval.OnOutcome(func(o approval.Proposal) { outcomes <- o })); err != nil {
			t.Fatal(err)
		}

		// The leader stops at the point; it is killed there.
		var paused string
		waitFor(t, 90*time.Second, fmt.Sprintf("trial %d: the leader at %s of %s", i, point, p.ID), func() bool {
			m, _ := filepath.Glob(filepath.Join(chaos, "paused-"+point+"-*"))
			if len(m) == 1 {
				paused = m[0]
				return true
			}
			return false
		})
		pid, _ := strconv.Atoi(paused[strings.LastIndex(paused, "-")+1:])
		var victim *agentProc
		for _, a := range replicas {
			if a.cmd.Process.Pid == pid {
				victim = a
			}
		}
		if victim == nil {
			t.Fatalf("trial %d: paused process %d is no agent of the test", i, pid)
		}
		if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = victim.cmd.Wait()
		kill := time.Now()
		if err := os.Remove(paused); err != nil {
			t.Fatal(err)
		}
		killedAt[point]++

		var o approval.Proposal
		select {
		case o = <-outcomes:
		case <-time.After(3 * time.Minute):
			t.Fatalf("trial %d (%s): no outcome for %s", i, point, p.ID)
		}
		takeovers = append(takeovers, time.Since(kill))
		if o.State != approval.StateExecuted || o.Result == nil || o.Result.Outcome != actions.OutcomeApplied || o.Result.Undo == nil ||
			o.Result.Undo.NoProxy == nil || o.Result.Undo.NoProxy.Previous != noProxy {
			t.Fatalf("trial %d (%s): outcome %s %+v (%s), want applied with its undo", i, point, o.State, o.Result, o.Reason)
		}
		noProxy += "," + entry
		hc, err := env.Dynamic.Resource(hypershift.HostedClusterGVR).Namespace(ns).Get(ctx, "cx", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if np, _, _ := unstructuredString(hc.Object, "spec", "configuration", "proxy", "noProxy"); np != noProxy {
			t.Fatalf("trial %d (%s): noProxy = %q, want %q (each entry once)", i, point, np, noProxy)
		}
		// The killed replica comes back (under a new identity: the lease
		// it held expires), and one of the two leads.
		replicas[victim.name] = start(victim.name)
		waitFor(t, 60*time.Second, fmt.Sprintf("trial %d: %s running again, one leader", i, victim.name), func() bool {
			a, b := replicas["agent-a"], replicas["agent-b"]
			return (a.leader() && b.follows()) || (b.leader() && a.follows())
		})
	}

	// A sweep later, still one outcome each: reported applied once.
	time.Sleep(approval.DefaultSweepInterval / 3)
	recent, err := trail.Recent(ctx, 1000)
	if err != nil {
		t.Fatal(err)
	}
	executed := map[string]int{}
	for _, r := range recent {
		if r.Kind == audit.KindExecuted && !strings.HasSuffix(r.ID, ".agent") {
			executed[r.ActionID]++
		}
	}
	if len(executed) != trials {
		t.Errorf("%d actions recorded executed by the bot, want %d", len(executed), trials)
	}
	for id, n := range executed {
		if n != 1 {
			t.Errorf("%s recorded executed %d times", id, n)
		}
	}
	chaosreport.Log(t, "agent-killed-during-execution", map[string]any{
		"trials": trials, "truthful": trials, "killed_before_write": killedAt[approval.ChaosBeforeWrite],
		"killed_after_write": killedAt[approval.ChaosAfterWrite], "killed_after_answer": killedAt[approval.ChaosAfterAnswer],
		"takeover_to_outcome_max_s": slicesMax(takeovers),
	})
}

func slicesMax(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}
