package approval_test

import (
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/bot/approval"
	"github.com/hcpbot/hcpbot/internal/testenv"
)

// Follow passes the proposals present, then each change. With a sealer,
// what someone without the bot's key wrote into the bucket never reaches
// the bot's messages: a forged proposal is left out, and a rewritten
// Cause (the root cause the bot shows for a fix) of a real one is dropped.
func TestFollowPassesOnlyWhatTheBotWrote(t *testing.T) {
	e := newEnv(t)
	signer, err := actions.NewEphemeralSigner()
	if err != nil {
		t.Fatal(err)
	}
	s := e.store(defaultPolicy(), nil, approval.WithSealer(signer))
	ctx := testContext(t)
	cause := approval.ForDiagnosis("proxy-tunnel", "API traffic is tunnelled", "noProxy lacks kubernetes.")
	before, err := s.Propose(ctx, noProxyRequest(), requester, approval.ForSource("mgmt-1"), cause)
	if err != nil {
		t.Fatal(err)
	}
	if before.CauseSeal == nil {
		t.Fatal("a sealed store did not seal the cause")
	}

	var mu sync.Mutex
	seen := map[string]approval.Proposal{}
	if err := s.Follow(ctx, func(p approval.Proposal) {
		mu.Lock()
		defer mu.Unlock()
		seen[p.ID] = p
	}); err != nil {
		t.Fatal(err)
	}
	got := func(id string) (approval.Proposal, bool) {
		mu.Lock()
		defer mu.Unlock()
		p, ok := seen[id]
		return p, ok
	}
	if p, ok := got(before.ID); !ok || p.Cause == nil || p.Cause.Title != "API traffic is tunnelled" {
		t.Fatalf("Follow returned before passing the proposal present: %+v", p)
	}

	kv, err := e.connect().JS.KeyValue(ctx, approval.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	put := func(p approval.Proposal) {
		t.Helper()
		b, _ := json.Marshal(p)
		if _, err := kv.Put(ctx, p.ID, b); err != nil {
			t.Fatal(err)
		}
	}
	// A real change is passed; a rewritten cause is dropped from it.
	rewritten := before
	rewritten.Cause = &approval.Cause{Rule: "proxy-tunnel", Title: "<!channel> click https://evil.example", Summary: "x"}
	put(rewritten)
	testenv.Eventually(t, 10*time.Second, "the rewritten proposal to be passed", func() bool {
		p, _ := got(before.ID)
		return p.Revision > before.Revision
	})
	if p, _ := got(before.ID); p.Cause != nil {
		t.Errorf("a rewritten cause reached the bot: %+v", p.Cause)
	}
	// A forged proposal (no seal, or the seal of another one) is left out;
	// a proposal written after it by the bot still comes through.
	forged := before
	forged.ID = "fix-forgedforged"
	forged.State = approval.StateExecuted
	forged.ExecutedAt = before.CreatedAt.Add(time.Minute)
	put(forged)
	after, err := s.Propose(ctx, noProxyRequest(), requester, approval.ForSource("mgmt-1"), cause)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the next real proposal to be passed", func() bool {
		_, ok := got(after.ID)
		return ok
	})
	if p, ok := got(forged.ID); ok {
		t.Errorf("a forged proposal reached the bot: %+v", p)
	}
}
