package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/configs"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
)

// The events stream's settings are the bot's, whichever of agent and bot
// starts and restarts first, on the agent's embedded server (the only
// place the agent may create it), when the agent's file writes none of
// them: the agent creates it with the defaults only while it is absent
// and never rewrites what the bot set (one it writes is applied:
// TestAgentEventsStreamOnItsEmbeddedServer).
func TestEventsStreamSettingsSurviveRestartsInAnyOrder(t *testing.T) {
	cfg := &configs.Config{NATS: configs.NATS{StreamReplicas: 1, EventsMaxAge: 5 * time.Hour, DuplicateWindow: 3 * time.Minute}}
	for _, order := range []string{"agent bot agent agent bot agent", "bot agent bot agent", "agent agent bot bot agent"} {
		t.Run(order, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), natstest.Timeout)
			defer cancel()
			store := t.TempDir()
			var botRan bool
			var first time.Time
			for i, who := range strings.Fields(order) {
				// Each start is a new process on the same store.
				conn, err := connectNATS(ctx, natsClient{storeDir: store, name: "order-" + who}, natstest.Logger(t))
				if err != nil {
					t.Fatal(err)
				}
				if who == "bot" {
					err, botRan = botStream(ctx, cfg, conn, natstest.Logger(t)), true
				} else {
					_, err = agentStream(ctx, conn, bus.EventsSettings{}, natstest.Logger(t))
				}
				if err != nil {
					t.Fatalf("start %d (%s): %v", i, who, err)
				}
				s, err := conn.JS.Stream(ctx, event.StreamName)
				if err != nil {
					t.Fatal(err)
				}
				info := s.CachedInfo()
				wantAge, wantDup := 72*time.Hour, 15*time.Minute // the agent's defaults
				if botRan {
					wantAge, wantDup = cfg.NATS.EventsMaxAge, cfg.NATS.DuplicateWindow
				}
				if info.Config.MaxAge != wantAge || info.Config.Duplicates != wantDup {
					t.Errorf("after %d starts (%s): max age %v, duplicates %v; want %v, %v", i+1, who, info.Config.MaxAge, info.Config.Duplicates, wantAge, wantDup)
				}
				if first.IsZero() {
					first = info.Created
				} else if !info.Created.Equal(first) {
					t.Errorf("start %d (%s) re-created the stream", i+1, who)
				}
				conn.Close()
			}
		})
	}
}

// A bot started after every event about a cluster has aged out of the
// stream (a max age of 2s, which the config refuses below a minute, so set
// here as an earlier bot would have) knows the cluster within seconds: it
// asks the agents to restate (event.RestateSubject), the agent leader
// restates with fresh IDs, and /hcp status, fix noproxy and the digest
// work.
func TestBotStartedAfterEventsAgedOutKnowsEveryCluster(t *testing.T) {
	ctx := context.Background()
	ns, hosted, nodes, kubeconfig := allCluster(t, "aged")
	// A node down, so the cluster has a problem to restate and a fix.
	if err := scenario.SetNodeReady(ctx, hosted.Kube, nodes[0], corev1.ConditionFalse, "KubeletNotReady", "x"); err != nil {
		t.Fatal(err)
	}
	srv := natstest.RunServer(t)
	const maxAge = 2 * time.Second
	conn, err := bus.Connect(ctx, bus.Config{URLs: []string{srv.ClientURL()}}, natstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	if _, err := bus.EnsureStream(ctx, conn.JS, bus.EventsStream(maxAge, 0)); err != nil { // as a bot before
		t.Fatal(err)
	}

	agentAddr := freeAddr(t)
	const source = "mgmt-aged"
	runCtx, cancel := context.WithCancel(ctx)
	var agentLogs syncBuffer
	done := make(chan int, 1)
	go func() {
		c := &cli{stdin: strings.NewReader(""), stdout: &agentLogs, stderr: &agentLogs, getenv: func(string) string { return "" }}
		done <- c.main(runCtx, []string{"agent", "--kubeconfig", kubeconfig, "--source", source, "--nats-url", srv.ClientURL(),
			"--listen", agentAddr, "--leader-elect=false", "--identity", "aged-0", "--log-format", "json"})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("agent did not stop")
		}
	})
	// The agent published the cluster; then every event about it ages out.
	subject, err := event.SubjectFilter(source, &event.ClusterRef{Namespace: ns, Name: "aged"}, "")
	if err != nil {
		t.Fatal(err)
	}
	stream, err := conn.JS.Stream(ctx, event.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	aboutCluster := func() bool {
		_, err := stream.GetLastMsgForSubject(ctx, subject)
		return err == nil
	}
	testenv.Eventually(t, 60*time.Second, "the agent's events about the cluster", aboutCluster)
	testenv.Eventually(t, 60*time.Second, "every event about the cluster aged out", func() bool { return !aboutCluster() })

	seed, _ := signingSeed(t)
	rec := slackrec.New(t)
	botAddr, opsAddr := freeAddr(t), freeAddr(t)
	const channel, secret = "C0AGED0001", "test-signing-secret"
	cfg := fmt.Sprintf(`nats:
  urls: [%q]
bot:
  listen: %q
  opsListen: %q
  groupWait: 0s
  defaultChannel: %s
slack:
  apiURL: %q
  botTokenEnv: TEST_SLACK_BOT_TOKEN
  signingSecretEnv: TEST_SLACK_SIGNING_SECRET
approvals:
  approvers: [U0AGED0001, U0AGED0002]
  signingKeyFile: %s
digests:
  - name: daily
    schedule: "0 8 * * *"
    channel: %s
`, srv.ClientURL(), botAddr, opsAddr, channel, rec.APIURL(), seed, channel)
	started := time.Now()
	startMode(t, "bot", cfg, map[string]string{"TEST_SLACK_BOT_TOKEN": "xoxb-0000-test", "TEST_SLACK_SIGNING_SECRET": secret})
	waitReady(t, opsAddr)
	hcp := slashCommander{t: t, url: "http://" + botAddr + "/slack/commands", secret: secret, channel: channel, rec: rec}
	cluster := ns + "/aged"
	var status string
	defer func() { t.Logf("status: %s", status) }()
	testenv.Eventually(t, 30*time.Second, "/hcp status knows the cluster", func() bool {
		status = hcp.run(ctx, "status "+cluster, "U0AGED0001", func(string) bool { return true })
		return strings.Contains(status, cluster) && (strings.Contains(status, "tunnelled") || strings.Contains(status, "NotReady"))
	})
	known := time.Since(started)
	if !strings.Contains(agentLogs.String(), `"fresh":true`) {
		t.Errorf("the agent did not restate on the bot's request; logs:\n%s", tail(agentLogs.String(), 3000))
	}
	reply := hcp.run(ctx, "fix noproxy "+cluster, "U0AGED0001", func(s string) bool {
		return actionIDPattern.MatchString(s) || strings.Contains(s, "No noProxy fix") || strings.Contains(s, "nknown")
	})
	if !actionIDPattern.MatchString(reply) {
		t.Errorf("fix noproxy: %q", reply)
	}
	before := len(rec.CallsTo("chat.postMessage"))
	hcp.run(ctx, "digest now", "U0AGED0001", func(s string) bool { return s != "" })
	rec.WaitFor(t, 30*time.Second, func(r *slackrec.Recorder) bool {
		for _, c := range r.CallsTo("chat.postMessage")[before:] {
			if strings.Contains(c.Form.Get("text")+c.Form.Get("blocks"), "aged") {
				return true
			}
		}
		return false
	})
	t.Logf("bot knew the cluster %v after its start", known.Round(10*time.Millisecond))
}
