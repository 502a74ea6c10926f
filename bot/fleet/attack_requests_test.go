package fleet_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/bot/command"
	"github.com/hcpbot/hcpbot/bot/fleet"
	"github.com/hcpbot/hcpbot/bot/fleet/wire"
	"github.com/hcpbot/hcpbot/bus"
)

// Attacker 1's subject tricks, with the bot's NATS seed (which hears
// every request, and so every client's reply subject):
//   - its own requests to group 1, replied onto the victim's reply
//     subject: genuine answers, to other requests: ignored;
//   - the victim's very request sent to group 0 with the reply subject
//     of group 1: group 0's genuine answer is no answer of group 1;
//   - a "no responders" status forged onto the victim's reply subject:
//     the group is named as not answering at once (what the server would
//     say; honest about the group, not about why: the residual).
func TestI30AttackAnswerSubjectTricks(t *testing.T) {
	f := newFixture(t, 4)
	spy := f.connect(bus.BotRole()).NC
	mode := make(chan string, 1)
	mode <- "redirect"
	sub, err := spy.Subscribe(wire.Subject(2, 1), func(m *nats.Msg) {
		if op, _ := fleet.RequestOp(m.Data); op == fleet.OpStates {
			return // the spy's own request, heard back
		}
		trick := <-mode
		mode <- trick
		switch trick {
		case "redirect":
			for range 3 {
				own, _ := fleet.NewRequest(fleet.OpStates)
				_ = spy.PublishMsg(&nats.Msg{Subject: wire.Subject(2, 1), Reply: m.Reply, Data: own})
			}
			_ = spy.PublishMsg(&nats.Msg{Subject: wire.Subject(2, 0), Reply: m.Reply, Data: m.Data})
		case "no responders":
			msg := nats.NewMsg(m.Reply)
			msg.Header.Set("Status", "503")
			_ = spy.PublishMsg(msg)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	h0 := &command.Handler{Bot: f.client(0, 10*time.Second)}
	own1 := &command.Handler{Bot: f.bots[1]}
	if got, want := ask(h0, diagnoseCmd(1)), ask(own1, diagnoseCmd(1)); got != want {
		t.Errorf("diagnose with answers redirected onto its reply subject:\n%s\nwant group 1's own:\n%s", got, want)
	}
	if got := ask(h0, chatops.Status{}); !strings.Contains(got, key(1).String()) || strings.Contains(got, "did not answer") {
		t.Errorf("status with answers redirected onto its reply subject:\n%s", got)
	}
	<-mode
	mode <- "no responders"
	start := time.Now()
	got := ask(h0, chatops.Status{})
	if !strings.Contains(got, "group 1 of 2 did not answer") || strings.Contains(got, key(1).String()) {
		t.Errorf("status with a forged no-responders status:\n%s", got)
	}
	t.Logf("forged no-responders: named after %s:\n%s", time.Since(start).Round(time.Millisecond), got)
}

// Requests crafted to make a server work or to pass odd bytes: larger
// than maxRequest (4 KB; NATS would carry 1 MB), an unknown field, an
// unknown operation, no nonce, a cluster request without its key. Each
// is refused before any answer is made; nothing reaches the reply
// subject.
func TestI30AttackCraftedRequestsRefused(t *testing.T) {
	f := newFixture(t, 2)
	nc := f.connect(bus.BotRole()).NC
	inbox := wire.AnswerPrefix + ".crafted"
	heard, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	nonce := strings.Repeat("ab", 16)
	req := func(v map[string]any) []byte {
		data, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	crafted := map[string][]byte{
		"1 MB":            req(map[string]any{"nonce": nonce + strings.Repeat("0", 1<<20-200), "op": "states"}),
		"unknown field":   req(map[string]any{"nonce": nonce, "op": "states", "all": true}),
		"unknown op":      req(map[string]any{"nonce": nonce, "op": "diagnose-everything"}),
		"no nonce":        req(map[string]any{"op": "states"}),
		"cluster, no key": req(map[string]any{"nonce": nonce, "op": "cluster"}),
		"not JSON":        []byte("\x1f\x8b garbage"),
		"trailing bytes":  append(req(map[string]any{"nonce": nonce, "op": "clusters"}), req(map[string]any{"nonce": nonce, "op": "states"})...),
	}
	// One at a time, each until the server has dealt with it: refused,
	// or (the 1 MB one) dropped by the client library, over the
	// subscription's pending bytes.
	for name, data := range crafted {
		before := f.servers[1].Stats()
		if err := nc.PublishMsg(&nats.Msg{Subject: wire.Subject(2, 1), Reply: inbox, Data: data}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(2 * time.Second)
		for f.servers[1].Stats() == before && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if s := f.servers[1].Stats(); s.Answered != before.Answered || s.Failed != before.Failed {
			t.Errorf("%s: answered: %+v", name, s)
		}
	}
	if m, err := heard.NextMsg(200 * time.Millisecond); err == nil {
		head, _, _ := strings.Cut(string(m.Data), "\n")
		t.Errorf("a crafted request was answered: %.120s", head)
	}
}

// Attacker 3, a Slack user allowed to type /hcp, no approver: a burst of
// `status` commands (no rate limit per user) fans out to every group,
// and every replica of a group computes each answer. Before the backlog
// the servers answered Concurrency at a time and dropped the rest: 25 of
// 40 commands waited their whole deadline and said group 1 did not
// answer, for answers of milliseconds. Now the burst waits in the
// backlog and every reply is whole; still at most Concurrency answers
// are made at once. (A flood beyond the backlog still misses groups,
// each reply saying so: the residual in docs/security.md.)
func TestI30AttackSlackUserBurstOfFleetCommands(t *testing.T) {
	f := newFixture(t, 4)
	h0 := &command.Handler{Bot: f.client(0, 10*time.Second)}
	const burst = 40
	replies := make(chan string, burst)
	for range burst {
		go func() { replies <- ask(h0, chatops.Status{}) }()
	}
	var whole, named int
	for range burst {
		got := <-replies
		switch {
		case strings.Contains(got, "group 1 of 2 did not answer") && !strings.Contains(got, key(1).String()):
			named++
		case strings.Contains(got, key(1).String()) && strings.Contains(got, key(0).String()) && !strings.Contains(got, "did not answer"):
			whole++
		default:
			t.Errorf("a reply neither whole nor naming the missing group:\n%s", got)
		}
	}
	s := f.servers[1].Stats()
	t.Logf("%d status commands at once: %d whole, %d naming group 1; group 1's server: %+v", burst, whole, named, s)
	if s.MaxInFlight > fleet.DefaultConcurrency {
		t.Errorf("%d answers made at once, concurrency %d", s.MaxInFlight, fleet.DefaultConcurrency)
	}
	if whole != burst {
		t.Errorf("%d of %d commands of a burst answered whole", whole, burst)
	}
}
