package bot

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/rs/zerolog"
	"github.com/slack-go/slack"

	"github.com/hcpbot/hcpbot/bot/blockkit"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/bot/notify"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/scenario"
)

// seed000 drives seed 000 through a Bot on a clock of its own: hosted
// cluster ns/hc-0 behind a proxy whose noProxy tunnels API traffic, 3
// nodes NotReady, 3 kube-apiserver-proxy pods in tunnel mode, the
// service-ca-operator crashlooping; then the fix and a slow rollout.
type seed000 struct {
	t    *testing.T
	b    *Bot
	out  *recorder
	now  time.Time
	k    diagnose.Key
	hc   event.HostedClusterState
	hcEv event.Event
	// events is every event handled, to replay into a restarted bot.
	events []event.Event
}

const seedSource = "mgmt-seed"

func newSeed000(t *testing.T, cfg Config) *seed000 {
	t.Helper()
	s := &seed000{t: t, out: &recorder{}, now: t0}
	cfg.Channel = "C1"
	cfg.Now = func() time.Time { return s.now }
	s.b = New(cfg, nil, s.out, nil, zerolog.Nop())
	events, err := scenario.Storm(seedSource, "clusters", 1, 3, t0)
	if err != nil {
		t.Fatal(err)
	}
	s.k = diagnose.Key{Source: seedSource, Cluster: event.ClusterRef{Namespace: "clusters", Name: "hc-0"}}
	for _, e := range events {
		s.handle(e)
		if e.Type == event.TypeHostedCluster {
			s.hcEv = e
		}
	}
	s.hc = scenario.StormHostedCluster(0)
	for n := range 3 {
		s.apiProxy(n, event.ProxyModeTunnel, t0.Add(time.Duration(n)*time.Millisecond))
	}
	return s
}

func (s *seed000) handle(e event.Event) {
	s.t.Helper()
	data, err := event.Encode(e)
	if err != nil {
		s.t.Fatal(err)
	}
	s.events = append(s.events, e)
	s.b.Handle(context.Background(), data)
}

func (s *seed000) event(obj event.ObjectRef, p event.Payload, key string, at time.Time) {
	s.t.Helper()
	e, err := event.New(seedSource, &s.k.Cluster, obj, p, key, at)
	if err != nil {
		s.t.Fatal(err)
	}
	s.handle(e)
}

// apiProxy is node n's kube-apiserver-proxy static pod in mode at at.
func (s *seed000) apiProxy(n int, mode event.ProxyMode, at time.Time) {
	s.t.Helper()
	e, err := scenario.APIServerProxy(seedSource, s.k.Cluster, n, mode, at)
	if err != nil {
		s.t.Fatal(err)
	}
	s.handle(e)
}

func (s *seed000) nodeReady(n int, at time.Time) {
	s.t.Helper()
	e, err := scenario.NodeReady(seedSource, "clusters", "hc-0", n, true, at)
	if err != nil {
		s.t.Fatal(err)
	}
	s.handle(e)
}

func (s *seed000) operatorRecovered(at time.Time) {
	s.t.Helper()
	e, err := scenario.StormOperatorRecovered(seedSource, s.k.Cluster, at)
	if err != nil {
		s.t.Fatal(err)
	}
	s.handle(e)
}

// applyFix is the agent's patch as the events show it: the HostedCluster
// with the fixed noProxy.
func (s *seed000) applyFix(after string, at time.Time) {
	hc := s.hc
	hc.Proxy.NoProxy = after
	s.event(s.hcEv.Object, hc, "rv:2", at)
}

// flushAt advances the clock to at and flushes; it returns the last
// rendering of the incident's message, if one was handed over.
func (s *seed000) flushAt(at time.Time) (notify.Message, bool) {
	s.t.Helper()
	s.now = at
	before := len(s.out.msgs)
	s.b.flush(context.Background())
	if len(s.out.msgs) == before {
		return notify.Message{}, false
	}
	return s.out.msgs[len(s.out.msgs)-1], true
}

