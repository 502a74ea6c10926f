package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime/pprof"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/slack-go/slack"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
	"github.com/hcpbot/hcpbot/internal/testenv/syncbuf"
)

// `hcpbot all --config F`: agent and bot from one config file, the seed
// incident posted to Slack, and a signed /hcp command answered.
func TestAllCommand(t *testing.T) {
	ctx := context.Background()
	ns, hosted, nodes, kubeconfig := allCluster(t, "allcmd")
	dir := t.TempDir()
	srv := natstest.RunServer(t)
	rec := slackrec.New(t)
	agentAddr, botAddr, opsAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	const channel = "C0ALLCMD01"
	cfg := fmt.Sprintf(`nats:
  urls: [%q]
agent:
  source: mgmt-all
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
  approvers: [U0ALLCMD01, U0ALLCMD02]
  fourEyes: false
digests:
  - name: weekly
    schedule: "0 8 * * 1"
    timezone: Europe/Berlin
    channel: %s
log: {level: info, format: json}
`, srv.ClientURL(), kubeconfig, agentAddr, ns, botAddr, opsAddr, channel, rec.APIURL(), channel)
	path := filepath.Join(dir, "hcpbot.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	const secret = "test-signing-secret"
	vars := map[string]string{"TEST_SLACK_BOT_TOKEN": "xoxb-0000-test", "TEST_SLACK_SIGNING_SECRET": secret, "POD_NAME": "all-0"}

	runCtx, cancel := context.WithCancel(ctx)
	var logs syncbuf.Buffer
	done := make(chan int)
	go func() {
		c := &cli{stdin: strings.NewReader(""), stdout: &logs, stderr: &logs, getenv: func(k string) string { return vars[k] }}
		done <- c.main(runCtx, []string{"all", "--config", path})
	}()
	defer func() {
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("hcpbot all exited %d:\n%s", code, logs.String())
			}
		case <-time.After(30 * time.Second):
			var stacks strings.Builder
			_ = pprof.Lookup("goroutine").WriteTo(&stacks, 1)
			t.Errorf("hcpbot all did not stop; goroutines:\n%s\nlogs (tail):\n%s", stacks.String(), tail(logs.String(), 4000))
		}
		if strings.Contains(logs.String(), secret) || strings.Contains(logs.String(), "xoxb-0000-test") {
			t.Error("a secret reached the logs")
		}
	}()

	// Each side's health on its own ops listener (bot.opsListen,
	// agent.listen); the listener that faces Slack serves /slack/* only.
	for _, addr := range []string{opsAddr, agentAddr} {
		testenv.Eventually(t, 30*time.Second, "/readyz on "+addr, func() bool { code, _ := get("http://" + addr + "/readyz"); return code == 200 })
	}
	if code, body := get("http://" + opsAddr + "/metrics"); code != 200 || !strings.Contains(body, "hcpbot_slack_requests_rejected_total") {
		t.Errorf("bot /metrics on opsListen: %d", code)
	}
	for _, p := range []string{"/metrics", "/healthz", "/readyz"} {
		if code, _ := get("http://" + botAddr + p); code != http.StatusNotFound {
			t.Errorf("GET %s on bot.listen: %d, want 404", p, code)
		}
	}

	if err := scenario.SetNodeReady(ctx, hosted.Kube, nodes[0], corev1.ConditionFalse, "KubeletNotReady", "x"); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, 60*time.Second, func(r *slackrec.Recorder) bool {
		for _, m := range r.Messages(channel) {
			if strings.Contains(m.Text, ns+"/allcmd") {
				return true
			}
		}
		return false
	})

	// A signed slash command, as Slack sends it, answered by the bot.
	var body string
	testenv.Eventually(t, 20*time.Second, "/hcp status answered", func() bool {
		req, err := slackrec.CommandRequest(ctx, "http://"+botAddr+"/slack/commands", secret,
			slack.SlashCommand{Command: "/hcp", Text: "status " + ns + "/allcmd", UserID: "U0ALLCMD01", UserName: "sam", ChannelID: channel, ResponseURL: rec.ResponseURL(channel)}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return resp.StatusCode == 200 && strings.Contains(body, "allcmd")
	})
	if !strings.Contains(body, "tunnelled") && !strings.Contains(body, "NotReady") {
		t.Errorf("status reply does not describe the problem: %s", body)
	}
	// The same request replayed is refused.
	req, _ := slackrec.CommandRequest(ctx, "http://"+botAddr+"/slack/commands", secret,
		slack.SlashCommand{Command: "/hcp", Text: "incidents", UserID: "U0ALLCMD01", ChannelID: channel, ResponseURL: rec.ResponseURL(channel)}, time.Now())
	body2, _ := io.ReadAll(req.Body)
	for i, want := range []int{200, 401} {
		r, _ := http.NewRequestWithContext(ctx, http.MethodPost, req.URL.String(), strings.NewReader(string(body2)))
		r.Header = req.Header.Clone()
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("request %d: status %d, want %d", i+1, resp.StatusCode, want)
		}
	}

	// The fix, proposed and approved in chat, executed by the agent on
	// the real API server.
	hcp := slashCommander{t: t, url: "http://" + botAddr + "/slack/commands", secret: secret, channel: channel, rec: rec}
	var id string
	testenv.Eventually(t, 30*time.Second, "noProxy fix proposed", func() bool {
		reply := hcp.run(ctx, "fix noproxy "+ns+"/allcmd", "U0ALLCMD01", func(s string) bool {
			return actionIDPattern.MatchString(s) || strings.Contains(s, "No noProxy fix") || strings.Contains(s, "Unknown cluster")
		})
		id = actionIDPattern.FindString(reply)
		return id != ""
	})
	final := func(s string) bool { return strings.Contains(s, id) }
	if reply := hcp.run(ctx, "approve "+id, "U0STRANGER", final); !strings.Contains(reply, "not allowed") {
		t.Errorf("non-approver's approve: %q", reply)
	}
	// The answer comes at once; the outcome follows in the conversation.
	if reply := hcp.run(ctx, "approve "+id, "U0ALLCMD02", outcomeOf(id)); !strings.Contains(reply, "and applied") || !strings.Contains(reply, "<@U0ALLCMD02>") {
		t.Fatalf("approve: %q\n%s", reply, logs.String())
	}
	u, err := env.Dynamic.Resource(hypershift.HostedClusterGVR).Namespace(ns).Get(ctx, "allcmd", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, _, _ := unstructured.NestedString(u.Object, "spec", "configuration", "proxy", "noProxy")
	entries := strings.Split(got, ",")
	for _, want := range append([]string{"kubernetes"}, hypershift.CIDRs(hosted.Object.Spec.Networking.ServiceNetwork)...) {
		if !slices.Contains(entries, want) {
			t.Errorf("noProxy %q lacks %q", got, want)
		}
	}
	if !strings.HasPrefix(got, scenario.SeedNoProxy+",") {
		t.Errorf("noProxy %q does not keep the earlier entries %q", got, scenario.SeedNoProxy)
	}
	if reply := hcp.run(ctx, "approve "+id, "U0ALLCMD01", final); !strings.Contains(reply, "already decided") {
		t.Errorf("second approve: %q", reply)
	}
	if u, err = env.Dynamic.Resource(hypershift.HostedClusterGVR).Namespace(ns).Get(ctx, "allcmd", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if after, _, _ := unstructured.NestedString(u.Object, "spec", "configuration", "proxy", "noProxy"); after != got {
		t.Errorf("noProxy changed by a refused approval: %q → %q", got, after)
	}

	// The configured digest, on demand: posted to its channel.
	before := len(rec.CallsTo("chat.postMessage"))
	if reply := hcp.run(ctx, "digest now", "U0ALLCMD01", func(s string) bool { return s != "" }); strings.Contains(reply, "not available") || strings.Contains(reply, "could not") {
		t.Errorf("digest now: %q", reply)
	}
	rec.WaitFor(t, 30*time.Second, func(r *slackrec.Recorder) bool { return len(r.CallsTo("chat.postMessage")) > before })
}

var actionIDPattern = regexp.MustCompile(`act-[a-z2-7]{16}`)

// allCluster is what `hcpbot all` tests watch: a hosted cluster name
// behind the seed 000 proxy with one node, in a namespace of the test's
// own, and a kubeconfig file of the management API server.
func allCluster(t *testing.T, name string) (ns string, hosted *testenv.Hosted, nodes []string, kubeconfig string) {
	t.Helper()
	env.Need(t)
	ns = env.Namespace(t)
	hosted = env.HostedCluster(t, scenario.BehindProxy(ns, name))
	nodes, err := scenario.Nodes(context.Background(), hosted.Kube, name+"-np", 1)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.CP.Management.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	return ns, hosted, nodes, kubeconfig
}

// slashCommander sends signed /hcp commands. A reply comes back in the
// HTTP response, or — when the bot took longer than Slack's acknowledgement
// deadline — is posted to the command's response_url.
type slashCommander struct {
	t       *testing.T
	url     string
	secret  string
	channel string
	rec     *slackrec.Recorder
	n       int
}

// run sends text as user and returns the reply that done accepts: the
// HTTP body's text or, failing that, a post to the response_url.
func (c *slashCommander) run(ctx context.Context, text, user string, done func(string) bool) string {
	c.t.Helper()
	c.n++
	// A response_url of its own for every command: its posts are told
	// apart by their pseudo channel.
	rch := fmt.Sprintf("R%s%d", c.channel, c.n)
	req, err := slackrec.CommandRequest(ctx, c.url, c.secret,
		slack.SlashCommand{Command: "/hcp", Text: text, UserID: user, ChannelID: c.channel, ResponseURL: c.rec.ResponseURL(rch)}, time.Now())
	if err != nil {
		c.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct{ Text string }
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusOK {
		c.t.Fatalf("/hcp %s: status %d, decode: %v", text, resp.StatusCode, err)
	}
	if done(body.Text) {
		return body.Text
	}
	return c.rec.WaitResponse(c.t, 2*time.Minute, rch, done)
}

// `hcpbot all` whose agent.kubeconfig does not load, or is refused by its
// API server, exits non-zero naming the field before the bot starts,
// instead of a bot that looks ready beside an agent that stopped.
func TestAllCommandUnusableKubeconfig(t *testing.T) {
	env.Need(t)
	srv := natstest.RunServer(t)
	vars := map[string]string{"TEST_SLACK_BOT_TOKEN": "xoxb-0000-test", "TEST_SLACK_SIGNING_SECRET": "test-signing-secret"}
	for name, kc := range unusableKubeconfigs(t) {
		t.Run(name, func(t *testing.T) {
			cfg := fmt.Sprintf(`nats:
  urls: [%q]
agent:
  source: mgmt-all
  kubeconfig: %s
  listen: %q
bot:
  listen: %q
  opsListen: %q
  defaultChannel: C0ALLBAD01
slack:
  apiURL: "http://%s/api/"
  botTokenEnv: TEST_SLACK_BOT_TOKEN
  signingSecretEnv: TEST_SLACK_SIGNING_SECRET
`, srv.ClientURL(), kc.path, freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t))
			path := filepath.Join(t.TempDir(), "hcpbot.yaml")
			if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*kubeCheckTimeout)
			defer cancel()
			var logs syncbuf.Buffer
			c := &cli{stdin: strings.NewReader(""), stdout: &logs, stderr: &logs, getenv: func(k string) string { return vars[k] }}
			code := c.main(ctx, []string{"all", "--config", path})
			if ctx.Err() != nil {
				t.Fatalf("hcpbot all ran until the test's deadline; logs:\n%s", logs.String())
			}
			out := logs.String()
			if code == 0 || !strings.Contains(out, "agent.kubeconfig: ") || !strings.Contains(out, kc.want) {
				t.Errorf("exit %d, want non-zero and an agent.kubeconfig error saying %q; logs:\n%s", code, kc.want, out)
			}
			if strings.Contains(out, "connecting to NATS") || strings.Contains(out, "serving") {
				t.Errorf("started before checking the kubeconfig:\n%s", out)
			}
			t.Logf("exit %d: %s", code, tail(out, 300))
		})
	}
}
