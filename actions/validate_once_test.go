package actions_test

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bot/approval"
	"github.com/hcpbot/hcpbot/bot/command"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
)

// A request is validated once when the bot sends it and once when the
// agent receives it, whatever the hops in between: proposed and approved
// through the bot's chat layer (bot/command on bot/approval's store, which
// validates at Propose), sealed and queued (Client.Submit), consumed,
// verified and executed by the agent (Serve: Verifier.Open validates, the
// executor runs the checked request) on a real API server. Before, one
// noProxy request was validated four times (Propose, Verifier.Open,
// Executor.Execute, PatchNoProxy) and a rollback three and a half.
func TestValidatedOnceAtEachBoundary(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	c := scenario.BehindProxy(env.Namespace(t), "once")
	seedCluster(t, c)
	validations := actions.CountValidations(t, func(r actions.Change) bool { return r.Cluster.Namespace == c.Namespace })

	source := "mgmt-once"
	srv := natstest.RunServer(t)
	botConn, agentConn := connect(t, srv.ClientURL(), "bot"), connect(t, srv.ClientURL(), "agent")
	ensureQueue(t, botConn.JS)
	signer, err := actions.NewEphemeralSigner()
	if err != nil {
		t.Fatal(err)
	}
	x, _, _ := executor(t)
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- actions.Serve(sctx, agentConn.JS, actions.ServeConfig{
			Source: source, Executor: x, Log: natstest.Logger(t),
			Verifier: &actions.Verifier{Keys: []string{signer.PublicKey()}, Store: approval.NewLookup(agentConn.JS), Source: source},
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})

	log, err := audit.Open(ctx, botConn.JS)
	if err != nil {
		t.Fatal(err)
	}
	store, err := approval.NewStore(ctx, botConn.JS, log, approval.Policy{Approvers: []string{"U0APPROVER"}}, approval.WithSealer(signer))
	if err != nil {
		t.Fatal(err)
	}
	changes := &command.Changes{Store: store, Audit: log, Queue: &actions.Client{JS: botConn.JS, Poll: 50 * time.Millisecond}, Signer: signer, Timeout: time.Minute}

	k := diagnose.Key{Source: source, Cluster: event.ClusterRef{Namespace: c.Namespace, Name: c.Name}}
	fix := &diagnose.Fix{Kind: "noproxy", Target: "HostedCluster/" + c.Namespace + "/" + c.Name, Before: scenario.SeedNoProxy, Add: []string{"kubernetes", "172.31.0.0/16", "10.132.0.0/14"}}
	r := changes.ProposeNoProxy(ctx, k, fix, nil, "U0REQUESTER")
	id := regexp.MustCompile(`act-[a-z2-7]{16}`).FindString(r.Text)
	if id == "" {
		t.Fatalf("no proposal: %s", r.Text)
	}
	if n := validations(actions.TypeNoProxyPatch); n != 1 {
		t.Errorf("proposed: validated %d times, want 1 (the bot's boundary)", n)
	}
	r = changes.Approve(ctx, id, "U0APPROVER")
	if !strings.Contains(r.Text, "applied") {
		t.Fatalf("approve: %s", r.Text)
	}
	if got, _ := readHC(t, c.Namespace, c.Name); got != fixedNoProxy {
		t.Fatalf("noProxy = %q, want %q", got, fixedNoProxy)
	}
	if n := validations(actions.TypeNoProxyPatch); n != 2 {
		t.Errorf("sent, received and executed: validated %d times, want 2 (once by the bot, once by the agent)", n)
	}

	r = changes.ProposeRollback(ctx, id, "U0REQUESTER")
	rid := regexp.MustCompile(`rbk-[a-z2-7]{16}`).FindString(r.Text)
	if rid == "" {
		t.Fatalf("no rollback proposal: %s", r.Text)
	}
	if r = changes.Approve(ctx, rid, "U0APPROVER"); !strings.Contains(r.Text, "rolled back") {
		t.Fatalf("approve rollback: %s", r.Text)
	}
	if got, _ := readHC(t, c.Namespace, c.Name); got != scenario.SeedNoProxy {
		t.Fatalf("noProxy after rollback = %q, want %q", got, scenario.SeedNoProxy)
	}
	if n := validations(actions.TypeRollback); n != 2 {
		t.Errorf("rollback: validated %d times, want 2 (once by the bot, once by the agent)", n)
	}
}