func (s *seed000) incident() *Incident {
	s.t.Helper()
	inc := s.b.incidents[s.k]
	if inc == nil {
		s.t.Fatal("no incident")
	}
	return inc
}

// shown is what a rendering shows: its fallback text and every block's
// JSON, for assertions on words.
func shown(m notify.Message) string {
	var raw strings.Builder
	enc := json.NewEncoder(&raw)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(m.Blocks)
	return m.Text + "\n" + raw.String()
}

// fixed posts the seed incident, then its fix runs at t0+2m (as the
// approval store records it) and the agent's patch shows in the events.
func (s *seed000) fixed() (diagnose.Diagnosis, time.Time) {
	s.t.Helper()
	s.flushAt(t0.Add(6 * time.Second))
	d := s.incident().Diagnoses[0]
	fixedAt := t0.Add(2 * time.Minute)
	s.b.RecordRemediation(remediationFor(s, d.Fix, d.Title, d.Short(), fixedAt))
	s.applyFix(d.Fix.After, fixedAt.Add(time.Second))
	return d, fixedAt
}

func remediationFor(s *seed000, fix *diagnose.Fix, title, summary string, executed time.Time) Remediation {
	return Remediation{
		ID: "fix-abcdefgh", Cluster: s.k, Kind: "noproxy-patch", Diff: fix.Diff,
		Cause:       Cause{Rule: diagnose.RuleProxyTunnel, Title: title, RootCause: summary},
		RequestedBy: "U0REQUESTER", ApprovedBy: "U0APPROVER",
		ProposedAt: executed.Add(-40 * time.Second), ApprovedAt: executed.Add(-time.Second), ExecutedAt: executed,
	}
}

