package actions_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
)

// approvals is an approval store for the server's tests: what
// bot/approval would hold once a proposal is approved. The real store
// against the agent is tested in bot (TestForgedActionRequests).
type approvals struct {
	mu sync.Mutex
	m  map[string]actions.ApprovalRecord
}

func (a *approvals) LookupApproval(_ context.Context, id string) (actions.ApprovalRecord, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	r, ok := a.m[id]
	if !ok {
		return actions.ApprovalRecord{}, actions.ErrNoApproval
	}
	return r, nil
}

// sealer plays the bot: it records a request as approved by two people
// (unless its id is approved already) and seals it.
type sealer struct {
	source string
	signer *actions.Signer
	store  *approvals
}

func (s *sealer) seal(t *testing.T, req actions.Change) []byte {
	t.Helper()
	now := time.Now().UTC()
	req.RequestedBy = "U0REQUESTER"
	s.store.mu.Lock()
	rec, ok := s.store.m[req.ID]
	if !ok {
		rec = actions.ApprovalRecord{
			ID: req.ID, State: "approved", Source: s.source, RequestedBy: req.RequestedBy, DecidedBy: "U0APPROVER",
			CreatedAt: now, DecidedAt: now, ExpiresAt: now.Add(time.Hour), FourEyes: true, Request: req,
		}
		rec.Seal = sealRecord(t, s.signer, rec)
		s.store.m[req.ID] = rec
	}
	s.store.mu.Unlock()
	digest, err := actions.RequestDigest(req)
	if err != nil {
		t.Fatal(err)
	}
	data, err := s.signer.Seal(req, actions.Approval{
		ProposalID: req.ID, Source: s.source, RequestedBy: rec.RequestedBy, ApprovedBy: rec.DecidedBy, FourEyes: true,
		CreatedAt: rec.CreatedAt, ApprovedAt: rec.DecidedAt, ExpiresAt: rec.ExpiresAt, RequestSHA256: digest,
	}, now)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// sealRecord is the seal the bot's approval store puts on a proposal.
func sealRecord(t *testing.T, s *actions.Signer, rec actions.ApprovalRecord) *actions.ProposalSeal {
	t.Helper()
	claims, err := rec.Claims()
	if err != nil {
		t.Fatal(err)
	}
	seal, err := s.SealProposal(claims)
	if err != nil {
		t.Fatal(err)
	}
	return &seal
}

// agentSide is a served source: the bot's client and the sealer.
type agentSide struct {
	source string
	url    string
	client *actions.Client
	js     jetstream.JetStream
	*sealer
}

// serve starts actions.Serve for source on an embedded NATS server, with
// the actions stream and results bucket created as the bot does, and
// returns the bot's side; Serve is stopped (and must return) when the test
// ends.
func serve(t *testing.T, source string, x *actions.Executor) *agentSide {
	t.Helper()
	a := newQueue(t, source)
	a.start(t, x, 0)
	return a
}

// newQueue is the bot's side of source on an embedded NATS server, the
// actions stream and results bucket created as the bot does; start runs
// the agent.
func newQueue(t *testing.T, source string) *agentSide {
	t.Helper()
	srv := natstest.RunServer(t)
	bot := connect(t, srv.ClientURL(), "bot")
	ensureQueue(t, bot.JS)
	signer, err := actions.NewEphemeralSigner()
	if err != nil {
		t.Fatal(err)
	}
	s := &sealer{source: source, signer: signer, store: &approvals{m: map[string]actions.ApprovalRecord{}}}
	return &agentSide{source: source, url: srv.ClientURL(), client: &actions.Client{JS: bot.JS}, js: bot.JS, sealer: s}
}

func connect(t *testing.T, url, name string) *bus.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), natstest.Timeout)
	defer cancel()
	c, err := bus.Connect(ctx, bus.Config{URLs: []string{url}, Name: name}, natstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// start runs actions.Serve for a's source on its own connection until the
// test ends (when it must return).
func (a *agentSide) start(t *testing.T, x *actions.Executor, ackWait time.Duration) {
	t.Helper()
	agent := connect(t, a.url, "agent")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- actions.Serve(ctx, agent.JS, actions.ServeConfig{
			Source: a.source, Executor: x, Log: natstest.Logger(t), AckWait: ackWait,
			Verifier: &actions.Verifier{Keys: []string{a.signer.PublicKey()}, Store: a.store, Source: a.source, FourEyes: true},
		})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Serve did not return")
		}
	})
}

