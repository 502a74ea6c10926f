package command_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/bot/silence"
	"github.com/hcpbot/hcpbot/internal/testenv"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
)

// A silence written into the bucket without the bot's signing key (a
// stolen bot NATS seed) silences nothing, and `/hcp status` says so first,
// so the people on call see the attack, not only the log; a genuine
// silence deleted while it applies is listed too, still applied. The
// record's own text cannot ping or link.
func TestI30StatusShowsRefusedSilences(t *testing.T) {
	signer, err := approval.NewEphemeralSigner()
	if err != nil {
		t.Fatal(err)
	}
	e := newSilences(t, silence.WithSigner(signer.ForSilences()))
	s, c, now := e.store, e.cmds, e.now
	ctx, cancel := context.WithTimeout(context.Background(), natstest.Timeout)
	defer cancel()
	rctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(rctx) }()
	t.Cleanup(func() { stop(); <-done })

	web := chatops.ClusterRef{Namespace: "clusters", Name: "web"}
	if r := cmd(c, requester, chatops.Silence{Cluster: &web, Duration: 2 * time.Hour}); !strings.Contains(r.Text, "silenced cluster") {
		t.Fatalf("silence: %q", r.Text)
	}
	genuine := s.Active(now)[0]
	kv, err := e.js.KeyValue(ctx, silence.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	// Sealed by a "key" of the attacker's choosing, which the refusal
	// names.
	body, _ := json.Marshal(silence.Silence{ID: "sil-aaaaaaaaaa", Cluster: "mgmt-1/clusters/web", CreatedBy: requester, CreatedAt: now, ExpiresAt: now.Add(time.Hour)})
	forged, _ := json.Marshal(map[string]any{"silence": json.RawMessage(body), "key": "<!channel>", "sig": []byte("x")})
	if _, err := kv.Put(ctx, "sil-aaaaaaaaaa", forged); err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, genuine.ID); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "both refusals", func() bool { list, _ := s.Refused(now); return len(list) == 2 })

	out := cmd(c, requester, chatops.Status{}).Text
	for _, want := range []string{
		"silence record `sil-aaaaaaaaaa` refused, it silences nothing: silence sealed by a key that is not trusted",
		"silence `" + genuine.ID + "` tampered with, still applied: deleted from the bucket while it applies",
		"re-create those with `/hcp silence`",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	if strings.Index(out, "refused") > strings.Index(out, "mgmt-1/clusters/web:") {
		t.Errorf("the refusals are not first:\n%s", out)
	}
	if strings.Contains(out, "<!channel>") {
		t.Errorf("a record's text pings:\n%s", out)
	}
	if got, _ := s.Match("mgmt-1/clusters/web", "", now); got.ID != genuine.ID {
		t.Errorf("the cluster is silenced by %q, want the genuine %s", got.ID, genuine.ID)
	}
}
