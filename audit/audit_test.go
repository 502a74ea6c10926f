package audit_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
)

func testContext(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), natstest.Timeout)
	t.Cleanup(cancel)
	return ctx
}

func connect(t testing.TB) *bus.Conn {
	t.Helper()
	srv := natstest.RunServer(t)
	c, err := bus.Connect(testContext(t), bus.Config{URLs: []string{srv.ClientURL()}, Name: t.Name()}, natstest.Logger(t))
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

func openLog(t testing.TB, js jetstream.JetStream, opts ...audit.Option) *audit.Log {
	t.Helper()
	l, err := audit.Open(testContext(t), js, opts...)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return l
}

func TestAppendRecent(t *testing.T) {
	c := connect(t)
	ctx := testContext(t)
	l := openLog(t, c.JS)

	if got, err := l.Recent(ctx, 5); err != nil || len(got) != 0 {
		t.Fatalf("Recent on empty stream = %v, %v; want nothing", got, err)
	}
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	for i := range 5 {
		r := audit.Record{
			ID: fmt.Sprintf("rec-%d", i), Time: t0.Add(time.Duration(i) * time.Minute),
			Actor: "U123", Kind: audit.KindProposed, ActionID: fmt.Sprintf("act-%04d", i),
			Cluster: "clusters/c1", Source: "mgmt-1", Summary: fmt.Sprintf("summary %d", i),
		}
		if err := l.Append(ctx, r); err != nil {
			t.Fatalf("Append %d: %v", i, err)
		}
	}
	got, err := l.Recent(ctx, 3)
	if err != nil {
		t.Fatalf("Recent: %v", err)
	}
	if len(got) != 3 {
		t.Fatalf("Recent(3) returned %d records", len(got))
	}
	for i, r := range got {
		want := 4 - i
		if r.ID != fmt.Sprintf("rec-%d", want) || r.Summary != fmt.Sprintf("summary %d", want) ||
			!r.Time.Equal(t0.Add(time.Duration(want)*time.Minute)) || r.Source != "mgmt-1" || r.Kind != audit.KindProposed {
			t.Errorf("Recent[%d] = %+v, want record %d", i, r, want)
		}
	}
	all, err := l.Recent(ctx, 100)
	if err != nil || len(all) != 5 || all[0].ID != "rec-4" || all[4].ID != "rec-0" {
		t.Fatalf("Recent(100) = %v, %v; want the 5 records newest first", all, err)
	}

	// Records land on the source's audit subject, which the event
	// package's AuditFilter matches.
	s, err := c.JS.Stream(ctx, audit.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(ctx, "hcpbot.audit.mgmt-1")
	if err != nil || m.Sequence != 5 {
		t.Fatalf("last message on hcpbot.audit.mgmt-1 = %v, %v", m, err)
	}

	// A record without source or time gets the defaults.
	if err := l.Append(ctx, audit.Record{Kind: audit.KindRefused, Actor: "U9", Reason: "not an approver"}); err != nil {
		t.Fatal(err)
	}
	got, err = l.Recent(ctx, 1)
	if err != nil || len(got) != 1 || got[0].Source != audit.DefaultSource || got[0].ID == "" || got[0].Time.IsZero() {
		t.Fatalf("defaults: %+v, %v", got, err)
	}
}

func TestAppendRejectsInvalid(t *testing.T) {
	c := connect(t)
	ctx := testContext(t)
	l := openLog(t, c.JS)
	for name, r := range map[string]audit.Record{
		"unknown kind": {Kind: "deleted"},
		"bad id":       {ID: "has space", Kind: audit.KindProposed},
		"bad source":   {Kind: audit.KindProposed, Source: "Not_A.Name*"},
	} {
		if err := l.Append(ctx, r); !errors.Is(err, audit.ErrInvalid) {
			t.Errorf("%s: Append = %v, want ErrInvalid", name, err)
		}
	}
}

func TestAppendRetryIsNotDoubled(t *testing.T) {
	c := connect(t)
	ctx := testContext(t)
	l := openLog(t, c.JS)
	r := audit.Record{ID: audit.NewID(), Kind: audit.KindApproved, Actor: "U1", ActionID: "act-abcd"}
	for range 3 {
		if err := l.Append(ctx, r); err != nil {
			t.Fatalf("Append: %v", err)
		}
	}
	s, err := c.JS.Stream(ctx, audit.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("stream holds %d messages after 3 appends of one record, want 1", info.State.Msgs)
	}
}

func TestAppendRedacts(t *testing.T) {
	c := connect(t)
	ctx := testContext(t)
	l := openLog(t, c.JS)
	const secret = "s3cr3tP4ss"
	leak := "http://proxyuser:" + secret + "@proxy.corp:3128"
	r := audit.Record{
		Kind: audit.KindFailed, ActionID: "act-abcd", Actor: "U1",
		Summary: "proxy is " + leak,
		Diff:    "- HTTPS_PROXY=" + leak + "\n+ HTTPS_PROXY=http://proxy.corp:3128",
		Result:  "dial " + leak + ": refused",
		Reason:  "user:" + secret + "@proxy.corp:3128 unreachable",
	}
	if err := l.Append(ctx, r); err != nil {
		t.Fatal(err)
	}
	// Check the raw stored bytes, not only the decoded record.
	s, err := c.JS.Stream(ctx, audit.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(m.Data), secret) || strings.Contains(string(m.Data), "proxyuser") {
		t.Fatalf("stored record leaks the proxy credentials: %s", m.Data)
	}
	got, err := l.Recent(ctx, 1)
	if err != nil || len(got) != 1 {
		t.Fatal(got, err)
	}
	if !strings.Contains(got[0].Summary, "http://***@proxy.corp:3128") {
		t.Errorf("summary = %q, want the URL with its userinfo masked", got[0].Summary)
	}
}

func TestRedactTruncates(t *testing.T) {
	r := audit.Redact(audit.Record{Diff: strings.Repeat("é", audit.MaxFieldBytes)})
	if len(r.Diff) > audit.MaxFieldBytes || !strings.HasSuffix(r.Diff, "[truncated]") {
		t.Fatalf("diff of %d bytes not cut to %d", len(r.Diff), audit.MaxFieldBytes)
	}
}

func TestAppendOnly(t *testing.T) {
	c := connect(t)
	ctx := testContext(t)
	l := openLog(t, c.JS)
	for i := range 2 {
		if err := l.Append(ctx, audit.Record{Kind: audit.KindProposed, ActionID: fmt.Sprintf("act-%04d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	s, err := c.JS.Stream(ctx, audit.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteMsg(ctx, 1); err == nil {
		t.Error("DeleteMsg succeeded on the audit stream")
	}
	if err := s.SecureDeleteMsg(ctx, 2); err == nil {
		t.Error("SecureDeleteMsg succeeded on the audit stream")
	}
	if err := s.Purge(ctx); err == nil {
		t.Error("Purge succeeded on the audit stream")
	}
	if err := s.Purge(ctx, jetstream.WithPurgeSubject("hcpbot.audit.bot")); err == nil {
		t.Error("subject Purge succeeded on the audit stream")
	}
	// Lifting the protection is refused by the server.
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg := info.Config
	cfg.DenyDelete, cfg.DenyPurge = false, false
	if _, err := c.JS.UpdateStream(ctx, cfg); err == nil {
		t.Error("UpdateStream lifted DenyDelete/DenyPurge")
	}
	if info, err = s.Info(ctx); err != nil || info.State.Msgs != 2 {
		t.Fatalf("stream state after delete attempts: %+v, %v; want 2 messages", info, err)
	}
	// Opening again (another process starting) keeps everything.
	l2 := openLog(t, c.JS)
	if got, err := l2.Recent(ctx, 10); err != nil || len(got) != 2 {
		t.Fatalf("Recent after reopen = %v, %v", got, err)
	}
	_ = l
}

func TestOpenReplicatedCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	cl := natstest.RunCluster(t, 3)
	c, err := bus.Connect(testContext(t), bus.Config{URLs: cl.URLs(), Name: t.Name()}, natstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx := testContext(t)
	l := openLog(t, c.JS, audit.WithReplicas(3))
	if err := l.Append(ctx, audit.Record{Kind: audit.KindProposed, ActionID: "act-abcd"}); err != nil {
		t.Fatal(err)
	}
	s, err := c.JS.Stream(ctx, audit.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil || info.Config.Replicas != 3 || !info.Config.DenyDelete || !info.Config.DenyPurge {
		t.Fatalf("stream config %+v, %v", info, err)
	}
	if err := s.DeleteMsg(ctx, 1); err == nil {
		t.Error("DeleteMsg succeeded on the replicated audit stream")
	}
}

// More records than one fetch batch: Recent must page through.
func TestRecentManyRecords(t *testing.T) {
	c := connect(t)
	ctx := testContext(t)
	l := openLog(t, c.JS)
	const total = 600
	for i := range total {
		if err := l.Append(ctx, audit.Record{ID: fmt.Sprintf("r-%d", i), Kind: audit.KindExecuted}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := l.Recent(ctx, 550)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 550 {
		t.Fatalf("Recent(550) returned %d", len(got))
	}
	for i, r := range got {
		if want := fmt.Sprintf("r-%d", total-1-i); r.ID != want || r.Seq != uint64(total-i) {
			t.Fatalf("Recent[%d] = %s (seq %d), want %s", i, r.ID, r.Seq, want)
		}
	}
}
