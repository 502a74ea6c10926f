package silence_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bot/silence"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/internal/testenv"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
)

const (
	user    = "UOPS0001"
	cluster = "mgmt-a/clusters/example"
	other   = "mgmt-a/clusters/other"
	inc     = "inc-0123456789ab"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

type env struct {
	t     *testing.T
	url   string
	log   *audit.Log
	clock *clock
}

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), natstest.Timeout)
	t.Cleanup(cancel)
	return ctx
}

func newEnv(t *testing.T) *env {
	t.Helper()
	srv := natstest.RunServer(t)
	e := &env{t: t, url: srv.ClientURL(), clock: &clock{t: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)}}
	l, err := audit.Open(testContext(t), e.connect().JS)
	if err != nil {
		t.Fatal(err)
	}
	e.log = l
	return e
}

func (e *env) connect() *bus.Conn {
	e.t.Helper()
	c, err := bus.Connect(testContext(e.t), bus.Config{URLs: []string{e.url}, Name: e.t.Name()}, natstest.Logger(e.t))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(c.Close)
	return c
}

// store opens a Store on its own connection (a bot replica) and runs it
// until the test ends.
func (e *env) store(opts ...silence.Option) *silence.Store {
	e.t.Helper()
	s, err := silence.NewStore(testContext(e.t), e.connect().JS, e.log, append([]silence.Option{silence.WithClock(e.clock.Now)}, opts...)...)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	e.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			e.t.Errorf("Run: %v", err)
		}
	})
	return s
}

