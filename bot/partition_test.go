package bot_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hcpbot/hcpbot/bot"
	"github.com/hcpbot/hcpbot/bot/notify"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
	"github.com/hcpbot/hcpbot/partition"
)

// sourcesIn picks n management cluster names (prefix-0, prefix-1, ...)
// that set places in group.
func sourcesIn(set partition.Set, group, n int, prefix string) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		if src := fmt.Sprintf("%s-%d", prefix, i); set.Of(src) == group {
			out = append(out, src)
		}
	}
	return out
}

// groupReplica is one replica of one bot group, as `hcpbot bot
// --partition k` runs it: its own NATS connection (a kill closes it, so
// its lease is not handed over but expires), its group's lease.
type groupReplica struct {
	*botRun
	group int
	lease *bus.Lease
	conn  *bus.Conn
	stop  func()
}

func startGroupReplica(t *testing.T, urls []string, rec *slackrec.Recorder, cfg bot.Config, ttl time.Duration, id string) *groupReplica {
	t.Helper()
	ctx := context.Background()
	conn, err := bus.Connect(ctx, bus.Config{URLs: urls}, natstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	key := cfg.Partitions.ID(cfg.Partition).Suffix("bot")
	lease, err := bus.NewLease(ctx, conn.JS, key, id, natstest.Logger(t), bus.WithLeaseTTL(ttl), bus.WithReplicas(3))
	if err != nil {
		t.Fatal(err)
	}
	lctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = lease.Run(lctx) })
	cfg.Leader = lease.Leader
	log, _ := capturedLog(t, id)
	r := runBotLogged(t, conn.JS, rec, cfg, nil, nil, log)
	g := &groupReplica{botRun: r, group: cfg.Partition, lease: lease, conn: conn}
	var once sync.Once
	g.stop = func() { once.Do(func() { r.cancel(); cancel(); wg.Wait(); conn.Close() }) }
	t.Cleanup(g.stop)
	return g
}

// kill stops the replica as a crash would: its connection goes first, so
// it hands nothing over (lease, checkpoint) and sends nothing more.
func (g *groupReplica) kill() {
	g.conn.Close()
	g.stop()
}

// stormMembers are the clusters (namespace/name) the thread of the storm
// message ts lists.
func stormMembers(r *slackrec.Recorder, ts string) map[string]bool {
	out := map[string]bool{}
	for _, m := range r.Thread(channel, ts) {
		for _, c := range memberRE.FindAllString(m.Text, -1) {
			out[c] = true
		}
	}
	return out
}

var memberRE = regexp.MustCompile(`[a-z0-9-]+/hc-[0-9]+`)

// storedTag reads the tag NATS stored the newest event of source with.
func storedTag(t *testing.T, js jetstream.JetStream, source string) event.Tag {
	t.Helper()
	tok, err := event.SourceToken(source)
	if err != nil {
		t.Fatal(err)
	}
	// The JetStream API of a busy 3-node cluster may answer a moment
	// later ("no responders" while its meta leader moves): ask again
	// until the deadline.
	var tag event.Tag
	var last error
	testenv.Eventually(t, 30*time.Second, "the newest event of "+source+" read back", func() bool {
		tag, last = lastTag(js, tok)
		return last == nil
	})
	if last != nil {
		t.Fatal(last)
	}
	return tag
}

// lastTag is the partition tag of the newest event stored for the source
// token tok.
func lastTag(js jetstream.JetStream, tok string) (event.Tag, error) {
	ctx, cancel := context.WithTimeout(context.Background(), natstest.Timeout)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, event.StreamName, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{event.EventsSubjectPrefix + "." + tok + ".>"}, DeliverPolicy: jetstream.DeliverLastPolicy,
	})
	if err != nil {
		return event.Tag{}, err
	}
	m, err := cons.Next(jetstream.FetchMaxWait(natstest.Timeout))
	if err != nil {
		return event.Tag{}, err
	}
	p, err := event.ParseSubject(m.Subject())
	if err != nil {
		return event.Tag{}, err
	}
	return p.Tag, nil
}

