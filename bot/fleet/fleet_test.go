package fleet_test

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/slack-go/slack"

	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/bot"
	"github.com/hcpbot/hcpbot/bot/blockkit"
	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/bot/command"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/bot/digest"
	"github.com/hcpbot/hcpbot/bot/fleet"
	"github.com/hcpbot/hcpbot/bot/fleet/wire"
	"github.com/hcpbot/hcpbot/bot/notify"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/configs"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/partition"
)

// at is when the fixture's clusters fail; the bots' clock is a minute
// later.
var at = time.Date(2026, 12, 6, 8, 0, 0, 0, time.UTC)

// fixture is a fleet of two bot groups on the real embedded NATS server,
// each a real *bot.Bot fed the events of its own management clusters
// only (scenario.Burst: cluster i on mgmt-i, even i in group 0), as the
// partitioned events stream delivers them; each group's Server answers
// on its own connection with the bot's NATS user.
type fixture struct {
	t       testing.TB
	local   *bus.Local
	set     partition.Set
	signer  *approval.Signer
	bots    []*bot.Bot
	servers []*fleet.Server
	conns   []*bus.Conn
}

func newFixture(t testing.TB, clusters int) *fixture {
	t.Helper()
	l, err := bus.StartLocal(t.Context(), bus.LocalConfig{StoreDir: t.TempDir(), Agents: []string{"mgmt-0"}}, natstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Shutdown)
	signer, err := approval.NewEphemeralSigner()
	if err != nil {
		t.Fatal(err)
	}
	burst, err := scenario.Burst("mgmt", clusters, at)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, local: l, signer: signer, set: partition.Set{Count: 2, Static: map[string]int{}}}
	for i := range clusters {
		f.set.Static[source(i)] = i % 2
	}
	for k := range 2 {
		b := bot.New(bot.Config{Channel: "C0INCIDENTS", Now: func() time.Time { return at.Add(time.Minute) }}, nil, notify.NewConsole(io.Discard), nil, zerolog.Nop())
		for _, evs := range burst {
			if f.set.Of(evs[0].Source) != k {
				continue
			}
			for _, e := range evs {
				data, err := event.Encode(e)
				if err != nil {
					t.Fatal(err)
				}
				b.Handle(t.Context(), data)
			}
		}
		f.bots = append(f.bots, b)
		f.conns = append(f.conns, f.connect(bus.BotRole()))
		srv, err := fleet.NewServer(fleet.ServerConfig{Group: partition.ID{Index: k, Count: 2}, Bot: b, Conn: f.conns[k].NC, Signer: signer.ForFleet(), Log: natstest.Logger(t)})
		if err != nil {
			t.Fatal(err)
		}
		f.servers = append(f.servers, srv)
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(srv.Stop)
	}
	return f
}

func source(i int) string { return fmt.Sprintf("mgmt-%d", i) }

// key is scenario.Burst's cluster i.
func key(i int) diagnose.Key {
	return diagnose.Key{Source: source(i), Cluster: event.ClusterRef{Namespace: "clusters", Name: fmt.Sprintf("hc-%d", i)}}
}

func (f *fixture) connect(role bus.Role) *bus.Conn {
	f.t.Helper()
	c, err := f.local.Connect(f.t.Context(), role, bus.Config{Name: role.String()}, natstest.Logger(f.t))
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(c.Close)
	return c
}

// client is group self's fleet client, on a connection of its own.
func (f *fixture) client(self int, timeout time.Duration) *fleet.Client {
	f.t.Helper()
	c, err := fleet.NewClient(fleet.ClientConfig{Set: f.set, Self: self, Bot: f.bots[self], Conn: f.connect(bus.BotRole()).NC,
		Trusted: []string{f.signer.PublicKey()}, Timeout: timeout, Log: natstest.Logger(f.t)})
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}

func ask(h *command.Handler, cmd chatops.Command) string {
	return h.HandleCommand(context.Background(), chatops.Request{Command: cmd}).Text
}

func diagnoseCmd(i int) chatops.Diagnose {
	k := key(i)
	return chatops.Diagnose{Cluster: chatops.ClusterRef{Mgmt: k.Source, Namespace: k.Cluster.Namespace, Name: k.Cluster.Name}}
}

