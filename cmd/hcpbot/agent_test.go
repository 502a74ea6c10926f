package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/internal/testenv/syncbuf"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// syncBuffer is shared by the goroutines under test and the test.
type syncBuffer = syncbuf.Buffer

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func get(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// `hcpbot agent` against a real management cluster and NATS: it becomes
// leader, watches the hosted cluster, serves health and metrics, and logs
// no proxy credentials.
func TestAgentCommand(t *testing.T) {
	env.Need(t)
	ns := env.Namespace(t)
	spec := scenario.BehindProxy(ns, "cmd")
	spec.HTTPSProxy = "http://svc-user:s3cr3t-pass@proxy.corp.example:3128"
	env.HostedCluster(t, spec)
	kubeconfig := managementKubeconfig(t)
	srv := natstest.RunServer(t)
	addr := freeAddr(t)

	ctx, cancel := context.WithCancel(context.Background())
	botEventsStream(t, srv.ClientURL())
	var logs syncBuffer
	done := make(chan int)
	go func() {
		c := &cli{stdin: strings.NewReader(""), stdout: &logs, stderr: &logs, getenv: func(string) string { return "" }}
		done <- c.main(ctx, []string{"agent", "--kubeconfig", kubeconfig, "--source", "mgmt-cmd", "--nats-url", srv.ClientURL(),
			"--listen", addr, "--lease-namespace", ns, "--identity", "test-agent", "--log-format", "json"})
	}()
	testenv.Eventually(t, 30*time.Second, "/readyz", func() bool { code, _ := get("http://" + addr + "/readyz"); return code == 200 })
	// The agent watches every HostedCluster of the management cluster,
	// those earlier tests of this package left included: at least ours.
	testenv.Eventually(t, 60*time.Second, "leader and the hosted cluster watched", func() bool {
		_, body := get("http://" + addr + "/metrics")
		return strings.Contains(body, "hcpbot_agent_leader 1") && metricAtLeast(body, "hcpbot_agent_hosted_clusters_watched", 1) &&
			metricAtLeast(body, `hcpbot_agent_events_published_total{type="hostedcluster"}`, 1)
	})
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("agent exited %d; logs:\n%s", code, logs.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("agent did not stop")
	}
	if strings.Contains(logs.String(), "s3cr3t-pass") {
		t.Error("proxy password in the agent's logs")
	}
	if !strings.Contains(logs.String(), `"acquired the agent lease"`) {
		t.Errorf("no leader election in logs:\n%s", logs.String())
	}
}

// managementKubeconfig writes a kubeconfig of the shared management API
// server and returns its path.
func managementKubeconfig(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.CP.Management.WriteKubeconfig(p); err != nil {
		t.Fatal(err)
	}
	return p
}

// botEventsStream connects to url as the bot would and creates the events
// stream: against an external NATS the bot owns it, the agent waits for it
// (TestAgentNATSFlags).
func botEventsStream(t *testing.T, url string) (*bus.Conn, jetstream.Stream) {
	t.Helper()
	conn, err := bus.Connect(context.Background(), bus.Config{URLs: []string{url}}, natstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	s, err := bus.EnsureStream(context.Background(), conn.JS, bus.EventsStream(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	return conn, s
}

// startAgentCmd runs `hcpbot agent args...` in-process until the test
// ends, then expects it to stop with exit code 0.
func startAgentCmd(t *testing.T, args ...string) *syncBuffer {
	t.Helper()
	return startAgentCmdEnv(t, nil, args...)
}

// startAgentCmdEnv is startAgentCmd with the environment vars.
func startAgentCmdEnv(t *testing.T, vars map[string]string, args ...string) *syncBuffer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	logs := &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		c := &cli{stdin: strings.NewReader(""), stdout: logs, stderr: logs, getenv: func(k string) string { return vars[k] }}
		done <- c.main(ctx, append([]string{"agent"}, args...))
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("agent exited %d:\n%s", code, tail(logs.String(), 4000))
			}
		case <-time.After(30 * time.Second):
			t.Errorf("agent did not stop:\n%s", tail(logs.String(), 4000))
		}
	})
	return logs
}

// metricAtLeast reports whether the sample named series (name and labels,
// as exposed) of a /metrics page is at least min.
func metricAtLeast(body, series string, min float64) bool {
	for line := range strings.SplitSeq(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return err == nil && f >= min
		}
	}
	return false
}

