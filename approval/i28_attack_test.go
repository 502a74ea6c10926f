package approval_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/identity"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
)

// The attack review of issue 28 (acting as the approver): each test here
// failed when it was written, and names the attacker of docs/security.md
// it plays.

// A stolen bot NATS seed (no signing key) answers every identity check
// "allowed". The bot's user may create the streams of buckets the bot
// creates only when a feature is on (the digest buckets: no digests in
// configs/deploy/bot/config.yaml), at any time and with any subjects; a
// stream whose subjects take in hcpbot.identity.> makes the server answer
// each check with a JetStream publish acknowledgement, which reaches the
// bot before the agent's SubjectAccessReviews do. The bot decodes
// {"stream":…,"seq":…} as a CheckAnswer with nothing missing, no error,
// no identity: allowed. An approval the agent refuses (alice may not
// patch) then counts, silently, and completes the decision.
//
// The agent here answers only once Approve has returned (bounded by 10s):
// an API server slower than the server's acknowledgement, which any real
// one is, made certain.
func TestI28AttackBotSeedAnswersIdentityChecks(t *testing.T) {
	e := newEnv(t)
	m := identities(true)
	f := e.flow(fourEyes(), func(c *approval.Config) { c.Identities = m })
	var imp impersonation
	e.serve(func(c *approval.AgentConfig) {
		c.Identities = m
		c.As = imp.acting(e.x)
	})
	approved := make(chan struct{})
	asked := make(chan struct{}, 10)
	nc := e.connect("agent").NC
	e.run(func(ctx context.Context) {
		_ = approval.ServeChecks(ctx, nc, approval.CheckConfig{Source: source, Keys: []string{e.signer.PublicKey()}, Identities: m, Log: natstest.Logger(e.t),
			Access: func(ctx context.Context, id identity.Identity, _ actions.Change) ([]string, error) {
				asked <- struct{}{}
				select {
				case <-approved:
				case <-time.After(10 * time.Second):
				case <-ctx.Done():
				}
				return []string{"patch hostedclusters.hypershift.openshift.io in namespace clusters (name c1)"}, nil
			}})
	})

	// The attacker: the bot's user, creating the stream of a bucket this
	// bot never created, with the identity checks as its subjects.
	attacker := e.connect("bot")
	if _, err := attacker.JS.CreateStream(testContext(t), jetstream.StreamConfig{
		Name: "KV_" + bus.DigestTicksBucket, Subjects: []string{event.SubjectRoot + ".identity.>"}, Storage: jetstream.FileStorage,
	}); err != nil {
		t.Fatalf("the bot's user creating a capturing stream: %v", err)
	}

	ctx := testContext(t)
	p, err := f.Propose(ctx, noProxyChange(), requester, approval.ForSource(source))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	got, err := f.Approve(ctx, p.ID, approver)
	close(approved)
	t.Logf("Approve after %s: state %s, note %q, err %v", time.Since(start).Round(time.Millisecond), got.State, got.IdentityNote, err)
	select {
	case <-asked:
	case <-time.After(10 * time.Second):
		t.Fatal("the agent was never asked")
	}
	switch {
	case errors.Is(err, approval.ErrNotPermitted):
		// The agent's answer decided.
	case err == nil && got.IdentityNote != "":
		// No answer the bot could trust: said so, RBAC decides at the
		// write (as with an agent that does not answer).
	default:
		t.Errorf("approval by alice, whom the agent finds without patch: %s, note %q, err %v — counted as checked on an answer that was not the agent's", got.State, got.IdentityNote, err)
	}
}

// identities.required is the bot's word only. The bot requires identities
// and tells the approver that the change runs as their Kubernetes
// identity; the agent's copy of the section (configs/deploy/agent/config.yaml,
// kept equal by hand) lacks it — not yet updated, or dropped — so it
// neither answers the check ("no agent is listening", the same as an
// agent that is down) nor impersonates: it makes the change with its own
// ServiceAccount. Nothing sealed tells the agent that the bot required
// an identity. As with four-eyes, the sealed terms (or the completing
// decision, with the identity the bot resolved) should carry it, and the
// agent apply the stricter of the seal and its own configuration.
func TestI28AttackAgentWithoutTheMapActsAsItself(t *testing.T) {
	e := newEnv(t)
	f := e.flow(fourEyes(), func(c *approval.Config) { c.Identities = identities(true) })
	var imp impersonation
	e.serve(func(c *approval.AgentConfig) {
		// The agent's configuration without the identities section.
		c.As = imp.acting(e.x)
	})
	ctx := testContext(t)
	p, err := f.Propose(ctx, noProxyChange(), requester, approval.ForSource(source))
	if err != nil {
		t.Fatal(err)
	}
	var got outcome
	p, err = f.Approve(ctx, p.ID, approver, approval.OnOutcome(got.fn))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("told the approver: %q", p.IdentityNote)
	waitFor(t, 30*time.Second, "the outcome", func() bool { return len(got.got()) == 1 })
	as, _ := imp.last()
	if o := got.got()[0]; o.State == approval.StateExecuted && as.User == "" {
		t.Errorf("under the bot's identities.required, alice's approval was executed by the agent with its own rights (outcome %s, as %q, runs %d); the approver was told %q",
			o.State, o.Result.As, e.x.runs(p.ID), p.IdentityNote)
	}
}
