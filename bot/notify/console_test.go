package notify

import (
	"bytes"
	"testing"

	"github.com/hcpbot/hcpbot/internal/testenv/syncbuf"
	"github.com/slack-go/slack"
)

// syncBuffer is shared by the goroutines under test and the test.
type syncBuffer = syncbuf.Buffer

func TestConsoleRendersReadableText(t *testing.T) {
	var out syncBuffer
	c := NewConsole(&out)
	md := func(s string) *slack.TextBlockObject {
		return slack.NewTextBlockObject(slack.MarkdownType, s, false, false)
	}
	blocks := []slack.Block{
		slack.NewHeaderBlock(slack.NewTextBlockObject(slack.PlainTextType, "API server unreachable from workers", false, false)),
		slack.NewSectionBlock(md("kube-apiserver-proxy tunnels through the proxy."), []*slack.TextBlockObject{
			md("*Cluster*\nclusters/example"), md("*Platform*\nKubeVirt"),
		}, nil),
		slack.NewDividerBlock(),
		slack.NewContextBlock("", md("seed 000"), md("2 signals")),
	}
	mustUpsert(t, c, Message{Key: "inc-1", Channel: "C0INC", Version: 1, Text: "API unreachable", Blocks: blocks})
	mustReply(t, c, Reply{Key: "inc-1", Channel: "C0INC", ID: "e1", Text: "service-ca-operator crashloops:\nF0603 failed checking apiserver connectivity"})
	mustReply(t, c, Reply{Key: "inc-1", Channel: "C0INC", ID: "e1", Text: "duplicate"})
	mustUpsert(t, c, Message{Key: "inc-1", Channel: "C0INC", Version: 1, Text: "same version again"})
	mustUpsert(t, c, Message{Key: "inc-1", Channel: "C0INC", Version: 2, Text: "*Resolved*: noProxy fixed"})
	stop := run(t, c)
	waitUntil(t, "the update printed", func() bool { return bytes.Contains([]byte(out.String()), []byte("UPDATE")) })
	stop()

	want := `● NEW inc-1 in C0INC (v1)
  API server unreachable from workers
  ===================================
  kube-apiserver-proxy tunnels through the proxy.
    Cluster: clusters/example
    Platform: KubeVirt
  ---
  (seed 000 · 2 signals)
  ↳ inc-1 reply
    service-ca-operator crashloops:
    F0603 failed checking apiserver connectivity
● UPDATE inc-1 in C0INC (v2)
  *Resolved*: noProxy fixed
`
	if got := out.String(); got != want {
		t.Errorf("console output:\n%s\nwant:\n%s", got, want)
	}
	if err := c.Upsert(t.Context(), Message{Key: "inc-2", Channel: "C0INC", Version: 1, Text: "late"}); err != ErrStopped {
		t.Errorf("Upsert after stop: %v, want ErrStopped", err)
	}
}
