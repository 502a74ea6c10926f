package digest_test

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/hcpbot/hcpbot/bot"
	"github.com/hcpbot/hcpbot/bot/blockkit"
	"github.com/hcpbot/hcpbot/bot/digest"
	"github.com/hcpbot/hcpbot/bot/notify"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
)

// The digest says why a cluster is not watched: a bot fed the agent's
// reachability event for a refused kubeconfig, and a digest posted on
// demand by the real Runner (NATS KV tick lock on an embedded server).
func TestDigestSaysWhyNotWatched(t *testing.T) {
	const why = `admin kubeconfig refused: Secret clusters/bad-admin-kubeconfig: user "admin" reads its token from a file (tokenFile); hcpbot opens no files and accepts inline credentials only`
	ctx := context.Background()
	b := bot.New(bot.Config{Channel: "C0INCIDENTS"}, nil, notify.NewConsole(io.Discard), nil, zerolog.Nop())
	for _, k := range []event.ClusterRef{keyGood.Cluster, keyBad.Cluster} {
		e, err := event.New(keyBad.Source, &k, event.ObjectRef{Kind: "HostedCluster", Namespace: k.Namespace, Name: k.Name, UID: "u-" + k.Name},
			hc("kubernetes,.svc,172.31.0.0/16,10.132.0.0/14"), "hc", t0)
		if err != nil {
			t.Fatal(err)
		}
		handle(t, b, e)
	}
	e, err := event.New(keyBad.Source, &keyBad.Cluster, event.ObjectRef{Kind: "HostedCluster", Namespace: keyBad.Cluster.Namespace, Name: keyBad.Cluster.Name, UID: "u-bad"},
		event.Reachability{Unwatched: true, Error: why, Since: t0}, event.TransitionAt("reachable=false:r", t0), t0)
	if err != nil {
		t.Fatal(err)
	}
	handle(t, b, e)

	srv := natstest.RunServer(t)
	conn, err := bus.Connect(ctx, bus.Config{URLs: []string{srv.ClientURL()}}, natstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	for _, mode := range []digest.Mode{digest.Compact, digest.Full} {
		out := &recorder{}
		r, err := digest.NewRunner(ctx, conn.JS, digest.Config{Digests: digests(t, "  - {name: daily, schedule: '0 0 8 * * *', channel: C0DIGEST01}\n"),
			Bot: b, Out: out, Mode: mode, Log: natstest.Logger(t)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.DigestNow(ctx); err != nil {
			t.Fatal(err)
		}
		if len(out.messages) != 1 || !strings.Contains(sectionsText(out.messages[0].Blocks), "🙈 1 unwatched cluster") {
			t.Errorf("mode %d: summary does not count the unwatched cluster: %+v", mode, out.messages)
		}
		rp, ok := replyByID(out.replies, "cluster/"+keyBad.String())
		if !ok {
			t.Fatalf("mode %d: no reply for %s (the cluster is compliant, so only Unwatched makes it worth one)", mode, keyBad)
		}
		t.Logf("mode %d reply:\n%s", mode, text(rp))
		if want := blockkit.EscapeText("🙈 Not watched by hcpbot: " + why); !strings.Contains(text(rp), want) {
			t.Errorf("mode %d: reply:\n%s\nwant it to contain\n%s", mode, text(rp), want)
		}
		if rp, ok := replyByID(out.replies, "cluster/"+keyGood.String()); ok && strings.Contains(text(rp), "Not watched") {
			t.Errorf("the watched cluster is said unwatched: %s", text(rp))
		}
	}
}

func handle(t *testing.T, b *bot.Bot, e event.Event) {
	t.Helper()
	data, err := event.Encode(e)
	if err != nil {
		t.Fatal(err)
	}
	b.Handle(context.Background(), data)
}