// Seed 000 with a slow rollout: the fix runs, then the kube-apiserver-proxy
// pods switch to haproxy one by one, then the nodes come back, then the
// operator. The message keeps the root cause as its headline throughout,
// never says "no proxy cause", shows each step within the group interval,
// and the resolution tells the story (root cause, fix, approver,
// durations), with the timeline in the thread.
func TestSeed000SlowRollout(t *testing.T) {
	cfg := Config{GroupWait: 5 * time.Second, GroupInterval: time.Minute, ResolveTimeout: 5 * time.Minute}
	s := newSeed000(t, cfg)
	first, ok := s.flushAt(t0.Add(6 * time.Second))
	if !ok {
		t.Fatal("seed 000 not posted after its group wait")
	}
	d := s.incident().Diagnoses[0]
	if d.Rule != diagnose.RuleProxyTunnel || d.Fix == nil {
		t.Fatalf("seed 000 diagnosed as %s (fix %v), want %s with a fix", d.Rule, d.Fix, diagnose.RuleProxyTunnel)
	}
	if !strings.Contains(first.Text, d.Title) || !strings.Contains(shown(first), "Approve fix") {
		t.Fatalf("first message %q lacks the headline or the Approve button", first.Text)
	}
	// Read in five seconds: at most 2,000 visible characters, the two
	// facts that matter (the missing entries, the fix) in the root cause.
	visible := notify.PlainText(first.Blocks)
	if n := utf8.RuneCountInString(visible); n > 2000 {
		t.Errorf("seed 000's root post shows %d characters, want at most 2,000:\n%s", n, visible)
	}
	if !strings.Contains(visible, "lacks kubernetes, 172.31.0.0/16, 10.132.0.0/14") || !strings.Contains(visible, "Fix: add them") {
		t.Errorf("seed 000's root cause does not name the missing entries and the fix:\n%s", visible)
	}
	t.Logf("seed 000's root post, %d visible characters:\n%s", utf8.RuneCountInString(visible), visible)

	fixedAt := t0.Add(2 * time.Minute)
	s.b.RecordRemediation(remediationFor(s, d.Fix, d.Title, d.Short(), fixedAt))
	s.applyFix(d.Fix.After, fixedAt.Add(time.Second))

	var renderings []notify.Message
	check := func(m notify.Message, progress string) {
		t.Helper()
		renderings = append(renderings, m)
		all := shown(m)
		if !strings.Contains(m.Text, "FIX APPLIED, ROLLING OUT") || !strings.Contains(m.Text, d.Title) {
			t.Errorf("rollout message headline %q, want the root cause %q, rolling out", m.Text, d.Title)
		}
		if strings.Contains(strings.ToLower(all), "no proxy cause") || strings.Contains(all, "without a proxy cause") {
			t.Errorf("a cluster whose proxy was just fixed is said to have no proxy cause:\n%s", all)
		}
		if strings.Contains(all, blockkit.ActionApprove) {
			t.Errorf("the fix ran, but the message still offers to approve one")
		}
		if !strings.Contains(all, progress) {
			t.Errorf("rollout message lacks %q:\n%s", progress, all)
		}
	}
	// Each step is shown at the next flush past the group interval.
	at := fixedAt.Add(time.Minute + 2*time.Second)
	m, ok := s.flushAt(at)
	if !ok {
		t.Fatal("the fix is not shown within the group interval")
	}
	check(m, "kube-apiserver-proxy direct 0 of 3")
	for n := range 3 {
		s.apiProxy(n, event.ProxyModeHAProxy, at.Add(time.Second))
		at = at.Add(time.Minute + 2*time.Second)
		m, ok := s.flushAt(at)
		if !ok {
			t.Fatalf("proxy pod %d switching to haproxy not shown within the group interval", n)
		}
		check(m, fmt.Sprintf("kube-apiserver-proxy direct %d of 3", n+1))
	}
	for n := range 3 {
		s.nodeReady(n, at.Add(time.Second))
		at = at.Add(time.Minute + 2*time.Second)
		m, ok := s.flushAt(at)
		if !ok {
			t.Fatalf("node %d Ready not shown within the group interval", n)
		}
		check(m, fmt.Sprintf("nodes Ready %d of 3", n+1))
	}
	healedAt := at.Add(time.Second)
	s.operatorRecovered(healedAt)
	s.flushAt(healedAt.Add(time.Second))
	resolved, ok := s.flushAt(healedAt.Add(5*time.Minute + time.Second))
	if !ok {
		t.Fatal("not resolved ResolveTimeout after every signal cleared")
	}
	all := shown(resolved)
	for _, want := range []string{"RESOLVED", d.Title, "fix-abcdefgh", "<@U0APPROVER>", "<@U0REQUESTER>", "Time to fix", "2m0s", "Time to heal", d.Short()[:40]} {
		if !strings.Contains(all, blockkit.EscapeText(want)) && !strings.Contains(all, want) {
			t.Errorf("resolved message lacks %q:\n%s", want, all)
		}
	}
	if strings.Contains(resolved.Text, "crashlooping") {
		t.Errorf("resolved headline names the last symptom, not the root cause: %q", resolved.Text)
	}
	for i, m := range renderings {
		if err := blockkit.ValidateBlocks(m.Blocks); err != nil {
			t.Errorf("rollout rendering %d breaks a Block Kit limit: %v", i, err)
		}
	}
	if err := blockkit.ValidateBlocks(resolved.Blocks); err != nil {
		t.Errorf("resolved rendering breaks a Block Kit limit: %v", err)
	}
	var timeline string
	for _, r := range s.out.replies {
		if strings.HasPrefix(r.ID, "timeline-") {
			timeline += r.Text
		}
	}
	wantOrder := []string{"first symptom", "fix `fix-abcdefgh` proposed", "approved", "executed by the agent",
		"direct 1 of 3", "direct 3 of 3", "nodes Ready 3 of 3", "resolved"}
	pos := 0
	for _, w := range wantOrder {
		i := strings.Index(timeline[pos:], w)
		if i < 0 {
			t.Fatalf("timeline lacks %q after position %d:\n%s", w, pos, timeline)
		}
		pos += i
	}
	if !strings.Contains(timeline, "<@U0APPROVER>") || !strings.Contains(timeline, "<@U0REQUESTER>") {
		t.Errorf("timeline does not say who did what:\n%s", timeline)
	}

	// A restarted bot replays the events knowing the fix (command.FollowFixes
	// loads the store first) and tells the same story.
	again := &seed000{t: t, out: &recorder{}, now: s.now, k: s.k}
	again.b = New(Config{Channel: "C1", GroupWait: cfg.GroupWait, GroupInterval: cfg.GroupInterval, ResolveTimeout: cfg.ResolveTimeout,
		Now: func() time.Time { return again.now }}, nil, again.out, nil, zerolog.Nop())
	again.b.RecordRemediation(remediationFor(s, d.Fix, d.Title, d.Short(), fixedAt))
	again.b.caughtUp = false // as Run replays the stream
	for _, e := range s.events {
		again.handle(e)
	}
	again.b.markCaughtUp()
	again.flushAt(s.now)
	_, before, ok := s.b.Timeline(s.incident().Key)
	if !ok {
		t.Fatal("no timeline before the restart")
	}
	_, after, ok := again.b.Timeline(s.incident().Key)
	if !ok {
		t.Fatal("the restarted bot does not know the incident")
	}
	if !slices.Equal(before, after) {
		t.Errorf("timeline after a restart differs:\nbefore %v\nafter  %v", before, after)
	}
}

