package approval_test

import (
	"strings"
	"testing"

	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bot/checkpoint"
	"github.com/hcpbot/hcpbot/bot/fleet/wire"
)

// The bot's signing key also seals the answers bot groups give each other
// (issue 30, partitions). A fleet answer is what a command shows as a
// diagnosis or an incident: no signature made for a checkpoint, an audit
// record or an approval may pass for one, nor one for them.
func TestI30AttackFleetSignerSignsFleetAnswersOnly(t *testing.T) {
	s, err := approval.NewEphemeralSigner()
	if err != nil {
		t.Fatal(err)
	}
	header := "2 1 req rep ans 0 1 sum\n"
	for _, input := range []string{
		"hcpbot-proposal-v2\n" + header,
		"hcpbot-decision-v1\n" + header,
		"hcpbot-request-v2\n" + header,
		audit.SigningContext + header,
		checkpoint.SigningContext + header,
		header,
		strings.TrimSuffix(wire.SigningContext, "\n") + header,
	} {
		if _, err := s.ForFleet().Sign([]byte(input)); err == nil {
			t.Errorf("the fleet signer signed %q", input)
		}
	}
	for name, other := range map[string]interface{ Sign([]byte) ([]byte, error) }{"checkpoint": s.ForCheckpoints(), "audit": s.ForAudit()} {
		if _, err := other.Sign([]byte(wire.SigningContext + header)); err == nil {
			t.Errorf("the %s signer signed a fleet answer", name)
		}
	}
	if _, err := s.ForFleet().Sign([]byte(wire.SigningContext + header)); err != nil {
		t.Errorf("the fleet signer refused a fleet answer: %v", err)
	}
	if got := s.ForFleet().PublicKey(); got != s.PublicKey() {
		t.Errorf("fleet key %s, signing key %s", got, s.PublicKey())
	}
}
