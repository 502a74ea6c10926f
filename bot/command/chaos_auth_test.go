package command_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bot/approval"
	"github.com/hcpbot/hcpbot/bot/command"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/testenv/chaosreport"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
)

// authClock is a settable clock shared by the Store and the test.
type authClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *authClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *authClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// Every way of deciding a change one must not decide — a non-approver, the
// requester under four-eyes, an expired proposal, another cluster's action
// id, a replayed approve of an executed action (also concurrent), a reject
// after the approve, an approve after a reject, an id that does not exist
// — is refused, runs nothing on the agent (action requests counted on
// NATS), and is audited as a refusal. Only the legitimate approvals run,
// each once.
func TestChaosAuthorisation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const source = "mgmt-authz"
	srv := natstest.RunServer(t)
	connect := func(name string) *bus.Conn {
		c, err := bus.Connect(ctx, bus.Config{URLs: []string{srv.ClientURL()}, Name: name}, natstest.Logger(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	botConn, agentConn := connect("bot"), connect("agent")
	clk := &authClock{t: time.Now().UTC()}
	alog, err := audit.Open(ctx, botConn.JS)
	if err != nil {
		t.Fatal(err)
	}
	const ttl = time.Minute
	signer, verifier := agentKeys(t, agentConn.JS, source)
	store, err := approval.NewStore(ctx, botConn.JS, alog,
		approval.Policy{Approvers: []string{approver1, approver2}, FourEyes: true, TTL: ttl}, approval.WithClock(clk.Now), approval.WithSealer(signer))
	if err != nil {
		t.Fatal(err)
	}

	// The agent's side: every action request is counted, by action id.
	var executed atomic.Int64
	var perIDMu sync.Mutex
	perID := map[string]int{}
	queue := ensureQueue(t, botConn.JS)
	serveFake(t, agentConn.JS, source, func(data []byte) (actions.Reply, bool) {
		req, ok := openRequest(t, verifier, data)
		if !ok {
			return actions.Reply{}, false
		}
		executed.Add(1)
		perIDMu.Lock()
		perID[req.ID]++
		perIDMu.Unlock()
		return actions.Reply{Result: &actions.Result{ActionID: req.ID, Type: req.Type, Outcome: actions.OutcomeApplied, Summary: "applied"}}, true
	})
	approvals := &command.Changes{Store: store, Audit: alog, Queue: queue, Signer: signer, Timeout: 20 * time.Second}
	// The same queueing the bot does, for the one refusal the bot's
	// Approve has no parameter for (the cluster the decision came from).
	dispatch := approval.DispatcherFunc(func(ctx context.Context, p approval.Proposal) (actions.Result, error) {
		att, err := p.Attestation()
		if err != nil {
			return actions.Result{}, err
		}
		data, err := signer.Seal(p.Request, att, time.Now())
		if err != nil {
			return actions.Result{}, err
		}
		if err := queue.Send(ctx, p.Source, p.ID, data); err != nil {
			return actions.Result{}, err
		}
		r, err := queue.Wait(ctx, p.Source, p.ID)
		if err != nil {
			return actions.Result{}, err
		}
		if r.Result == nil {
			return actions.Result{}, r.Err()
		}
		return *r.Result, r.Err()
	})

	clusterKey := func(name string) diagnose.Key {
		return diagnose.Key{Source: source, Cluster: event.ClusterRef{Namespace: "clusters", Name: name}}
	}
	propose := func(t *testing.T, cluster string) string {
		t.Helper()
		f := &diagnose.Fix{Kind: "noproxy", Target: "HostedCluster/clusters/" + cluster, Before: ".cluster.local", Add: []string{"kubernetes"}}
		r := approvals.ProposeNoProxy(ctx, clusterKey(cluster), f, nil, requester)
		id := actionID.FindString(r.Text)
		if id == "" {
			t.Fatalf("no action id in the proposal reply: %s", r.Text)
		}
		return id
	}
	approve := func(id, user string) error {
		_, err := approval.ApproveAndRun(ctx, store, dispatch, id, user)
		return err
	}
	// refusedRecords counts the audit's refusals of id by user whose reason
	// cites want.
	refusedRecords := func(t *testing.T, id, user string, want error) int {
		t.Helper()
		rs, err := alog.Recent(ctx, 10000)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, r := range rs {
			if r.Kind == audit.KindRefused && r.ActionID == id && r.Actor == user && strings.Contains(r.Reason, want.Error()) {
				n++
			}
		}
		return n
	}

	// attempt is one decision that must be refused.
	type attempt struct {
		user string
		want error
		do   func(id, user string) (refusedText string, err error)
	}
	viaBotApprove := func(id, user string) (string, error) { return approvals.Approve(ctx, id, user).Text, nil }
	viaBotReject := func(id, user string) (string, error) {
		return approvals.Reject(ctx, id, "changed my mind", user).Text, nil
	}
	type row struct {
		name string
		// setup proposes (and possibly decides legitimately) and returns
		// the id to attack; legit counts its legitimate approvals.
		setup    func(t *testing.T) (id string, legit int)
		attempts []attempt
	}
	rows := []row{
		{name: "not an approver", setup: func(t *testing.T) (string, int) { return propose(t, "c1"), 0 },
			attempts: []attempt{{stranger, approval.ErrNotApprover, viaBotApprove}, {stranger, approval.ErrNotApprover, viaBotReject}}},
		{name: "own request under four-eyes", setup: func(t *testing.T) (string, int) { return propose(t, "c1"), 0 },
			attempts: []attempt{{requester, approval.ErrOwnRequest, viaBotApprove}}},
		{name: "expired", setup: func(t *testing.T) (string, int) {
			id := propose(t, "c1")
			clk.Add(ttl + time.Second)
			return id, 0
		}, attempts: []attempt{{approver1, approval.ErrExpired, viaBotApprove}, {approver2, approval.ErrExpired, viaBotApprove}}},
		{name: "another cluster's action id", setup: func(t *testing.T) (string, int) { return propose(t, "c2"), 0 },
			attempts: []attempt{{approver1, approval.ErrWrongCluster, func(id, user string) (string, error) {
				_, err := approval.ApproveAndRun(ctx, store, dispatch, id, user, approval.ExpectCluster(actions.ClusterRef{Namespace: "clusters", Name: "c1"}))
				return "", err
			}}}},
		{name: "replayed approve of an executed action", setup: func(t *testing.T) (string, int) {
			id := propose(t, "c1")
			if r := approvals.Approve(ctx, id, approver1); !strings.Contains(r.Text, "approved by") {
				t.Fatalf("legitimate approval: %s", r.Text)
			}
			return id, 1
		}, attempts: []attempt{{approver1, approval.ErrAlreadyDecided, viaBotApprove}, {approver2, approval.ErrAlreadyDecided, viaBotApprove},
			{approver2, approval.ErrAlreadyDecided, func(id, user string) (string, error) { return "", approve(id, user) }}}},
		{name: "reject after approve", setup: func(t *testing.T) (string, int) {
			id := propose(t, "c1")
			if err := approve(id, approver2); err != nil {
				t.Fatalf("legitimate approval: %v", err)
			}
			return id, 1
		}, attempts: []attempt{{approver1, approval.ErrAlreadyDecided, viaBotReject}, {requester, approval.ErrAlreadyDecided, viaBotReject}}},
		{name: "approve after reject", setup: func(t *testing.T) (string, int) {
			id := propose(t, "c1")
			if r := approvals.Reject(ctx, id, "no", approver1); !strings.Contains(r.Text, "rejected by") {
				t.Fatalf("legitimate reject: %s", r.Text)
			}
			return id, 0
		}, attempts: []attempt{{approver2, approval.ErrAlreadyDecided, viaBotApprove}}},
		{name: "no such action", setup: func(t *testing.T) (string, int) { return "act-" + strings.Repeat("a", 16), 0 },
			attempts: []attempt{{approver1, approval.ErrNotFound, viaBotApprove}}},
	}

	rounds := chaosreport.Pick(1, 5)
	replays := chaosreport.Pick(4, 20) // concurrent replays of an executed action per round
	var attempts, refused, audited, legit int
	for round := range rounds {
		for _, r := range rows {
			t.Run(fmt.Sprintf("%d/%s", round, r.name), func(t *testing.T) {
				id, l := r.setup(t)
				legit += l
				before := executed.Load()
				for _, a := range r.attempts {
					attempts++
					text, err := a.do(id, a.user)
					// The bot's replies say why; the Store's errors wrap
					// the sentinel.
					if err != nil && !errors.Is(err, a.want) {
						t.Errorf("%s by %s: %v, want %v", r.name, a.user, err, a.want)
						continue
					}
					if err == nil && text != "" && strings.HasPrefix(text, "`"+id+"`") && (strings.Contains(text, " approved by <@") || strings.HasPrefix(text, "`"+id+"` rejected by")) {
						t.Errorf("%s by %s was not refused: %s", r.name, a.user, text)
						continue
					}
					if n := refusedRecords(t, id, a.user, a.want); n == 0 {
						t.Errorf("%s by %s: refusal not audited", r.name, a.user)
					}
					refused++
				}
				if got := executed.Load() - before; got != 0 {
					t.Errorf("%s: %d action requests reached the agent", r.name, got)
				}
				if r.name == "expired" {
					if p, err := store.Get(ctx, id); err != nil || p.State != approval.StateExpired {
						t.Errorf("expired proposal is %s (%v)", p.State, err)
					}
				}
			})
		}
		// A burst of concurrent replays of one executed action, as a
		// replayed Slack payload on several replicas would make.
		t.Run(fmt.Sprintf("%d/concurrent replays", round), func(t *testing.T) {
			id := propose(t, "c1")
			before := executed.Load()
			var wg sync.WaitGroup
			var wins atomic.Int32
			for i := range replays {
				user := []string{approver1, approver2}[i%2]
				wg.Go(func() {
					if err := approve(id, user); err == nil {
						wins.Add(1)
					} else if !errors.Is(err, approval.ErrAlreadyDecided) {
						t.Errorf("concurrent approve: %v", err)
					}
				})
			}
			wg.Wait()
			attempts += replays
			legit++
			refused += replays - int(wins.Load())
			if wins.Load() != 1 || executed.Load()-before != 1 {
				t.Errorf("%d approvals won, %d requests reached the agent; want 1 and 1", wins.Load(), executed.Load()-before)
			}
		})
	}
	// Every refusal is in the audit log, once.
	rs, err := alog.Recent(ctx, 10000)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Kind == audit.KindRefused {
			audited++
		}
	}
	if audited != refused {
		t.Errorf("%d refusals audited, want %d", audited, refused)
	}
	if got := int(executed.Load()); got != legit {
		t.Errorf("%d actions executed, want the %d legitimate approvals", got, legit)
	}
	perIDMu.Lock()
	for id, n := range perID {
		if n != 1 {
			t.Errorf("action %s executed %d times", id, n)
		}
	}
	perIDMu.Unlock()
	chaosreport.Log(t, "abuse-authorisation", map[string]any{
		"attempts": attempts, "refused": refused, "executed": executed.Load(), "legitimate_approvals": legit,
		"audited_refusals": audited, "refusal_kinds": len(rows) + 1, "rounds": rounds,
	})
}