// Two bot groups (P = 2, two replicas each) on a 3-node NATS cluster that
// tags the events (partition.Set.Mappings on every node):
//   - NATS stores each source's events with the group Of gives;
//   - every cluster's incident is posted once, by the group holding its
//     management cluster, and each replica knows its group's clusters only;
//   - a storm on a proxy shared by the management clusters of both groups
//     (scenario.StormProxy) is one Slack message per group, each listing
//     its group's clusters (docs/capacity.md: when causes split);
//   - a kill of group 0's leader (connection first: no hand-over) makes its
//     standby post group 0's next incident within the lease TTL + 2 s, and
//     nothing is posted twice.
func TestPartitionsTwoGroupsOnACluster(t *testing.T) {
	ctx := context.Background()
	set := partition.Set{Count: 2}
	cl := natstest.RunCluster(t, 3, func(c *bus.EmbeddedConfig) { c.Mappings = set.Mappings() })
	conn, err := bus.Connect(ctx, bus.Config{URLs: cl.URLs()}, natstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	js := conn.JS
	if _, err := bus.EnsureStream(ctx, js, bus.EventsStream(0, 0, bus.WithReplicas(3))); err != nil {
		t.Fatal(err)
	}
	// The shared buckets as deployed, R3: the Slack messages of both groups
	// and their leases.
	if _, err := notify.NewKVStore(ctx, js, notify.KVConfig{}, bus.WithReplicas(3)); err != nil {
		t.Fatal(err)
	}
	rec := slackrec.New(t)
	const ttl = 3 * time.Second
	replicas := make([]*groupReplica, 0, 4)
	for k := range 2 {
		for _, id := range []string{"a", "b"} {
			cfg := stormConfig()
			cfg.StormThreshold = 10
			cfg.Partitions, cfg.Partition = set, k
			replicas = append(replicas, startGroupReplica(t, cl.URLs(), rec, cfg, ttl, fmt.Sprintf("g%d-%s", k, id)))
		}
	}

	// Per group: two management clusters of 5 storm clusters each behind
	// the one proxy (10 per group: a storm in each), and one lone cluster.
	var events []event.Event
	stormSrc := [2][]string{sourcesIn(set, 0, 2, "storm"), sourcesIn(set, 1, 2, "storm")}
	loneSrc := [2]string{sourcesIn(set, 0, 1, "lone")[0], sourcesIn(set, 1, 1, "lone")[0]}
	now := time.Now()
	for k := range 2 {
		for i, src := range stormSrc[k] {
			ev, err := scenario.Storm(src, fmt.Sprintf("s%d%d", k, i), 5, 2, now)
			if err != nil {
				t.Fatal(err)
			}
			events = append(events, ev...)
		}
		events = append(events, nodeEvents(t, loneSrc[k], "lone", fmt.Sprintf("g%d", k), now, 3)...)
	}
	if err := scenario.Publish(ctx, js, events); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, m := range rec.Messages(channel) {
				t.Logf("message %s thread=%q: %.200s", m.TS, m.ThreadTS, m.Text)
			}
		}
	})
	storms := func(r *slackrec.Recorder) []slackrec.Message {
		var out []slackrec.Message
		for _, m := range roots(r) {
			if strings.Contains(m.Text, "STORM") {
				out = append(out, m)
			}
		}
		return out
	}
	rec.WaitFor(t, 60*time.Second, func(r *slackrec.Recorder) bool {
		ss := storms(r)
		return len(ss) == 2 && len(stormMembers(r, ss[0].TS)) == 10 && len(stormMembers(r, ss[1].TS)) == 10 &&
			len(rootsAbout(r, "lone/g0")) == 1 && len(rootsAbout(r, "lone/g1")) == 1
	})

	for k := range 2 {
		for _, src := range append([]string{loneSrc[k]}, stormSrc[k]...) {
			if got, want := storedTag(t, js, src), (event.Tag{Count: 2, Index: k}); got != want {
				t.Errorf("source %s: stored with tag %+v, want %+v", src, got, want)
			}
		}
	}
	for _, r := range replicas {
		waitApplied(t, js, r.bot)
		for _, inc := range r.bot.Incidents() {
			if set.Of(inc.Cluster.Source) != r.group {
				t.Errorf("group %d holds %s of group %d", r.group, inc.Cluster, set.Of(inc.Cluster.Source))
			}
		}
		if n := len(r.bot.Incidents()); n != 11 {
			t.Errorf("a replica of group %d knows %d incidents, want 11", r.group, n)
		}
		for _, s := range r.bot.Storms() {
			if want := "-" + set.ID(r.group).Name(); !strings.HasSuffix(s.Key, want) {
				t.Errorf("group %d's storm key %s lacks %s", r.group, s.Key, want)
			}
		}
	}
	for _, ss := range storms(rec) {
		var groups []int
		for c := range stormMembers(rec, ss.TS) {
			g := int(c[1] - '0') // the namespace s<group><i>
			if !slices.Contains(groups, g) {
				groups = append(groups, g)
			}
		}
		if len(groups) != 1 {
			t.Errorf("storm %s lists clusters of groups %v, want one group's", ss.TS, groups)
		}
	}

	// Group 0's leader dies; its standby takes over.
	var leader, standby *groupReplica
	testenv.Eventually(t, 10*time.Second, "one leader in group 0", func() bool {
		leader, standby = nil, nil
		for _, r := range replicas[:2] {
			if r.lease.Leader() {
				leader = r
			} else {
				standby = r
			}
		}
		return leader != nil && standby != nil
	})
	mark := len(rec.Calls())
	fresh := nodeEvents(t, sourcesIn(set, 0, 1, "fresh")[0], "lone", "fresh", time.Now(), 4)
	leader.kill()
	killed := time.Now()
	if err := scenario.Publish(ctx, js, fresh); err != nil {
		t.Fatal(err)
	}
	rec.WaitFor(t, 30*time.Second, func(r *slackrec.Recorder) bool { return len(rootsAbout(r, "lone/fresh")) == 1 })
	took := time.Since(killed)
	if took > ttl+2*time.Second {
		t.Errorf("the standby posted %s after the leader's kill, want within the lease TTL %s + 2s", took, ttl)
	}
	t.Logf("group 0's standby posted %s after its leader's kill (lease TTL %s)", took.Round(10*time.Millisecond), ttl)
	testenv.Eventually(t, 30*time.Second, "the standby's notifications delivered", func() bool {
		return metricSum(t, standby.reg, "hcpbot_slack_queue_depth") == 0
	})
	for _, c := range rec.Calls()[mark:] {
		if c.Method == "chat.postMessage" && c.Form.Get("thread_ts") == "" && !strings.Contains(c.Form.Get("text"), "lone/fresh") {
			t.Errorf("after the kill, a second root: %.200s", c.Form.Get("text"))
		}
	}
	if n := len(storms(rec)); n != 2 {
		t.Errorf("%d storm messages, want 2", n)
	}
	for _, name := range []string{"lone/g0", "lone/g1", "lone/fresh"} {
		if n := len(rootsAbout(rec, name)); n != 1 {
			t.Errorf("%s: %d roots, want 1", name, n)
		}
	}
}

