package main

import (
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/configs"
	"github.com/hcpbot/hcpbot/internal/testenv/syncbuf"
)

// A bot without a signing key (no approvals) keeps silences unsealed, as
// before sealing, and says at start what that leaves open; with one,
// silences are sealed and read against its key and the trusted ones.
func TestI30SilencesSealedOnlyWithASigningKey(t *testing.T) {
	var buf syncbuf.Buffer
	log := zerolog.New(&buf)
	if opts := silenceOptions(&configs.Config{}, nil, 1, log); len(opts) != 2 {
		t.Errorf("without a key: %d options, want replicas and logger only", len(opts))
	}
	if !strings.Contains(buf.String(), `"level":"warn"`) || !strings.Contains(buf.String(), "silences are not sealed, whoever holds the bot's NATS credentials can mute any incident") {
		t.Errorf("no warning at start without a key:\n%s", buf.String())
	}
	signer, err := approval.NewEphemeralSigner()
	if err != nil {
		t.Fatal(err)
	}
	before := buf.String()
	if opts := silenceOptions(&configs.Config{Approvals: &configs.Approvals{}}, signer, 1, log); len(opts) != 3 {
		t.Errorf("with a key: %d options, want the signer too", len(opts))
	}
	if buf.String() != before {
		t.Errorf("a warning with a key: %s", strings.TrimPrefix(buf.String(), before))
	}
}
