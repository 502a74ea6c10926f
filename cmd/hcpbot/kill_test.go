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
	if testing.Short() {
		t.Skip("builds and runs the hcpbot binary")
	}
	ctx := context.Background()
	dir := t.TempDir()
	bin := buildBinary(t, dir)
	srv := natstest.RunServer(t)
	rec := slackrec.New(t)
	const channel = "C0KILLED01"
	cfg := fmt.Sprintf(`nats:
  urls: [%q]
bot:
  listen: %q
  opsListen: %q
  groupWait: 2s
  groupInterval: 5s
  storm: {threshold: 20, window: 30s}
  defaultChannel: %s
slack:
  apiURL: %q
  botTokenEnv: TEST_SLACK_BOT_TOKEN
  signingSecretEnv: TEST_SLACK_SIGNING_SECRET
log: {level: info, format: json}
`, srv.ClientURL(), freeAddr(t), freeAddr(t), channel, rec.APIURL())
	path := filepath.Join(dir, "hcpbot.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	start := func(name string) *exec.Cmd {
		logf, err := os.Create(filepath.Join(dir, name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "bot", "--config", path)
		cmd.Env = append(os.Environ(), "TEST_SLACK_BOT_TOKEN=xoxb-0000-kill", "TEST_SLACK_SIGNING_SECRET=kill-secret", "POD_NAME="+name)
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

	conn, err := bus.Connect(ctx, bus.Config{URLs: []string{srv.ClientURL()}}, natstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := bus.EnsureStream(ctx, conn.JS, bus.EventsStream(1, 0, 0)); err != nil {
		t.Fatal(err)
	}
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
