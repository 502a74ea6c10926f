package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/hcpbot/hcpbot/internal/testenv"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
)

// A bot whose NATS cannot hold its streams yet (here JetStream is not
// enabled; on a fresh cluster, replies lost to racing creates) does not
// exit: it serves /healthz, says not ready on /readyz with the reason, logs
// the retry once rather than per attempt, and becomes ready, in the same
// process, once JetStream is there.
func TestBotWaitsForJetStreamNotReadyMeanwhile(t *testing.T) {
	srv := natstest.StartOptions(t, &server.Options{Host: "127.0.0.1", Port: -1, NoLog: true})
	rec := slackrec.New(t)
	ops := freeAddr(t)
	logs := startBot(t, fmt.Sprintf(`nats:
  urls: [%q]
bot:
  listen: %q
  opsListen: %q
  defaultChannel: C0ENSURE01
slack:
  apiURL: %q
  botTokenEnv: TEST_SLACK_BOT_TOKEN
  signingSecretEnv: TEST_SLACK_SIGNING_SECRET
log: {level: info, format: json}
`, srv.ClientURL(), freeAddr(t), ops, rec.APIURL()), map[string]string{
		"TEST_SLACK_BOT_TOKEN": "xoxb-0000-ensure", "TEST_SLACK_SIGNING_SECRET": "ensure-signing-secret"})

	testenv.Eventually(t, 30*time.Second, "/readyz to say the bot is starting", func() bool {
		code, body := get("http://" + ops + "/readyz")
		return code == 503 && strings.Contains(body, "streams and buckets not ensured yet")
	})
	if code, _ := get("http://" + ops + "/healthz"); code != 200 {
		t.Errorf("/healthz while ensuring: %d, want 200 (a liveness probe would kill the bot)", code)
	}
	// Several attempts (250ms, 500ms, 1s, … apart), one warning.
	testenv.Eventually(t, 30*time.Second, "a warning that the events stream is retried", func() bool {
		return strings.Contains(logs.String(), "cannot ensure stream HCPBOT_EVENTS yet")
	})
	time.Sleep(3 * time.Second) // lets attempts fail; the count below must not grow with them
	if code, _ := get("http://" + ops + "/readyz"); code != 503 {
		t.Errorf("/readyz without JetStream: %d, want 503", code)
	}
	if err := srv.EnableJetStream(&server.JetStreamConfig{StoreDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	waitReady(t, ops)
	out := logs.String()
	for line := range strings.SplitSeq(out, "\n") {
		if strings.Contains(line, "HCPBOT_EVENTS") {
			t.Log(line)
		}
	}
	warnings := strings.Count(out, "cannot ensure stream HCPBOT_EVENTS yet")
	if warnings < 1 || warnings > 2 {
		t.Errorf("%d retry warnings for the events stream, want one (two if the reason changed):\n%s", warnings, tail(out, 4000))
	}
	if !strings.Contains(out, `"attempts":`) || !strings.Contains(out, "stream HCPBOT_EVENTS ready") {
		t.Errorf("no line saying the stream is ready after retries:\n%s", tail(out, 4000))
	}
	if strings.Contains(out, "retrying stream HCPBOT_EVENTS") {
		t.Errorf("per-attempt lines at info level:\n%s", tail(out, 4000))
	}
}
