package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
	"github.com/hcpbot/hcpbot/partition"
)

// partitionSources are two management cluster names the hash puts in the
// groups 0 and 1 of two: a bot.partitionMap that swaps them shows the map
// read (the hash alone would place them the other way).
func partitionSources() (byHashIn0, byHashIn1 string) {
	two := partition.Set{Count: 2}
	for i := 0; byHashIn0 == "" || byHashIn1 == ""; i++ {
		src := fmt.Sprintf("mgmt-pt-%d", i)
		if two.Of(src) == 0 && byHashIn0 == "" {
			byHashIn0 = src
		} else if two.Of(src) == 1 && byHashIn1 == "" {
			byHashIn1 = src
		}
	}
	return byHashIn0, byHashIn1
}

// TestBotPartitionsAtRuntime: bot.partitions, bot.partition and
// bot.partitionMap, with HCPBOT_PARTITION over bot.partition. The file
// says partitions 2, partition 1, and a map putting a (hash: group 0) in
// group 1 and b (hash: group 1) in group 0; the environment says
// partition 0. `hcpbot bot` then holds the lease of group 0 of 2
// ("bot-p2-0", not "bot"), posts b's incident and consumes none of a's
// events (skipped before decoding: events consumed are b's alone, counted
// when b's incident is posted, after a's were read).
func TestBotPartitionsAtRuntime(t *testing.T) {
	srv := natstest.RunServer(t)
	rec := slackrec.New(t)
	opsAddr := freeAddr(t)
	a, b := partitionSources()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	const ch = "C0PARTIT01"
	startBot(t, fmt.Sprintf(`nats:
  urls: [%q]
bot:
  listen: %q
  opsListen: %q
  groupWait: 0s
  defaultChannel: %s
  partitions: 2
  partition: 1
  partitionMap:
    %s: 1
    %s: 0
slack:
  apiURL: %q
  botTokenEnv: TEST_SLACK_BOT_TOKEN
  signingSecretEnv: TEST_SLACK_SIGNING_SECRET
approvals:
  approvers: [U0PARTAPP1, U0PARTAPP2]
  signingKeyEnv: TEST_PART_SIGNING_KEY
`, srv.ClientURL(), freeAddr(t), opsAddr, ch, a, b, rec.APIURL()),
		map[string]string{"TEST_SLACK_BOT_TOKEN": "xoxb-0000-partitions", "TEST_SLACK_SIGNING_SECRET": "test-signing-secret-partitions",
			"TEST_PART_SIGNING_KEY": string(seed), "HCPBOT_PARTITION": "0"})
	waitReady(t, opsAddr)

	ctx := context.Background()
	conn, err := bus.Connect(ctx, bus.Config{URLs: []string{srv.ClientURL()}}, natstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// a's events first: the bot reads them before b's.
	now := time.Now()
	evA := nodesNotReadyEvents(t, a, event.ClusterRef{Namespace: "pt", Name: "hc-a"}, now)
	evB := nodesNotReadyEvents(t, b, event.ClusterRef{Namespace: "pt", Name: "hc-b"}, now)
	if err := scenario.Publish(ctx, conn.JS, append(evA, evB...)); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, 60*time.Second, func(r *slackrec.Recorder) bool { return len(rootsIn(r, ch)) >= 1 })
	if rs := rootsIn(rec, ch); len(rs) != 1 || !strings.Contains(rs[0].Text, "pt/hc-b") {
		t.Errorf("roots %v, want b's incident alone", texts(rs))
	}
	if got := metricSum(metricsOf(t, opsAddr), "hcpbot_bot_events_consumed_total"); got != float64(len(evB)) {
		t.Errorf("%v events consumed, want b's %d (a's %d skipped)", got, len(evB), len(evA))
	}
	kv, err := conn.JS.KeyValue(ctx, bus.LeasesBucket)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the lease bot-p2-0 held", func() bool {
		_, err := kv.Get(ctx, "bot-p2-0")
		return err == nil
	})
	if _, err := kv.Get(ctx, "bot"); err == nil {
		t.Error("the lease of one group (bot) is held too")
	}
}

