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
	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bot/command"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/testenv"
	"github.com/hcpbot/hcpbot/internal/testenv/chaosreport"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
)

// Every way of deciding a change one must not decide — a non-approver, the
// requester under four-eyes, an expired proposal, another cluster's action
// id, a replayed approve of an executed action (also concurrent, on two
// replicas), a reject after the approve, an approve after a reject, an id
// that does not exist — is refused, runs nothing on the agent (the real
// approval.Serve; its executor counts what it is asked to run), and is
// audited as a refusal. Only the legitimate approvals run, each once.
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
	alog, err := audit.Open(ctx, botConn.JS)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := approval.NewEphemeralSigner()
	if err != nil {
		t.Fatal(err)
	}
	const ttl = time.Minute
	pol := fourEyes()
	pol.TTL = ttl
	// Two bot replicas, as deployed; the second only takes part in the
	// concurrent replays.
	replicas := []*approval.Flow{runFlow(t, botConn.JS, signer, alog, pol), runFlow(t, botConn.JS, signer, alog, pol)}
	flow := replicas[0]
	// A replica whose clock is a TTL behind: what it proposes is expired.
	behind := openFlow(t, botConn.JS, signer, alog, pol, func(c *approval.Config) {
		c.Now = func() time.Time { return time.Now().Add(-ttl - time.Second) }
	})

	// The agent's side: every execution is counted, by action id.
	x := newFakeExecutor(func(ch actions.Change) (*actions.Result, error) {
		return &actions.Result{ActionID: ch.ID, Type: ch.Type, Outcome: actions.OutcomeApplied, Summary: "applied"}, nil
	})
	serveAgent(t, agentConn.JS, source, signer, x)
	approvals := &command.Changes{Flow: flow, Audit: alog}

	clusterKey := func(name string) diagnose.Key {
		return diagnose.Key{Source: source, Cluster: event.ClusterRef{Namespace: "clusters", Name: name}}
	}
	proposeOn := func(t *testing.T, c *command.Changes, cluster string) string {
		t.Helper()
		f := &diagnose.Fix{Kind: "noproxy", Target: "HostedCluster/clusters/" + cluster, Before: ".cluster.local", Add: []string{"kubernetes"}}
		r := c.ProposeNoProxy(ctx, clusterKey(cluster), nil, f, nil, requester)
		id := actionID.FindString(r.Text)
		if id == "" {
			t.Fatalf("no action id in the proposal reply: %s", r.Text)
		}
		return id
	}
	propose := func(t *testing.T, cluster string) string { return proposeOn(t, approvals, cluster) }
	// executed waits for the outcome of a legitimate approval of id, so
	// that its one execution is counted before the attacks on it.
	executed := func(t *testing.T, id string) {
		t.Helper()
		testenv.Eventually(t, natsWait, id+" executed", func() bool { return stateOf(t, flow, id) == approval.StateExecuted })
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
	viaFlow := func(id, user string) (string, error) {
		_, err := flow.Approve(ctx, id, user)
		return "", err
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
			return proposeOn(t, &command.Changes{Flow: behind, Audit: alog}, "c1"), 0
		}, attempts: []attempt{{approver1, approval.ErrExpired, viaBotApprove}, {approver2, approval.ErrExpired, viaBotApprove}}},
		{name: "another cluster's action id", setup: func(t *testing.T) (string, int) { return propose(t, "c2"), 0 },
			attempts: []attempt{{approver1, approval.ErrWrongCluster, func(id, user string) (string, error) {
				// As from the thread of cluster c1.
				return approvals.Approve(ctx, id, user, approval.ExpectCluster(actions.ClusterRef{Namespace: "clusters", Name: "c1"})).Text, nil
			}}}},
		{name: "replayed approve of an executed action", setup: func(t *testing.T) (string, int) {
			id := propose(t, "c1")
			if r := approvals.Approve(ctx, id, approver1); !strings.Contains(r.Text, "approved by <@"+approver1+"> and sent to the agent") {
				t.Fatalf("legitimate approval: %s", r.Text)
			}
			executed(t, id)
			return id, 1
		}, attempts: []attempt{{approver1, approval.ErrAlreadyDecided, viaBotApprove}, {approver2, approval.ErrAlreadyDecided, viaBotApprove},
			{approver2, approval.ErrAlreadyDecided, viaFlow}}},
		{name: "reject after approve", setup: func(t *testing.T) (string, int) {
			id := propose(t, "c1")
			if _, err := flow.Approve(ctx, id, approver2); err != nil {
				t.Fatalf("legitimate approval: %v", err)
			}
			executed(t, id)
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
				before := x.calls()
				for _, a := range r.attempts {
					attempts++
					text, err := a.do(id, a.user)
					// The bot's replies say why; the flow's errors wrap
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
				if s, err := flow.Get(ctx, id); err == nil && s.State == approval.StateApproved {
					t.Errorf("%s: %s is approved", r.name, id)
				}
				if got := x.calls() - before; got != 0 {
					t.Errorf("%s: %d executions on the agent", r.name, got)
				}
				if r.name == "expired" {
					if p, err := flow.Get(ctx, id); err != nil || p.State != approval.StateExpired {
						t.Errorf("expired proposal is %s (%v)", p.State, err)
					}
				}
			})
		}
		// A burst of concurrent replays of one approval, as a replayed
		// Slack payload on both replicas would make.
		t.Run(fmt.Sprintf("%d/concurrent replays", round), func(t *testing.T) {
			id := propose(t, "c1")
			before := x.calls()
			var wg sync.WaitGroup
			var wins atomic.Int32
			for i := range replays {
				user := []string{approver1, approver2}[i%2]
				wg.Go(func() {
					if _, err := replicas[i%2].Approve(ctx, id, user); err == nil {
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
			executed(t, id)
			if wins.Load() != 1 || x.calls()-before != 1 {
				t.Errorf("%d approvals won, %d executions on the agent; want 1 and 1", wins.Load(), x.calls()-before)
			}
		})
	}
	time.Sleep(2 * time.Second) // two sweeps of both replicas: nothing more runs
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
	if got := x.calls(); got != legit {
		t.Errorf("%d actions executed, want the %d legitimate approvals", got, legit)
	}
	x.mu.Lock()
	for id, n := range x.runs {
		if n != 1 {
			t.Errorf("action %s executed %d times", id, n)
		}
	}
	x.mu.Unlock()
	chaosreport.Log(t, "abuse-authorisation", map[string]any{
		"attempts": attempts, "refused": refused, "executed": x.calls(), "legitimate_approvals": legit,
		"audited_refusals": audited, "refusal_kinds": len(rows) + 1, "rounds": rounds,
	})
}