// A repartition from one bot group to two, by the procedure of
// docs/partitions.md: events before; the one group stopped cleanly (its
// checkpoint written); the mapping applied (here to the running server,
// as a configuration reload does); events after; the two groups started.
// Nothing is lost (the resolutions and changes of what the one group
// posted reach the same messages, the new incidents are posted), nothing
// is duplicated (no second root for any cluster, the storm's message
// taken over by the group that holds it), and the two groups' incidents
// are those of one bot's full replay of the same stream.
func TestRepartitionOneToTwo(t *testing.T) {
	ctx := context.Background()
	srv := natstest.RunServer(t)
	conn, err := bus.Connect(ctx, bus.Config{URLs: []string{srv.ClientURL()}}, natstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	js := conn.JS
	if _, err := bus.EnsureStream(ctx, js, bus.EventsStream(0, 0)); err != nil {
		t.Fatal(err)
	}
	kv, err := bus.EnsureKV(ctx, js, bus.CheckpointsKV(0))
	if err != nil {
		t.Fatal(err)
	}
	rec := slackrec.New(t)
	two := partition.Set{Count: 2}
	src := [2]string{sourcesIn(two, 0, 1, "mgmt")[0], sourcesIn(two, 1, 1, "mgmt")[0]}
	cfg := stormConfig()
	cfg.StormThreshold = 10
	cfg.ResolveTimeout = 2 * time.Second
	cfg.Checkpoints, _ = checkpointStore(t, kv)
	cfg.CheckpointEvery = -1

	// Before: one group. Clusters a, b on src[0]; c, d and a storm of 10
	// on src[1].
	logOne, _ := capturedLog(t, "one")
	one := runBotLogged(t, js, rec, cfg, nil, nil, logOne)
	now := time.Now()
	events := slices.Concat(nodeEvents(t, src[0], "ns", "a", now, 1), nodeEvents(t, src[0], "ns", "b", now, 1),
		nodeEvents(t, src[1], "ns", "c", now, 1), nodeEvents(t, src[1], "ns", "d", now, 1))
	stormEvents, err := scenario.Storm(src[1], "storm", 10, 2, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := scenario.Publish(ctx, js, append(events, stormEvents...)); err != nil {
		t.Fatal(err)
	}
	ts := map[string]string{}
	rec.WaitFor(t, 60*time.Second, func(r *slackrec.Recorder) bool {
		for _, name := range []string{"a", "b", "c", "d"} {
			if ms := rootsAbout(r, "ns/"+name); len(ms) == 1 {
				ts[name] = ms[0].TS
			}
		}
		for _, m := range roots(r) {
			if strings.Contains(m.Text, "STORM") && len(listed(r, m.TS)) == 10 {
				ts["storm"] = m.TS
			}
		}
		return len(ts) == 5
	})
	testenv.Eventually(t, 30*time.Second, "the one group's notifications delivered", func() bool {
		return metricSum(t, one.reg, "hcpbot_slack_queue_depth") == 0
	})
	oneStorms := one.bot.Storms()
	one.cancel() // a clean stop: its checkpoint "bot" is written
	if _, _, err := cfg.Checkpoints.Load(ctx, bot.DefaultCheckpointName); err != nil {
		t.Fatalf("the one group's checkpoint: %v", err)
	}

	// The mapping, then events after it: a and c heal, b grows, e and f
	// fail.
	for _, m := range two.Mappings() {
		if err := srv.Server().GlobalAccount().AddMapping(m.Src, m.Dest); err != nil {
			t.Fatal(err)
		}
	}
	later := time.Now()
	after := slices.Concat([]event.Event{
		nodeEvent(t, src[0], "ns", "a", 1, true, later), nodeEvent(t, src[1], "ns", "c", 1, true, later),
		nodeEvent(t, src[0], "ns", "b", 2, false, later),
	}, nodeEvents(t, src[0], "ns", "e", later, 1), nodeEvents(t, src[1], "ns", "f", later, 1))
	if err := scenario.Publish(ctx, js, after); err != nil {
		t.Fatal(err)
	}
	for k, s := range src {
		if got := storedTag(t, js, s); got != (event.Tag{Count: 2, Index: k}) {
			t.Fatalf("%s: the newest event stored with tag %+v: the mapping is not applied", s, got)
		}
	}

	// Two groups, started on the same stream and Slack store.
	mark := len(rec.Calls())
	groups := make([]*botRun, 2)
	for k := range 2 {
		gcfg := cfg
		gcfg.Partitions, gcfg.Partition = two, k
		log, _ := capturedLog(t, fmt.Sprintf("group %d", k))
		groups[k] = runBotLogged(t, js, rec, gcfg, nil, nil, log)
	}
	rec.WaitFor(t, 60*time.Second, func(r *slackrec.Recorder) bool {
		a, _ := r.Message(channel, ts["a"])
		c, _ := r.Message(channel, ts["c"])
		b, _ := r.Message(channel, ts["b"])
		return strings.Contains(a.Text, "RESOLVED") && strings.Contains(c.Text, "RESOLVED") &&
			strings.Contains(b.Text, "2 of 30 nodes NotReady") &&
			len(rootsAbout(r, "ns/e")) == 1 && len(rootsAbout(r, "ns/f")) == 1
	})
	for _, g := range groups {
		waitApplied(t, js, g.bot)
		testenv.Eventually(t, 30*time.Second, "the groups' notifications delivered", func() bool {
			return metricSum(t, g.reg, "hcpbot_slack_queue_depth") == 0
		})
	}
	for _, c := range rec.Calls()[mark:] {
		text := c.Form.Get("text")
		if c.Method == "chat.postMessage" && c.Form.Get("thread_ts") == "" && !strings.Contains(text, "ns/e") && !strings.Contains(text, "ns/f") {
			t.Errorf("after the repartition, a second root: %.200s", text)
		}
	}
	for _, name := range []string{"a", "b", "c", "d", "e", "f"} {
		if n := len(rootsAbout(rec, "ns/"+name)); n != 1 {
			t.Errorf("ns/%s: %d roots, want 1", name, n)
		}
	}
	// The storm is group 1's alone (one management cluster): it kept the
	// one group's message, under the one group's key.
	if got := groups[1].bot.Storms(); len(oneStorms) != 1 || len(got) != 1 || got[0].Key != oneStorms[0].Key {
		t.Errorf("storms: the one group had %+v, group 1 has %+v: want the same key", oneStorms, got)
	}
	if n := len(groups[0].bot.Storms()); n != 0 {
		t.Errorf("group 0 has %d storms, want none", n)
	}

	// One bot's full replay of the same stream: the same incidents as the
	// two groups together, the storm under the same key; it finds every
	// message (no root posted).
	for _, g := range groups {
		g.cancel()
	}
	union := append(groups[0].bot.Incidents(), groups[1].bot.Incidents()...)
	if n := len(union); n != 16 {
		t.Errorf("%d incidents in the two groups, want 16 (a-f and the storm's 10)", n)
	}
	mark = len(rec.Calls())
	log, _ := capturedLog(t, "full replay")
	replay, diff := replayInFull(t, js, rec, cfg, log, union)
	if len(diff) > 0 {
		t.Errorf("the two groups' incidents differ from one bot's full replay:\n%s", strings.Join(diff, "\n"))
	}
	testenv.Eventually(t, 30*time.Second, "the full replay's notifications delivered", func() bool {
		return metricSum(t, replay.reg, "hcpbot_slack_queue_depth") == 0
	})
	for _, c := range rec.Calls()[mark:] {
		if c.Method == "chat.postMessage" && c.Form.Get("thread_ts") == "" {
			t.Errorf("the full replay posted a root: %.200s", c.Form.Get("text"))
		}
	}
}