// A command through a replica of group 0 about a cluster of group 1 is
// answered as group 1's own handler answers it; status and incidents
// list both groups' clusters and incidents, in the order one bot gives;
// an incident's timeline and its Details button reach the group that
// holds it.
func TestFleetCommandsReachEveryGroup(t *testing.T) {
	f := newFixture(t, 4)
	h0 := &command.Handler{Bot: f.client(0, 10*time.Second)}
	own := []*command.Handler{{Bot: f.bots[0]}, {Bot: f.bots[1]}}
	for i := range 4 {
		got, want := ask(h0, diagnoseCmd(i)), ask(own[i%2], diagnoseCmd(i))
		if got != want || !strings.Contains(got, "*Rules*") {
			t.Errorf("diagnose %s through group 0:\n%s\nits group's own answer:\n%s", key(i), got, want)
		}
	}
	// Without the management cluster: found in the group that holds it.
	ref := chatops.Diagnose{Cluster: chatops.ClusterRef{Namespace: "clusters", Name: "hc-3"}}
	if got, want := ask(h0, ref), ask(own[1], ref); got != want {
		t.Errorf("diagnose clusters/hc-3 through group 0:\n%s\nwant\n%s", got, want)
	}

	// The fleet's status is one listing over both groups (summary, then
	// worst first): its cluster lines are both groups' own.
	status := ask(h0, chatops.Status{})
	clusterLines := func(text string) []string {
		var out []string
		for _, l := range strings.Split(strings.TrimSpace(text), "\n") {
			if strings.HasPrefix(l, "mgmt-") {
				out = append(out, l)
			}
		}
		slices.Sort(out)
		return out
	}
	var want []string
	for _, h := range own {
		want = append(want, clusterLines(ask(h, chatops.Status{}))...)
	}
	slices.Sort(want)
	if got := clusterLines(status); !slices.Equal(got, want) || !strings.HasPrefix(status, "*4 hosted clusters* on 4 management clusters") {
		t.Errorf("status through group 0:\n%s\nwant a summary of 4 clusters and both groups' lines:\n%s", status, strings.Join(want, "\n"))
	}

	incidents := ask(h0, chatops.Incidents{})
	var keys []string
	for k, b := range f.bots {
		incs := b.Incidents()
		if len(incs) != 2 {
			t.Fatalf("group %d holds %d incidents, want 2 (its two clusters fail)", k, len(incs))
		}
		for _, inc := range incs {
			keys = append(keys, inc.Key)
			if !strings.Contains(incidents, inc.Key+"  OPEN") {
				t.Errorf("incidents through group 0 lacks %s of group %d:\n%s", inc.Key, k, incidents)
			}
		}
	}
	// The merged list is ordered as one bot orders its own.
	merged := f.client(0, 10*time.Second).View(context.Background()).Incidents()
	if !slices.IsSortedFunc(merged, func(x, y bot.Incident) int { return y.Opened.Compare(x.Opened) }) || len(merged) != 4 {
		t.Errorf("merged incidents: %d, not newest first", len(merged))
	}

	inc1 := f.bots[1].Incidents()[0]
	tl := chatops.Timeline{IncidentID: inc1.Key}
	if got, want := ask(h0, tl), ask(own[1], tl); got != want || !strings.Contains(got, "first symptom") {
		t.Errorf("timeline of %s through group 0:\n%s\nwant\n%s", inc1.Key, got, want)
	}
	press := chatops.ActionRequest{ActionID: blockkit.ActionDetails, Value: inc1.Key}
	if got, want := h0.HandleAction(context.Background(), press).Text, own[1].HandleAction(context.Background(), press).Text; got != want {
		t.Errorf("Details of %s through group 0:\n%s\nwant\n%s", inc1.Key, got, want)
	}
	if strings.Contains(status+incidents, "did not answer") {
		t.Errorf("a group is said not to answer:\n%s\n%s", status, incidents)
	}
}