// "Fix did not heal": the rollout completes (every kube-apiserver-proxy
// direct) but the nodes stay NotReady past the heal deadline: the incident
// says so, with the evidence, and offers the fix's rollback.
func TestFixNotHealedOffersRollback(t *testing.T) {
	s := newSeed000(t, Config{GroupWait: 5 * time.Second, GroupInterval: time.Minute, ResolveTimeout: 5 * time.Minute, HealDeadline: 30 * time.Minute})
	d, fixedAt := s.fixed()
	for n := range 3 {
		s.apiProxy(n, event.ProxyModeHAProxy, fixedAt.Add(time.Duration(n+1)*time.Minute))
	}
	m, ok := s.flushAt(fixedAt.Add(29 * time.Minute))
	if !ok || !strings.Contains(m.Text, "ROLLING OUT") {
		t.Fatalf("before the deadline: %q, want rolling out", m.Text)
	}
	m, ok = s.flushAt(fixedAt.Add(30*time.Minute + time.Second))
	if !ok {
		t.Fatal("nothing said when the heal deadline passed")
	}
	all := shown(m)
	if !strings.Contains(m.Text, "NOT HEALED") || !strings.Contains(m.Text, d.Title) || !strings.Contains(all, "not healed 30m0s after the fix") {
		t.Errorf("past the deadline: %s", all)
	}
	if !strings.Contains(all, "nodes Ready 0 of 3") {
		t.Errorf("not-healed message lacks the evidence (nodes Ready 0 of 3):\n%s", all)
	}
	var rollback *slack.ButtonBlockElement
	for _, bl := range m.Blocks {
		if a, ok := bl.(*slack.ActionBlock); ok {
			for _, e := range a.Elements.ElementSet {
				if btn, ok := e.(*slack.ButtonBlockElement); ok && btn.ActionID == blockkit.ActionRollback {
					rollback = btn
				}
			}
		}
	}
	if rollback == nil || rollback.Value != "fix-abcdefgh" {
		t.Fatalf("no Rollback button carrying the fix's id: %s", all)
	}
}

