package bus

import (
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/partition"
)

// lastEvent is the subject of the newest message on the events stream,
// read through an ordered consumer of the bot's role.
func lastEvent(t *testing.T, js jetstream.JetStream) string {
	t.Helper()
	ctx := testContext(t)
	cons, err := js.OrderedConsumer(ctx, EventsStreamName, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverLastPolicy})
	if err != nil {
		t.Fatal(err)
	}
	m, err := cons.Next(jetstream.FetchMaxWait(testWait))
	if err != nil {
		t.Fatal(err)
	}
	return m.Subject()
}

// TestI30AttackAgentSteersItsEventsToAnotherGroup: with two bot groups
// the embedded server tags each event with its source's group, and the
// agent's user cannot choose the tag. Its ordinary publish (six tokens)
// is stored tagged with its own group; a subject it tagged itself for
// the other group, for another count of groups, or of seven tokens is
// refused by the server. (The bot follows partition.Set.Of whatever the
// tag says, so a forged tag would move nothing: this keeps the stored
// tags true for anyone else who reads them.)
func TestI30AttackAgentSteersItsEventsToAnotherGroup(t *testing.T) {
	const src = "mgmt-1"
	set := partition.Set{Count: 2}
	own := set.Of(src)
	l := startLocal(t, LocalConfig{Agents: []string{src}, Partitions: set}, testLogger(t))
	ctx := testContext(t)
	if _, err := l.CreateStream(ctx, EventsStream(0, 0), testLogger(t)); err != nil {
		t.Fatal(err)
	}
	agent := connectRole(t, l, AgentRole(src))
	bot := connectRole(t, l, BotRole())

	plain := "hcpbot.events." + src + ".clusters.hc-1.node"
	if _, err := agent.JS.Publish(ctx, plain, []byte(`{}`)); err != nil {
		t.Fatalf("the agent's own event: %v", err)
	}
	want := event.TagSubject(plain, event.Tag{Count: 2, Index: own})
	if got := lastEvent(t, bot.JS); got != want {
		t.Fatalf("stored on %q, want %q (tagged with its group)", got, want)
	}

	raw, errs := rawRole(t, l, AgentRole(src))
	for _, subject := range []string{
		event.TagSubject(plain, event.Tag{Count: 2, Index: 1 - own}),
		event.TagSubject(plain, event.Tag{Count: 3, Index: 0}),
		plain + ".x",
		"hcpbot.events." + src + ".clusters.hc-1",
	} {
		refused(t, raw, errs, subject)
	}
}

// TestPermissionsCheckedAfterTheMapping: nats-server checks a publish
// permission on the subject its account mapping made, not on the one the
// client sent (server/parser.go: selectMappedSubject before
// processInboundMsg). An agent user with the permissions of one group
// (six tokens only) on a server that tags events is refused its own
// ordinary publish: which is why AgentPermissionsIn lists the tag.
func TestPermissionsCheckedAfterTheMapping(t *testing.T) {
	const src = "mgmt-1"
	set := partition.Set{Count: 2}
	kp, pub, err := newUserKey()
	if err != nil {
		t.Fatal(err)
	}
	onePerms, err := AgentPermissions(src)
	if err != nil {
		t.Fatal(err)
	}
	e := startEmbedded(t, EmbeddedConfig{InProcessOnly: true, Mappings: set.Mappings(),
		Users: []*server.NkeyUser{{Nkey: pub, Permissions: onePerms}}})
	inbox, _ := AgentRole(src).InboxPrefix()
	errs := make(permErrs, 64)
	nc, err := nats.Connect(inProcessURL, nats.InProcessServer(e), nats.Nkey(pub, kp.Sign), nats.CustomInboxPrefix(inbox), nats.ErrorHandler(errs.handler))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	plain := "hcpbot.events." + src + ".clusters.hc-1.node"
	tagged := event.TagSubject(plain, event.Tag{Count: 2, Index: set.Of(src)})
	for len(errs) > 0 {
		<-errs
	}
	if err := nc.Publish(plain, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	_ = nc.Flush()
	select {
	case err := <-errs:
		if !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(tagged)) {
			t.Fatalf("refused: %v; want the refusal to name the mapped subject %s", err, tagged)
		}
	case <-testContext(t).Done():
		t.Fatal("an allow list without the tag let the tagged subject through: the server checked the subject before the mapping")
	}
}
