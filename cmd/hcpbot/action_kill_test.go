package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nkeys"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv/chaosreport"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
)

// The bot PROCESS is SIGKILLed right after an approval is stored — the
// sealed decision written, its request not yet known to have got out —
// and started again: the restarted bot finds the approved proposal, proves
// it (Permit) and queues its request (the action id as message id, so a
// copy the first bot did send is dropped), and the agent, started only
// after the kill, executes it exactly once; the restarted bot records the
// outcome in the approval store.
func TestChaosBotKilledAfterApproval(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the hcpbot binary")
	}
	env.Need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin := buildBinary(t, dir)
	ns := env.Namespace(t)
	spec := scenario.BehindProxy(ns, "bk")
	env.HostedCluster(t, spec)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := env.CP.Management.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	seedPath := filepath.Join(dir, "signing.seed")
	if err := os.WriteFile(seedPath, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	signer, err := approval.NewSigner(seed)
	if err != nil {
		t.Fatal(err)
	}
	srv := natstest.RunServer(t)
	rec := slackrec.New(t)
	opsAddr := freeAddr(t)
	cfg := fmt.Sprintf(`nats:
  urls: [%q]
bot:
  listen: %q
  opsListen: %q
  defaultChannel: C0BOTKILL1
slack:
  apiURL: %q
  botTokenEnv: TEST_SLACK_BOT_TOKEN
  signingSecretEnv: TEST_SLACK_SIGNING_SECRET
approvals:
  approvers: [UBOTKILL02]
  fourEyes: false
  signingKeyFile: %s
log: {level: info, format: json}
`, srv.ClientURL(), freeAddr(t), opsAddr, rec.APIURL(), seedPath)
	cfgPath := filepath.Join(dir, "hcpbot.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(name string, args ...string) (*exec.Cmd, string) {
		logPath := filepath.Join(dir, name+".log")
		logf, err := os.Create(logPath)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "TEST_SLACK_BOT_TOKEN=xoxb-0000-kill", "TEST_SLACK_SIGNING_SECRET=kill-secret", "POD_NAME="+name,
			"HTTPS_PROXY=", "HTTP_PROXY=", "https_proxy=", "http_proxy=")
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			logf.Close()
			if t.Failed() {
				b, _ := os.ReadFile(logPath)
				t.Logf("%s log (tail):\n%s", name, tail(string(b), 3000))
			}
		})
		return cmd, logPath
	}

	first, _ := run("bot-0", "bot", "--config", cfgPath)
	waitReady(t, opsAddr)
	conn, err := bus.Connect(ctx, bus.Config{URLs: []string{srv.ClientURL()}}, natstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	alog, err := audit.Open(ctx, conn.JS)
	if err != nil {
		t.Fatal(err)
	}
	// What the approving bot writes before it sends (a replica with the
	// same key, whose loop never runs); then it dies.
	store, err := approval.NewFlow(ctx, conn.JS, approval.Config{Signer: signer, Trail: alog, Log: natstest.Logger(t),
		Policy: approval.Policy{Approvers: []string{"UBOTKILL02"}}})
	if err != nil {
		t.Fatal(err)
	}
	source := "mgmt-" + ns
	p, err := store.Propose(ctx, actions.Change{Type: actions.TypeNoProxyPatch, Cluster: actions.ClusterRef{Namespace: ns, Name: "bk"},
		NoProxy: &actions.NoProxyParams{Expected: spec.NoProxy, Add: []string{"kubernetes"}}}, "UBOTKILL01", approval.ForSource(source))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Approve(ctx, p.ID, "UBOTKILL02"); err != nil {
		t.Fatal(err)
	}
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()

	// The agent comes up only now: nothing could have run before.
	_, agentLog := run("agent", "agent", "--kubeconfig", kubeconfig, "--source", source, "--nats-url", srv.ClientURL(),
		"--listen", freeAddr(t), "--leader-elect=false", "--log-format", "json", "--trusted-keys", signer.PublicKey())
	restartedAt := time.Now()
	run("bot-1", "bot", "--config", cfgPath)

	var got approval.Proposal
	waitFor(t, 2*time.Minute, "the approved action executed and recorded after the restart", func() bool {
		got, err = store.Get(ctx, p.ID)
		return err == nil && got.State == approval.StateExecuted
	})
	recorded := time.Since(restartedAt)
	if got.Result == nil || got.Result.Outcome != actions.OutcomeApplied {
		t.Errorf("result %+v", got.Result)
	}
	hc, err := env.Dynamic.Resource(hypershift.HostedClusterGVR).Namespace(ns).Get(ctx, "bk", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if np, _, _ := unstructuredString(hc.Object, "spec", "configuration", "proxy", "noProxy"); np != spec.NoProxy+",kubernetes" {
		t.Errorf("noProxy = %q, want %q", np, spec.NoProxy+",kubernetes")
	}
	// A few more recovery sweeps would re-send it; it still ran once.
	time.Sleep(approval.DefaultSweepInterval + 5*time.Second)
	b, _ := os.ReadFile(agentLog)
	executions := 0
	for line := range strings.SplitSeq(string(b), "\n") {
		if strings.Contains(line, `"action executed"`) && strings.Contains(line, p.ID) {
			executions++
		}
	}
	if executions != 1 {
		t.Errorf("action %s executed %d times, want 1", p.ID, executions)
	}
	s, err := conn.JS.Stream(ctx, bus.ActionsStreamName)
	if err != nil {
		t.Fatal(err)
	}
	if n := s.CachedInfo().State.Msgs; n != 0 {
		t.Errorf("%d requests left in the work queue", n)
	}
	chaosreport.Log(t, "bot-killed-after-approval", map[string]any{
		"recorded_after_restart_s": recorded, "executions": executions,
	})
}
