package bus

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// The bot groups ask each other and answer on FleetSubjects (package
// bot/fleet): the bot's user publishes and subscribes there; an agent's
// user may do neither, by an explicit deny (an agent that heard the
// requests could answer them; answers are sealed besides).
func TestFleetSubjectsBotOnly(t *testing.T) {
	l := startLocal(t, LocalConfig{Agents: []string{"mgmt-1"}}, testLogger(t))
	bot, berrs := rawRole(t, l, BotRole())
	sub, err := bot.SubscribeSync(FleetSubjects)
	if err != nil {
		t.Fatal(err)
	}
	for _, subject := range []string{"hcpbot.fleet.2.1", "hcpbot.fleet.answer.0a1b"} {
		if err := bot.Publish(subject, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		if m, err := sub.NextMsg(testWait); err != nil || m.Subject != subject {
			t.Fatalf("bot: %s not delivered to its fleet subscription: %v, %v", subject, m, err)
		}
	}
	select {
	case err := <-berrs:
		t.Fatalf("bot on the fleet's subjects: %v", err)
	default:
	}

	agent, aerrs := rawRole(t, l, AgentRole("mgmt-1"))
	for _, subject := range []string{"hcpbot.fleet.2.1", "hcpbot.fleet.answer.0a1b"} {
		refused(t, agent, aerrs, subject)
	}
	for len(aerrs) > 0 {
		<-aerrs
	}
	heard, err := agent.SubscribeSync(FleetSubjects)
	if err != nil {
		t.Fatal(err)
	}
	_ = agent.Flush()
	want := strings.ToLower(`permissions violation for subscription to "` + FleetSubjects + `"`)
	timeout := time.After(testWait)
	for refusedSub := false; !refusedSub; {
		select {
		case err := <-aerrs:
			refusedSub = errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(strings.ToLower(err.Error()), want)
		case <-timeout:
			t.Fatal("agent: subscription to the fleet's subjects not refused")
		}
	}
	if err := bot.Publish("hcpbot.fleet.2.1", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.NextMsg(testWait); err != nil {
		t.Fatal(err)
	}
	if m, err := heard.NextMsg(50 * time.Millisecond); err == nil {
		t.Errorf("the agent heard %s", m.Subject)
	}
	if p, err := AgentPermissions("mgmt-1"); err != nil || !strings.Contains(strings.Join(p.Publish.Deny, " "), FleetSubjects) || !strings.Contains(strings.Join(p.Subscribe.Deny, " "), FleetSubjects) {
		t.Errorf("agent permissions deny %+v / %+v, want %s denied explicitly (%v)", p.Publish.Deny, p.Subscribe.Deny, FleetSubjects, err)
	}
}
