package command_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/bot"
	"github.com/hcpbot/hcpbot/bot/blockkit"
	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/bot/command"
	"github.com/hcpbot/hcpbot/event"
)

// fleetBot is a bot that knows sources × perSource hosted clusters
// ("mgmt-NN/clusters/hc-NNNN"), of which those for which blind says so are
// not watched (the agent's reachability event, as in
// TestStatusSaysWhyNotWatched); the rest healthy.
func fleetBot(t *testing.T, sources, perSource int, blind func(i int) bool) *bot.Bot {
	t.Helper()
	name := func(i int) (string, string) { return fmt.Sprintf("mgmt-%02d", i/perSource), fmt.Sprintf("hc-%04d", i) }
	hcs := make([]hostedCluster, sources*perSource)
	for i := range hcs {
		source, n := name(i)
		hcs[i] = kubevirt(source, "clusters", n)
	}
	b := botKnowing(t, hcs...)
	at := time.Date(2026, 12, 1, 8, 1, 0, 0, time.UTC)
	for i := range hcs {
		if blind(i) {
			source, n := name(i)
			// The UID botKnowing gave the HostedCluster.
			feedFrom(t, b, source, "uid-"+n, &event.ClusterRef{Namespace: "clusters", Name: n}, event.Reachability{Unwatched: true, Error: refusedReason, Since: at},
				event.TransitionAt("reachable=false:r", at), at)
		}
	}
	if n := len(b.Clusters()); n != len(hcs) {
		t.Fatalf("the bot knows %d hosted clusters, want %d", n, len(hcs))
	}
	return b
}

var clusterLine = regexp.MustCompile(`(?m)^mgmt-\d+/clusters/hc-\d+: `)

// accounted counts the hosted clusters a `status` reply accounts for
// (command.StatusAccounted), failing when the summary's total differs.
func accounted(t *testing.T, text string) int {
	t.Helper()
	total, n, ok := command.StatusAccounted(text)
	if !ok || total != n {
		t.Errorf("the summary counts %d hosted clusters, the reply accounts for %d (summary found: %v)", total, n, ok)
	}
	return n
}