// ensureQueue creates the actions stream and the results bucket, as the
// bot does.
func ensureQueue(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), natstest.Timeout)
	defer cancel()
	if _, err := bus.EnsureStream(ctx, js, bus.ActionsStream()); err != nil {
		t.Fatal(err)
	}
	if _, err := bus.EnsureKV(ctx, js, bus.ActionResultsKV()); err != nil {
		t.Fatal(err)
	}
}

var msgSeq atomic.Int64

// call queues data under a fresh message id (so that a replayed copy is
// not dropped by the server's de-duplication and reaches the agent) and
// waits for the answer recorded under that id.
func call(t *testing.T, a *agentSide, data []byte) actions.Reply {
	t.Helper()
	return callAs(t, a, fmt.Sprintf("msg-%04d", msgSeq.Add(1)), data)
}

// callAs queues data under message id id, as the bot does with the action
// id, and waits for the answer recorded under it.
func callAs(t *testing.T, a *agentSide, id string, data []byte) actions.Reply {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.client.Send(ctx, a.source, id, data); err != nil {
		t.Fatalf("send: %v", err)
	}
	r, err := a.client.Wait(ctx, a.source, id)
	if err != nil {
		t.Fatalf("wait for %s: %v", id, err)
	}
	return r
}

// An approved noProxy request is executed and answered with its result;
// a replayed copy (another message id) and the same id with other content
// are refused without touching the cluster.
func TestServeNoProxyPatch(t *testing.T) {
	env.Need(t)
	c := scenario.BehindProxy(env.Namespace(t), "served")
	seedCluster(t, c)
	x, mgmt, _ := executor(t)
	s := serve(t, "mgmt-serve", x)

	req := patchRequest("fix-serve0001", c, scenario.SeedNoProxy)
	// As the bot sends it: the action id is the message id.
	r := callAs(t, s, req.ID, s.seal(t, req))
	if err := r.Err(); err != nil {
		t.Fatalf("reply: %v", err)
	}
	if r.Result == nil || r.Result.Outcome != actions.OutcomeApplied || r.Result.ActionID != req.ID {
		t.Fatalf("result = %+v, want applied %s", r.Result, req.ID)
	}
	mgmt.expect(t, "execute", "get hostedclusters", "update hostedclusters dry-run", "update hostedclusters")
	got, rv := readHC(t, c.Namespace, c.Name)
	if got != fixedNoProxy {
		t.Errorf("noProxy = %q, want %q", got, fixedNoProxy)
	}

	// A replayed copy under another message id: refused, no API call.
	again := call(t, s, s.seal(t, req))
	if again.Code != actions.CodeUnauthorized || again.Result != nil {
		t.Errorf("replay: reply %+v, want code unauthorized", again)
	}
	mgmt.expect(t, "replay")
	if _, rv2 := readHC(t, c.Namespace, c.Name); rv2 != rv {
		t.Errorf("replay changed the HostedCluster: resourceVersion %s → %s", rv, rv2)
	}

	// The same id for something else is a bug or an attack, not a replay:
	// it is not what the approval store holds for that id.
	other := req
	other.NoProxy = &actions.NoProxyParams{Expected: fixedNoProxy, Add: []string{"example.com"}}
	r = call(t, s, s.seal(t, other))
	if r.Code != actions.CodeUnauthorized || !errors.Is(r.Err(), actions.ErrUnauthorized) {
		t.Errorf("reused id: reply %+v, want code unauthorized", r)
	}
	mgmt.expect(t, "reused id")

	// A new proposal computed from a value the cluster no longer holds.
	stale := patchRequest("fix-serve0002", c, scenario.SeedNoProxy+",changed")
	stale.NoProxy.Add = []string{"example.org"}
	r = call(t, s, s.seal(t, stale))
	if r.Code != actions.CodeConflict || !errors.Is(r.Err(), actions.ErrConflict) || r.Result != nil {
		t.Errorf("stale: reply %+v, want code conflict", r)
	}
	if got, rv2 := readHC(t, c.Namespace, c.Name); got != fixedNoProxy || rv2 != rv {
		t.Errorf("stale request changed the HostedCluster: %q (rv %s → %s)", got, rv, rv2)
	}
}

