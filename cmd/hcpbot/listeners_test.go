package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/hcpbot/hcpbot/bot/blockkit"
	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/internal/testenv"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
	"github.com/hcpbot/hcpbot/internal/testenv/syncbuf"
)

// startBot runs `hcpbot bot` in this process with the config text and the
// environment vars until the test ends; it must then exit 0 without a
// value of vars in its logs.
func startBot(t *testing.T, config string, vars map[string]string) *syncbuf.Buffer {
	t.Helper()
	return startMode(t, "bot", config, vars)
}

// startMode is startBot for `hcpbot <mode>` (bot or all).
func startMode(t *testing.T, mode, config string, vars map[string]string) *syncbuf.Buffer {
	t.Helper()
	return startModeFor(t, t, mode, config, vars)
}

// startModeFor is startMode running until owner ends (a parent test whose
// subtests share the process).
func startModeFor(t, owner *testing.T, mode, config string, vars map[string]string) *syncbuf.Buffer {
	t.Helper()
	path := filepath.Join(t.TempDir(), "hcpbot.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	logs := &syncbuf.Buffer{}
	done := make(chan int, 1)
	go func() {
		c := &cli{stdin: strings.NewReader(""), stdout: logs, stderr: logs, getenv: func(k string) string { return vars[k] }}
		done <- c.main(ctx, []string{mode, "--config", path})
	}()
	owner.Cleanup(func() {
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				owner.Errorf("hcpbot %s exited %d:\n%s", mode, code, tail(logs.String(), 4000))
			}
		case <-time.After(30 * time.Second):
			owner.Errorf("hcpbot %s did not stop; logs (tail):\n%s", mode, tail(logs.String(), 4000))
		}
		for k, v := range vars {
			if strings.Contains(k, "TOKEN") || strings.Contains(k, "SECRET") {
				if strings.Contains(logs.String(), v) {
					owner.Errorf("%s reached the logs", k)
				}
			}
		}
	})
	return logs
}

// waitReady polls GET /readyz on addr until it answers 200.
func waitReady(t *testing.T, addr string) {
	t.Helper()
	testenv.Eventually(t, 60*time.Second, "/readyz on "+addr, func() bool { code, _ := get("http://" + addr + "/readyz"); return code == 200 })
}

// metricSum adds the samples of the metric name whose labels include every
// one of labels (written as in the exposition, `reason="replay"`).
func metricSum(body, name string, labels ...string) float64 {
	var sum float64
	for line := range strings.SplitSeq(body, "\n") {
		series, v, found := strings.Cut(line, " ")
		if !found || (series != name && !strings.HasPrefix(series, name+"{")) {
			continue
		}
		matches := true
		for _, l := range labels {
			matches = matches && strings.Contains(series, l)
		}
		if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && matches {
			sum += f
		}
	}
	return sum
}

func metricsOf(t *testing.T, addr string) string {
	t.Helper()
	code, body := get("http://" + addr + "/metrics")
	if code != 200 {
		t.Fatalf("GET /metrics on %s: %d", addr, code)
	}
	return body
}

