package bot_test

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/bot/approval"
)

// agentKeys is the key pair of a test's bot and the agent-side check of
// source trusting it, reading the approval store through js as a real
// agent does.
func agentKeys(t *testing.T, js jetstream.JetStream, source string) (*actions.Signer, *actions.Verifier) {
	t.Helper()
	s, err := actions.NewEphemeralSigner()
	if err != nil {
		t.Fatal(err)
	}
	return s, &actions.Verifier{Keys: []string{s.PublicKey()}, Store: approval.NewLookup(js), Source: source, FourEyes: true}
}

// openRequest is what a fake agent does with a request: verify it.
func openRequest(t *testing.T, v *actions.Verifier, data []byte) (actions.Request, bool) {
	t.Helper()
	vr, err := v.Open(context.Background(), data)
	if err != nil {
		t.Errorf("agent: %v", err)
		return actions.Request{}, false
	}
	return vr.Request, true
}
