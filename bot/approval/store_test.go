package approval_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bot/approval"
)

func TestProposeAndApprove(t *testing.T) {
	e := newEnv(t)
	s := e.store(defaultPolicy(), nil)
	ctx := testContext(t)

	p := e.propose(s)
	if !regexp.MustCompile(`^act-[0-9a-z]{16}$`).MatchString(p.ID) || p.Request.ID != p.ID {
		t.Errorf("generated id %q (request id %q)", p.ID, p.Request.ID)
	}
	if p.State != approval.StatePending || p.RequestedBy != requester || p.Request.RequestedBy != requester ||
		!p.ExpiresAt.Equal(e.clock.Now().Add(approval.DefaultTTL)) || p.Source != "mgmt-1" {
		t.Errorf("proposal = %+v", p)
	}

	e.clock.Add(time.Minute)
	got, err := s.Approve(ctx, p.ID, approver, e.clock.Now(), approval.ExpectCluster(cluster))
	if err != nil {
		t.Fatalf("Approve: %v", err)
	}
	if got.State != approval.StateApproved || got.DecidedBy != approver || !got.DecidedAt.Equal(e.clock.Now()) {
		t.Errorf("approved proposal = %+v", got)
	}
	stored, err := s.Get(ctx, p.ID)
	if err != nil || stored.State != approval.StateApproved || stored.Revision != got.Revision {
		t.Errorf("Get = %+v, %v", stored, err)
	}

	rs := e.records(p.ID)
	if !slices.Equal(kinds(rs), []audit.Kind{audit.KindProposed, audit.KindApproved}) {
		t.Fatalf("audit kinds = %v", kinds(rs))
	}
	ap := rs[1]
	if ap.Actor != approver || ap.Cluster != "clusters/c1" || ap.Source != "mgmt-1" ||
		!strings.Contains(ap.Summary, "kubernetes, 172.31.0.0/16") || !strings.Contains(ap.Diff, "+ noProxy: .cluster.local,kubernetes,172.31.0.0/16") {
		t.Errorf("approved record = %+v", ap)
	}
	if rs[0].Actor != requester {
		t.Errorf("proposed record actor = %q", rs[0].Actor)
	}
}

func TestProposeRefusesInvalid(t *testing.T) {
	e := newEnv(t)
	s := e.store(defaultPolicy(), nil)
	ctx := testContext(t)

	bad := noProxyRequest()
	bad.NoProxy.Add = []string{"*"}
	if _, err := s.Propose(ctx, bad, requester); !errors.Is(err, actions.ErrInvalid) {
		t.Errorf("Propose(wildcard) = %v, want actions.ErrInvalid", err)
	}
	if _, err := s.Propose(ctx, noProxyRequest(), ""); !errors.Is(err, actions.ErrInvalid) {
		t.Errorf("Propose(no requester) = %v, want actions.ErrInvalid", err)
	}
	req := noProxyRequest()
	req.ID = "act-fixed01"
	if _, err := s.Propose(ctx, req, requester); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Propose(ctx, req, stranger); !errors.Is(err, approval.ErrExists) {
		t.Errorf("Propose(same id) = %v, want ErrExists", err)
	}
}

