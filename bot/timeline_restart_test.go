package bot_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/bot"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
)

// An incident's timeline survives a restart: a bot that saw seed 000
// fixed, rolled out and resolved is stopped, and a new one on the same
// NATS, knowing the fixes before it replays (as `hcpbot bot` loads the
// proposals bucket with command.FollowFixes first), tells the same story
// step by step, from the events stream alone.
func TestTimelineSurvivesRestart(t *testing.T) {
	ctx := context.Background()
	js := natsJS(t)
	rec := slackrec.New(t)
	const source, ns = "mgmt-timeline", "clusters"
	k := diagnose.Key{Source: source, Cluster: event.ClusterRef{Namespace: ns, Name: "hc-0"}}
	publish := func(events ...event.Event) {
		t.Helper()
		if err := scenario.Publish(ctx, js, events); err != nil {
			t.Fatal(err)
		}
	}
	cfg := restartConfig()
	cfg.StormThreshold = -1 // one cluster: no storm to wait for
	first := startBotWith(t, js, rec, cfg, nil)
	broke := time.Now()
	events, err := scenario.Storm(source, ns, 1, 3, broke)
	if err != nil {
		t.Fatal(err)
	}
	for n := range 3 {
		events = append(events, apiProxyEvent(t, source, k.Cluster, n, event.ProxyModeTunnel, broke))
	}
	publish(events...)
	var incKey string
	var cause diagnose.Diagnosis
	rec.WaitFor(t, 30*time.Second, func(r *slackrec.Recorder) bool {
		for _, m := range rootsIn(r, channel) {
			if strings.Contains(m.Text, "tunnelled through the HTTPS proxy") {
				return true
			}
		}
		return false
	})
	testenv.Eventually(t, 30*time.Second, "the seed incident", func() bool {
		for _, inc := range first.bot.Incidents() {
			if inc.Cluster == k && inc.Open() && len(inc.Diagnoses) > 0 && inc.Diagnoses[0].Fix != nil {
				incKey, cause = inc.Key, inc.Diagnoses[0]
				return true
			}
		}
		return false
	})

	fixed := time.Now()
	fix := bot.Remediation{ID: "fix-restarttimeline", Cluster: k, Kind: "noproxy-patch", Diff: cause.Fix.Diff,
		Cause:       bot.Cause{Rule: cause.Rule, Title: cause.Title, RootCause: cause.Short()},
		RequestedBy: "U0ALICE", ApprovedBy: "U0BOB", ProposedAt: fixed.Add(-time.Second), ApprovedAt: fixed, ExecutedAt: fixed}
	first.bot.RecordRemediation(fix)
	hc := scenario.StormHostedCluster(0)
	hc.Proxy.NoProxy = cause.Fix.After
	at := fixed.Add(time.Second)
	hcEvent, err := event.New(source, &k.Cluster, event.ObjectRef{Kind: "HostedCluster", Namespace: ns, Name: "hc-0", UID: "uid-hc-0"}, hc, "rv:2", at)
	if err != nil {
		t.Fatal(err)
	}
	publish(hcEvent)
	for n := range 3 {
		publish(apiProxyEvent(t, source, k.Cluster, n, event.ProxyModeHAProxy, at.Add(time.Duration(n+1)*time.Second)))
	}
	for n := range 3 {
		publish(nodeEvent(t, source, ns, "hc-0", n, true, at.Add(time.Duration(n+4)*time.Second)))
	}
	cleared, err := scenario.StormOperatorRecovered(source, k.Cluster, at.Add(8*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	publish(cleared)
	var before []bot.Step
	testenv.Eventually(t, 60*time.Second, "the incident resolved, its timeline in the thread", func() bool {
		inc, steps, ok := first.bot.Timeline(incKey)
		if !ok || inc.Open() {
			return false
		}
		before = steps
		for _, m := range rootsIn(rec, channel) {
			for _, r := range rec.Thread(channel, m.TS) {
				if strings.Contains(r.Text, "Timeline of `"+incKey+"`") {
					return true
				}
			}
		}
		return false
	})
	first.cancel()

	second := startBotWith(t, js, rec, cfg, func(b *bot.Bot) { b.RecordRemediation(fix) })
	var after []bot.Step
	testenv.Eventually(t, 30*time.Second, "the restarted bot to tell the resolved incident", func() bool {
		inc, steps, ok := second.bot.Timeline(incKey)
		after = steps
		return ok && !inc.Open()
	})
	if !slices.Equal(before, after) {
		t.Fatalf("the timeline changed with the restart:\nbefore:\n%s\nafter:\n%s", storyOf(before), storyOf(after))
	}
	for _, want := range []string{"first symptom", "proposed", "approved", "executed", "direct 3 of 3", "nodes Ready 3 of 3", "resolved"} {
		if !strings.Contains(storyOf(after), want) {
			t.Errorf("the timeline lacks %q:\n%s", want, storyOf(after))
		}
	}
}

func storyOf(s []bot.Step) string {
	var b strings.Builder
	for _, st := range s {
		fmt.Fprintf(&b, "%s %s %s\n", st.At.UTC().Format(time.RFC3339Nano), st.Text, st.Actor)
	}
	return b.String()
}

// apiProxyEvent is scenario.APIServerProxy, failing t on error.
func apiProxyEvent(t *testing.T, source string, ref event.ClusterRef, n int, mode event.ProxyMode, at time.Time) event.Event {
	t.Helper()
	e, err := scenario.APIServerProxy(source, ref, n, mode, at)
	if err != nil {
		t.Fatal(err)
	}
	return e
}