// Requests that cannot be acted on are answered with code invalid before
// any API call.
func TestServeInvalidRequests(t *testing.T) {
	env.Need(t)
	c := scenario.BehindProxy(env.Namespace(t), "invalid")
	seedCluster(t, c)
	before, rv := readHC(t, c.Namespace, c.Name)
	x, mgmt, _ := executor(t)
	s := serve(t, "mgmt-invalid", x)

	wildcard := patchRequest("fix-inval001", c, scenario.SeedNoProxy)
	wildcard.NoProxy.Add = []string{"*"}
	// Node ports no bot would send, approved and sealed as if it had.
	nodePortsTwice := exposeReq("expo-inval005", c)
	nodePortsTwice.Expose.NodePorts = []int32{30001, 30001}
	nodePortsBoth := exposeReq("expo-inval006", c, actions.ExposePort{Port: 8080, NodePort: 30001})
	nodePortsBoth.Expose.NodePorts = []int32{30002}
	nodePortTooBig := exposeReq("expo-inval007", c)
	nodePortTooBig.Expose.NodePorts = []int32{65536}
	unknownField := strings.Replace(string(s.seal(t, patchRequest("fix-inval002", c, scenario.SeedNoProxy))), `"key"`, `"force":true,"key"`, 1)
	for name, data := range map[string][]byte{
		"wildcard":              s.seal(t, wildcard),
		"nodePorts twice":       s.seal(t, nodePortsTwice),
		"nodePorts and ports":   s.seal(t, nodePortsBoth),
		"nodePort beyond 65535": s.seal(t, nodePortTooBig),
		"not json":              []byte("{nope"),
		"unknown field":         []byte(unknownField),
		"trailing data":         append(s.seal(t, patchRequest("fix-inval003", c, scenario.SeedNoProxy)), []byte(` {}`)...),
		"too large":             []byte(`{"id":"` + strings.Repeat("a", actions.MaxRequestBytes) + `"}`),
	} {
		r := call(t, s, data)
		if r.Code != actions.CodeInvalid || r.Result != nil || !errors.Is(r.Err(), actions.ErrInvalid) {
			t.Errorf("%s: reply %+v, want code invalid", name, r)
		}
	}
	mgmt.expect(t, "invalid requests")
	if got, rv2 := readHC(t, c.Namespace, c.Name); got != before || rv2 != rv {
		t.Errorf("HostedCluster changed: noProxy %q → %q, rv %s → %s", before, got, rv, rv2)
	}
}

func TestReplyCodes(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code actions.Code
	}{
		{nil, ""},
		{actions.ErrConflict, actions.CodeConflict},
		{actions.ErrNotKubeVirt, actions.CodeNotKubeVirt},
		{&actions.PortCollisionError{NodePort: 30080, Err: actions.ErrRejected}, actions.CodePortCollision},
		{actions.ErrInvalid, actions.CodeInvalid},
		{actions.ErrRejected, actions.CodeRejected},
		{actions.ErrUnauthorized, actions.CodeUnauthorized},
		{actions.ErrKubeconfig, actions.CodeInternal},
		{context.DeadlineExceeded, actions.CodeInternal},
	} {
		if got := actions.CodeOf(tc.err); got != tc.code {
			t.Errorf("CodeOf(%v) = %q, want %q", tc.err, got, tc.code)
		}
		if tc.err == nil {
			continue
		}
		back := actions.Reply{Code: tc.code, Error: "x"}.Err()
		if want := tc.code.Err(); !errors.Is(back, want) {
			t.Errorf("Reply{%s}.Err() = %v, want %v", tc.code, back, want)
		}
	}
	if err := (actions.Reply{}).Err(); !errors.Is(err, actions.ErrInternal) {
		t.Errorf("empty reply: %v, want ErrInternal", err)
	}
}
