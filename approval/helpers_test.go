package approval_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
)

// Slack-like user ids.
const (
	requester = "UREQ0001"
	approver  = "UAPP0001"
	approver2 = "UAPP0002"
	stranger  = "USTR0001"
	source    = "mgmt-1"
	// otherSource is a second management cluster, its agent user made by
	// newEnv.
	otherSource = "mgmt-2"
)

var cluster = actions.ClusterRef{Namespace: "clusters", Name: "c1"}

func noProxyChange() actions.Change {
	return actions.Change{
		Type: actions.TypeNoProxyPatch, Cluster: cluster,
		NoProxy: &actions.NoProxyParams{Expected: ".corp", Add: []string{"kubernetes", "172.31.0.0/16"}},
	}
}

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*natstest.Timeout)
	t.Cleanup(cancel)
	return ctx
}

// env is a real nats-server whose bot user and agent user (each an nkey)
// have the shipped permission split (bus.BotPermissions,
// bus.AgentPermissions: what configs/deploy/nats/nats.conf grants), the
// bot's trail and key, and a fake executor for the agent: the flow and
// the agent's Serve are the real ones.
type env struct {
	t      *testing.T
	srv    *server.Server
	opts   *server.Options
	users  map[string]natstest.User
	signer *approval.Signer
	trail  *audit.Log
	x      *fakeExecutor
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{t: t, users: map[string]natstest.User{
		"bot": natstest.NewUser(t), "agent": natstest.NewUser(t), "admin": natstest.NewUser(t), otherSource: natstest.NewUser(t),
	}, x: &fakeExecutor{}}
	other, err := bus.AgentPermissions(otherSource)
	if err != nil {
		t.Fatal(err)
	}
	// Every user a test may need exists from the start: adding one later
	// (ReloadOptions) while clients run races inside nats-server (its
	// setOpts against a direct get reading the options, v2.15.2).
	e.opts = &server.Options{
		ServerName: "approval-test", Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: t.TempDir(),
		Nkeys: []*server.NkeyUser{
			{Nkey: e.users["bot"].Public, Permissions: bus.BotPermissions()},
			{Nkey: e.users["agent"].Public, Permissions: agentPermissions(t)},
			{Nkey: e.users["admin"].Public},
			{Nkey: e.users[otherSource].Public, Permissions: other},
		},
	}
	e.srv = natstest.StartOptions(t, e.opts)
	s, err := approval.NewEphemeralSigner()
	if err != nil {
		t.Fatal(err)
	}
	e.signer = s
	if e.trail, err = audit.Open(testContext(t), e.connect("bot").JS); err != nil {
		t.Fatal(err)
	}
	return e
}

