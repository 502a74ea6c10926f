package approval_test

import (
	"strings"
	"testing"

	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bot/checkpoint"
)

// The bot's signing key now also seals its checkpoints (issue 30). The
// key signs what people and agents influence (a proposal's terms hold a
// requester's text; an audit record holds a reason): none of those
// signatures may pass for a checkpoint's seal, nor one for them. Each use
// of the key signs only under its own context, so whoever can make the
// bot sign something (a channel member who is no approver, proposing)
// never obtains a seal over a manifest.
func TestI30AttackCheckpointSignerSignsCheckpointsOnly(t *testing.T) {
	s, err := approval.NewEphemeralSigner()
	if err != nil {
		t.Fatal(err)
	}
	manifest := `bot` + "\n" + `{"format":1,"seq":1}`
	for _, input := range []string{
		"hcpbot-proposal-v2\n" + manifest,
		"hcpbot-decision-v1\n" + manifest,
		"hcpbot-request-v2\n" + manifest,
		audit.SigningContext + manifest,
		manifest,
		strings.TrimSuffix(checkpoint.SigningContext, "\n") + manifest, // the context without its newline
	} {
		if _, err := s.ForCheckpoints().Sign([]byte(input)); err == nil {
			t.Errorf("the checkpoint signer signed %q", input)
		}
	}
	if _, err := s.ForAudit().Sign([]byte(checkpoint.SigningContext + manifest)); err == nil {
		t.Error("the audit signer signed a checkpoint manifest")
	}
	if _, err := s.ForCheckpoints().Sign([]byte(checkpoint.SigningContext + manifest)); err != nil {
		t.Errorf("the checkpoint signer refused a checkpoint: %v", err)
	}
	if got := s.ForCheckpoints().PublicKey(); got != s.PublicKey() {
		t.Errorf("checkpoint key %s, signing key %s", got, s.PublicKey())
	}
}
