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

	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv/chaosreport"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
)

// buildBinary builds hcpbot once per test into dir.
func buildBinary(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "hcpbot")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// The bot PROCESS is killed with SIGKILL in the middle of a storm of more
// than 5,000 events and started again: no incident is lost (the storm
// thread lists every cluster, the restarted bot reports every incident)
// and no root message is posted twice.
func TestChaosBotSIGKILLMidStorm(t *testing.T) {
	ctx := context.Background()
	dir, bin, srv, rec := processRig(t)
	const channel = "C0KILLED01"
	path := writeBotConfig(t, dir, srv.ClientURL(), rec.APIURL(), channel, freeAddr(t), `  groupWait: 2s
  groupInterval: 5s
  storm: {threshold: 20, window: 30s}
`)
	start := func(name string) *exec.Cmd { return startBotProcess(t, bin, dir, path, name) }
	conn := eventsConn(t, srv.ClientURL())
	const clusters = 420 // 12 events each: 5,040 events
	events, err := scenario.Storm("mgmt-kill", "clusters", clusters, 10, time.Now())
	if err != nil {
		t.Fatal(err)
	}

	first := start("bot-0")
	half := len(events) / 2
	if err := scenario.Publish(ctx, conn.JS, events[:half]); err != nil {
		t.Fatal(err)
	}
	var storm slackrec.Message
	rec.WaitFor(t, 90*time.Second, func(r *slackrec.Recorder) bool {
		for _, m := range r.Messages(channel) {
			if m.ThreadTS == "" && strings.Contains(m.Text, "STORM") {
				storm = m
				return true
			}
		}
		return false
	})
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	killedAt := time.Now()
	callsBefore := len(rec.CallsTo("chat.postMessage"))

	if err := scenario.Publish(ctx, conn.JS, events[half:]); err != nil {
		t.Fatal(err)
	}
	start("bot-1")
	// The new process waits out the dead one's lease (15 s) and, if it died
	// mid-post, that post's claim (notify.DefaultClaimLease, 1 min).
	rec.WaitFor(t, 180*time.Second, func(r *slackrec.Recorder) bool {
		m, ok := r.Message(channel, storm.TS)
		return ok && strings.Contains(m.Text, fmt.Sprintf("%d hosted clusters", clusters)) && len(listedIn(r, channel, storm.TS)) == clusters
	})
	recovered := time.Since(killedAt)

	var rootTexts []string
	for _, m := range rec.Messages(channel) {
		if m.ThreadTS == "" {
			rootTexts = append(rootTexts, m.Text)
		}
	}
	if len(rootTexts) != 1 {
		t.Errorf("%d root messages, want only the storm:\n%s", len(rootTexts), strings.Join(rootTexts, "\n"))
	}
	twice := 0
	for _, n := range listedIn(rec, channel, storm.TS) {
		if n > 1 {
			twice++
		}
	}
	if twice > 40 { // at most the page cut short by the kill
		t.Errorf("%d clusters listed more than once", twice)
	}
	if v := rec.Violations(); v != 0 {
		t.Errorf("%d rate-limit violations", v)
	}
	chaosreport.Log(t, "bot-sigkill-mid-storm", map[string]any{
		"events": len(events), "clusters": clusters, "incidents_listed": len(listedIn(rec, channel, storm.TS)),
		"root_posts": len(rootTexts), "listed_twice": twice, "posts_before_kill": callsBefore,
		"posts_after_kill": len(rec.CallsTo("chat.postMessage")) - callsBefore, "rate_violations": rec.Violations(),
		"complete_after_kill_s": recovered.Seconds(),
	})
}

// processRig skips in -short runs, else builds hcpbot into a fresh
// directory and starts the NATS server and the Slack recorder its
// processes use.
func processRig(t *testing.T) (dir, bin string, srv *bus.Embedded, rec *slackrec.Recorder) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the hcpbot binary")
	}
	dir = t.TempDir()
	return dir, buildBinary(t, dir), natstest.RunServer(t), slackrec.New(t)
}

// writeBotConfig writes the configuration of an `hcpbot bot` on NATS at
// natsURL and Slack at slackURL, posting to channel, with its ops listener
// on ops, and returns its path. extra holds more lines of the bot section.
func writeBotConfig(t *testing.T, dir, natsURL, slackURL, channel, ops, extra string) string {
	t.Helper()
	cfg := fmt.Sprintf(`nats:
  urls: [%q]
bot:
  listen: %q
  opsListen: %q
  defaultChannel: %s
%sslack:
  apiURL: %q
  botTokenEnv: TEST_SLACK_BOT_TOKEN
  signingSecretEnv: TEST_SLACK_SIGNING_SECRET
log: {level: info, format: json}
`, natsURL, freeAddr(t), ops, channel, extra, slackURL)
	path := filepath.Join(dir, "hcpbot.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// startBotProcess runs `hcpbot bot --config path` as pod name, its log in
// dir/name.log (its tail shown if the test fails), killed at the end.
func startBotProcess(t *testing.T, bin, dir, path, name string) *exec.Cmd {
	t.Helper()
	return startProcess(t, bin, dir, "bot", path, name)
}

// startProcess is startBotProcess for `hcpbot <mode>` (bot or all).
func startProcess(t *testing.T, bin, dir, mode, path, name string) *exec.Cmd {
	t.Helper()
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, mode, "--config", path)
	cmd.Env = append(os.Environ(), "TEST_SLACK_BOT_TOKEN=xoxb-0000-"+name, "TEST_SLACK_SIGNING_SECRET=secret-"+name, "POD_NAME="+name)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("%s log (tail):\n%s", name, tail(string(b), 3000))
		}
	})
	return cmd
}

// eventsConn connects to NATS at url, closed at the end of the test, with
// the events stream in place.
func eventsConn(t *testing.T, url string) *bus.Conn {
	t.Helper()
	ctx := context.Background()
	conn, err := bus.Connect(ctx, bus.Config{URLs: []string{url}}, natstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	if _, err := bus.EnsureStream(ctx, conn.JS, bus.EventsStream(0, 0)); err != nil {
		t.Fatal(err)
	}
	return conn
}

// listedIn counts how often each cluster appears in the thread of ts.
func listedIn(rec *slackrec.Recorder, channel, ts string) map[string]int {
	out := map[string]int{}
	for _, m := range rec.Messages(channel) {
		if m.ThreadTS != ts {
			continue
		}
		for _, line := range strings.Split(m.Text, "\n") {
			if i := strings.Index(line, "/hc-"); i >= 0 {
				name := line[i+1:]
				if j := strings.IndexByte(name, '`'); j >= 0 {
					out[name[:j]]++
				}
			}
		}
	}
	return out
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}