func TestApproveRefusals(t *testing.T) {
	e := newEnv(t)
	s := e.store(defaultPolicy(), nil)

	for _, tc := range []struct {
		name    string
		user    string
		advance time.Duration
		opts    []approval.DecideOption
		want    error
	}{
		{name: "non-approver", user: stranger, want: approval.ErrNotApprover},
		{name: "four-eyes", user: requester, want: approval.ErrOwnRequest},
		{name: "expired", user: approver, advance: approval.DefaultTTL, want: approval.ErrExpired},
		{name: "wrong cluster", user: approver, want: approval.ErrWrongCluster,
			opts: []approval.DecideOption{approval.ExpectCluster(actions.ClusterRef{Namespace: "clusters", Name: "other"})}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			p := e.propose(s)
			_, err := s.Approve(ctx, p.ID, tc.user, e.clock.Now().Add(tc.advance), tc.opts...)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Approve = %v, want %v", err, tc.want)
			}
			rs := e.records(p.ID)
			last := rs[len(rs)-1]
			if last.Kind != audit.KindRefused || last.Actor != tc.user || !strings.Contains(last.Reason, tc.want.Error()) {
				t.Errorf("last audit record = %+v, want a refusal of %s citing %q", last, tc.user, tc.want)
			}
			got, err := s.Get(ctx, p.ID)
			if err != nil {
				t.Fatal(err)
			}
			wantState := approval.StatePending
			if tc.want == approval.ErrExpired {
				wantState = approval.StateExpired
				if !slices.Contains(kinds(rs), audit.KindExpired) {
					t.Errorf("expiry not audited: %v", kinds(rs))
				}
			}
			if got.State != wantState {
				t.Errorf("state after refusal = %s, want %s", got.State, wantState)
			}
			// An expired proposal stays expired, for everybody.
			if tc.want == approval.ErrExpired {
				if _, err := s.Approve(ctx, p.ID, approver2, e.clock.Now()); !errors.Is(err, approval.ErrExpired) {
					t.Errorf("second Approve of expired proposal = %v", err)
				}
			}
		})
	}

	t.Run("not found", func(t *testing.T) {
		ctx := testContext(t)
		for _, id := range []string{"act-doesnotexist", "ACT BAD ID http://u:secretpw@proxy:3128"} {
			if _, err := s.Approve(ctx, id, approver, e.clock.Now()); !errors.Is(err, approval.ErrNotFound) {
				t.Errorf("Approve(%q) = %v, want ErrNotFound", id, err)
			}
		}
		recent, err := e.log.Recent(ctx, 2)
		if err != nil || len(recent) != 2 {
			t.Fatal(recent, err)
		}
		for _, r := range recent {
			if r.Kind != audit.KindRefused || strings.Contains(r.Reason+r.ActionID, "secretpw") {
				t.Errorf("refusal record %+v", r)
			}
		}
	})
}

func TestFourEyesOff(t *testing.T) {
	e := newEnv(t)
	pol := defaultPolicy()
	pol.FourEyes = false
	s := e.store(pol, nil)
	ctx := testContext(t)
	req := noProxyRequest()
	p, err := s.Propose(ctx, req, approver)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Approve(ctx, p.ID, approver, e.clock.Now()); err != nil {
		t.Fatalf("self-approval without four-eyes: %v", err)
	}
}

func TestRejectThenApprove(t *testing.T) {
	e := newEnv(t)
	s := e.store(defaultPolicy(), nil)
	ctx := testContext(t)
	p := e.propose(s)

	const reason = "wrong proxy http://admin:hunter2@proxy.corp:3128"
	if _, err := s.Reject(ctx, p.ID, stranger, "no", e.clock.Now()); !errors.Is(err, approval.ErrNotApprover) {
		t.Fatalf("Reject by stranger = %v, want ErrNotApprover", err)
	}
	got, err := s.Reject(ctx, p.ID, approver, reason, e.clock.Now())
	if err != nil || got.State != approval.StateRejected || got.DecidedBy != approver || got.Reason != "wrong proxy http://***@proxy.corp:3128" {
		t.Fatalf("Reject = %+v, %v; want the reason stored with the password redacted", got, err)
	}
	if _, err := s.Approve(ctx, p.ID, approver2, e.clock.Now()); !errors.Is(err, approval.ErrAlreadyDecided) {
		t.Fatalf("Approve after reject = %v, want ErrAlreadyDecided", err)
	}
	if _, err := s.Reject(ctx, p.ID, approver2, "again", e.clock.Now()); !errors.Is(err, approval.ErrAlreadyDecided) {
		t.Fatalf("second Reject = %v, want ErrAlreadyDecided", err)
	}
	rs := e.records(p.ID)
	if want := []audit.Kind{audit.KindProposed, audit.KindRefused, audit.KindRejected, audit.KindRefused, audit.KindRefused}; !slices.Equal(kinds(rs), want) {
		t.Fatalf("audit kinds = %v, want %v", kinds(rs), want)
	}
	if strings.Contains(rs[2].Reason, "hunter2") || !strings.Contains(rs[2].Reason, "proxy.corp:3128") {
		t.Errorf("rejection reason in audit = %q: want it kept, with the password redacted", rs[2].Reason)
	}
}