func TestAddMatchActive(t *testing.T) {
	e := newEnv(t)
	s := e.store()
	ctx := testContext(t)
	now := e.clock.Now()

	sil, err := s.Add(ctx, silence.Silence{Cluster: cluster, Reason: "maintenance, proxy http://u:hunter2@proxy:3128", CreatedBy: user, ExpiresAt: now.Add(2 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(sil.ID, "sil-") || !sil.CreatedAt.Equal(now) || strings.Contains(sil.Reason, "hunter2") {
		t.Errorf("added silence: %+v", sil)
	}
	// In the local copy at once, without waiting for the watch.
	if got, ok := s.Match(cluster, "", now); !ok || got.ID != sil.ID {
		t.Errorf("Match(cluster) = %+v, %v", got, ok)
	}
	if got, ok := s.Match(cluster, "inc-ffffffffffff", now); !ok || got.ID != sil.ID {
		t.Errorf("Match(cluster, other incident) = %+v, %v", got, ok)
	}
	if _, ok := s.Match(other, "", now); ok {
		t.Error("another cluster matches")
	}
	if _, ok := s.Match("", "", now); ok {
		t.Error("nothing matches something")
	}
	if _, ok := s.Match(cluster, "", sil.ExpiresAt); ok {
		t.Error("matches at its expiry")
	}

	isil, err := s.Add(ctx, silence.Silence{Incident: inc, CreatedBy: user, ExpiresAt: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := s.Match(other, inc, now); !ok || got.ID != isil.ID {
		t.Errorf("Match(incident) = %+v, %v", got, ok)
	}
	// Of two matching silences, the one lasting longest.
	if got, _ := s.Match(cluster, inc, now); got.ID != sil.ID {
		t.Errorf("Match(both) = %s, want the longer %s", got.ID, sil.ID)
	}
	active := s.Active(now)
	if len(active) != 2 || active[0].ID != isil.ID || active[1].ID != sil.ID {
		t.Errorf("Active sorted by expiry: %+v", active)
	}
	if got := s.Active(now.Add(90 * time.Minute)); len(got) != 1 || got[0].ID != sil.ID {
		t.Errorf("Active after the first expired: %+v", got)
	}

	recs, err := e.log.Recent(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[1].Kind != audit.KindSilenced || recs[1].Actor != user || recs[1].ActionID != sil.ID ||
		recs[1].Cluster != "clusters/example" || recs[1].Source != "mgmt-a" || strings.Contains(recs[1].Reason, "hunter2") ||
		!strings.Contains(recs[1].Summary, "2h0m0s") {
		t.Errorf("audit records: %+v", recs)
	}
	if recs[0].ActionID != isil.ID || !strings.Contains(recs[0].Summary, inc) {
		t.Errorf("incident silence audit: %+v", recs[0])
	}
	// A storm is silenced like an incident.
	ssil, err := s.Add(ctx, silence.Silence{Incident: "storm-0123456789ab", CreatedBy: user, ExpiresAt: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := s.Match("", "storm-0123456789ab", now); !ok || got.ID != ssil.ID {
		t.Errorf("Match(storm) = %+v, %v", got, ok)
	}
}

func TestAddInvalid(t *testing.T) {
	e := newEnv(t)
	s := e.store(silence.WithMaxDuration(24 * time.Hour))
	ctx := testContext(t)
	now := e.clock.Now()
	for name, sil := range map[string]silence.Silence{
		"no target":        {CreatedBy: user, ExpiresAt: now.Add(time.Hour)},
		"two targets":      {Cluster: cluster, Incident: inc, CreatedBy: user, ExpiresAt: now.Add(time.Hour)},
		"cluster no mgmt":  {Cluster: "clusters/example", CreatedBy: user, ExpiresAt: now.Add(time.Hour)},
		"cluster spaces":   {Cluster: "mgmt a/clusters/example", CreatedBy: user, ExpiresAt: now.Add(time.Hour)},
		"bad incident":     {Incident: "act-0123456789ab", CreatedBy: user, ExpiresAt: now.Add(time.Hour)},
		"no creator":       {Cluster: cluster, ExpiresAt: now.Add(time.Hour)},
		"creator control":  {Cluster: cluster, CreatedBy: "U1\n", ExpiresAt: now.Add(time.Hour)},
		"expired":          {Cluster: cluster, CreatedBy: user, ExpiresAt: now.Add(-time.Minute)},
		"no expiry":        {Cluster: cluster, CreatedBy: user},
		"too long":         {Cluster: cluster, CreatedBy: user, ExpiresAt: now.Add(25 * time.Hour)},
		"reason too long":  {Cluster: cluster, CreatedBy: user, ExpiresAt: now.Add(time.Hour), Reason: strings.Repeat("x", silence.MaxReasonRunes+1)},
		"cluster too deep": {Cluster: cluster + "/x", CreatedBy: user, ExpiresAt: now.Add(time.Hour)},
	} {
		if _, err := s.Add(ctx, sil); !errors.Is(err, silence.ErrInvalid) {
			t.Errorf("%s: err %v, want ErrInvalid", name, err)
		}
	}
	if got := s.Active(now); len(got) != 0 {
		t.Errorf("invalid silences stored: %+v", got)
	}
	if recs, _ := e.log.Recent(ctx, 10); len(recs) != 0 {
		t.Errorf("invalid silences audited: %+v", recs)
	}
	// Exactly the maximum is fine.
	if _, err := s.Add(ctx, silence.Silence{Cluster: cluster, CreatedBy: user, ExpiresAt: now.Add(24 * time.Hour)}); err != nil {
		t.Errorf("maximum duration: %v", err)
	}
}

// Two replicas on one server: each sees the other's silences through Run,
// including those added before it started.
func TestReplicasShareSilences(t *testing.T) {
	e := newEnv(t)
	a := e.store()
	ctx := testContext(t)
	now := e.clock.Now()
	early, err := a.Add(ctx, silence.Silence{Incident: inc, CreatedBy: user, ExpiresAt: now.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	b := e.store()
	testenv.Eventually(t, 10*time.Second, "replica b loads the earlier silence", func() bool {
		got, ok := b.Match("", inc, now)
		return ok && got.ID == early.ID
	})
	sil, err := b.Add(ctx, silence.Silence{Cluster: cluster, CreatedBy: "UOPS0002", Reason: "upgrade", ExpiresAt: now.Add(3 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "replica a sees b's silence", func() bool {
		got, ok := a.Match(cluster, "", now)
		return ok && got.ID == sil.ID && got.Reason == "upgrade" && got.CreatedBy == "UOPS0002" && got.ExpiresAt.Equal(sil.ExpiresAt)
	})
	if got := a.Active(now); len(got) != 2 {
		t.Errorf("replica a: %d active silences, want 2", len(got))
	}
	// Expired silences stop matching everywhere, and are dropped lazily.
	e.clock.Add(2 * time.Hour)
	later := e.clock.Now()
	if _, ok := a.Match("", inc, later); ok {
		t.Error("expired incident silence still matches")
	}
	if got := b.Active(later); len(got) != 1 || got[0].ID != sil.ID {
		t.Errorf("replica b after expiry: %+v", got)
	}
}

func TestNewStoreNeedsAudit(t *testing.T) {
	e := newEnv(t)
	if _, err := silence.NewStore(testContext(t), e.connect().JS, nil); err == nil {
		t.Error("NewStore without an audit log succeeded")
	}
	if _, err := silence.NewStore(testContext(t), e.connect().JS, e.log, silence.WithMaxDuration(0)); err == nil {
		t.Error("NewStore with a zero maximum succeeded")
	}
}