// A group that does not answer is named in the reply: its clusters are
// missing, never silently. Once it answers again, the reply is whole.
func TestFleetGroupDownIsNamed(t *testing.T) {
	f := newFixture(t, 4)
	h0 := &command.Handler{Bot: f.client(0, 300*time.Millisecond)}
	f.servers[1].Stop()
	missing := "group 1 of 2 did not answer"
	status := ask(h0, chatops.Status{})
	if !strings.Contains(status, missing) || !strings.Contains(status, key(0).String()) || strings.Contains(status, key(1).String()) {
		t.Errorf("status with group 1 down:\n%s", status)
	}
	if got := ask(h0, diagnoseCmd(1)); !strings.Contains(got, missing) {
		t.Errorf("diagnose of a cluster of group 1, down:\n%s", got)
	}
	if got := ask(h0, chatops.Incidents{}); !strings.Contains(got, missing) {
		t.Errorf("incidents with group 1 down:\n%s", got)
	}
	// The group's own replica answers its own clusters in-process (the
	// name is looked up in every group: the reply says one is missing).
	if got, want := ask(h0, diagnoseCmd(0)), ask(&command.Handler{Bot: f.bots[0]}, diagnoseCmd(0)); !strings.HasPrefix(got, want) {
		t.Errorf("diagnose of a cluster of group 0:\n%s\nwant its group's answer:\n%s", got, want)
	}
	if err := f.servers[1].Start(); err != nil {
		t.Fatal(err)
	}
	if got := ask(h0, chatops.Status{}); strings.Contains(got, missing) || !strings.Contains(got, key(1).String()) {
		t.Errorf("status once group 1 answers again:\n%s", got)
	}
}

// recorder keeps what the digest posts.
type recorder struct {
	mu   sync.Mutex
	text []string
}

func (r *recorder) Upsert(_ context.Context, m notify.Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.text = append(r.text, m.Text)
	for _, b := range m.Blocks {
		if s, ok := b.(*slack.SectionBlock); ok && s.Text != nil {
			r.text = append(r.text, s.Text.Text)
		}
	}
	return nil
}

func (r *recorder) Reply(_ context.Context, rp notify.Reply) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.text = append(r.text, rp.Text)
	return nil
}

func (r *recorder) Run(ctx context.Context) error { <-ctx.Done(); return nil }

func (r *recorder) all() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	defer func() { r.text = nil }()
	return strings.Join(r.text, "\n")
}

// The digest, run in group 0, gathers the clusters of both groups; with
// group 1 down it says so.
func TestFleetDigestGathersEveryGroup(t *testing.T) {
	f := newFixture(t, 4)
	cfg, err := configs.Parse([]byte("slack:\n  botTokenEnv: SLACK_BOT_TOKEN\n  signingSecretEnv: SLACK_SIGNING_SECRET\nbot:\n  defaultChannel: C0123456789\n"+
		"digests:\n  - name: fleet\n    schedule: \"@weekly\"\n    channel: C0DIGEST01\n"), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out := &recorder{}
	var tick atomic.Int64 // each digest now takes a key of its own time
	r, err := digest.NewRunner(t.Context(), f.conns[0].JS, digest.Config{Digests: cfg.Digests, Bot: f.client(0, 300*time.Millisecond), Out: out, Mode: digest.Full,
		Now: func() time.Time { return at.Add(time.Minute + time.Duration(tick.Add(1))*time.Second) }, Log: natstest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.DigestNow(t.Context()); err != nil {
		t.Fatal(err)
	}
	text := out.all()
	for i := range 4 {
		if !strings.Contains(text, key(i).Cluster.String()) || !strings.Contains(text, source(i)) {
			t.Errorf("digest lacks %s:\n%s", key(i), text)
		}
	}
	if strings.Contains(text, "did not answer") {
		t.Errorf("digest says a group did not answer:\n%s", text)
	}
	f.servers[1].Stop()
	if _, err := r.DigestNow(t.Context()); err != nil {
		t.Fatal(err)
	}
	if text := out.all(); !strings.Contains(text, "group 1 of 2 did not answer") || strings.Contains(text, source(1)) {
		t.Errorf("digest with group 1 down:\n%s", text)
	}
}

// The fleet's subjects are the ones the bot's NATS user is granted.
func TestFleetSubjectsAreTheGrantedOnes(t *testing.T) {
	if wire.Filter != bus.FleetSubjects || !strings.HasPrefix(wire.Subject(4, 3), "hcpbot.fleet.") || !strings.HasPrefix(wire.AnswerPrefix, "hcpbot.fleet.") {
		t.Errorf("wire.Filter %q, bus.FleetSubjects %q", wire.Filter, bus.FleetSubjects)
	}
	if got := wire.Subject(4, 2); got != "hcpbot.fleet.4.2" {
		t.Errorf("subject of group 2 of 4: %s", got)
	}
}
