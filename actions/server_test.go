package actions_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/event"
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

func (s *sealer) seal(t *testing.T, req actions.Request) []byte {
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

// serve starts actions.Serve for source on an embedded NATS server and
// returns a client connection, the request subject and the bot's sealer;
// Serve is stopped (and must return) when the test ends.
func serve(t *testing.T, source string, x *actions.Executor) (*nats.Conn, string, *sealer) {
	t.Helper()
	srv := natstest.RunServer(t)
	connect := func(name string) *bus.Conn {
		ctx, cancel := context.WithTimeout(context.Background(), natstest.Timeout)
		defer cancel()
		c, err := bus.Connect(ctx, bus.Config{URLs: []string{srv.ClientURL()}, Name: name}, natstest.Logger(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	agent, client := connect("agent"), connect("bot")
	signer, err := actions.NewEphemeralSigner()
	if err != nil {
		t.Fatal(err)
	}
	s := &sealer{source: source, signer: signer, store: &approvals{m: map[string]actions.ApprovalRecord{}}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- actions.Serve(ctx, agent.NC, actions.ServeConfig{
			Source: source, Executor: x, Log: natstest.Logger(t),
			Verifier: &actions.Verifier{Keys: []string{signer.PublicKey()}, Store: s.store, Source: source, FourEyes: true},
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
	subject, err := event.ActionRequestSubject(source)
	if err != nil {
		t.Fatal(err)
	}
	return client.NC, subject, s
}

// call sends data and decodes the reply, waiting for Serve to subscribe.
func call(t *testing.T, nc *nats.Conn, subject string, data []byte) actions.Reply {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		msg, err := nc.Request(subject, data, 30*time.Second)
		if errors.Is(err, nats.ErrNoResponders) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatalf("request: %v", err)
		}
		var r actions.Reply
		if err := json.Unmarshal(msg.Data, &r); err != nil {
			t.Fatalf("decode reply %q: %v", msg.Data, err)
		}
		return r
	}
}

// An approved noProxy request is executed and answered with its result;
// the same request again gets the stored result without touching the
// cluster, and the same id with other content is refused.
func TestServeNoProxyPatch(t *testing.T) {
	env.Need(t)
	c := scenario.BehindProxy(env.Namespace(t), "served")
	seedCluster(t, c)
	x, mgmt, _ := executor(t)
	nc, subject, s := serve(t, "mgmt-serve", x)

	req := patchRequest("fix-serve0001", c, scenario.SeedNoProxy)
	r := call(t, nc, subject, s.seal(t, req))
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

	// A replayed request: the stored result, no API call at all.
	again := call(t, nc, subject, s.seal(t, req))
	if err := again.Err(); err != nil {
		t.Fatalf("duplicate: %v", err)
	}
	if again.Result == nil || again.Result.Outcome != actions.OutcomeApplied || again.Result.After != r.Result.After {
		t.Errorf("duplicate result = %+v, want the stored one %+v", again.Result, r.Result)
	}
	mgmt.expect(t, "duplicate")
	if _, rv2 := readHC(t, c.Namespace, c.Name); rv2 != rv {
		t.Errorf("duplicate changed the HostedCluster: resourceVersion %s → %s", rv, rv2)
	}

	// The same id for something else is a bug or an attack, not a replay:
	// it is not what the approval store holds for that id.
	other := req
	other.NoProxy = &actions.NoProxyParams{Expected: fixedNoProxy, Add: []string{"example.com"}}
	r = call(t, nc, subject, s.seal(t, other))
	if r.Code != actions.CodeUnauthorized || !errors.Is(r.Err(), actions.ErrUnauthorized) {
		t.Errorf("reused id: reply %+v, want code unauthorized", r)
	}
	mgmt.expect(t, "reused id")

	// A new proposal computed from a value the cluster no longer holds.
	stale := patchRequest("fix-serve0002", c, scenario.SeedNoProxy+",changed")
	stale.NoProxy.Add = []string{"example.org"}
	r = call(t, nc, subject, s.seal(t, stale))
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
	nc, subject, s := serve(t, "mgmt-invalid", x)

	wildcard := patchRequest("fix-inval001", c, scenario.SeedNoProxy)
	wildcard.NoProxy.Add = []string{"*"}
	unknownField := strings.Replace(string(s.seal(t, patchRequest("fix-inval002", c, scenario.SeedNoProxy))), `"key"`, `"force":true,"key"`, 1)
	for name, data := range map[string][]byte{
		"wildcard":      s.seal(t, wildcard),
		"not json":      []byte("{nope"),
		"unknown field": []byte(unknownField),
		"trailing data": append(s.seal(t, patchRequest("fix-inval003", c, scenario.SeedNoProxy)), []byte(` {}`)...),
		"too large":     []byte(`{"id":"` + strings.Repeat("a", actions.MaxRequestBytes) + `"}`),
	} {
		r := call(t, nc, subject, data)
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