func TestRequesterMayWithdraw(t *testing.T) {
	e := newEnv(t)
	s := e.store(defaultPolicy(), nil)
	p := e.propose(s)
	if got, err := s.Reject(testContext(t), p.ID, requester, "withdrawn", e.clock.Now()); err != nil || got.State != approval.StateRejected {
		t.Fatalf("Reject by requester = %+v, %v", got, err)
	}
}

type brokenGroups struct{}

func (brokenGroups) GroupMembers(context.Context, string) ([]string, error) {
	return nil, errors.New("slack: ratelimited")
}

func TestGroupApprover(t *testing.T) {
	e := newEnv(t)
	s := e.store(approval.Policy{ApproverGroups: []string{group}, TTL: 10 * time.Minute}, nil)
	ctx := testContext(t)
	p := e.propose(s)
	if p.ExpiresAt.Sub(p.CreatedAt) != 10*time.Minute {
		t.Errorf("TTL = %v, want the policy's 10m", p.ExpiresAt.Sub(p.CreatedAt))
	}
	if _, err := s.Approve(ctx, p.ID, approver, e.clock.Now()); !errors.Is(err, approval.ErrNotApprover) {
		t.Fatalf("Approve by a listed approver of another policy = %v, want ErrNotApprover", err)
	}
	got, err := s.Approve(ctx, p.ID, grouped, e.clock.Now())
	if err != nil || got.State != approval.StateApproved || got.DecidedBy != grouped {
		t.Fatalf("Approve by group member = %+v, %v", got, err)
	}

	// A group that cannot be read refuses, fail-closed.
	broken := e.store(approval.Policy{ApproverGroups: []string{group}}, nil, approval.WithGroups(brokenGroups{}))
	p2 := e.propose(broken)
	if _, err := broken.Approve(ctx, p2.ID, grouped, e.clock.Now()); !errors.Is(err, approval.ErrGroupLookup) || errors.Is(err, approval.ErrNotApprover) {
		t.Fatalf("Approve with broken group lookup = %v, want ErrGroupLookup", err)
	}
}

func TestNewStoreRefusesGroupsWithoutResolver(t *testing.T) {
	e := newEnv(t)
	c := e.connect()
	if _, err := approval.NewStore(testContext(t), c.JS, e.log, approval.Policy{ApproverGroups: []string{group}}); err == nil {
		t.Fatal("NewStore accepted approver groups without a resolver")
	}
	if _, err := approval.NewStore(testContext(t), c.JS, nil, defaultPolicy()); err == nil {
		t.Fatal("NewStore accepted no audit log")
	}
}

// TestConcurrentApprove: 20 approvals racing on two replicas (two Stores,
// two connections, one bucket): exactly one wins.
func TestConcurrentApprove(t *testing.T) {
	e := newEnv(t)
	replicas := []*approval.Store{e.store(defaultPolicy(), nil), e.store(defaultPolicy(), nil)}
	ctx := testContext(t)
	p := e.propose(replicas[0])

	const n = 20
	var wg sync.WaitGroup
	start := make(chan struct{})
	results := make([]approval.Proposal, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			<-start
			user := []string{approver, approver2, grouped}[i%3]
			results[i], errs[i] = replicas[i%2].Approve(ctx, p.ID, user, e.clock.Now())
		})
	}
	close(start)
	wg.Wait()

	wins := 0
	for i, err := range errs {
		switch {
		case err == nil:
			wins++
			if results[i].State != approval.StateApproved {
				t.Errorf("winner got %+v", results[i])
			}
		case !errors.Is(err, approval.ErrAlreadyDecided):
			t.Errorf("loser %d: %v, want ErrAlreadyDecided", i, err)
		}
	}
	if wins != 1 {
		t.Fatalf("%d approvals succeeded, want exactly 1", wins)
	}
	rs := e.records(p.ID)
	if countKind(rs, audit.KindApproved) != 1 || countKind(rs, audit.KindRefused) != n-1 {
		t.Errorf("audit kinds = %v", kinds(rs))
	}
}

