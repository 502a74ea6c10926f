package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/slack-go/slack"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/hcpbot/hcpbot/approval/wire"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/hypershift"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
)

// BenchmarkB2Production measures B2 as users run it: the hcpbot binary
// (`hcpbot all`, agent and bot in one process, built from this tree) on
// production defaults — group wait 5 s, group interval 1 m, one shared
// channel, four-eyes approvals — against a real kube-apiserver, a NATS
// server that fsyncs every write (sync_interval: always, as the deploy
// ships) and the Slack recorder with Slack's rate limits on. Two results:
//
//   - B2-prod: Node NotReady → the incident's first post, minus the
//     group wait (what the bot adds to the wait it is configured for);
//   - B2-approve: a signed `/hcp approve` → the HostedCluster patched on
//     the API server → the confirmation posted, with its stages.
func BenchmarkB2Production(b *testing.B) {
	env.Need(b)
	detTrials, apprTrials := pick(20, 3), pick(20, 3)
	const groupWait, resolveTimeout = 5 * time.Second, time.Second
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := env.Namespace(b)
	const name = "b2prod"
	const source = "mgmt-b2prod"
	const channel = "C0B2PROD01"
	const secret = "bench-signing-secret"
	const proposer, approver = "U0B2PROP01", "U0B2APPR01"

	hosted := env.HostedCluster(b, scenario.BehindProxy(ns, name))
	nodes, err := scenario.Nodes(ctx, hosted.Kube, name+"-np", 2)
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := env.CP.Management.WriteKubeconfig(kubeconfig); err != nil {
		b.Fatal(err)
	}
	srv := natstest.RunServer(b, natstest.SyncAlways)
	rec := slackrec.New(b) // Slack's limits: post 1/s burst 3 per channel, update 50/min
	bin := buildHcpbot(b)

	agentAddr, botAddr, opsAddr := freeAddr(b), freeAddr(b), freeAddr(b)
	// Production defaults but for resolveTimeout: its least value (1s)
	// resolves an incident a second after its node is Ready, so each trial
	// opens a new one (the default 5m would make every trial one incident).
	cfg := fmt.Sprintf(`nats:
  urls: [%q]
agent:
  source: %s
  kubeconfig: %s
  listen: %q
  leaderElection: {namespace: %s}
bot:
  listen: %q
  opsListen: %q
  resolveTimeout: 1s
  defaultChannel: %s
slack:
  apiURL: %q
  botTokenEnv: B2_SLACK_BOT_TOKEN
  signingSecretEnv: B2_SLACK_SIGNING_SECRET
approvals:
  approvers: [%s, %s]
log: {level: info, format: json}
`, srv.ClientURL(), source, kubeconfig, agentAddr, ns, botAddr, opsAddr, channel, rec.APIURL(), proposer, approver)
	path := filepath.Join(dir, "hcpbot.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		b.Fatal(err)
	}
	logs, err := os.Create(filepath.Join(dir, "hcpbot.log"))
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, "all", "--config", path)
	cmd.Env = []string{"B2_SLACK_BOT_TOKEN=xoxb-0000-bench", "B2_SLACK_SIGNING_SECRET=" + secret, "POD_NAME=b2prod-0",
		"HOME=" + dir, "PATH=" + os.Getenv("PATH")}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	b.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		logs.Close()
	})
	failf := func(format string, a ...any) {
		b.Helper()
		data, _ := os.ReadFile(logs.Name())
		var metrics []string
		if resp, err := http.Get("http://" + opsAddr + "/metrics"); err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			for _, l := range strings.Split(string(body), "\n") {
				if strings.HasPrefix(l, "hcpbot_bot_events") {
					metrics = append(metrics, l)
				}
			}
		}
		b.Fatalf(format+"\nbot metrics: %s\nhcpbot log (tail):\n%s", append(a, strings.Join(metrics, "; "), tailOf(string(data), 3000))...)
	}
	for _, addr := range []string{opsAddr, agentAddr} {
		if !b2Poll(60*time.Second, func() bool { return httpOK("http://" + addr + "/readyz") }) {
			failf("hcpbot all: /readyz on %s", addr)
		}
	}
	hcp := &b2Slash{url: "http://" + botAddr + "/slack/commands", secret: secret, channel: channel, rec: rec}
	cluster := ns + "/" + name
	var status string
	if !b2Poll(2*time.Minute, func() bool {
		reply, err := hcp.run(ctx, "status "+cluster, proposer, func(s string) bool { return s != "" })
		status = fmt.Sprint(reply, err)
		return err == nil && strings.Contains(reply, name) && !strings.Contains(reply, "Unknown cluster")
	}) {
		failf("the bot never knew %s: %s", cluster, status)
	}

	// B2-prod: each trial a node goes NotReady (a new incident: the
	// previous one resolved when its node went Ready) and the incident's
	// first post comes a group wait later; 1 warm-up trial.
	r := newResult("B2-prod", "Detection as users run it: Node NotReady to the first post, minus the group wait (hcpbot all, production defaults)", map[string]any{
		"trials": detTrials, "warmup_trials": 1, "group_wait": groupWait.String(), "group_interval": "1m (default)", "resolve_timeout": "1s",
		"channel": "one shared", "slack_limits": "recorder: post 1/s burst 3 per channel, update 50/min burst 10",
		"nats": "sync_interval: always", "process": "hcpbot all (built from this tree)",
	})
	lastSec := map[string]int64{}
	var late, e2e []float64
	roots := func() []slackrec.Call {
		var out []slackrec.Call
		for _, c := range rec.CallsTo("chat.postMessage") {
			if c.Channel == channel && c.Status == http.StatusOK && c.Form.Get("thread_ts") == "" {
				out = append(out, c)
			}
		}
		return out
	}
	for i := range detTrials + 1 {
		node := nodes[i%len(nodes)]
		for time.Now().Unix() <= lastSec[node] {
			time.Sleep(10 * time.Millisecond)
		}
		before := len(roots())
		_, t0, err := b2SetReady(ctx, hosted.Kube, node, corev1.ConditionFalse, "KubeletNotReady", fmt.Sprintf("b2-prod trial %d", i))
		if err != nil {
			b.Fatal(err)
		}
		var post slackrec.Call
		if !b2Poll(60*time.Second, func() bool {
			rs := roots()
			if len(rs) > before {
				post = rs[before]
				return true
			}
			return false
		}) {
			failf("trial %d: no new incident post in %s within 60s", i, channel)
		}
		if !strings.Contains(post.Form.Get("text")+post.Form.Get("blocks"), name) {
			failf("trial %d: the new post is not about %s: %q", i, cluster, post.Form.Get("text"))
		}
		_, ready, err := b2SetReady(ctx, hosted.Kube, node, corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status")
		if err != nil {
			b.Fatal(err)
		}
		lastSec[node] = ready.Unix()
		// The incident resolves once its signals stayed clear for the
		// resolve timeout; the next trial must open a new one.
		time.Sleep(resolveTimeout + 500*time.Millisecond)
		if i == 0 {
			continue
		}
		d := b2MS(post.Time.Round(0).Sub(t0.Round(0)))
		e2e = append(e2e, d)
		late = append(late, d-b2MS(groupWait))
	}
	r.Add("trials", float64(len(late)), "trials")
	for _, q := range []struct {
		n string
		q float64
	}{{"p50", 0.5}, {"p90", 0.9}, {"p99", 0.99}, {"max", 1}} {
		r.Add("first_post_minus_group_wait_"+q.n+"_ms", b2Pct(late, q.q), "ms")
	}
	r.Add("first_post_p50_ms", b2Pct(e2e, 0.5), "ms")
	r.Add("rate_limited_429", float64(rec.RateLimited()), "calls")
	r.Add("rate_limit_violations", float64(rec.Violations()), "calls")
	r.Want("first_post_minus_group_wait_p99_ms", "<=", 50)
	r.Want("rate_limit_violations", "<=", 0)
	r.Want("trials", ">=", 20)
	r.Note("t0 = the UpdateStatus setting Ready=False returned; first post = the recorder's receive time of the first chat.postMessage (not a thread reply) of the new incident in the shared channel; the figure is first post − t0 − group wait (%s): detection plus how late the bot's group-wait timer fires. The group wait starts when the bot sees the incident, so detection (B2's ~1-2 ms) is inside the figure", groupWait)
	r.Note("one hosted cluster behind the seed 000 proxy (a NotReady node is diagnosed proxy-tunnel), two nodes taking turns; after each post the node is set Ready, which resolves the incident a second later (resolveTimeout 1s, its least value; the next trial starts after it); its resolution goes out on the group interval (1 m) as chat.update + a thread reply in the same channel, alongside later trials' posts, as in production")
	r.Note("hcpbot all runs as a separate process (go build ./cmd/hcpbot) with its own connections; NATS is a separate embedded server in the benchmark process with every write fsynced")

	// B2-approve: the fix of the tunnelling proxy, proposed by one
	// approver and approved by the other (four-eyes), executed by the
	// agent on the real API server.
	ra := newResult("B2-approve", "Approval latency: a signed /hcp approve to the HostedCluster patched and the confirmation posted (hcpbot all)", map[string]any{
		"trials": apprTrials, "warmup_trials": 1, "four_eyes": true, "nats": "sync_interval: always", "process": "hcpbot all (built from this tree)",
		"action": "noProxy fix of a tunnelling HostedCluster (proxy-tunnel diagnosis)",
	})
	if _, _, err := b2SetReady(ctx, hosted.Kube, nodes[0], corev1.ConditionFalse, "KubeletNotReady", "b2-approve"); err != nil {
		b.Fatal(err)
	}
	w := newHCWatch(b, ctx, ns, name)
	obs, err := bus.Connect(ctx, bus.Config{URLs: []string{srv.ClientURL()}, Name: "b2-prod-observer"}, natstest.Logger(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(obs.Close)
	js := obs.JS
	queued := newQueueTimes(b, ctx, obs)
	kv, err := js.KeyValue(ctx, bus.ActionResultsBucket)
	if err != nil {
		b.Fatal(err)
	}
	var sHandled, sQueued, sPatched, sResult, sPosted, total []float64
	for j := range apprTrials + 1 {
		if j > 0 {
			if err := scenario.SetNoProxy(ctx, env.Dynamic, ns, name, scenario.SeedNoProxy); err != nil {
				b.Fatal(err)
			}
		}
		var id string
		if !b2Poll(2*time.Minute, func() bool {
			reply, err := hcp.run(ctx, "fix noproxy "+cluster, proposer, func(s string) bool { return s != "" })
			id = b2ActionID.FindString(reply)
			return err == nil && id != ""
		}) {
			failf("approval trial %d: no noProxy fix proposed", j)
		}
		time.Sleep(200 * time.Millisecond) // quiet start
		seen := w.count()
		t0 := time.Now()
		reply, handled, confirmed, err := hcp.timed(ctx, "approve "+id, approver, func(s string) bool { return strings.Contains(s, id) && strings.Contains(s, "applied") })
		if err != nil {
			failf("approval trial %d: %v", j, err)
		}
		if !strings.Contains(reply, "applied") {
			failf("approval trial %d: approve answered %q", j, reply)
		}
		patched, ok := w.changedAfter(seen, scenario.SeedNoProxy, 30*time.Second)
		if !ok {
			failf("approval trial %d: the HostedCluster's noProxy never changed", j)
		}
		q, ok := queued.at(id, 10*time.Second)
		if !ok {
			failf("approval trial %d: action %s not seen on %s", j, id, bus.ActionsStream)
		}
		key, err := wire.ResultKey(source, id)
		if err != nil {
			b.Fatal(err)
		}
		entry, err := kv.Get(ctx, key)
		if err != nil {
			failf("approval trial %d: result %s: %v", j, key, err)
		}
		if j == 0 {
			continue
		}
		ms := func(t time.Time) float64 { return b2MS(t.Round(0).Sub(t0.Round(0))) }
		sHandled = append(sHandled, ms(handled))
		sQueued = append(sQueued, ms(q))
		sPatched = append(sPatched, ms(patched))
		sResult = append(sResult, ms(entry.Created()))
		sPosted = append(sPosted, ms(confirmed))
		total = append(total, ms(confirmed))
	}
	ra.Add("trials", float64(len(total)), "trials")
	ra.Add("approve_to_confirmation_p50_ms", b2Pct(total, 0.5), "ms")
	ra.Add("approve_to_confirmation_p90_ms", b2Pct(total, 0.9), "ms")
	ra.Add("approve_to_confirmation_p99_ms", b2Pct(total, 0.99), "ms")
	ra.Add("approve_to_confirmation_max_ms", b2Pct(total, 1), "ms")
	for _, st := range []struct {
		n  string
		xs []float64
	}{{"approve_handled", sHandled}, {"request_published", sQueued}, {"hostedcluster_patched", sPatched}, {"result_recorded", sResult}, {"confirmation_posted", sPosted}} {
		ra.Add("at_"+st.n+"_p50_ms", b2Pct(st.xs, 0.5), "ms")
		ra.Add("at_"+st.n+"_p99_ms", b2Pct(st.xs, 0.99), "ms")
	}
	ra.Want("approve_to_confirmation_p50_ms", "<=", 100)
	ra.Want("approve_to_confirmation_p99_ms", "<=", 500)
	ra.Want("trials", ">=", 20)
	ra.Note("t0 = the signed /hcp approve is sent (as Slack sends it, by the second approver: four-eyes); every at_* figure is from t0: approve_handled = the bot's HTTP answer to the command; request_published = the signed action request reaches the NATS server for %s (a plain subscription on its subjects receives it; JetStream stores it, fsync included, as it is delivered); hostedcluster_patched = the watch on the management API server delivers the HostedCluster with its new noProxy (the agent picked the request up, verified its signature and the approval record, and patched; the pickup itself is not observable outside the process); result_recorded = the agent's result created in %s; confirmation_posted = the reply saying the fix was applied, as received (the HTTP answer when the bot waited for the result, else its post to the command's response_url at the recorder)", bus.ActionsStreamName, bus.ActionResultsBucket)
	ra.Note("each trial first restores the seed noProxy (the previous trial's fix made the spec bypass) and has the first approver propose the fix again (not timed); 1 warm-up trial")
	save(b, r)
	save(b, ra)
}

var b2ActionID = regexp.MustCompile(`act-[a-z2-7]{16}`)

// buildHcpbot builds the hcpbot binary of this tree into a temp dir.
func buildHcpbot(b *testing.B) string {
	b.Helper()
	bin := filepath.Join(b.TempDir(), "hcpbot")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/hcpbot/hcpbot/cmd/hcpbot")
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("go build ./cmd/hcpbot: %v\n%s", err, out)
	}
	return bin
}

func freeAddr(b *testing.B) string {
	b.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func httpOK(url string) bool {
	resp, err := http.Get(url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// b2Poll checks cond every 5 ms until it holds or timeout passes.
func b2Poll(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

func tailOf(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// b2Slash sends signed /hcp commands as Slack does; a reply comes in the
// HTTP answer or, when the bot took longer, at the command's
// response_url.
type b2Slash struct {
	url, secret, channel string
	rec                  *slackrec.Recorder
	n                    int
}

func (c *b2Slash) run(ctx context.Context, text, user string, done func(string) bool) (string, error) {
	reply, _, _, err := c.timed(ctx, text, user, done)
	return reply, err
}

// timed sends a command and returns the reply done accepts, when the HTTP
// answer came and when the accepted reply was received.
func (c *b2Slash) timed(ctx context.Context, text, user string, done func(string) bool) (reply string, answered, received time.Time, err error) {
	c.n++
	rch := fmt.Sprintf("R%s%d", c.channel, c.n)
	req, err := slackrec.CommandRequest(ctx, c.url, c.secret,
		slack.SlashCommand{Command: "/hcp", Text: text, UserID: user, ChannelID: c.channel, ResponseURL: c.rec.ResponseURL(rch)}, time.Now())
	if err != nil {
		return "", answered, received, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", answered, received, err
	}
	var body struct{ Text string }
	err = json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	answered = time.Now()
	if err != nil || resp.StatusCode != http.StatusOK {
		return "", answered, received, fmt.Errorf("/hcp %s: status %d, decode: %v", text, resp.StatusCode, err)
	}
	if done(body.Text) {
		return body.Text, answered, answered, nil
	}
	var got slackrec.Call
	if !b2Poll(2*time.Minute, func() bool {
		for _, call := range c.rec.CallsTo(slackrec.MethodResponseURL) {
			if call.Channel == rch && done(call.Form.Get("text")) {
				got = call
				return true
			}
		}
		return false
	}) {
		return body.Text, answered, received, fmt.Errorf("/hcp %s: no accepted reply (answer %q)", text, body.Text)
	}
	return got.Form.Get("text"), answered, got.Time, nil
}

// hcWatch records when the management API server delivers each version
// of one HostedCluster, with its noProxy.
type hcWatch struct {
	mu   sync.Mutex
	seen []hcSeen
	kick chan struct{}
}

type hcSeen struct {
	noProxy string
	at      time.Time
}

func newHCWatch(b *testing.B, ctx context.Context, ns, name string) *hcWatch {
	b.Helper()
	w := &hcWatch{kick: make(chan struct{}, 1)}
	wi, err := env.Dynamic.Resource(hypershift.HostedClusterGVR).Namespace(ns).Watch(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String(),
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(wi.Stop)
	go func() {
		for ev := range wi.ResultChan() {
			at := time.Now()
			u, ok := ev.Object.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			np, _, _ := unstructured.NestedString(u.Object, "spec", "configuration", "proxy", "noProxy")
			w.mu.Lock()
			w.seen = append(w.seen, hcSeen{np, at})
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *hcWatch) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.seen)
}

// changedAfter waits for a version after the first n whose noProxy is not
// old and returns when it was delivered.
func (w *hcWatch) changedAfter(n int, old string, timeout time.Duration) (time.Time, bool) {
	var at time.Time
	ok := b2Poll(timeout, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, s := range w.seen[min(n, len(w.seen)):] {
			if s.noProxy != old {
				at = s.at
				return true
			}
		}
		return false
	})
	return at, ok
}

// queueTimes sees the action requests as they reach the NATS server: a
// plain subscription on the actions stream's subjects (a work-queue
// stream takes no second consumer, and the agent's ack deletes the
// message), by message id (the action id).
type queueTimes struct {
	mu    sync.Mutex
	times map[string]time.Time
}

func newQueueTimes(b *testing.B, ctx context.Context, conn *bus.Conn) *queueTimes {
	b.Helper()
	q := &queueTimes{times: map[string]time.Time{}}
	st, err := conn.JS.Stream(ctx, bus.ActionsStreamName)
	if err != nil {
		b.Fatal(err)
	}
	for _, subj := range st.CachedInfo().Config.Subjects {
		sub, err := conn.NC.Subscribe(subj, func(m *nats.Msg) {
			at := time.Now()
			q.mu.Lock()
			q.times[m.Header.Get(jetstream.MsgIDHeader)] = at
			q.mu.Unlock()
		})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	if err := conn.NC.Flush(); err != nil {
		b.Fatal(err)
	}
	return q
}

func (q *queueTimes) at(id string, timeout time.Duration) (time.Time, bool) {
	var at time.Time
	ok := b2Poll(timeout, func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		t, ok := q.times[id]
		at = t
		return ok
	})
	return at, ok
}