func agentPermissions(t *testing.T) *server.Permissions {
	t.Helper()
	p, err := bus.AgentPermissions(source)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// connect opens a connection as role ("bot" or "agent"), with the role's
// inbox prefix (the permissions let each role read its own replies only).
func (e *env) connect(role string) *bus.Conn {
	e.t.Helper()
	r := bus.BotRole()
	if role == "agent" {
		r = bus.AgentRole(source)
	}
	inbox, err := r.InboxPrefix()
	if err != nil {
		e.t.Fatal(err)
	}
	c, err := bus.Connect(testContext(e.t), bus.Config{
		URLs: []string{"nats://" + e.srv.Addr().String()}, Name: e.t.Name() + "-" + role, NkeySeedFile: e.users[role].SeedFile,
		InboxPrefix: inbox,
	}, natstest.Logger(e.t))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(c.Close)
	return c
}

// flow is a bot replica: its own connection, running its loop until the
// test ends.
func (e *env) flow(pol approval.Policy, mod ...func(*approval.Config)) *approval.Flow {
	e.t.Helper()
	f := e.newFlow(pol, mod...)
	e.run(func(ctx context.Context) { _ = f.Run(ctx) })
	return f
}

// newFlow is flow without its loop running.
func (e *env) newFlow(pol approval.Policy, mod ...func(*approval.Config)) *approval.Flow {
	e.t.Helper()
	cfg := approval.Config{Signer: e.signer, Trail: e.trail, Policy: pol, Log: natstest.Logger(e.t), Registerer: prometheus.NewRegistry(), SweepInterval: time.Second}
	for _, m := range mod {
		m(&cfg)
	}
	f, err := approval.NewFlow(testContext(e.t), e.connect("bot").JS, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	return f
}

// serve runs the agent of source with e.x until stop or the test's end.
func (e *env) serve(mod ...func(*approval.AgentConfig)) (stop func()) {
	e.t.Helper()
	cfg := approval.AgentConfig{
		Source: source, Trust: approval.Trust{Keys: []string{e.signer.PublicKey()}, FourEyes: true},
		Executor: e.x, Log: natstest.Logger(e.t), AckWait: 3 * time.Second, Registerer: prometheus.NewRegistry(),
	}
	for _, m := range mod {
		m(&cfg)
	}
	js := e.connect("agent").JS
	if cfg.Trail == nil {
		l, err := audit.ForAgent(js, source)
		if err != nil {
			e.t.Fatal(err)
		}
		cfg.Trail = l
	}
	return e.run(func(ctx context.Context) {
		if err := approval.Serve(ctx, js, cfg); err != nil {
			e.t.Errorf("Serve: %v", err)
		}
	})
}

func (e *env) run(f func(ctx context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f(ctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	e.t.Cleanup(stop)
	return stop
}

// records returns the audit records of action id, oldest first.
func (e *env) records(id string) []audit.Record {
	e.t.Helper()
	recent, err := e.trail.Recent(testContext(e.t), 1000)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []audit.Record
	for _, r := range slices.Backward(recent) {
		if r.ActionID == id {
			out = append(out, r)
		}
	}
	return out
}

// approvedRunsOnce approves id for real (approver) and checks that it
// runs once: nothing an attack left decides it.
func (e *env) approvedRunsOnce(f *approval.Flow, id string) {
	e.t.Helper()
	var got outcome
	if _, err := f.Approve(testContext(e.t), id, approver, approval.OnOutcome(got.fn)); err != nil {
		e.t.Fatal(err)
	}
	waitFor(e.t, 30*time.Second, "the genuine approval's outcome", func() bool { return len(got.got()) == 1 })
	if o := got.got()[0]; o.State != approval.StateExecuted || e.x.runs(id) != 1 {
		e.t.Fatalf("outcome %s %s, %d runs", o.State, o.Reason, e.x.runs(id))
	}
}

// refusedByAgent counts the refusals the agent audited.
func (e *env) refusedByAgent() int {
	e.t.Helper()
	recent, err := e.trail.Recent(testContext(e.t), 100)
	if err != nil {
		e.t.Fatal(err)
	}
	n := 0
	for _, r := range recent {
		if r.Kind == audit.KindRefused && strings.HasPrefix(r.Summary, approval.RefusedByAgent) {
			n++
		}
	}
	return n
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

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// outcome is an OnOutcome that keeps what it gets.
type outcome struct {
	mu sync.Mutex
	ps []approval.Proposal
}

func (o *outcome) fn(p approval.Proposal) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ps = append(o.ps, p)
}

func (o *outcome) got() []approval.Proposal {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.ps)
}

// fakeExecutor plays the cluster side: it counts executions and answers
// from its script (errors to return first), then applied.
type fakeExecutor struct {
	mu       sync.Mutex
	executed []actions.Change
	events   []string
	errs     []error
	inPlace  bool
	// block, when set, is waited on by Execute (a slow API server).
	block chan struct{}
}

func (x *fakeExecutor) Execute(ctx context.Context, ch actions.Change) (*actions.Result, error) {
	if x.block != nil {
		select {
		case <-x.block:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.executed = append(x.executed, ch)
	if len(x.errs) > 0 {
		err := x.errs[0]
		x.errs = x.errs[1:]
		return nil, err
	}
	x.inPlace = true
	return applied(ch), nil
}

func applied(ch actions.Change) *actions.Result {
	return &actions.Result{
		ActionID: ch.ID, Type: ch.Type, Outcome: actions.OutcomeApplied, Summary: "added kubernetes",
		Undo: &actions.Undo{ActionID: ch.ID, Type: actions.TypeNoProxyPatch, Cluster: ch.Cluster,
			NoProxy: &actions.NoProxyUndo{Previous: ".corp", Written: ".corp,kubernetes,172.31.0.0/16"}},
	}
}

func (x *fakeExecutor) Observe(_ context.Context, ch actions.Change) (*actions.Result, bool, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if !x.inPlace {
		return nil, false, nil
	}
	return applied(ch), true, nil
}

func (x *fakeExecutor) RecordEvent(_ context.Context, ch actions.Change, _ *actions.Result, who actions.Actors) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.events = append(x.events, fmt.Sprintf("%s by %s approved by %v", ch.ID, who.RequestedBy, who.Approvers))
	return nil
}

func (x *fakeExecutor) runs(id string) int {
	x.mu.Lock()
	defer x.mu.Unlock()
	n := 0
	for _, c := range x.executed {
		if c.ID == id {
			n++
		}
	}
	return n
}

// transientErr stands for an API server 503 (actions.Transient's
// business; the tests hand Serve their own classifier).
var transientErr = errors.New("the server is currently unable to handle the request")

func transient(err error) bool { return errors.Is(err, transientErr) }

func counter(t *testing.T, c prometheus.Collector) float64 {
	t.Helper()
	return testutil.ToFloat64(c)
}
