package command_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bot/command"
	"github.com/hcpbot/hcpbot/bot/notify"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
	"github.com/hcpbot/hcpbot/partition"
)

// With two bot groups each tells the refusals of its own management
// clusters only (RefusalNotices.Owns), so each refusal is told once. The
// agents write the records as they do (audit.ForAgent): b's, then a's,
// then b's again; group 0 (a's) tells a's and, having read past b's
// first record to reach it, never tells b's; group 1 tells b's two and,
// having read past a's to reach the second, never a's.
func TestRefusalNoticesPerOwningGroup(t *testing.T) {
	ctx := context.Background()
	srv := natstest.RunServer(t)
	conn, err := bus.Connect(ctx, bus.Config{URLs: []string{srv.ClientURL()}}, natstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := audit.Open(ctx, conn.JS); err != nil {
		t.Fatal(err)
	}
	set := partition.Set{Count: 2}
	var src [2]string
	for _, s := range []string{"mgmt-rf-a", "mgmt-rf-b", "mgmt-rf-c", "mgmt-rf-d", "mgmt-rf-e", "mgmt-rf-f"} {
		if src[set.Of(s)] == "" {
			src[set.Of(s)] = s
		}
	}
	if src[0] == "" || src[1] == "" {
		t.Fatalf("no source of each group among the candidates: %v", src)
	}
	rec := slackrec.New(t)
	channels := [2]string{"C0REFUSE00", "C0REFUSE01"}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	t.Cleanup(func() { stop(); wg.Wait() })
	for k := range 2 {
		n, err := notify.NewSlack(notify.SlackConfig{Client: notify.NewSlackClient("xoxb-test", rec.APIURL(), nil), Log: natstest.Logger(t)})
		if err != nil {
			t.Fatal(err)
		}
		notices := &command.RefusalNotices{JS: conn.JS, Out: n, Log: natstest.Logger(t),
			Channel: func(string) string { return channels[k] },
			Owns:    func(source string) bool { return set.Of(source) == k }}
		wg.Go(func() { _ = n.Run(runCtx) })
		wg.Go(func() { _ = notices.Run(runCtx) })
	}
	refuse := func(source, why string) {
		t.Helper()
		l, err := audit.ForAgent(conn.JS, source)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Append(ctx, audit.Record{Kind: audit.KindRefused, Source: source, Summary: "action request refused", Reason: why, Time: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	refuse(src[1], "signature does not verify")
	refuse(src[0], "signed by a key this agent does not trust")
	refuse(src[1], "replayed")
	rootsIn := func(r *slackrec.Recorder, ch string) []slackrec.Message {
		var out []slackrec.Message
		for _, m := range r.Messages(ch) {
			if m.ThreadTS == "" {
				out = append(out, m)
			}
		}
		return out
	}
	rec.WaitFor(t, 30*time.Second, func(r *slackrec.Recorder) bool {
		a, b := rootsIn(r, channels[0]), rootsIn(r, channels[1])
		return len(a) == 1 && strings.Contains(a[0].Text, src[0]) &&
			len(b) == 1 && strings.Contains(b[0].Text, src[1]) && strings.Contains(b[0].Text, "refused 2 action requests")
	})
	for k, ch := range channels {
		for _, m := range rec.Messages(ch) {
			if strings.Contains(m.Text, src[1-k]) {
				t.Errorf("group %d told a refusal of %s, group %d's: %.200s", k, src[1-k], 1-k, m.Text)
			}
		}
	}
}
