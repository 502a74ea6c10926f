package command_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bot/blockkit"
	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/bot/command"
	"github.com/hcpbot/hcpbot/bot/silence"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/internal/testenv"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
)

type silenceEnv struct {
	cmds  *command.Handler
	store *silence.Store
	log   *audit.Log
	now   time.Time
	js    jetstream.JetStream
}

// newSilences is a Handler with a silence Store made with opts (not run:
// what it adds is in its copy at once).
func newSilences(t *testing.T, opts ...silence.Option) *silenceEnv {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), natstest.Timeout)
	defer cancel()
	srv := natstest.RunServer(t)
	conn, err := bus.Connect(ctx, bus.Config{URLs: []string{srv.ClientURL()}}, natstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	log, err := audit.Open(ctx, conn.JS)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	s, err := silence.NewStore(ctx, conn.JS, log, append([]silence.Option{silence.WithClock(clock)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	c := &command.Handler{Bot: botKnowing(t, kubevirt("mgmt-1", "clusters", "web")), Silences: s, Audit: log, Now: clock}
	return &silenceEnv{cmds: c, store: s, log: log, now: now, js: conn.JS}
}

func TestSilenceCommand(t *testing.T) {
	e := newSilences(t)
	web := chatops.ClusterRef{Namespace: "clusters", Name: "web"}
	r := cmd(e.cmds, requester, chatops.Silence{Cluster: &web, Duration: 2 * time.Hour, Reason: "upgrade, proxy http://u:hunter2@proxy:3128"})
	if !strings.Contains(r.Text, "silenced cluster mgmt-1/clusters/web for 2h") || !strings.Contains(r.Text, "sil-") || strings.Contains(r.Text, "hunter2") || !r.InChannel {
		t.Errorf("silence: %+v", r)
	}
	sil, ok := e.store.Match("mgmt-1/clusters/web", "", e.now)
	if !ok || sil.CreatedBy != requester || !sil.ExpiresAt.Equal(e.now.Add(2*time.Hour)) || strings.Contains(sil.Reason, "hunter2") {
		t.Errorf("stored silence %+v, %v", sil, ok)
	}
	if r := cmd(e.cmds, requester, chatops.Silence{Cluster: &chatops.ClusterRef{Namespace: "clusters", Name: "nope"}, Duration: time.Hour}); !strings.Contains(r.Text, "Unknown cluster") {
		t.Errorf("unknown cluster: %q", r.Text)
	}
	if r := cmd(e.cmds, requester, chatops.Silence{IncidentID: "inc-0123456789ab", Duration: time.Hour}); !strings.Contains(r.Text, "Unknown incident") {
		t.Errorf("unknown incident: %q", r.Text)
	}
	if r := press(e.cmds, requester, blockkit.ActionSilence, "inc-0123456789ab"); !strings.Contains(r.Text, "Unknown incident") {
		t.Errorf("Silence button on an unknown incident: %q", r.Text)
	}
	// Within the grammar's 30 days but over the store's maximum.
	r = cmd(e.cmds, requester, chatops.Silence{Cluster: &web, Duration: 8 * 24 * time.Hour})
	if !strings.Contains(r.Text, "at most 7d") || !strings.Contains(r.Text, "Usage: `/hcp silence") {
		t.Errorf("too long: %q", r.Text)
	}
	if got := e.store.Active(e.now); len(got) != 1 {
		t.Errorf("%d silences stored, want 1", len(got))
	}
	if out := console(t, &command.Handler{Bot: e.cmds.Bot}, requester, "silence clusters/web 2h"); !strings.Contains(out, "not available") {
		t.Errorf("silence without a store: %s", out)
	}
	recs, err := e.log.Recent(context.Background(), 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].Kind != audit.KindSilenced || recs[0].Actor != requester {
		t.Errorf("audit: %+v", recs)
	}
}

// audit shows the newest entries, redacted, escaped and within one
// message.
func TestAuditCommand(t *testing.T) {
	e := newSilences(t)
	ctx := context.Background()
	if r := cmd(e.cmds, requester, chatops.Audit{}); r.Text != "The audit trail is empty." {
		t.Errorf("empty trail: %q", r.Text)
	}
	for i := range 30 {
		if err := e.log.Append(ctx, audit.Record{
			Kind: audit.KindRefused, Actor: stranger, ActionID: "act-aaaaaaaaaaaaaaaa", Cluster: "clusters/web",
			Summary: "approve refused <!channel> `x`", Reason: strings.Repeat("long reason ", 20) + "http://u:hunter2@proxy:3128 #" + string(rune('a'+i%26)),
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.log.Append(ctx, audit.Record{Kind: audit.KindProposed, Actor: requester, ActionID: "act-bbbbbbbbbbbbbbbb", Summary: "the newest"}); err != nil {
		t.Fatal(err)
	}
	r := cmd(e.cmds, requester, chatops.Audit{N: 3})
	lines := strings.Split(strings.TrimSpace(r.Text), "\n")
	if len(lines) != 6 || !strings.Contains(lines[2], "the newest") || !strings.HasPrefix(lines[0], "Last 3 audit entries") || r.InChannel {
		t.Errorf("audit 3:\n%s", r.Text)
	}
	r = cmd(e.cmds, requester, chatops.Audit{N: 1000})
	t.Logf("audit 1000: %d characters", len([]rune(r.Text)))
	if n := len([]rune(r.Text)); n > blockkit.MaxSectionText {
		t.Errorf("audit reply of %d characters exceeds a section's %d", n, blockkit.MaxSectionText)
	}
	if !strings.Contains(r.Text, "more did not fit") {
		t.Errorf("cut reply does not say so:\n%s", r.Text)
	}
	for _, bad := range []string{"hunter2", "<!channel>", "`x`"} {
		if strings.Contains(r.Text, bad) {
			t.Errorf("audit reply carries %q", bad)
		}
	}
	if r := cmd(&command.Handler{Bot: e.cmds.Bot}, requester, chatops.Audit{}); !strings.Contains(r.Text, "not available") {
		t.Errorf("audit without a reader: %q", r.Text)
	}
}

// The flow's loop expires stale proposals, once (two replicas sweep), an
// approval afterwards is told so, and the loop stops with its context.
func TestLoopExpiresStaleProposals(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), natstest.Timeout)
	defer cancel()
	srv := natstest.RunServer(t)
	conn, err := bus.Connect(ctx, bus.Config{URLs: []string{srv.ClientURL()}}, natstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	log, err := audit.Open(ctx, conn.JS)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := approval.NewEphemeralSigner()
	if err != nil {
		t.Fatal(err)
	}
	// Proposed two hours ago with a one-hour TTL, by a replica that
	// stopped.
	past := openFlow(t, conn.JS, signer, log, fourEyes(), func(c *approval.Config) {
		c.Now = func() time.Time { return time.Now().Add(-2 * time.Hour) }
	})
	id, _ := proposeWith(t, &command.Changes{Flow: past, Audit: log}, "mgmt-1")
	flows := []*approval.Flow{openFlow(t, conn.JS, signer, log, fourEyes()), openFlow(t, conn.JS, signer, log, fourEyes())}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, len(flows))
	for _, f := range flows {
		go func() { done <- f.Run(runCtx) }()
	}
	// The state is written before its audit record: wait for both, or
	// stop may cancel the append in between (a busy machine).
	testenv.Eventually(t, 10*time.Second, "the stale proposal expired and audited", func() bool {
		p, err := flows[0].Get(ctx, id)
		return err == nil && p.State == approval.StateExpired && auditKinds(t, log)[audit.KindExpired] > 0
	})
	time.Sleep(1500 * time.Millisecond) // another sweep of each
	stop()
	for range flows {
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	if n := auditKinds(t, log)[audit.KindExpired]; n != 1 {
		t.Errorf("%d expiry records, want 1", n)
	}
	if r := (&command.Changes{Flow: flows[1], Audit: log}).Approve(ctx, id, approver1); !strings.Contains(r.Text, "expired before it was decided") {
		t.Errorf("approve after expiry: %q", r.Text)
	}
}