// TestConfigCheckPartitions: `config check` refuses partitions the bot and
// NATS could not agree on, naming the field; `hcpbot bot --partition`
// refuses a group that does not exist; `config nats-mapping` prints the
// mapping and each listed agent's permission for its tag.
func TestConfigCheckPartitions(t *testing.T) {
	const base = "bot:\n  defaultChannel: C0PARTCHK1\n%s\nslack:\n  botTokenEnv: T\n  signingSecretEnv: S\n%s"
	const signing = "approvals:\n  approvers: [U0PARTAPP1, U0PARTAPP2]\n  signingKeyEnv: K\n"
	for _, tc := range []struct {
		bot, approvals, field, says string
	}{
		{"  partitions: 0", signing, "bot.partitions", "at least 1"},
		{"  partitions: 2\n  partition: 2", signing, "bot.partition", "below bot.partitions"},
		{"  partitions: 2\n  partitionMap: {mgmt-1: 2}", signing, "bot.partitionMap.mgmt-1", "below bot.partitions"},
		{"  partitionMap: {mgmt-1: 0}", signing, "bot.partitionMap", "2 or more"},
		{"  partitions: 2\n  partitionMap: {MGMT: 0}", signing, "bot.partitionMap.MGMT", "management cluster"},
		{"  partitions: 2", "", "bot.partitions", "signingKey"},
	} {
		path := configFile(t, fmt.Sprintf(base, tc.bot, tc.approvals))
		code, stdout, stderr := run(t, "config", "check", "--secrets=false", "--config", path)
		if out := stdout + stderr; code == 0 || !strings.Contains(out, tc.field+": ") || !strings.Contains(out, tc.says) {
			t.Errorf("%q: exit %d, want non-zero naming %s (%s):\n%s", tc.bot, code, tc.field, tc.says, out)
		}
	}

	a, b := partitionSources()
	path := configFile(t, fmt.Sprintf(base, "  partitions: 2\n  partitionMap: {"+a+": 1}", signing))
	if code, stdout, stderr := run(t, "bot", "--config", path, "--partition", "2"); code == 0 || !strings.Contains(stdout+stderr, "--partition 2") {
		t.Errorf("--partition 2 of 2: exit %d:\n%s%s", code, stdout, stderr)
	}
	code, stdout, stderr := run(t, "config", "nats-mapping", "--config", path, "--agents", b)
	if code != 0 {
		t.Fatalf("config nats-mapping: exit %d:\n%s%s", code, stdout, stderr)
	}
	for _, want := range []string{
		"mappings: {",
		fmt.Sprintf("%q: %q", "hcpbot.events."+a+".*.*.*", "hcpbot.events."+a+".{{wildcard(1)}}.{{wildcard(2)}}.{{wildcard(3)}}.2.1"),
		fmt.Sprintf("%q", "hcpbot.events."+a+".*.*.*.2.1"),
		// b is not in the static map: stored untagged, placed by the hash.
		"agent " + b + ": stored untagged",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("config nats-mapping lacks %s:\n%s", want, stdout)
		}
	}
	hash := configFile(t, fmt.Sprintf(base, "  partitions: 3", signing))
	if code, stdout, _ := run(t, "config", "nats-mapping", "--config", hash, "--agents", a); code != 0 ||
		!strings.Contains(stdout, `"hcpbot.events.*.*.*.*": "hcpbot.events.{{wildcard(1)}}.{{wildcard(2)}}.{{wildcard(3)}}.{{wildcard(4)}}.3.{{partition(3,1)}}"`) ||
		!strings.Contains(stdout, fmt.Sprintf("%q", fmt.Sprintf("hcpbot.events.%s.*.*.*.3.%d", a, partition.Set{Count: 3}.Of(a)))) {
		t.Errorf("config nats-mapping, hash of 3: exit %d:\n%s", code, stdout)
	}
}
