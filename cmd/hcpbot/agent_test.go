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

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/hcpbot/hcpbot/bus"
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
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.CP.Management.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	srv := natstest.RunServer(t)
	addr := freeAddr(t)

	ctx, cancel := context.WithCancel(context.Background())
	// Against an external NATS the bot owns the events stream; the agent
	// waits for it (TestAgentNATSFlags), so create it as the bot would.
	bot, err := bus.Connect(ctx, bus.Config{URLs: []string{srv.ClientURL()}}, natstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer bot.Close()
	if _, err := bus.EnsureStream(ctx, bot.JS, bus.EventsStream(1, 0, 0)); err != nil {
		t.Fatal(err)
	}
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
