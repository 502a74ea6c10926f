package chatops

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/bot/blockkit"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"github.com/slack-go/slack"
	"github.com/slack-go/slack/socketmode"
)

type ack struct {
	id      string
	payload any
}

// fakeAcker records acknowledgements like *socketmode.Client.AckCtx would send them.
type fakeAcker struct {
	mu   sync.Mutex
	acks []ack
	fail func(payload any) error
}

func (f *fakeAcker) AckCtx(_ context.Context, id string, payload any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		if err := f.fail(payload); err != nil {
			return err
		}
	}
	f.acks = append(f.acks, ack{id, payload})
	return nil
}

func (f *fakeAcker) all() []ack {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]ack(nil), f.acks...)
}

func (f *fakeAcker) waitFor(t *testing.T, n int) []ack {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for len(f.all()) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d acks, want %d", len(f.all()), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return f.all()
}

type socketEnv struct {
	rec    *slackrec.Recorder
	h      *fakeHandler
	s      *socketServer
	ack    *fakeAcker
	events chan socketmode.Event
	runErr chan error
	done   chan error
	cancel context.CancelFunc
}

func newSocketEnv(t *testing.T, h *fakeHandler, opts ...Option) *socketEnv {
	t.Helper()
	rec := slackrec.New(t)
	responder, err := NewResponder(rec.APIURL()+"response/", nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := newSocketServer(h, zerolog.Nop(), append([]Option{WithResponder(responder)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &socketEnv{rec: rec, h: h, s: s, ack: &fakeAcker{}, events: make(chan socketmode.Event),
		runErr: make(chan error, 1), done: make(chan error, 1), cancel: cancel}
	go func() { e.done <- s.serve(ctx, e.events, e.ack, e.runErr) }()
	t.Cleanup(func() {
		cancel()
		if err := <-e.done; err != nil {
			t.Errorf("serve: %v", err)
		}
		_ = s.d.shutdown(context.Background())
	})
	return e
}

func slashEvent(envelope, text, responseURL string) socketmode.Event {
	return socketmode.Event{
		Type: socketmode.EventTypeSlashCommand,
		Data: slack.SlashCommand{Command: "/hcp", Text: text, TeamID: slackrec.TeamID, UserID: "U0ALICE", UserName: "alice",
			ChannelID: "C0OPS", ResponseURL: responseURL, TriggerID: "1.2.abc"},
		Request: &socketmode.Request{Type: socketmode.RequestTypeSlashCommands, EnvelopeID: envelope, AcceptsResponsePayload: true},
	}
}

func pressEvent(envelope, actionID, value, responseURL string) socketmode.Event {
	ic := slackrec.ButtonPress(slackrec.Press{UserID: "U0BOB", UserName: "bob", ChannelID: "C0OPS", MessageTS: "1712345678.000100",
		ActionID: actionID, Value: value, ResponseURL: responseURL})
	return socketmode.Event{
		Type: socketmode.EventTypeInteractive, Data: *ic,
		Request: &socketmode.Request{Type: socketmode.RequestTypeInteractive, EnvelopeID: envelope},
	}
}

func TestSocketModeCommand(t *testing.T) {
	e := newSocketEnv(t, newFakeHandler())
	e.events <- slashEvent("env-1", "diagnose mgmt-1:clusters/example", e.rec.ResponseURL("C0OPS"))
	acks := e.ack.waitFor(t, 1)
	w, ok := acks[0].payload.(wireReply)
	if acks[0].id != "env-1" || !ok || w.Text != "echo: diagnose mgmt-1:clusters/example" || w.ResponseType != "ephemeral" {
		t.Fatalf("ack = %#v", acks[0])
	}
	cmds := e.h.commands()
	if len(cmds) != 1 || cmds[0].Transport != TransportSocketMode || cmds[0].UserID != "U0ALICE" || cmds[0].ChannelID != "C0OPS" ||
		cmds[0].TriggerID != "1.2.abc" || !strings.HasPrefix(cmds[0].ResponseURL, e.rec.APIURL()) {
		t.Errorf("requests = %#v", cmds)
	}
	if n := testutil.ToFloat64(e.s.m.accepted.WithLabelValues("socket_commands")); n != 1 {
		t.Errorf("accepted = %v", n)
	}

	// Slack redelivers the envelope: acknowledged again, not run again.
	e.events <- slashEvent("env-1", "diagnose mgmt-1:clusters/example", e.rec.ResponseURL("C0OPS"))
	acks = e.ack.waitFor(t, 2)
	if acks[1].id != "env-1" || acks[1].payload != nil || e.h.called() != 1 {
		t.Errorf("redelivery: ack %#v, handler calls %d", acks[1], e.h.called())
	}
	if n := testutil.ToFloat64(e.s.m.rejected.WithLabelValues(reasonReplay)); n != 1 {
		t.Errorf("replays = %v", n)
	}
}

func TestSocketModeUsageErrorAndRejects(t *testing.T) {
	e := newSocketEnv(t, newFakeHandler())
	e.events <- slashEvent("env-u", "status clusters/example;id", e.rec.ResponseURL("C0OPS"))
	e.events <- slashEvent("env-r", "status", "https://attacker.example/x")
	e.events <- pressEvent("env-a", "hcp_format_disk", "act-7f3k9q", e.rec.ResponseURL("C0OPS"))
	e.events <- socketmode.Event{Type: socketmode.EventTypeEventsAPI, Request: &socketmode.Request{Type: "events_api", EnvelopeID: "env-e"}}
	e.events <- socketmode.Event{Type: socketmode.EventTypeConnected} // no envelope: logged only
	acks := e.ack.waitFor(t, 4)
	byID := map[string]any{}
	for _, a := range acks {
		byID[a.id] = a.payload
	}
	if w, ok := byID["env-u"].(wireReply); !ok || !strings.Contains(w.Text, "Usage: `/hcp status") {
		t.Errorf("usage ack = %#v", byID["env-u"])
	}
	for _, id := range []string{"env-r", "env-a", "env-e"} {
		if p, found := byID[id]; !found || p != nil {
			t.Errorf("%s: ack %#v (found %v), want an empty ack", id, p, found)
		}
	}
	if e.h.called() != 0 {
		t.Errorf("handler called %d times", e.h.called())
	}
	for _, r := range []string{reasonBadResponseURL, reasonUnknownAction} {
		if n := testutil.ToFloat64(e.s.m.rejected.WithLabelValues(r)); n != 1 {
			t.Errorf("rejected{%s} = %v", r, n)
		}
	}
}

func TestSocketModeActionAndSlowCommand(t *testing.T) {
	h := newFakeHandler()
	h.delay = 800 * time.Millisecond
	e := newSocketEnv(t, h, WithAckTimeout(50*time.Millisecond))
	e.events <- pressEvent("env-p", blockkit.ActionSilence, "inc-0a1b2c", e.rec.ResponseURL("C0OPS"))
	e.events <- slashEvent("env-s", "incidents", e.rec.ResponseURL("C0OPS"))
	acks := e.ack.waitFor(t, 2)
	for _, a := range acks {
		switch a.id {
		case "env-p":
			if a.payload != nil {
				t.Errorf("action ack payload %#v", a.payload)
			}
		case "env-s":
			if w, _ := a.payload.(wireReply); w.Text != workingReply.Text {
				t.Errorf("slow command ack %#v", a.payload)
			}
		}
	}
	e.rec.WaitFor(t, 5*time.Second, func(r *slackrec.Recorder) bool {
		return len(r.CallsTo(slackrec.MethodResponseURL)) == 2
	})
	texts := map[string]bool{}
	for _, c := range e.rec.CallsTo(slackrec.MethodResponseURL) {
		texts[c.Form.Get("text")] = true
	}
	if !texts["echo: incidents"] || !texts["echo: hcp_silence inc-0a1b2c"] {
		t.Errorf("posts = %v", texts)
	}
	if acts := h.actions(); len(acts) != 1 || acts[0].Transport != TransportSocketMode || acts[0].Value != "inc-0a1b2c" {
		t.Errorf("actions = %#v", acts)
	}
}

func TestSocketModeOversizedAck(t *testing.T) {
	h := newFakeHandler()
	h.reply = func(any) Reply { return Reply{Text: strings.Repeat("x", 25<<10)} }
	e := newSocketEnv(t, h)
	e.ack.fail = func(p any) error {
		if p != nil {
			return errors.New("socket mode response too large")
		}
		return nil
	}
	e.events <- slashEvent("env-big", "audit", e.rec.ResponseURL("C0OPS"))
	if acks := e.ack.waitFor(t, 1); acks[0].payload != nil {
		t.Errorf("ack %#v", acks[0])
	}
	e.rec.WaitFor(t, 5*time.Second, func(r *slackrec.Recorder) bool {
		return len(r.CallsTo(slackrec.MethodResponseURL)) == 1
	})
}

func TestSocketModeClientGivesUp(t *testing.T) {
	s, err := newSocketServer(newFakeHandler(), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	runErr := make(chan error, 1)
	runErr <- errors.New("invalid_auth")
	if err := s.serve(context.Background(), nil, &fakeAcker{}, runErr); err == nil || !strings.Contains(err.Error(), "invalid_auth") {
		t.Errorf("serve = %v", err)
	}
}

// TestRunSocketModeLoopback drives RunSocketMode end to end against
// slackrec's Socket Mode stand-in: apps.connections.open hands out a ws://
// URL, whose server sends hello, one slash command and one button press
// as Slack's Socket Mode does, and reads the acknowledgements.
func TestRunSocketModeLoopback(t *testing.T) {
	rec := slackrec.New(t)
	api := slack.New("xoxb-test", slack.OptionAppLevelToken("xapp-test"), slack.OptionAPIURL(rec.APIURL()))
	client := socketmode.New(api)
	h := newFakeHandler()
	responder, _ := NewResponder(rec.APIURL()+"response/", nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- RunSocketMode(ctx, client, h, zerolog.Nop(), WithResponder(responder)) }()

	conn := rec.Socket(t, "xapp-test", 10*time.Second)
	if err := conn.Send("slash_commands", "env-cmd", slack.SlashCommand{Command: "/hcp", Text: "status clusters/example", TeamID: slackrec.TeamID,
		UserID: "U0ALICE", UserName: "alice", ChannelID: "C0OPS", ResponseURL: rec.ResponseURL("C0OPS"), TriggerID: "1.2.abc"}); err != nil {
		t.Fatal(err)
	}
	if err := conn.Send("interactive", "env-btn", slackrec.ButtonPress(slackrec.Press{UserID: "U0BOB", ChannelID: "C0OPS",
		ActionID: blockkit.ActionApprove, Value: "act-7f3k9q", ResponseURL: rec.ResponseURL("C0OPS")})); err != nil {
		t.Fatal(err)
	}
	var reply wireReply
	if got := conn.Ack(t, "env-cmd", 10*time.Second); json.Unmarshal(got, &reply) != nil || reply.Text != "echo: status clusters/example" {
		t.Errorf("command ack %s", got)
	}
	if p := conn.Ack(t, "env-btn", 10*time.Second); len(p) != 0 {
		t.Errorf("button ack %q", p)
	}
	rec.WaitFor(t, 5*time.Second, func(r *slackrec.Recorder) bool {
		return len(r.CallsTo(slackrec.MethodResponseURL)) == 1
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("RunSocketMode = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("RunSocketMode did not return after cancel")
	}
}