// unusableKubeconfigs writes kubeconfigs the agent cannot work with, by
// name, with what its error must say: a missing file, a server that
// refuses connections (a closed loopback port), and the real API server
// with credentials it rejects.
func unusableKubeconfigs(t *testing.T) map[string]struct{ path, want string } {
	t.Helper()
	dir := t.TempDir()
	write := func(name string, edit func(*clientcmdapi.Config)) string {
		t.Helper()
		data, err := env.CP.Management.Kubeconfig()
		if err != nil {
			t.Fatal(err)
		}
		kc, err := clientcmd.Load(data)
		if err != nil {
			t.Fatal(err)
		}
		edit(kc)
		p := filepath.Join(dir, name)
		if err := clientcmd.WriteToFile(*kc, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	closed := freeAddr(t) // listened on, then closed: connections are refused
	refused := write("refused", func(kc *clientcmdapi.Config) {
		for _, c := range kc.Clusters {
			c.Server = "https://" + closed
		}
	})
	badToken := write("bad-token", func(kc *clientcmdapi.Config) {
		for name := range kc.AuthInfos {
			kc.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: "not-a-valid-token"}
		}
	})
	return map[string]struct{ path, want string }{
		"missing":   {filepath.Join(dir, "missing"), "no such file or directory"},
		"refused":   {refused, "connection refused"},
		"bad token": {badToken, "Unauthorized"},
	}
}

// `hcpbot agent` with a kubeconfig that does not load, or that its API
// server refuses, exits non-zero at once with the reason instead of
// running and watching nothing.
func TestAgentCommandUnusableKubeconfig(t *testing.T) {
	env.Need(t)
	srv := natstest.RunServer(t)
	for name, kc := range unusableKubeconfigs(t) {
		t.Run(name, func(t *testing.T) {
			addr := freeAddr(t)
			ctx, cancel := context.WithTimeout(context.Background(), 2*kubeCheckTimeout)
			defer cancel()
			var logs syncBuffer
			c := &cli{stdin: strings.NewReader(""), stdout: &logs, stderr: &logs, getenv: func(string) string { return "" }}
			code := c.main(ctx, []string{"agent", "--kubeconfig", kc.path, "--source", "mgmt-badkc", "--nats-url", srv.ClientURL(),
				"--listen", addr, "--identity", "test-agent", "--log-format", "json"})
			if ctx.Err() != nil {
				t.Fatalf("agent ran until the test's deadline; logs:\n%s", logs.String())
			}
			if code == 0 || !strings.Contains(logs.String(), kc.want) {
				t.Errorf("exit %d, want non-zero and an error saying %q; logs:\n%s", code, kc.want, logs.String())
			}
			t.Logf("exit %d: %s", code, tail(logs.String(), 300))
			if strings.Contains(logs.String(), "not-a-valid-token") {
				t.Error("kubeconfig credentials in the logs")
			}
		})
	}
}

// The events stream disappears under a running `hcpbot agent` (external
// NATS: the agent may not re-create it): /readyz fails with the reason and
// the refusals count as no_stream; once the stream is back, readiness
// recovers and the held event is stored.
func TestAgentReadyzPublishRefused(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	spec := scenario.Healthy(ns, "refused")
	hosted := env.HostedCluster(t, spec)
	nodes, err := scenario.Nodes(ctx, hosted.Kube, "rf", 1)
	if err != nil {
		t.Fatal(err)
	}
	srv := natstest.RunServer(t)
	bot, s := botEventsStream(t, srv.ClientURL())
	addr := freeAddr(t)
	logs := startAgentCmd(t, "--kubeconfig", managementKubeconfig(t), "--source", "mgmt-refused", "--nats-url", srv.ClientURL(),
		"--listen", addr, "--leader-elect=false", "--identity", "test-agent", "--log-format", "json")
	testenv.Eventually(t, 60*time.Second, "ready and publishing", func() bool {
		code, _ := get("http://" + addr + "/readyz")
		_, body := get("http://" + addr + "/metrics")
		return code == 200 && metricAtLeast(body, `hcpbot_agent_events_published_total{type="hostedcluster"}`, 1)
	})

	if err := bot.JS.DeleteStream(ctx, event.StreamName); err != nil {
		t.Fatal(err)
	}
	if err := scenario.SetNodeReady(ctx, hosted.Kube, nodes[0], corev1.ConditionFalse, "KubeletNotReady", "while the stream is gone"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "/readyz to fail with the reason", func() bool {
		code, body := get("http://" + addr + "/readyz")
		return code == 503 && strings.Contains(body, "no_stream")
	})
	_, body := get("http://" + addr + "/readyz")
	t.Logf("/readyz: %s", strings.TrimSpace(body))
	if _, m := get("http://" + addr + "/metrics"); !metricAtLeast(m, `hcpbot_agent_publish_errors_total{kind="no_stream"}`, 1) {
		t.Error("no no_stream publish errors counted")
	}

	testenv.Eventually(t, 30*time.Second, "the episode's log line", func() bool {
		return strings.Contains(logs.String(), "NATS refuses the agent's events")
	})

	if _, err := bus.EnsureStream(ctx, bot.JS, bus.EventsStream(0, 0)); err != nil {
		t.Fatal(err)
	}
	subject, err := event.SubjectFilter("mgmt-refused", &event.ClusterRef{Namespace: ns, Name: spec.Name}, event.TypeNode)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "/readyz back and the held event stored", func() bool {
		code, _ := get("http://" + addr + "/readyz")
		_, err := s.GetLastMsgForSubject(ctx, subject)
		return code == 200 && err == nil
	})
	if n := strings.Count(logs.String(), "NATS refuses the agent's events"); n != 1 {
		t.Errorf("%d log lines for one episode, want 1", n)
	}
}
