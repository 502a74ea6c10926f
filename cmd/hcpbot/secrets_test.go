package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/slack-go/slack"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv"
	"github.com/hcpbot/hcpbot/internal/testenv/chaosreport"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
	"github.com/hcpbot/hcpbot/internal/testenv/syncbuf"
)

// Abuse suite (issue 9), secrets: `hcpbot all` runs a realistic flow — a
// cluster behind a proxy whose URL carries credentials, an incident posted
// to Slack, /hcp status, diagnose, fix noproxy, approve and audit, a forged
// request, then the hosted cluster's kubeconfig Secret replaced by one that
// does not work — with a Slack token, a signing secret and kubeconfig
// tokens configured. Every output channel is then searched
// for every secret (and its base64): the process's log output (debug
// level), every request the Slack recorder received (except the token
// field Slack authenticates with), every answer to a slash command, both
// /metrics pages, and every message of every NATS stream (events, audit
// records, key-value state).
func TestChaosSecretsNeverLeak(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	const name = "secrets"
	const (
		proxyUser     = "proxyuser-6f1d"
		proxyPassword = "s3cr3t-proxy-pw-a9c2"
		slackToken    = "xoxb-1111-2222-s3cr3tSlackTok3n"
		signingSecret = "s3cr3t-signing-secret-5be1"
		brokenToken   = "sha256~s3cr3t-broken-kubeconfig-token"
	)
	spec := scenario.BehindProxy(ns, name)
	proxy := fmt.Sprintf("http://%s:%s@proxy.corp.example:3128", proxyUser, proxyPassword)
	spec.HTTPProxy, spec.HTTPSProxy = proxy, proxy
	hosted := env.HostedCluster(t, spec)
	t.Cleanup(func() {
		_ = env.Dynamic.Resource(hypershift.HostedClusterGVR).Namespace(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	nodes, err := scenario.Nodes(ctx, hosted.Kube, "secrets-np", 1)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := env.CP.Management.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	// The kubeconfig tokens: the management cluster's (a file the agent
	// reads) and the hosted cluster's (a Secret the agent reads).
	secrets := map[string]string{
		"proxy password": proxyPassword, "proxy user": proxyUser, "proxy userinfo": proxyUser + ":" + proxyPassword,
		"Slack token": slackToken, "signing secret": signingSecret,
		"broken kubeconfig token": brokenToken,
	}
	for what, path := range map[string]string{"management kubeconfig token": kubeconfig} {
		kc, err := clientcmd.LoadFromFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, ai := range kc.AuthInfos {
			if ai.Token != "" {
				secrets[what] = ai.Token
			}
		}
	}
	hostedKC, err := hosted.Server.Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	kc, err := clientcmd.Load(hostedKC)
	if err != nil {
		t.Fatal(err)
	}
	secrets["hosted kubeconfig token"] = kc.AuthInfos["admin"].Token
	for what, s := range secrets {
		if len(s) < 8 {
			t.Fatalf("%s %q is too short to search for", what, s)
		}
	}

	// NATS credentials are only taken from a .creds file (the config
	// refuses them in URLs), which the embedded test server cannot check;
	// bus.TestCredentialsNeverLogged covers them.
	srv := natstest.RunServer(t)
	natsURL := srv.ClientURL()
	rec := slackrec.New(t)
	agentAddr, botAddr, botOps := freeAddr(t), freeAddr(t), freeAddr(t)
	const channel = "C0SECRETS1"
	cfg := fmt.Sprintf(`nats:
  urls: [%q]
agent:
  source: mgmt-secrets
  kubeconfig: %s
  listen: %q
  leaderElection: {namespace: %s}
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
  approvers: [U0SECRET01]
  fourEyes: false
log: {level: debug, format: json}
`, natsURL, kubeconfig, agentAddr, ns, botAddr, botOps, channel, rec.APIURL())
	path := filepath.Join(dir, "hcpbot.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"TEST_SLACK_BOT_TOKEN": slackToken, "TEST_SLACK_SIGNING_SECRET": signingSecret, "POD_NAME": "secrets-0"}

	runCtx, cancel := context.WithCancel(ctx)
	var logs syncbuf.Buffer
	done := make(chan int)
	go func() {
		c := &cli{stdin: strings.NewReader(""), stdout: &logs, stderr: &logs, getenv: func(k string) string { return vars[k] }}
		done <- c.main(runCtx, []string{"all", "--config", path})
	}()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				out := logs.String()
				t.Errorf("hcpbot all exited %d; its output ends:\n%s", code, out[max(0, len(out)-4000):])
			}
		case <-time.After(30 * time.Second):
			var stacks strings.Builder
			_ = pprof.Lookup("goroutine").WriteTo(&stacks, 1)
			t.Errorf("hcpbot all did not stop; goroutines:\n%s", stacks.String())
		}
	}
	t.Cleanup(stop)

	// 1. An incident, posted to Slack.
	if err := scenario.SetNodeReady(ctx, hosted.Kube, nodes[0], corev1.ConditionFalse, "KubeletNotReady", "x"); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, 90*time.Second, func(r *slackrec.Recorder) bool {
		for _, m := range r.Messages(channel) {
			if strings.Contains(m.Text, ns+"/"+name) {
				return true
			}
		}
		return false
	})

	// 2. Commands, answered in the HTTP response or on the response_url
	// (recorded by rec); the approval lands in the audit trail.
	hcp := slashCommander{t: t, url: "http://" + botAddr + "/slack/commands", secret: signingSecret, channel: channel, rec: rec}
	var replies []string
	anyReply := func(string) bool { return true }
	testenv.Eventually(t, 30*time.Second, "/hcp status answered", func() bool {
		r := hcp.run(ctx, "status "+ns+"/"+name, "U0SECRET01", anyReply)
		replies = append(replies, r)
		return strings.Contains(r, name)
	})
	replies = append(replies, hcp.run(ctx, "diagnose "+ns+"/"+name, "U0SECRET01", func(s string) bool { return s != "" && !strings.Contains(s, "Working on it") }))
	var id string
	testenv.Eventually(t, 30*time.Second, "noProxy fix proposed", func() bool {
		r := hcp.run(ctx, "fix noproxy "+ns+"/"+name, "U0SECRET01", func(s string) bool {
			return actionIDPattern.MatchString(s) || strings.Contains(s, "No noProxy fix") || strings.Contains(s, "Unknown cluster")
		})
		replies = append(replies, r)
		id = actionIDPattern.FindString(r)
		return id != ""
	})
	replies = append(replies, hcp.run(ctx, "approve "+id, "U0SECRET01", func(s string) bool { return strings.Contains(s, id) }))
	replies = append(replies, hcp.run(ctx, "audit 20", "U0SECRET01", func(s string) bool { return s != "" }))
	replies = append(replies, hcp.run(ctx, "noproxy check "+ns+"/"+name+" api.corp.example:443", "U0SECRET01", func(s string) bool { return s != "" }))

	// 3. A forged request (wrong secret): rejected, logged.
	forged, err := slackrec.CommandRequest(ctx, "http://"+botAddr+"/slack/commands", "not-"+signingSecret,
		slack.SlashCommand{Command: "/hcp", Text: "approve " + id, UserID: "U0SECRET01", ChannelID: channel, ResponseURL: rec.ResponseURL(channel)}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := http.DefaultClient.Do(forged); err != nil {
		t.Fatal(err)
	} else {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		replies = append(replies, string(b))
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("forged request: status %d", resp.StatusCode)
		}
	}

	// 4. The hosted kubeconfig Secret replaced by one that does not parse
	// and carries a token: reported as unusable (an error string in the
	// events, the logs and possibly Slack), never with its content.
	sec, err := env.Kube.CoreV1().Secrets(ns).Get(ctx, spec.KubeconfigSecretName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sec.Data[hypershift.KubeconfigKey] = []byte("apiVersion: v1\nkind: Config\nusers:\n- name: admin\n  user:\n    token: " + brokenToken + "\nclusters: [ {server: https://127.0.0.1:1\n")
	if _, err := env.Kube.CoreV1().Secrets(ns).Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	reader, err := bus.Connect(ctx, bus.Config{URLs: []string{srv.ClientURL()}, Name: "secrets-reader"}, natstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reader.Close)
	testenv.Eventually(t, 60*time.Second, "the broken kubeconfig reported", func() bool {
		for _, m := range streamMessages(t, reader.JS, "") {
			if strings.Contains(m, "kubeconfig unusable") {
				return true
			}
		}
		return false
	})

	// Collect every channel.
	metrics := map[string]string{}
	for what, addr := range map[string]string{"agent /metrics": agentAddr, "bot /metrics": botOps} {
		code, body := get("http://" + addr + "/metrics")
		if code != http.StatusOK || !strings.Contains(body, "hcpbot_") {
			t.Errorf("%s: status %d, %d bytes", what, code, len(body))
		}
		metrics[what] = body
	}
	stream := streamMessages(t, reader.JS, "")
	audit := streamMessages(t, reader.JS, "HCPBOT_AUDIT")
	stop() // shutdown logs too
	channels := map[string][]string{
		"log output":      {logs.String()},
		"slash replies":   replies,
		"metrics":         {metrics["agent /metrics"], metrics["bot /metrics"]},
		"NATS messages":   stream,
		"audit records":   audit,
		"Slack API calls": nil,
	}
	tokenFields := 0
	for _, c := range rec.Calls() {
		for k, vs := range c.Form {
			for _, v := range vs {
				if k == "token" && v == slackToken {
					tokenFields++ // how Slack authenticates us: expected
					continue
				}
				channels["Slack API calls"] = append(channels["Slack API calls"], c.Method+" "+k+"="+v)
			}
		}
	}
	figures := map[string]any{"secrets": len(secrets), "slack_token_fields": tokenFields}
	leaks := 0
	for ch, texts := range channels {
		size := 0
		for _, s := range texts {
			size += len(s)
		}
		figures["bytes_"+strings.ReplaceAll(strings.ReplaceAll(ch, " ", "_"), "/", "")] = size
		if size == 0 {
			t.Errorf("%s: nothing collected; the search would prove nothing", ch)
		}
		for what, secret := range secrets {
			forms := []string{secret, base64.StdEncoding.EncodeToString([]byte(secret)), url.QueryEscape(secret)}
			for _, text := range texts {
				for _, f := range forms {
					if i := strings.Index(text, f); i >= 0 {
						leaks++
						lo, hi := max(0, i-120), min(len(text), i+len(f)+40)
						t.Errorf("%s contains the %s: …%s…", ch, what, text[lo:hi])
					}
				}
			}
		}
	}
	if len(audit) == 0 {
		t.Error("no audit records: the approval was not audited")
	}
	figures["audit_records"] = len(audit)
	figures["nats_messages"] = len(stream)
	figures["slack_calls"] = len(rec.Calls())
	figures["leaks"] = leaks
	chaosreport.Log(t, "secrets-grep", figures)
}

// streamMessages returns every message (headers and data) of stream, or of
// every stream when stream is "".
func streamMessages(t *testing.T, js jetstream.JetStream, stream string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var names []string
	if stream != "" {
		names = []string{stream}
	} else {
		l := js.StreamNames(ctx)
		for n := range l.Name() {
			names = append(names, n)
		}
		if err := l.Err(); err != nil {
			t.Fatal(err)
		}
	}
	var out []string
	for _, n := range names {
		s, err := js.Stream(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
			m, err := s.GetMsg(ctx, seq)
			if err != nil {
				continue // deleted or expired
			}
			out = append(out, fmt.Sprintf("%s %s %v %s", n, m.Subject, m.Header, m.Data))
		}
	}
	return out
}
