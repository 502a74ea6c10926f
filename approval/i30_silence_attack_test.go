package approval_test

import (
	"strings"
	"testing"

	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bot/checkpoint"
	"github.com/hcpbot/hcpbot/bot/silence"
)

// The bot's signing key seals its silences too (issue 30). Whoever can
// make the bot sign something of theirs (a reason in an audit record, a
// requester's text in a proposal) must never obtain a silence's seal, nor
// a silence's seal pass for anything else: each use signs only under its
// own context.
func TestI30AttackSilenceSignerSignsSilencesOnly(t *testing.T) {
	s, err := approval.NewEphemeralSigner()
	if err != nil {
		t.Fatal(err)
	}
	record := "sil-abcdefghij\n" + `{"id":"sil-abcdefghij","cluster":"mgmt-a/clusters/example"}`
	for _, input := range []string{
		"hcpbot-proposal-v2\n" + record,
		"hcpbot-decision-v1\n" + record,
		"hcpbot-request-v2\n" + record,
		audit.SigningContext + record,
		checkpoint.SigningContext + record,
		record,
		strings.TrimSuffix(silence.SigningContext, "\n") + record, // the context without its newline
	} {
		if _, err := s.ForSilences().Sign([]byte(input)); err == nil {
			t.Errorf("the silence signer signed %q", input)
		}
	}
	for name, other := range map[string]interface{ Sign([]byte) ([]byte, error) }{"audit": s.ForAudit(), "checkpoint": s.ForCheckpoints()} {
		if _, err := other.Sign([]byte(silence.SigningContext + record)); err == nil {
			t.Errorf("the %s signer signed a silence", name)
		}
	}
	if _, err := s.ForSilences().Sign([]byte(silence.SigningContext + record)); err != nil {
		t.Errorf("the silence signer refused a silence: %v", err)
	}
	if got := s.ForSilences().PublicKey(); got != s.PublicKey() {
		t.Errorf("silence key %s, signing key %s", got, s.PublicKey())
	}
}
