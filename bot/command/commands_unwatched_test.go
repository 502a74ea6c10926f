package command_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/hcpbot/hcpbot/bot"
	"github.com/hcpbot/hcpbot/bot/blockkit"
	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/bot/command"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/bot/notify"
	"github.com/hcpbot/hcpbot/event"
)

// refusedReason is what the agent publishes for an exec kubeconfig
// (watchers.TestFaultKubeconfigRefused shows it does).
const refusedReason = `admin kubeconfig refused: Secret clusters/web-admin-kubeconfig: user "admin" uses an exec plugin (exec); hcpbot runs no programs and accepts inline credentials only`

// feed hands the bot an event of mgmt-1 as NATS would deliver it.
func feed(t *testing.T, b *bot.Bot, ref *event.ClusterRef, p event.Payload, key string, at time.Time) {
	t.Helper()
	feedFrom(t, b, "mgmt-1", "u1", ref, p, key, at)
}

// feedFrom hands the bot an event of source about the HostedCluster of
// uid as NATS would deliver it.
func feedFrom(t *testing.T, b *bot.Bot, source, uid string, ref *event.ClusterRef, p event.Payload, key string, at time.Time) {
	t.Helper()
	e, err := event.New(source, ref, event.ObjectRef{Kind: "HostedCluster", Namespace: ref.Namespace, Name: ref.Name, UID: uid}, p, key, at)
	if err != nil {
		t.Fatal(err)
	}
	data, err := event.Encode(e)
	if err != nil {
		t.Fatal(err)
	}
	b.Handle(context.Background(), data)
}

// `/hcp status` says why a cluster is not watched, from the agent's
// reachability event, and stops saying it once the agent reaches it.
func TestStatusSaysWhyNotWatched(t *testing.T) {
	b := bot.New(bot.Config{Channel: "C0INCIDENTS"}, nil, notify.NewConsole(io.Discard), nil, zerolog.Nop())
	ref := event.ClusterRef{Namespace: "clusters", Name: "web"}
	at := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	feed(t, b, &ref, event.HostedClusterState{Platform: "KubeVirt", ServiceNetwork: []string{"172.31.0.0/16"}, KubeconfigSecret: "web-admin-kubeconfig"}, "hc", at)
	feed(t, b, &ref, event.Reachability{Unwatched: true, Error: refusedReason, Since: at.Add(time.Minute)}, event.TransitionAt("reachable=false:r", at.Add(time.Minute)), at.Add(time.Minute))
	c := &command.Handler{Bot: b}
	status := func(cluster *chatops.ClusterRef) string {
		return c.HandleCommand(context.Background(), chatops.Request{Command: chatops.Status{Cluster: cluster}}).Text
	}
	one := &chatops.ClusterRef{Namespace: "clusters", Name: "web"}
	want := blockkit.EscapeText("mgmt-1/clusters/web: not watched: " + refusedReason)
	for _, got := range []string{status(one), status(nil)} {
		if !strings.Contains(got, want) {
			t.Errorf("status:\n%s\nwant it to contain\n%s", got, want)
		}
	}
	// The diagnosis (and so the incident posted to Slack) says it too.
	diags, _ := b.Diagnose(diagnose.Key{Source: "mgmt-1", Cluster: ref})
	if len(diags) == 0 || diags[0].Rule != diagnose.RuleHostedNotWatched || !strings.Contains(diags[0].RootCause, refusedReason) {
		t.Errorf("diagnoses: %+v", diags)
	}
	// Fixed: the agent reaches the cluster again.
	feed(t, b, &ref, event.Reachability{Endpoint: "127.0.0.1:6443", Reachable: true, Since: at.Add(2 * time.Minute)}, event.TransitionAt("reachable=true:r", at.Add(2*time.Minute)), at.Add(2*time.Minute))
	if got := status(one); strings.Contains(got, "not watched") || !strings.Contains(got, "healthy") {
		t.Errorf("status once watched: %s", got)
	}
}

// delivery is a notifier that cannot post to some channels.
type delivery []notify.ChannelProblem

func (d delivery) Unpostable() []notify.ChannelProblem { return d }

// `/hcp status` says first which channels the bot cannot post to, and
// why, since when: incidents meant for them reach nobody.
func TestStatusShowsUnpostableChannels(t *testing.T) {
	b := bot.New(bot.Config{Channel: "C0INCIDENTS"}, nil, notify.NewConsole(io.Discard), nil, zerolog.Nop())
	since := time.Date(2026, 12, 5, 4, 50, 0, 0, time.UTC)
	c := &command.Handler{Bot: b, Delivery: delivery{{Channel: "C0INCIDENTS", Error: "not_in_channel", Since: since}}}
	got := c.HandleCommand(context.Background(), chatops.Request{Command: chatops.Status{}}).Text
	want := "cannot post to <#C0INCIDENTS>: not_in_channel (since 2026-12-05 04:50 UTC)\nNo hosted clusters known yet."
	if got != want {
		t.Errorf("status:\n%s\nwant\n%s", got, want)
	}
	c.Delivery = delivery{}
	if got := c.HandleCommand(context.Background(), chatops.Request{Command: chatops.Status{}}).Text; got != "No hosted clusters known yet." {
		t.Errorf("status with every channel fine: %q", got)
	}
}