// `/hcp status` at fleet size (issue 30; docs/capacity.md: at 2,000
// hosted clusters the reply, a line each, stopped at Slack's 40,000
// characters after 1,254). It is complete within one readable message: a
// summary first, the clusters that need attention listed worst first,
// the healthy counted per management cluster with the command that
// lists one's — every hosted cluster listed or counted, none cut
// silently. Too many needing attention to list: how many are not, and
// how to see them. A small fleet is listed whole, as before.
func TestI30StatusAtFleetSize(t *testing.T) {
	status := func(c *command.Handler, cmd chatops.Status) string {
		t.Helper()
		start := time.Now()
		text := c.HandleCommand(context.Background(), chatops.Request{Command: cmd}).Text
		t.Logf("%s: %d characters, %d lines, in %v", cmd, len(text), strings.Count(text, "\n"), time.Since(start).Round(time.Millisecond))
		if len(text) > 12000 {
			t.Errorf("%s: %d characters, more than one readable message (12,000; Slack cuts at 40,000)", cmd, len(text))
		}
		return text
	}
	t.Run("2,000 clusters, 40 not watched", func(t *testing.T) {
		c := &command.Handler{Bot: fleetBot(t, 50, 40, func(i int) bool { return i%50 == 7 })}
		text := status(c, chatops.Status{})
		if want := "*2,000 hosted clusters* on 50 management clusters: 1,960 healthy, 40 need attention (40 not watched).\n"; !strings.HasPrefix(text, want) {
			t.Errorf("summary:\n%.300s\nwant it to start with\n%s", text, want)
		}
		if got := accounted(t, text); got != 2000 {
			t.Errorf("the reply accounts for %d hosted clusters, want 2,000:\n%s", got, text)
		}
		for i := 7; i < 2000; i += 50 {
			line := fmt.Sprintf("mgmt-%02d/clusters/hc-%04d: not watched: ", i/40, i)
			if !strings.Contains(text, line) {
				t.Errorf("not listed: %s", line)
			}
		}
		if !strings.Contains(text, "Healthy, counted per management cluster (`/hcp status <management cluster>:` lists one's): mgmt-00 39, mgmt-01 39,") {
			t.Errorf("healthy counts:\n%s", text)
		}
		// The pointer works: one management cluster's, each by name,
		// the one not watched first.
		one := status(c, chatops.Status{Mgmt: "mgmt-03"})
		if !strings.HasPrefix(one, "*40 hosted clusters* on management cluster mgmt-03: 39 healthy, 1 needs attention (1 not watched).\nmgmt-03/clusters/hc-0157: not watched: ") {
			t.Errorf("status mgmt-03:\n%.400s", one)
		}
		if n := len(clusterLine.FindAllString(one, -1)); n != 40 || strings.Count(one, "mgmt-03/") != 40 {
			t.Errorf("status mgmt-03 lists %d hosted clusters, want its 40:\n%s", n, one)
		}
		if got := status(c, chatops.Status{Mgmt: "mgmt-99"}); got != "No hosted clusters known on management cluster mgmt-99." {
			t.Errorf("status of an unknown management cluster: %q", got)
		}
	})
	t.Run("2,000 clusters, 400 not watched", func(t *testing.T) {
		c := &command.Handler{Bot: fleetBot(t, 50, 40, func(i int) bool { return i%5 == 0 })}
		text := status(c, chatops.Status{})
		if got := accounted(t, text); got != 2000 {
			t.Errorf("the reply accounts for %d hosted clusters, want 2,000:\n%s", got, text)
		}
		listed := len(clusterLine.FindAllString(text, -1))
		want := fmt.Sprintf("… and %d more need attention, not listed here: `/hcp status <management cluster>:` lists one management cluster's, `/hcp incidents` their incidents.", 400-listed)
		if listed == 0 || listed >= 400 || !strings.Contains(text, want) {
			t.Errorf("%d listed; want some, and\n%s\nin:\n%s", listed, want, text)
		}
	})
	t.Run("20,000 clusters on 1,000 management clusters", func(t *testing.T) {
		if testing.Short() {
			t.Skip("20,000 clusters")
		}
		c := &command.Handler{Bot: fleetBot(t, 1000, 20, func(i int) bool { return false })}
		text := status(c, chatops.Status{})
		if got := accounted(t, text); got != 20000 || !strings.Contains(text, "more management clusters (") {
			t.Errorf("the reply accounts for %d hosted clusters, want 20,000, the last management clusters counted together:\n%s", got, text)
		}
	})
	t.Run("1,000 clusters on one management cluster", func(t *testing.T) {
		c := &command.Handler{Bot: fleetBot(t, 2, 1000, func(i int) bool { return false })}
		one := status(c, chatops.Status{Mgmt: "mgmt-01"})
		listed := len(clusterLine.FindAllString(one, -1))
		if got := accounted(t, one); got != 1000 || listed == 0 || !strings.Contains(one, "healthy hosted clusters on mgmt-01, not listed here: `/hcp status mgmt-01:<namespace>/<name>` shows one.") {
			t.Errorf("status mgmt-01 accounts for %d (%d listed), want 1,000:\n%s", got, listed, one)
		}
	})
	t.Run("a small fleet, listed whole", func(t *testing.T) {
		c := &command.Handler{Bot: fleetBot(t, 2, 3, func(i int) bool { return i == 4 })}
		want := "*6 hosted clusters* on 2 management clusters: 5 healthy, 1 needs attention (1 not watched).\n" +
			"mgmt-01/clusters/hc-0004: not watched: " + blockkit.EscapeText(refusedReason) + "\n" +
			"mgmt-00/clusters/hc-0000: healthy\nmgmt-00/clusters/hc-0001: healthy\nmgmt-00/clusters/hc-0002: healthy\n" +
			"mgmt-01/clusters/hc-0003: healthy\nmgmt-01/clusters/hc-0005: healthy\n"
		if got := status(c, chatops.Status{}); got != want {
			t.Errorf("status:\n%s\nwant\n%s", got, want)
		}
	})
}
