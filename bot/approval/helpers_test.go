package approval_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bot/approval"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
)

// Slack-like user ids.
const (
	requester = "UREQ0001"
	approver  = "UAPP0001"
	approver2 = "UAPP0002"
	stranger  = "USTR0001"
	grouped   = "UGRP0001"
	group     = "SGRP0001"
)

var cluster = actions.ClusterRef{Namespace: "clusters", Name: "c1"}

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), natstest.Timeout)
	t.Cleanup(cancel)
	return ctx
}

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)} }

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

func newEnv(t *testing.T) *env {
	t.Helper()
	srv := natstest.RunServer(t)
	e := &env{t: t, url: srv.ClientURL(), clock: newClock()}
	c := e.connect()
	l, err := audit.Open(testContext(t), c.JS, audit.WithClock(e.clock.Now))
	if err != nil {
		t.Fatalf("audit.Open: %v", err)
	}
	e.log = l
	return e
}

// connect opens a new client connection: a separate bot replica.
func (e *env) connect() *bus.Conn {
	e.t.Helper()
	c, err := bus.Connect(testContext(e.t), bus.Config{URLs: []string{e.url}, Name: e.t.Name()}, natstest.Logger(e.t))
	if err != nil {
		e.t.Fatalf("Connect: %v", err)
	}
	e.t.Cleanup(c.Close)
	return c
}

func defaultPolicy() approval.Policy {
	return approval.Policy{
		Approvers:      []string{approver, approver2},
		ApproverGroups: []string{group},
		FourEyes:       true,
	}
}

// store opens a Store on its own connection, auditing to a (e.log if nil).
func (e *env) store(p approval.Policy, a audit.Appender, opts ...approval.StoreOption) *approval.Store {
	e.t.Helper()
	if a == nil {
		a = e.log
	}
	c := e.connect()
	opts = append([]approval.StoreOption{
		approval.WithClock(e.clock.Now),
		approval.WithGroups(approval.StaticGroups{group: {grouped}}),
	}, opts...)
	s, err := approval.NewStore(testContext(e.t), c.JS, a, p, opts...)
	if err != nil {
		e.t.Fatalf("NewStore: %v", err)
	}
	return s
}

func noProxyRequest() actions.Change {
	return actions.Change{
		Type:    actions.TypeNoProxyPatch,
		Cluster: cluster,
		NoProxy: &actions.NoProxyParams{Expected: ".cluster.local", Add: []string{"kubernetes", "172.31.0.0/16"}},
	}
}

func (e *env) propose(s *approval.Store) approval.Proposal {
	e.t.Helper()
	p, err := s.Propose(testContext(e.t), noProxyRequest(), requester, approval.ForSource("mgmt-1"))
	if err != nil {
		e.t.Fatalf("Propose: %v", err)
	}
	return p
}

// records returns the audit records about action id, oldest first.
func (e *env) records(id string) []audit.Record {
	e.t.Helper()
	all, err := e.log.Recent(testContext(e.t), 1000)
	if err != nil {
		e.t.Fatalf("audit Recent: %v", err)
	}
	var out []audit.Record
	for i := len(all) - 1; i >= 0; i-- {
		if all[i].ActionID == id {
			out = append(out, all[i])
		}
	}
	return out
}

func kinds(rs []audit.Record) []audit.Kind {
	out := make([]audit.Kind, len(rs))
	for i, r := range rs {
		out[i] = r.Kind
	}
	return out
}

func countKind(rs []audit.Record, k audit.Kind) int {
	n := 0
	for _, r := range rs {
		if r.Kind == k {
			n++
		}
	}
	return n
}

// failingAudit wraps an Appender and fails records of the given kind.
type failingAudit struct {
	audit.Appender
	kind audit.Kind
}

var errAuditDown = errors.New("audit store down")

func (f failingAudit) Append(ctx context.Context, r audit.Record) error {
	if r.Kind == f.kind {
		return errAuditDown
	}
	return f.Appender.Append(ctx, r)
}

// countingDispatcher counts dispatches and returns an applied result.
type countingDispatcher struct {
	mu    sync.Mutex
	calls []approval.Proposal
	err   error
}

func (d *countingDispatcher) Dispatch(_ context.Context, p approval.Proposal) (actions.Result, error) {
	d.mu.Lock()
	d.calls = append(d.calls, p)
	d.mu.Unlock()
	if d.err != nil {
		return actions.Result{}, d.err
	}
	return actions.Result{
		ActionID: p.ID, Type: p.Request.Type, Outcome: actions.OutcomeApplied,
		Summary: "added 2 noProxy entries", Diff: "- .cluster.local\n+ .cluster.local,kubernetes,172.31.0.0/16",
		Undo: &actions.Undo{ActionID: p.ID, Type: p.Request.Type, Cluster: p.Request.Cluster,
			NoProxy: &actions.NoProxyUndo{Previous: ".cluster.local", Written: ".cluster.local,kubernetes,172.31.0.0/16"}},
	}, nil
}

func (d *countingDispatcher) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.calls)
}
