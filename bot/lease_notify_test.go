package bot_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/bot/notify"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
)

// heldStore fails the creation of root records (claims) while held, as a
// NATS KV that times out does, without writing them: the roots queued
// behind it wait in the notifier, unclaimed, on a store retry. It counts
// the roots it held back.
type heldStore struct {
	notify.Store
	held  atomic.Bool
	mu    sync.Mutex
	roots map[string]bool
}

func (s *heldStore) Create(ctx context.Context, id string, r notify.Record) (uint64, error) {
	if strings.HasPrefix(id, "root.") && s.held.Load() {
		s.mu.Lock()
		s.roots[id] = true
		s.mu.Unlock()
		return 0, errors.New("nats: timeout")
	}
	return s.Store.Create(ctx, id, r)
}

func (s *heldStore) heldRoots() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.roots)
}

// An old leader's incident roots, queued in its notifier (here on a store
// retry; behind Slack's pace it is the same queue), must not be posted
// once it lost the lease: the new leader, taking over, asked HasRoot,
// found no claim and folded those incidents into a storm as members with
// no message of their own. Posted anyway, their messages would say "open"
// forever, never updated by the leader. Two replicas on one NATS and one
// Slack, the lease as Config.Leader and SlackConfig.Leading (cmd/hcpbot
// wires bus.Lease.Leader to both):
//   - A leads and posts hc-0; hc-1 and hc-2 are handed to its notifier
//     and wait there, unclaimed (the store fails their claims);
//   - A loses the lease; hc-3 and hc-4 open; B takes over and, finding no
//     message for hc-1..hc-4, forms a storm of the five (hc-0 keeps its
//     own message);
//   - A's store recovers: A posts nothing (on main it posted hc-1 and
//     hc-2, whose messages then stayed open when everything healed).
func TestOldLeaderPostsNoRootAfterTheLoss(t *testing.T) {
	ctx := context.Background()
	js := natsJS(t)
	rec := slackrec.New(t)
	const source, ns = "mgmt-lease", "lease"
	events, err := scenario.Storm(source, ns, 5, 3, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	publish := func(names ...string) {
		t.Helper()
		var out []event.Event
		for _, e := range events {
			for _, name := range names {
				if e.Cluster != nil && e.Cluster.Name == name {
					out = append(out, e)
				}
			}
		}
		if err := scenario.Publish(ctx, js, out); err != nil {
			t.Fatal(err)
		}
	}
	rootOf := func(r *slackrec.Recorder, what string) (slackrec.Message, bool) {
		for _, m := range roots(r) {
			if strings.Contains(m.Text, what) {
				return m, true
			}
		}
		return slackrec.Message{}, false
	}

	cfg := restartConfig()
	cfg.StormThreshold = 5
	var leadA, leadB atomic.Bool
	var held *heldStore
	cfgA := cfg
	cfgA.Leader = leadA.Load
	a := runBotSlack(t, js, rec, cfgA, nil, nil, natstest.Logger(t), func(c *notify.SlackConfig) {
		held = &heldStore{Store: c.Store, roots: map[string]bool{}}
		c.Store, c.Leading = held, leadA.Load
		c.BackoffBase, c.BackoffMax = 10*time.Millisecond, 100*time.Millisecond
	})
	cfgB := cfg
	cfgB.Leader = leadB.Load
	b := runBotSlack(t, js, rec, cfgB, nil, nil, natstest.Logger(t), func(c *notify.SlackConfig) { c.Leading = leadB.Load })
	logOnFailure(t, rec, b)

	leadA.Store(true)
	a.bot.LeaderChanged(true)
	publish("hc-0")
	rec.WaitFor(t, 30*time.Second, func(r *slackrec.Recorder) bool { _, ok := rootOf(r, ns+"/hc-0"); return ok })

	held.held.Store(true)
	publish("hc-1", "hc-2")
	testenv.Eventually(t, 30*time.Second, "A's notifier holding the roots of hc-1 and hc-2", func() bool { return held.heldRoots() == 2 })

	// A loses the lease with both roots queued; two more incidents of the
	// same cause open, and B takes over.
	leadA.Store(false)
	a.bot.LeaderChanged(false)
	publish("hc-3", "hc-4")
	testenv.Eventually(t, 30*time.Second, "B holding the five incidents", func() bool { return len(b.bot.Incidents()) == 5 })
	leadB.Store(true)
	b.bot.LeaderChanged(true)
	rec.WaitFor(t, 30*time.Second, func(r *slackrec.Recorder) bool { _, ok := rootOf(r, "STORM"); return ok })

	// A's store recovers: its queued roots are dropped, not posted.
	held.held.Store(false)
	testenv.Eventually(t, 30*time.Second, "A done with the roots of hc-1 and hc-2", func() bool {
		_, one := rootOf(rec, ns+"/hc-1")
		_, two := rootOf(rec, ns+"/hc-2")
		return one || two || metricSum(t, a.reg, "hcpbot_slack_not_leading_total") >= 2
	})
	for _, name := range []string{"hc-1", "hc-2"} {
		if m, ok := rootOf(rec, ns+"/"+name); ok {
			t.Errorf("the old leader posted the root of %s after it lost the lease: %.160s", name, m.Text)
		}
	}

	// Everything heals: every message in Slack is one the leader knows of,
	// and shows the resolution.
	var healed []event.Event
	for _, name := range []string{"hc-0", "hc-1", "hc-2", "hc-3", "hc-4"} {
		es, err := recoverEvents(source, ns, name, 3, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		healed = append(healed, es...)
	}
	if err := scenario.Publish(ctx, js, healed); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, 60*time.Second, func(r *slackrec.Recorder) bool {
		storm, _ := rootOf(r, "storm of 5 hosted clusters")
		own, _ := rootOf(r, ns+"/hc-0")
		return strings.Contains(storm.Text, "RESOLVED") && strings.Contains(own.Text, "RESOLVED")
	})
	for _, m := range roots(rec) {
		if !strings.Contains(m.Text, "RESOLVED") {
			t.Errorf("a message stays open after every cluster healed (nobody updates it): %.160s", m.Text)
		}
	}
	if n := len(roots(rec)); n != 2 {
		t.Errorf("%d roots, want 2 (hc-0, posted before the storm, and the storm)", n)
	}
}
