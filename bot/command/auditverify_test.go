package command_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bot/blockkit"
	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/bot/command"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
)

// `audit verify` answers that the trail is whole, then, once someone with
// the bot's NATS user but not its key wrote on it, which records break
// the chain or lack the signature: escaped, and within one message however
// many there are.
func TestAuditVerifyCommand(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), natstest.Timeout)
	defer cancel()
	srv := natstest.RunServer(t)
	conn, err := bus.Connect(ctx, bus.Config{URLs: []string{srv.ClientURL()}}, natstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	signer, err := audit.NewKeyPairSigner(kp)
	if err != nil {
		t.Fatal(err)
	}
	log, err := audit.Open(ctx, conn.JS, audit.WithSigner(signer))
	if err != nil {
		t.Fatal(err)
	}
	h := &command.Handler{AuditVerifier: audit.NewVerifier(log, audit.VerifyOptions{TrustedKeys: []string{signer.PublicKey()}}, nil, natstest.Logger(t))}
	ask := func() string {
		t.Helper()
		r := h.HandleCommand(ctx, chatops.Request{Origin: chatops.Origin{UserID: "UAUDITOR"}, Command: chatops.AuditVerify{}})
		if n := len([]rune(r.Text)); n > blockkit.MaxSectionText || r.InChannel {
			t.Errorf("reply of %d characters (limit %d), in channel %v", n, blockkit.MaxSectionText, r.InChannel)
		}
		return r.Text
	}

	for _, source := range []string{"", "mgmt-1", ""} {
		if err := log.Append(ctx, audit.Record{Kind: audit.KindApproved, Actor: "U1", ActionID: "act-aaaa", Source: source}); err != nil {
			t.Fatal(err)
		}
	}
	const whole = "Audit trail verified: 3 records on 2 subjects since seq 1, no gap, no broken link (3 bot signatures verified)."
	if got := ask(); got != whole {
		t.Fatalf("whole trail:\n%s\nwant\n%s", got, whole)
	}

	// A decision made up on the bot's subject: it names the right
	// predecessor with a digest that is not its, carries no signature,
	// and says it comes from somewhere a mention would ping.
	stream, err := conn.JS.Stream(ctx, audit.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	prev, err := stream.GetLastMsgForSubject(ctx, "hcpbot.audit.bot")
	if err != nil {
		t.Fatal(err)
	}
	forged := fmt.Sprintf(`{"id":"forged","time":%q,"actor":"UMALLORY","kind":"approved","actionID":"act-evil","source":"<!channel>","chain":1,"prevSeq":%d,"prevDigest":"%s"}`,
		time.Now().UTC().Format(time.RFC3339), prev.Sequence, strings.Repeat("ab", 32))
	if _, err := conn.JS.Publish(ctx, "hcpbot.audit.bot", []byte(forged)); err != nil {
		t.Fatal(err)
	}
	got := ask()
	for _, want := range []string{
		"*Audit trail verification found 3 problems* in 4 records on 2 subjects since seq 1",
		"seq 4 hcpbot.audit.bot: broken link: predecessor seq 3 has digest",
		"seq 4 hcpbot.audit.bot: unsigned: no signature",
		`seq 4 hcpbot.audit.bot: misplaced: its source "&lt;!channel&gt;" writes elsewhere`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("broken chain: reply lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "<!channel>") {
		t.Errorf("reply carries a live mention:\n%s", got)
	}
	t.Logf("broken chain:\n%s", got)

	// Hundreds of problems: the first ones, and how many more.
	for range 300 {
		if _, err := conn.JS.Publish(ctx, "hcpbot.audit.bot", []byte("`not a record`")); err != nil {
			t.Fatal(err)
		}
	}
	got = ask()
	if !strings.Contains(got, "found 303 problems") || !strings.Contains(got, "seq 4 hcpbot.audit.bot: broken link") ||
		!strings.Contains(got, fmt.Sprintf("… and %d more.", 303-strings.Count(got, "undecodable")-3)) {
		t.Errorf("many problems:\n%s", got)
	}

	// Through the grammar, as a user types it.
	var out bytes.Buffer
	if err := (&chatops.Console{In: strings.NewReader("audit verify\n"), Out: &out, Handler: h, UserID: "UAUDITOR"}).Run(ctx); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "Audit trail verification found 303 problems") {
		t.Errorf("console: %s", out.String())
	}
	if r := (&command.Handler{}).HandleCommand(ctx, chatops.Request{Command: chatops.AuditVerify{}}); !strings.Contains(r.Text, "`audit verify` is not available") {
		t.Errorf("without a verifier: %q", r.Text)
	}
}
