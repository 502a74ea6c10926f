package approval_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
)

// exposeChange exposes petclinic of cluster on the chosen node ports.
func exposeChange(nodePorts ...int32) actions.Change {
	return actions.Change{
		Type: actions.TypeExposeNodePort, Cluster: cluster,
		Expose: &actions.ExposeParams{Namespace: "petclinic", Service: "petclinic", NodePorts: nodePorts},
	}
}

// preflights plays the cluster side of the agent's preflight (the real
// one, actions.Executor.Preflight, is tested on the API server): node
// ports in held are taken by the Service named, the rest are free.
type preflights struct {
	mu    sync.Mutex
	calls []actions.Change
	held  map[int32]string
	err   error
	// delay, when set, is how long each preflight reads (an API server
	// slower than a forged reply).
	delay time.Duration
}

func (p *preflights) preflight(_ context.Context, ch actions.Change) (*actions.Preflight, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, ch)
	time.Sleep(p.delay)
	if p.err != nil {
		return nil, p.err
	}
	pf := &actions.Preflight{}
	var problems []actions.PortProblem
	for _, n := range ch.Expose.ChosenNodePorts() {
		if h, ok := p.held[n]; ok {
			problems = append(problems, actions.PortProblem{NodePort: n, Reason: actions.PortAllocated, Holder: h})
		} else {
			pf.Free = append(pf.Free, n)
		}
	}
	if len(problems) > 0 {
		return &actions.Preflight{Collision: &actions.PortCollision{Ports: problems, Range: actions.DefaultNodePortRange, Alternatives: []int32{30004}}}, nil
	}
	return pf, nil
}

func (p *preflights) last() actions.Change {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[len(p.calls)-1]
}

func (p *preflights) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.calls)
}

// servePreflights answers checks and preflights as the agent of source
// (its NATS user) with p, until stop or the test's end.
func (e *env) servePreflights(p *preflights) (stop func()) {
	e.t.Helper()
	nc := e.connect("agent").NC
	served := e.run(func(ctx context.Context) {
		_ = approval.ServeChecks(ctx, nc, approval.CheckConfig{Source: source, Keys: []string{e.signer.PublicKey()}, Log: natstest.Logger(e.t), Preflight: p.preflight})
	})
	waitFor(e.t, 30*time.Second, "the agent answering preflights", func() bool { return nc.NumSubscriptions() == 1 })
	if err := nc.Flush(); err != nil {
		e.t.Fatal(err)
	}
	return func() {
		served()
		// The server has the unsubscription: nobody answers now.
		if err := nc.Flush(); err != nil {
			e.t.Fatal(err)
		}
	}
}

// ask sends data as a preflight of the agent of source over nc, and
// decodes the answer.
func ask(t *testing.T, nc *nats.Conn, data []byte) (approval.PreflightAnswer, error) {
	t.Helper()
	subject, err := event.IdentityCheckSubject(source)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := nc.Request(subject, data, 10*time.Second)
	if err != nil {
		return approval.PreflightAnswer{}, err
	}
	var a approval.PreflightAnswer
	if err := json.Unmarshal(msg.Data, &a); err != nil {
		t.Fatalf("answer %q: %v", msg.Data, err)
	}
	return a, nil
}

// Issue 29: a node port already taken in the management cluster is found
// when the exposure is proposed, not after two people approved it. The
// proposal is refused naming the port, the Service holding it and a free
// one, and nothing is stored or audited as proposed; free ports make the
// proposal, with a note saying so; an agent that does not answer leaves a
// note that the ports are checked when the exposure runs; an exposure
// the agent finds invalid is refused.
func TestPreflightAtProposal(t *testing.T) {
	e := newEnv(t)
	f := e.flow(fourEyes())
	pre := &preflights{held: map[int32]string{30002: "other/holds-30002"}}
	stop := e.servePreflights(pre)
	ctx := testContext(t)

	ch := exposeChange(30001, 30002)
	ch.ID = "expo-taken0001"
	_, err := f.Propose(ctx, ch, requester, approval.ForSource(source))
	var pc *actions.PortCollisionError
	if !errors.As(err, &pc) || !errors.Is(err, actions.ErrPortCollision) ||
		!strings.Contains(err.Error(), "30002 is already allocated in the management cluster (Service other/holds-30002)") || !strings.Contains(err.Error(), "30004") {
		t.Fatalf("taken port: %v", err)
	}
	t.Logf("refused: %v", err)
	if _, err := f.Get(ctx, ch.ID); !errors.Is(err, approval.ErrNotFound) {
		t.Errorf("a refused proposal is stored: %v", err)
	}
	if n := countKind(e.records(ch.ID), audit.KindProposed); n != 0 {
		t.Errorf("a refused proposal audited as proposed %d times", n)
	}
	if got := pre.last(); got.ID != ch.ID || got.RequestedBy != requester || !slices.Equal(got.Expose.NodePorts, ch.Expose.NodePorts) {
		t.Errorf("the agent was asked about %+v", got)
	}

	p, err := f.Propose(ctx, exposeChange(30001, 30004), requester, approval.ForSource(source))
	if err != nil || p.State != approval.StatePending || p.PreflightNote != "Node ports 30001, 30004 are free in the management cluster now (checked by the agent of mgmt-1)." {
		t.Fatalf("free ports: %+v %q, %v", p.State, p.PreflightNote, err)
	}
	if _, err := f.Get(ctx, p.ID); err != nil {
		t.Errorf("the proposal is not stored: %v", err)
	}

	// Whatever the ports: the hosted Service is not there.
	pre.mu.Lock()
	pre.err = errors.Join(actions.ErrInvalid, errors.New("hosted Service petclinic/petclinic not found"))
	pre.mu.Unlock()
	if _, err := f.Propose(ctx, exposeChange(30005), requester, approval.ForSource(source)); !errors.Is(err, actions.ErrInvalid) || !strings.Contains(err.Error(), "petclinic/petclinic not found") {
		t.Errorf("invalid exposure: %v", err)
	}
	// The cluster could not be read: proposed, with the note.
	pre.mu.Lock()
	pre.err = errors.New("get HostedCluster clusters/c1: the server is currently unable to handle the request")
	pre.mu.Unlock()
	p, err = f.Propose(ctx, exposeChange(30005), requester, approval.ForSource(source))
	if err != nil || !strings.Contains(p.PreflightNote, "could not check them (get HostedCluster clusters/c1: the server is currently unable") ||
		!strings.Contains(p.PreflightNote, "checked when the exposure runs, before anything is written") {
		t.Errorf("unreadable cluster: %q, %v", p.PreflightNote, err)
	}

	// No agent: proposed at once, with the note.
	stop()
	start := time.Now()
	p, err = f.Propose(ctx, exposeChange(30002), requester, approval.ForSource(source))
	if err != nil || p.PreflightNote != "Node ports not checked yet: the agent of mgmt-1 did not answer whether they are free (no agent is listening); they are checked when the exposure runs, before anything is written." || time.Since(start) > 2*time.Second {
		t.Errorf("no agent: %q, %v after %s", p.PreflightNote, err, time.Since(start))
	}
	// Not an exposure: nothing asked.
	n := pre.count()
	if p, err := f.Propose(ctx, noProxyChange(), requester, approval.ForSource(source)); err != nil || p.PreflightNote != "" || pre.count() != n {
		t.Errorf("noProxy: %q, %v", p.PreflightNote, err)
	}
}
