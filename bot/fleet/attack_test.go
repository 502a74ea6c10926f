package fleet_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/bot"
	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/bot/checkpoint"
	"github.com/hcpbot/hcpbot/bot/command"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/bot/fleet"
	"github.com/hcpbot/hcpbot/bot/fleet/wire"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/partition"
)

// forged is what an attacker wants a command to show: a diagnosis of
// cluster 1 with its own fix, an incident, a status line.
func forged(t *testing.T) []byte {
	t.Helper()
	k := key(1)
	d := diagnose.Diagnosis{Rule: diagnose.RuleProxyTunnel, Severity: diagnose.SeverityCritical, Title: "FORGED: apply the attacker's noProxy",
		RootCause: "FORGED", Fix: &diagnose.Fix{Kind: "noproxy", Diff: "FORGED"}}
	data, err := fleet.Encode(fleet.Answer{
		Clusters: []diagnose.Key{k}, Known: true, Explained: true, Diagnoses: []diagnose.Diagnosis{d},
		Incidents: []bot.Incident{{Key: "inc-FORGED", Cluster: k, Opened: at, Diagnoses: []diagnose.Diagnosis{d}}},
		Status:    []command.StatusLine{{Key: k, State: "FORGED"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func hexSum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// rogue answers every request to group 1 of 2 with what forge makes of
// it, on a connection of the bot's NATS user: its seed is stolen, its
// signing key is not.
// It returns how many requests it heard so far.
func (f *fixture) rogue(t *testing.T, forge func(nc *nats.Conn, request []byte) [][]byte) func() int64 {
	t.Helper()
	nc := f.connect(bus.BotRole()).NC
	var heard atomic.Int64
	sub, err := nc.Subscribe(wire.Subject(2, 1), func(m *nats.Msg) {
		heard.Add(1)
		for _, msg := range forge(nc, m.Data) {
			_ = nc.Publish(m.Reply, msg)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe(); _ = nc.Flush() })
	return heard.Load
}

// relay asks subject the very request and returns the chunks of the
// first answer.
func relay(t *testing.T, nc *nats.Conn, subject string, request []byte) [][]byte {
	inbox := wire.AnswerPrefix + ".rogue" + hexSum(request)[:8]
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Error(err)
		return nil
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishMsg(&nats.Msg{Subject: subject, Reply: inbox, Data: request}); err != nil {
		t.Error(err)
		return nil
	}
	var out [][]byte
	for {
		m, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Errorf("relay from %s: %v", subject, err)
			return out
		}
		out = append(out, m.Data)
		head, _, _ := strings.Cut(string(m.Data), "\n")
		var h wire.Header
		if err := json.Unmarshal([]byte(head), &h); err != nil || len(out) >= h.Total {
			return out
		}
	}
}

// Whoever holds the bot's NATS seed but not its signing key subscribes to
// group 1's subject while group 1 is down, and answers every request:
// with an unsealed answer, one sealed by its own key, one sealed by its
// own key but claiming the bot's, group 1's genuine answer to another
// request (another nonce) replayed, group 0's genuine answer to the very
// request relayed as group 1's, and a genuine checkpoint seal (the bot's
// key, another context) on its bytes. No command shows what it forged:
// each says group 1 did not answer.
func TestI30AttackBotSeedForgesFleetAnswers(t *testing.T) {
	f := newFixture(t, 4)
	h0 := &command.Handler{Bot: f.client(0, time.Second)}
	attacker, err := approval.NewEphemeralSigner()
	if err != nil {
		t.Fatal(err)
	}
	lie := forged(t)
	maxPayload := int(f.conns[0].NC.MaxPayload())
	// Captured while group 1 was up: its genuine answers to the
	// attacker's own requests.
	captured := map[string][][]byte{}
	spy := f.connect(bus.BotRole()).NC
	for _, op := range []string{fleet.OpClusters, fleet.OpStatus, fleet.OpIncidents} {
		req, err := fleet.NewRequest(op)
		if err != nil {
			t.Fatal(err)
		}
		if captured[op] = relay(t, spy, wire.Subject(2, 1), req); len(captured[op]) == 0 {
			t.Fatalf("no genuine answer of group 1 to %s captured", op)
		}
	}
	manifest, err := checkpoint.SealManifest(f.signer.ForCheckpoints(), "bot-p2-1", checkpoint.Manifest{Format: 1, Seq: 1})
	if err != nil {
		t.Fatal(err)
	}
	var ckpt struct {
		Key string `json:"key"`
		Sig []byte `json:"sig"`
	}
	if err := json.Unmarshal(manifest, &ckpt); err != nil {
		t.Fatal(err)
	}
	f.servers[1].Stop()

	header := func(request []byte) wire.Header {
		return wire.Header{Count: 2, Group: 1, Request: wire.RequestDigest(request), Replica: "rogue", Answer: hexSum(lie), Total: 1, Sum: hexSum(lie)}
	}
	one := func(h wire.Header) [][]byte {
		msg, err := wire.Marshal(wire.Chunk{Header: h, Data: lie})
		if err != nil {
			t.Error(err)
		}
		return [][]byte{msg}
	}
	attacks := []struct {
		name  string
		forge func(nc *nats.Conn, request []byte) [][]byte
	}{
		{"unsealed", func(_ *nats.Conn, request []byte) [][]byte { return one(header(request)) }},
		{"sealed by the attacker's key", func(_ *nats.Conn, request []byte) [][]byte {
			out, err := wire.Seal(attacker.ForFleet(), 2, 1, request, "rogue", lie, maxPayload)
			if err != nil {
				t.Error(err)
			}
			return out
		}},
		{"sealed by the attacker's key, claiming the bot's", func(_ *nats.Conn, request []byte) [][]byte {
			h := header(request)
			sig, err := attacker.ForFleet().Sign(signedInput(h))
			if err != nil {
				t.Error(err)
			}
			h.Key, h.Sig = f.signer.PublicKey(), sig
			return one(h)
		}},
		{"group 1's genuine answer to another request replayed", func(_ *nats.Conn, request []byte) [][]byte {
			op, _ := fleet.RequestOp(request)
			if c := captured[op]; c != nil {
				return c
			}
			return captured[fleet.OpClusters]
		}},
		{"group 0's genuine answer to the very request relayed as group 1's", func(nc *nats.Conn, request []byte) [][]byte {
			return relay(t, nc, wire.Subject(2, 0), request)
		}},
		{"a checkpoint's seal by the bot's key", func(_ *nats.Conn, request []byte) [][]byte {
			h := header(request)
			h.Key, h.Sig = ckpt.Key, ckpt.Sig
			return one(h)
		}},
	}
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			heard := f.rogue(t, a.forge)
			for _, cmd := range []chatops.Command{diagnoseCmd(1), chatops.Status{}, chatops.Incidents{}} {
				got := ask(h0, cmd)
				if strings.Contains(got, "FORGED") || !strings.Contains(got, "group 1 of 2 did not answer") {
					t.Errorf("%s, answered %s: the command shows\n%s", cmd.Name(), a.name, got)
				}
				if cmd.Name() != "diagnose" && strings.Contains(got, key(1).String()) {
					t.Errorf("%s lists a cluster of group 1 from a %s:\n%s", cmd.Name(), a.name, got)
				}
			}
			if heard() == 0 {
				t.Error("the rogue heard no request: nothing was tried")
			}
		})
	}
}

// signedInput is what wire seals: the context and the header line.
func signedInput(h wire.Header) []byte {
	line := []string{strconv.Itoa(h.Count), strconv.Itoa(h.Group), h.Request, h.Replica, h.Answer, strconv.Itoa(h.Index), strconv.Itoa(h.Total), h.Sum}
	return []byte(wire.SigningContext + strings.Join(line, " ") + "\n")
}

// A rogue answering faster than the genuine group changes nothing: the
// client waits for the first valid answer and ignores the others.
func TestI30AttackRogueAnswersBesideTheGroup(t *testing.T) {
	f := newFixture(t, 4)
	lie := forged(t)
	f.rogue(t, func(_ *nats.Conn, request []byte) [][]byte {
		h := wire.Header{Count: 2, Group: 1, Request: wire.RequestDigest(request), Replica: "rogue", Answer: hexSum(lie), Total: 1, Sum: hexSum(lie)}
		msg, _ := wire.Marshal(wire.Chunk{Header: h, Data: lie})
		return [][]byte{msg}
	})
	h0 := &command.Handler{Bot: f.client(0, 10*time.Second)}
	own1 := &command.Handler{Bot: f.bots[1]}
	if got, want := ask(h0, diagnoseCmd(1)), ask(own1, diagnoseCmd(1)); got != want {
		t.Errorf("diagnose beside a rogue:\n%s\nwant group 1's own answer:\n%s", got, want)
	}
	if got := ask(h0, chatops.Incidents{}); strings.Contains(got, "FORGED") || strings.Contains(got, "did not answer") {
		t.Errorf("incidents beside a rogue:\n%s", got)
	}
}

// The agent's NATS user can neither hear the bot groups' requests nor
// answer them: the server refuses its subscription and its publications
// on the fleet's subjects (explicit deny), and a command is answered by
// the genuine group only.
func TestI30AttackAgentCannotHearOrAnswerFleet(t *testing.T) {
	f := newFixture(t, 4)
	agent := f.connect(bus.AgentRole("mgmt-0")).NC
	refused := func(what, subject string) {
		t.Helper()
		if err := agent.Flush(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			err := agent.LastError()
			if err != nil && strings.Contains(strings.ToLower(err.Error()), "permissions violation for "+what) && strings.Contains(err.Error(), subject) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s %s: not refused (last error %v)", what, subject, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	heard, err := agent.SubscribeSync(wire.Filter)
	if err != nil {
		t.Fatal(err)
	}
	refused("subscription", wire.Filter)
	if err := agent.Publish(wire.Subject(2, 1), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	refused("publish", wire.Subject(2, 1))
	if err := agent.Publish(wire.AnswerPrefix+".x", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	refused("publish", wire.AnswerPrefix+".x")
	// A command goes out and is answered; the agent heard none of it.
	h0 := &command.Handler{Bot: f.client(0, 10*time.Second)}
	if got := ask(h0, chatops.Status{}); !strings.Contains(got, key(1).String()) {
		t.Fatalf("status:\n%s", got)
	}
	if m, err := heard.NextMsg(100 * time.Millisecond); err == nil {
		t.Errorf("the agent heard %s", m.Subject)
	}
}

// A flood of requests from the bot's NATS seed costs a server at most
// Concurrency answers at a time: the others are dropped, not queued;
// requests whose reply subject is outside the fleet's are refused (the
// bot never publishes its answers onto a subject of the requester's
// choice). Afterwards the group answers as before.
func TestI30AttackFleetFloodIsBounded(t *testing.T) {
	f := newFixture(t, 4)
	f.servers[1].Stop()
	srv, err := fleet.NewServer(fleet.ServerConfig{Group: partition.ID{Index: 1, Count: 2}, Bot: f.bots[1], Conn: f.connect(bus.BotRole()).NC,
		Signer: f.signer.ForFleet(), Concurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	flood := f.connect(bus.BotRole()).NC
	const n, offside = 300, 10
	for range n {
		req, err := fleet.NewRequest(fleet.OpStates)
		if err != nil {
			t.Fatal(err)
		}
		if err := flood.PublishMsg(&nats.Msg{Subject: wire.Subject(2, 1), Reply: wire.AnswerPrefix + ".flood", Data: req}); err != nil {
			t.Fatal(err)
		}
	}
	for range offside {
		req, _ := fleet.NewRequest(fleet.OpStates)
		if err := flood.PublishMsg(&nats.Msg{Subject: wire.Subject(2, 1), Reply: "hcpbot.actions.mgmt-1.request", Data: req}); err != nil {
			t.Fatal(err)
		}
	}
	if err := flood.Flush(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		s := srv.Stats()
		if s.Answered+s.Dropped+s.Refused+s.Failed == n+offside {
			t.Logf("flood of %d: %+v", n, s)
			if s.MaxInFlight > 2 {
				t.Errorf("%d answers made at once, concurrency 2", s.MaxInFlight)
			}
			if s.Refused != offside || s.Failed != 0 {
				t.Errorf("%d requests refused, %d failed; want the %d with a reply outside the fleet's subjects refused", s.Refused, s.Failed, offside)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("flood not handled: %+v", s)
		}
		time.Sleep(20 * time.Millisecond)
	}
	h0 := &command.Handler{Bot: f.client(0, 10*time.Second)}
	if got := ask(h0, chatops.Status{}); !strings.Contains(got, key(1).String()) || strings.Contains(got, "did not answer") {
		t.Errorf("status after the flood:\n%s", got)
	}
}
