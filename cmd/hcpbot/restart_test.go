package main

import (
	"context"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
)

// A restarted `hcpbot bot` PROCESS sends nothing that shows an unhealthy
// state (issue 14): one process runs, is stopped (SIGTERM, as a rolling
// update does), and a new one replays the events stream. Of three
// clusters of 30 nodes with one NotReady, "resolved" was resolved before
// the stop (no call about it after the restart), "healed" recovered while
// no bot ran (its message is updated to resolved, never shown unhealthy),
// "open" is still NotReady (left as it is, resolved later as usual).
func TestBotRestartSendsNothingUnhealthy(t *testing.T) {
	ctx := context.Background()
	dir, bin, srv, rec := processRig(t)
	const channel = "C0RESTART1"
	ops := freeAddr(t)
	path := writeBotConfig(t, dir, srv.ClientURL(), rec.APIURL(), channel, ops, `  groupWait: 300ms
  groupInterval: 5s
  resolveTimeout: 3s
`)
	start := func(name string) *exec.Cmd { return startBotProcess(t, bin, dir, path, name) }
	conn := eventsConn(t, srv.ClientURL())
	const source, ns, nodes, bad = "mgmt-restart", "clusters", 30, 7
	publish := func(events ...event.Event) {
		t.Helper()
		if err := scenario.Publish(ctx, conn.JS, events); err != nil {
			t.Fatal(err)
		}
	}
	heal := func(name string) {
		t.Helper()
		e, err := scenario.NodeReady(source, ns, name, bad, true, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		publish(e)
	}

	first := start("bot-0")
	names := []string{"resolved", "healed", "open"}
	now := time.Now()
	for _, name := range names {
		events, err := scenario.NodeFleet(source, ns, name, nodes, now, bad)
		if err != nil {
			t.Fatal(err)
		}
		publish(events...)
	}
	rootOf := map[string]string{}
	rec.WaitFor(t, 90*time.Second, func(r *slackrec.Recorder) bool {
		for _, m := range r.Messages(channel) {
			for _, name := range names {
				if m.ThreadTS == "" && strings.Contains(m.Text, ns+"/"+name) && strings.Contains(m.Text, "1 of 30 nodes NotReady") {
					rootOf[name] = m.TS
				}
			}
		}
		return len(rootOf) == len(names)
	})
	resolved := func(r *slackrec.Recorder, name string) bool {
		m, ok := r.Message(channel, rootOf[name])
		return ok && strings.Contains(m.Text, "RESOLVED")
	}
	heal("resolved")
	rec.WaitFor(t, 60*time.Second, func(r *slackrec.Recorder) bool {
		if !resolved(r, "resolved") {
			return false
		}
		for _, m := range r.Thread(channel, rootOf["resolved"]) {
			if strings.Contains(m.Text, "Resolved at") {
				return true
			}
		}
		return false
	})
	if err := first.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := first.Wait(); err != nil {
		t.Fatalf("bot-0 did not stop cleanly: %v", err)
	}

	heal("healed")
	mark := len(rec.Calls())
	start("bot-1")
	rec.WaitFor(t, 90*time.Second, func(r *slackrec.Recorder) bool { return resolved(r, "healed") })
	// The other two were re-rendered and found unchanged by the notifier.
	unchanged := regexp.MustCompile(`(?m)^hcpbot_slack_unchanged_total (\S+)$`)
	waitFor(t, 60*time.Second, "hcpbot_slack_unchanged_total >= 2", func() bool {
		_, body := get("http://" + ops + "/metrics")
		m := unchanged.FindStringSubmatch(body)
		v, _ := strconv.ParseFloat(valueOr(m, "0"), 64)
		return v >= 2
	})
	check := func(untouched ...string) {
		t.Helper()
		for _, c := range rec.Calls()[mark:] {
			text := c.Form.Get("text") + c.Form.Get("blocks")
			if strings.Contains(text, "WARNING") || strings.Contains(text, "CRITICAL") || strings.Contains(text, "Evidence") {
				t.Errorf("after the restart, %s shows an unhealthy state: %.200s", c.Method, c.Form.Get("text"))
			}
			if c.Method == "chat.postMessage" && c.Form.Get("thread_ts") == "" {
				t.Errorf("after the restart, a new root: %.200s", c.Form.Get("text"))
			}
			for _, name := range untouched {
				if target := c.Form.Get("ts") + c.Form.Get("thread_ts"); target == rootOf[name] {
					t.Errorf("after the restart, %s touched %q: %.200s", c.Method, name, c.Form.Get("text"))
				}
			}
		}
	}
	check("resolved", "open")

	heal("open")
	rec.WaitFor(t, 60*time.Second, func(r *slackrec.Recorder) bool { return resolved(r, "open") })
	check("resolved")
	t.Logf("after the restart: %d Slack calls", len(rec.Calls())-mark)
}

// valueOr is the first submatch of m, or def when there is none.
func valueOr(m []string, def string) string {
	if len(m) < 2 {
		return def
	}
	return m[1]
}