// Two bot replicas in Socket Mode share one NATS: an envelope Slack
// delivers to replica A and then again to replica B runs once (B
// acknowledges it empty and counts a replay). Late replies go through the
// responder: a button's answer is posted to a response_url under the
// configured Slack host, a response_url elsewhere is refused. With Socket
// Mode and no signing secret no Slack listener is opened.
func TestBotSocketModeReplicasRefuseReplay(t *testing.T) {
	srv := natstest.RunServer(t)
	rec := slackrec.New(t)
	const channel = "C0SOCKET01"
	// bot.listen is held by the test: a bot that tried to serve Slack's
	// HTTP endpoints there would fail to start. (Probing a freed port
	// instead races whatever else on a busy machine takes it.)
	hold, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close()
	slackAddr := hold.Addr().String()
	type replica struct{ name, token, ops string }
	replicas := []replica{{"socket-a", "xapp-1-A0-replica-a", freeAddr(t)}, {"socket-b", "xapp-1-A0-replica-b", freeAddr(t)}}
	for _, r := range replicas {
		startBot(t, fmt.Sprintf(`nats:
  urls: [%q]
bot:
  listen: %q
  opsListen: %q
  groupWait: 0s
  defaultChannel: %s
slack:
  apiURL: %q
  botTokenEnv: TEST_SLACK_BOT_TOKEN
  socketMode: true
  appTokenEnv: TEST_SLACK_APP_TOKEN
log: {level: info, format: json}
`, srv.ClientURL(), slackAddr, r.ops, channel, rec.APIURL()), map[string]string{
			"TEST_SLACK_BOT_TOKEN": "xoxb-0000-socket", "TEST_SLACK_APP_TOKEN": r.token, "POD_NAME": r.name})
	}
	for _, r := range replicas {
		waitReady(t, r.ops)
	}
	a, b := rec.Socket(t, replicas[0].token, 30*time.Second), rec.Socket(t, replicas[1].token, 30*time.Second)

	cmd := slack.SlashCommand{Command: "/hcp", Text: "incidents", TeamID: slackrec.TeamID, UserID: "U0SOCKET01", UserName: "sam",
		ChannelID: channel, ResponseURL: rec.ResponseURL(channel), TriggerID: "1.2.abc"}
	if err := a.Send("slash_commands", "env-replayed-1", cmd); err != nil {
		t.Fatal(err)
	}
	var reply struct{ Text string }
	if p := a.Ack(t, "env-replayed-1", 30*time.Second); json.Unmarshal(p, &reply) != nil || reply.Text == "" {
		t.Fatalf("replica A's ack %s: want the command's reply", p)
	}
	// The same envelope (same envelope_id) reaches replica B.
	if err := b.Send("slash_commands", "env-replayed-1", cmd); err != nil {
		t.Fatal(err)
	}
	if p := b.Ack(t, "env-replayed-1", 30*time.Second); len(p) != 0 {
		t.Errorf("replica B's ack %s: want an empty ack (dropped)", p)
	}
	ma, mb := metricsOf(t, replicas[0].ops), metricsOf(t, replicas[1].ops)
	handled := metricSum(ma, "hcpbot_chatops_requests_total", `kind="command"`) + metricSum(mb, "hcpbot_chatops_requests_total", `kind="command"`)
	if handled != 1 || metricSum(mb, "hcpbot_slack_requests_rejected_total", `reason="replay"`) != 1 ||
		metricSum(ma, "hcpbot_slack_requests_rejected_total", `reason="replay"`) != 0 {
		t.Errorf("commands handled %v (want 1); replays refused by A %v (want 0), by B %v (want 1)", handled,
			metricSum(ma, "hcpbot_slack_requests_rejected_total", `reason="replay"`), metricSum(mb, "hcpbot_slack_requests_rejected_total", `reason="replay"`))
	}

	// A button's answer is posted later to its response_url, through the
	// responder that allows the configured Slack host (rec's here).
	const late = "RSOCKETLATE"
	press := slackrec.ButtonPress(slackrec.Press{UserID: "U0SOCKET01", UserName: "sam", ChannelID: channel, MessageTS: "1712345678.000100",
		ActionID: blockkit.ActionDetails, Value: "inc-0a1b2c", ResponseURL: rec.ResponseURL(late)})
	if err := a.Send("interactive", "env-press-1", press); err != nil {
		t.Fatal(err)
	}
	a.Ack(t, "env-press-1", 30*time.Second)
	rec.WaitFor(t, 30*time.Second, func(r *slackrec.Recorder) bool {
		for _, c := range r.CallsTo(slackrec.MethodResponseURL) {
			if c.Channel == late && strings.Contains(c.Form.Get("text"), "no longer known") {
				return true
			}
		}
		return false
	})
	// Redelivered to B: dropped, nothing posted twice.
	if err := b.Send("interactive", "env-press-1", press); err != nil {
		t.Fatal(err)
	}
	b.Ack(t, "env-press-1", 30*time.Second)
	// A response_url outside the Slack host is refused before any post
	// (loopback, never dialled).
	evil := slackrec.ButtonPress(slackrec.Press{UserID: "U0SOCKET01", UserName: "sam", ChannelID: channel, MessageTS: "1712345678.000100",
		ActionID: blockkit.ActionDetails, Value: "inc-0a1b2c", ResponseURL: "http://127.0.0.1:9/hooks/T0/1/x"})
	if err := b.Send("interactive", "env-press-2", evil); err != nil {
		t.Fatal(err)
	}
	b.Ack(t, "env-press-2", 30*time.Second)
	mb = metricsOf(t, replicas[1].ops)
	if n := metricSum(mb, "hcpbot_slack_requests_rejected_total", `reason="bad_response_url"`); n != 1 {
		t.Errorf("replica B refused %v foreign response_urls, want 1", n)
	}
	if n := metricSum(mb, "hcpbot_slack_requests_rejected_total", `reason="replay"`); n != 2 {
		t.Errorf("replica B refused %v replays, want 2", n)
	}
	if n := metricSum(metricsOf(t, replicas[0].ops), "hcpbot_chatops_response_url_posts_total") +
		metricSum(mb, "hcpbot_chatops_response_url_posts_total"); n != 1 || len(rec.CallsTo(slackrec.MethodResponseURL)) != 1 {
		t.Errorf("response_url posts: %v counted, %d received; want 1", n, len(rec.CallsTo(slackrec.MethodResponseURL)))
	}
}