// TestApproveAndRunOnce: ApproveAndRun racing from 20 goroutines on two
// replicas dispatches exactly once and records the execution.
func TestApproveAndRunOnce(t *testing.T) {
	e := newEnv(t)
	replicas := []*approval.Store{e.store(defaultPolicy(), nil), e.store(defaultPolicy(), nil)}
	ctx := testContext(t)
	p := e.propose(replicas[1])
	d := &countingDispatcher{}

	const n = 20
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make([]error, n)
	results := make([]approval.Proposal, n)
	for i := range n {
		wg.Go(func() {
			<-start
			results[i], errs[i] = approval.ApproveAndRun(ctx, replicas[i%2], d, p.ID, []string{approver, approver2}[i%2], approval.ExpectCluster(cluster))
		})
	}
	close(start)
	wg.Wait()

	if d.count() != 1 {
		t.Fatalf("dispatched %d times, want exactly once", d.count())
	}
	wins := 0
	for i, err := range errs {
		if err == nil {
			wins++
			r := results[i]
			if r.State != approval.StateExecuted || r.Result == nil || r.Result.Undo == nil || r.Result.Outcome != actions.OutcomeApplied {
				t.Errorf("winner's proposal = %+v", r)
			}
		} else if !errors.Is(err, approval.ErrAlreadyDecided) {
			t.Errorf("loser %d: %v", i, err)
		}
	}
	if wins != 1 {
		t.Fatalf("%d callers won, want 1", wins)
	}
	if got := d.calls[0]; got.State != approval.StateApproved || got.ID != p.ID {
		t.Errorf("dispatched %+v", got)
	}
	rs := e.records(p.ID)
	if countKind(rs, audit.KindApproved) != 1 || countKind(rs, audit.KindExecuted) != 1 {
		t.Errorf("audit kinds = %v", kinds(rs))
	}
	ex := rs[slices.IndexFunc(rs, func(r audit.Record) bool { return r.Kind == audit.KindExecuted })]
	if ex.Result != string(actions.OutcomeApplied) || ex.Summary != "added 2 noProxy entries" || ex.Diff == "" {
		t.Errorf("executed record = %+v", ex)
	}

	// Reported twice (e.g. a redelivered agent result): recorded once.
	if _, err := replicas[0].MarkExecuted(ctx, p.ID, actions.Result{}); !errors.Is(err, approval.ErrWrongState) {
		t.Errorf("second MarkExecuted = %v, want ErrWrongState", err)
	}

	// Rollback.
	rb, err := replicas[0].MarkRolledBack(ctx, p.ID, approver2, actions.Result{ActionID: p.ID, Outcome: actions.OutcomeRolledBack, Summary: "restored noProxy"})
	if err != nil || rb.State != approval.StateRolledBack || rb.RolledBackBy != approver2 || rb.Result == nil || rb.Result.Undo == nil {
		t.Fatalf("MarkRolledBack = %+v, %v", rb, err)
	}
	if _, err := replicas[1].MarkRolledBack(ctx, p.ID, approver2, actions.Result{}); !errors.Is(err, approval.ErrWrongState) {
		t.Errorf("second MarkRolledBack = %v, want ErrWrongState", err)
	}
	if k := kinds(e.records(p.ID)); k[len(k)-1] != audit.KindRolledBack {
		t.Errorf("audit kinds = %v", k)
	}
}

func TestApproveAndRunDispatchFails(t *testing.T) {
	e := newEnv(t)
	s := e.store(defaultPolicy(), nil)
	p := e.propose(s)
	errAgent := fmt.Errorf("agent via http://proxyuser:pr0xyPass@proxy.corp:3128: %w", actions.ErrConflict)
	d := &countingDispatcher{err: errAgent}
	got, err := approval.ApproveAndRun(testContext(t), s, d, p.ID, approver)
	if !errors.Is(err, actions.ErrConflict) {
		t.Fatalf("ApproveAndRun = %v, want the dispatch error", err)
	}
	if got.State != approval.StateFailed || !strings.Contains(got.Reason, "conflict") || d.count() != 1 {
		t.Errorf("proposal = %+v after %d dispatches", got, d.count())
	}
	rs := e.records(p.ID)
	if k := kinds(rs); !slices.Equal(k, []audit.Kind{audit.KindProposed, audit.KindApproved, audit.KindFailed}) {
		t.Fatalf("audit kinds = %v", k)
	}
	if strings.Contains(got.Reason, "pr0xyPass") || strings.Contains(rs[2].Reason, "pr0xyPass") || !strings.Contains(rs[2].Reason, "conflict") {
		t.Errorf("failure reason stored as %q, audited as %q: want it kept with the password redacted", got.Reason, rs[2].Reason)
	}
}