// A node lost after the fix is a new symptom: the incident does not wait
// for the deadline to say the fix did not heal it.
func TestNodeLostAfterFixIsNotHealed(t *testing.T) {
	s := newSeed000(t, Config{GroupWait: 5 * time.Second, GroupInterval: time.Minute, ResolveTimeout: 5 * time.Minute})
	_, fixedAt := s.fixed()
	e, err := scenario.NodeReady(seedSource, "clusters", "hc-0", 7, false, fixedAt.Add(3*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	s.handle(e)
	m, ok := s.flushAt(fixedAt.Add(4 * time.Minute))
	if !ok || !strings.Contains(m.Text, "NOT HEALED") || !strings.Contains(shown(m), "hc-0-np-7 went NotReady after the fix") {
		t.Fatalf("a node lost after the fix: %q", shown(m))
	}
}

// The remedy stage alone: an incident learns its fix, and the flush looks
// again at the heal deadline.
func TestRemedyStage(t *testing.T) {
	b, _ := stageBot(t, Config{HealDeadline: 10 * time.Minute})
	inc := incident("a", t0.Add(-time.Minute), handled, rooted)
	inc.n.dirty = false
	b.incidents[inc.Cluster] = inc
	b.RecordRemediation(Remediation{ID: "fix-aaaaaaaa", Cluster: inc.Cluster, Kind: "noproxy-patch",
		Cause: Cause{Title: "the cause"}, ExecutedAt: t0})
	f := &flushRun{ctx: context.Background(), now: t0, next: t0.Add(maxFlush)}
	out := named("remedy")(b).Exec(f, []*Incident{inc})
	if len(out) != 1 || inc.Remedy == nil || inc.Remedy.Status != StatusRollingOut || !inc.n.dirty {
		t.Fatalf("after the stage: out %d, remedy %+v, dirty %v", len(out), inc.Remedy, inc.n.dirty)
	}
	if !f.next.Equal(t0.Add(maxFlush)) {
		t.Errorf("looks again at %v, want %v (the deadline is later)", f.next, t0.Add(maxFlush))
	}
	f = &flushRun{ctx: context.Background(), now: t0.Add(9 * time.Minute), next: t0.Add(time.Hour)}
	named("remedy")(b).Exec(f, []*Incident{inc})
	if !f.next.Equal(t0.Add(10 * time.Minute)) {
		t.Errorf("looks again at %v, want the deadline %v", f.next, t0.Add(10*time.Minute))
	}
	// A fix executed before the incident opened is another incident's.
	other := incident("b", t0.Add(time.Minute), handled, rooted)
	b.incidents[other.Cluster] = other
	b.RecordRemediation(Remediation{ID: "fix-bbbbbbbb", Cluster: other.Cluster, ExecutedAt: t0, Cause: Cause{Title: "x"}})
	named("remedy")(b).Exec(&flushRun{ctx: context.Background(), now: t0.Add(2 * time.Minute)}, []*Incident{other})
	if other.Remedy != nil {
		t.Errorf("an incident opened after the fix took it: %+v", other.Remedy)
	}
}

// A node that goes NotReady while a NodePool rolls the change out
// (UpdatingConfig=True) is the rollout restarting it, not a new symptom.
func TestNodeRestartedByRolloutIsNotNewSymptom(t *testing.T) {
	s := newSeed000(t, Config{GroupWait: 5 * time.Second, GroupInterval: time.Minute, ResolveTimeout: 5 * time.Minute})
	_, fixedAt := s.fixed()
	// As HyperShift writes a NodePool rolling out a config change.
	ltt := fixedAt.Add(2 * time.Second)
	replicas := int32(3)
	s.event(event.ObjectRef{Kind: "NodePool", Namespace: "clusters", Name: "hc-0-np", UID: "uid-np-hc-0"},
		event.NodePoolState{Name: "hc-0-np", ClusterName: "hc-0", Replicas: &replicas, CurrentReplicas: 3, Conditions: []event.Condition{
			{Type: "UpdatingConfig", Status: event.ConditionTrue, Reason: "AsExpected", Message: "Updating config in progress. Target config: 5d8f0c1a", LastTransitionTime: ltt},
			{Type: "Ready", Status: event.ConditionTrue, Reason: "AsExpected", LastTransitionTime: t0},
		}}, "rv:np-2", ltt)
	e, err := scenario.NodeReady(seedSource, "clusters", "hc-0", 7, false, fixedAt.Add(3*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	s.handle(e)
	m, ok := s.flushAt(fixedAt.Add(4 * time.Minute))
	if !ok || !strings.Contains(m.Text, "ROLLING OUT") || !strings.Contains(shown(m), "NodePool hc-0-np updating config") {
		t.Fatalf("a node restarted by the rollout: %q", shown(m))
	}
}