// The bot in HTTP mode: bot.listen serves /slack/* only, bot.opsListen
// health and metrics; the Slack listener cuts off slow and oversized
// requests, the ops listener slow ones (all on loopback, each bounded).
func TestBotListeners(t *testing.T) {
	srv := natstest.RunServer(t)
	rec := slackrec.New(t)
	const (
		channel = "C0LISTEN01"
		secret  = "listeners-signing-secret"
	)
	slackAddr, opsAddr := freeAddr(t), freeAddr(t)
	startBot(t, fmt.Sprintf(`nats:
  urls: [%q]
bot:
  listen: %q
  opsListen: %q
  defaultChannel: %s
slack:
  apiURL: %q
  botTokenEnv: TEST_SLACK_BOT_TOKEN
  signingSecretEnv: TEST_SLACK_SIGNING_SECRET
log: {level: info, format: json}
`, srv.ClientURL(), slackAddr, opsAddr, channel, rec.APIURL()), map[string]string{
		"TEST_SLACK_BOT_TOKEN": "xoxb-0000-listen", "TEST_SLACK_SIGNING_SECRET": secret, "POD_NAME": "listen-0"})
	waitReady(t, opsAddr)

	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		if code, _ := get("http://" + opsAddr + p); code != 200 {
			t.Errorf("GET %s on opsListen: %d", p, code)
		}
		if code, _ := get("http://" + slackAddr + p); code != http.StatusNotFound {
			t.Errorf("GET %s on the Slack listener: %d, want 404", p, code)
		}
	}
	for _, p := range []string{"/", "/slack/", "/debug/pprof/"} {
		if code, _ := get("http://" + slackAddr + p); code != http.StatusNotFound {
			t.Errorf("GET %s on the Slack listener: %d, want 404", p, code)
		}
	}
	if code, _ := get("http://" + opsAddr + chatops.CommandsPath); code != http.StatusNotFound {
		t.Errorf("GET %s on opsListen: %d, want 404", chatops.CommandsPath, code)
	}
	req, err := slackrec.CommandRequest(context.Background(), "http://"+slackAddr+chatops.CommandsPath, secret,
		slack.SlashCommand{Command: "/hcp", Text: "incidents", UserID: "U0LISTEN01", ChannelID: channel, ResponseURL: rec.ResponseURL(channel)}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("signed /hcp incidents: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}

	// Headers a request must carry to reach the body (the signature is
	// checked after it is read).
	slackHeaders := func() string {
		return "Host: hcpbot\r\nContent-Type: application/x-www-form-urlencoded\r\nX-Slack-Request-Timestamp: " +
			strconv.FormatInt(time.Now().Unix(), 10) + "\r\nX-Slack-Signature: v0=00\r\n"
	}
	t.Run("slow headers", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		closed := trickle(t, slackAddr, "POST /slack/commands HTTP/1.1\r\nHost: hcpbot\r\n", "X-Slow: "+strings.Repeat("a", 1000))
		checkCutOff(t, "headers sent a byte at a time", start, closed, slackLimits.readHeader)
	})
	t.Run("slow headers on the ops listener", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		closed := trickle(t, opsAddr, "GET /metrics HTTP/1.1\r\nHost: hcpbot\r\n", "X-Slow: "+strings.Repeat("a", 1000))
		checkCutOff(t, "ops headers sent a byte at a time", start, closed, opsLimits.readHeader)
	})
	t.Run("slow body", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		closed := trickle(t, slackAddr, "POST /slack/commands HTTP/1.1\r\n"+slackHeaders()+"Content-Length: 2000\r\n\r\n", strings.Repeat("a", 2000))
		checkCutOff(t, "body sent a byte at a time", start, closed, slackLimits.read)
	})
	t.Run("oversized body", func(t *testing.T) {
		t.Parallel()
		conn := dialLoopback(t, slackAddr)
		if _, err := io.WriteString(conn, "POST /slack/commands HTTP/1.1\r\n"+slackHeaders()+"Transfer-Encoding: chunked\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		// Chunks without end; the server must answer and hang up once
		// the body passes the limit instead of reading on.
		written := make(chan int64, 1)
		go func() {
			chunk := fmt.Sprintf("%x\r\n%s\r\n", 4096, strings.Repeat("a", 4096))
			var n int64
			for { // bounded by the connection's deadline
				m, err := io.WriteString(conn, chunk)
				n += int64(m)
				if err != nil {
					break
				}
			}
			written <- n
		}()
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil || resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("oversized body: response %v, %v; want 400", resp, err)
		}
		select {
		case n := <-written:
			t.Logf("client wrote %d bytes before the server hung up (limit %d)", n, chatops.DefaultMaxBodyBytes)
		case <-time.After(30 * time.Second):
			t.Error("the server kept reading an oversized body")
		}
	})
	t.Run("declared oversized body", func(t *testing.T) {
		t.Parallel()
		conn := dialLoopback(t, slackAddr)
		if _, err := io.WriteString(conn, "POST /slack/commands HTTP/1.1\r\n"+slackHeaders()+"Content-Length: 100000000\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		if resp, err := http.ReadResponse(bufio.NewReader(conn), nil); err != nil || resp.StatusCode != http.StatusBadRequest {
			t.Errorf("Content-Length 100 MB: response %v, %v; want 400 before any body", resp, err)
		}
	})
	t.Run("oversized headers", func(t *testing.T) {
		t.Parallel()
		conn := dialLoopback(t, slackAddr)
		if _, err := io.WriteString(conn, "POST /slack/commands HTTP/1.1\r\nHost: hcpbot\r\nX-Big: "+strings.Repeat("a", 64<<10)+"\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		if resp, err := http.ReadResponse(bufio.NewReader(conn), nil); err != nil || resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("64 KiB header: response %v, %v; want 431", resp, err)
		}
	})
}

func dialLoopback(t *testing.T, addr string) net.Conn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(time.Minute)) // the test's own bound
	return conn
}

// trickle sends head at once, then rest one byte every 100 ms, and returns
// when the server closed the connection (a channel closed then).
func trickle(t *testing.T, addr, head, rest string) <-chan struct{} {
	t.Helper()
	conn := dialLoopback(t, addr)
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		// Whatever the server answers (nothing, or 400) it then hangs up.
		_, _ = io.Copy(io.Discard, conn)
	}()
	go func() {
		for i := range len(rest) {
			select {
			case <-closed:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if _, err := conn.Write([]byte{rest[i]}); err != nil {
				return
			}
		}
	}()
	return closed
}

// checkCutOff: the server hung up about after limit, well before the
// trickle would have ended.
func checkCutOff(t *testing.T, what string, start time.Time, closed <-chan struct{}, limit time.Duration) {
	t.Helper()
	select {
	case <-closed:
	case <-time.After(limit + 30*time.Second):
		t.Fatalf("%s: connection still open %v after the %v limit", what, time.Since(start), limit)
	}
	if d := time.Since(start); d < limit-time.Second {
		t.Errorf("%s: cut off after %v, before the %v limit", what, d, limit)
	}
}