func TestApproveAndRunRefusalDoesNotDispatch(t *testing.T) {
	e := newEnv(t)
	s := e.store(defaultPolicy(), nil)
	p := e.propose(s)
	d := &countingDispatcher{}
	if _, err := approval.ApproveAndRun(testContext(t), s, d, p.ID, requester); !errors.Is(err, approval.ErrOwnRequest) {
		t.Fatalf("ApproveAndRun by requester = %v", err)
	}
	if d.count() != 0 {
		t.Fatal("refused approval was dispatched")
	}
}

// An approval that cannot be audited must not reach the cluster.
func TestUnauditedApprovalIsNotRun(t *testing.T) {
	e := newEnv(t)
	s := e.store(defaultPolicy(), failingAudit{Appender: e.log, kind: audit.KindApproved})
	p := e.propose(s)
	d := &countingDispatcher{}
	got, err := approval.ApproveAndRun(testContext(t), s, d, p.ID, approver)
	if !errors.Is(err, approval.ErrAudit) || !errors.Is(err, errAuditDown) {
		t.Fatalf("ApproveAndRun = %v, want ErrAudit", err)
	}
	if d.count() != 0 {
		t.Fatal("unaudited approval was dispatched")
	}
	if got.State != approval.StateFailed {
		t.Errorf("state = %s, want failed", got.State)
	}
}

func TestExpireSweep(t *testing.T) {
	e := newEnv(t)
	replicas := []*approval.Store{e.store(defaultPolicy(), nil), e.store(defaultPolicy(), nil)}
	ctx := testContext(t)
	if n, err := replicas[0].Expire(ctx, e.clock.Now()); err != nil || n != 0 {
		t.Fatalf("Expire on an empty bucket = %d, %v", n, err)
	}
	old := e.propose(replicas[0])
	decided := e.propose(replicas[0])
	if _, err := replicas[0].Reject(ctx, decided.ID, approver, "no", e.clock.Now()); err != nil {
		t.Fatal(err)
	}
	e.clock.Add(30 * time.Minute)
	fresh := e.propose(replicas[0])
	e.clock.Add(31 * time.Minute) // old is past its hour, fresh is not

	if n, err := replicas[0].Expire(ctx, e.clock.Now().Add(-time.Hour)); err != nil || n != 0 {
		t.Fatalf("early Expire = %d, %v; want nothing expired", n, err)
	}
	// Both replicas sweep at once; the proposal expires once.
	var wg sync.WaitGroup
	counts := make([]int, 2)
	for i, s := range replicas {
		wg.Go(func() {
			n, err := s.Expire(ctx, e.clock.Now())
			if err != nil {
				t.Errorf("Expire: %v", err)
			}
			counts[i] = n
		})
	}
	wg.Wait()
	if counts[0]+counts[1] != 1 {
		t.Fatalf("sweeps expired %v proposals, want 1 in total", counts)
	}
	for id, want := range map[string]approval.State{old.ID: approval.StateExpired, decided.ID: approval.StateRejected, fresh.ID: approval.StatePending} {
		got, err := replicas[1].Get(ctx, id)
		if err != nil || got.State != want {
			t.Errorf("%s: %s, %v; want %s", id, got.State, err, want)
		}
	}
	if n := countKind(e.records(old.ID), audit.KindExpired); n != 1 {
		t.Errorf("%d expired records, want 1", n)
	}
	if _, err := replicas[1].Approve(ctx, old.ID, approver, e.clock.Now()); !errors.Is(err, approval.ErrExpired) {
		t.Errorf("Approve after sweep = %v, want ErrExpired", err)
	}
}
