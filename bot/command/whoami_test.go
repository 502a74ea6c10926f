package command_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/bot/command"
	"github.com/hcpbot/hcpbot/bot/notify"
	"github.com/hcpbot/hcpbot/identity"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
)

// whoamiMap is an identities section with every kind of entry: a person by
// user ID on one management cluster, a Slack user group by e-mail on all,
// a person on a cluster the bot has no events from.
func whoamiMap(required bool) identity.Map {
	return identity.Map{Required: required, Entries: []identity.Entry{
		{Slack: "U0ALICE123", User: "alice@corp.example", Groups: []string{"platform-ops"}, Clusters: []string{"mgmt-1"}},
		{Slack: "S0OPSTEAM1", EmailPrefix: "oidc:"},
		{Slack: "U0CAROL123", User: "carol", Clusters: []string{"mgmt-3"}},
	}}
}

// whoamiHandler answers over a bot with events from mgmt-1 and mgmt-2,
// the Slack recorder holding the people's profiles and the group.
func whoamiHandler(t *testing.T, m identity.Map) (*command.Handler, *slackrec.Recorder) {
	t.Helper()
	rec := slackrec.New(t)
	rec.AddUser(slackrec.User{ID: "U0ALICE123", Name: "alice", Email: "alice@corp.example"})
	rec.AddUser(slackrec.User{ID: "U0BOBBY123", Name: "bob", Email: "bob@corp.example"})
	rec.AddUser(slackrec.User{ID: "U0CAROL123", Name: "carol", Email: "carol@corp.example"})
	rec.SetUserGroup("S0OPSTEAM1", "U0ALICE123", "U0BOBBY123")
	api := notify.NewSlackClient("xoxb-whoami", rec.APIURL(), nil)
	return &command.Handler{
		Bot:        botKnowing(t, kubevirt("mgmt-1", "clusters", "a"), kubevirt("mgmt-2", "clusters", "b")),
		Identities: m,
		Groups:     command.SlackGroups{Client: api},
		Emails:     &command.SlackProfiles{Client: api},
	}, rec
}

// lineOn is the line of a whoami answer about a management cluster.
func lineOn(t *testing.T, answer, cluster string) string {
	t.Helper()
	prefix := "• `" + cluster + "`: "
	if strings.Contains(cluster, " ") {
		prefix = "• " + cluster + ": "
	}
	for line := range strings.SplitSeq(answer, "\n") {
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			return rest
		}
	}
	t.Fatalf("no line for %s in:\n%s", cluster, answer)
	return ""
}

// `/hcp whoami` tells each person, per management cluster the bot knows
// (its events' and the map's) and for any other, their identity and the
// entry it comes from: their own user ID's (cluster-restricted), a group's
// (the user made of the prefix and their Slack e-mail), none; required
// says the agent will not act for them where they have none.
func TestWhoami(t *testing.T) {
	c, _ := whoamiHandler(t, whoamiMap(true))
	alice := console(t, c, "U0ALICE123", "whoami")
	t.Logf("alice:\n%s", alice)
	for cluster, want := range map[string]string{
		"mgmt-1":                       "user `alice@corp.example`, groups `platform-ops` — identities.map[0] (your user ID)",
		"mgmt-2":                       "user `oidc:alice@corp.example` — identities.map[1] (the Slack user group `S0OPSTEAM1`), the prefix `oidc:` and your Slack e-mail",
		"mgmt-3":                       "user `oidc:alice@corp.example` — identities.map[1]",
		"any other management cluster": "user `oidc:alice@corp.example` — identities.map[1]",
	} {
		if got := lineOn(t, alice, cluster); !strings.HasPrefix(got, want) {
			t.Errorf("alice on %s: %q, want %q", cluster, got, want)
		}
	}
	if !strings.Contains(alice, "Slack user `U0ALICE123`") || !strings.Contains(alice, "identities.required is on") {
		t.Errorf("header:\n%s", alice)
	}

	carol := console(t, c, "U0CAROL123", "whoami")
	const refused = "no identity: with identities.required the agent will not act on your approval there"
	for cluster, want := range map[string]string{
		"mgmt-1":                       refused,
		"mgmt-2":                       refused,
		"mgmt-3":                       "user `carol` — identities.map[2] (your user ID)",
		"any other management cluster": refused,
	} {
		if got := lineOn(t, carol, cluster); got != want {
			t.Errorf("carol on %s: %q, want %q", cluster, got, want)
		}
	}

	// Not required: without an identity the agent acts as itself.
	c.Identities = whoamiMap(false)
	carol = console(t, c, "U0CAROL123", "whoami")
	if got := lineOn(t, carol, "mgmt-1"); got != "none: the agent acts as itself" {
		t.Errorf("carol on mgmt-1, not required: %q", got)
	}
	if strings.Contains(carol, "identities.required is on") {
		t.Errorf("says required:\n%s", carol)
	}

	// Only the asking person sees it.
	if r := cmd(c, "U0ALICE123", chatops.Whoami{}); r.InChannel {
		t.Errorf("whoami answered in the channel: %+v", r)
	}
}

// Nothing configured: the agent acts as itself everywhere, said once.
func TestWhoamiWithoutIdentities(t *testing.T) {
	c := &command.Handler{Bot: botKnowing(t, kubevirt("mgmt-1", "clusters", "a"))}
	got := cmd(c, "U0ALICE123", chatops.Whoami{}).Text
	if !strings.Contains(got, "No identities are configured") || !strings.Contains(got, "as itself") {
		t.Errorf("answer: %s", got)
	}
}

// What cannot be read is said, cluster by cluster, never guessed: groups
// without a resolver or whose members Slack does not give, an e-mail
// without a look-up or without the scope. A person's own entry is still
// told.
func TestWhoamiCannotTell(t *testing.T) {
	c, rec := whoamiHandler(t, whoamiMap(true))

	c.Groups = nil
	alice := console(t, c, "U0ALICE123", "whoami")
	if got := lineOn(t, alice, "mgmt-1"); !strings.HasPrefix(got, "user `alice@corp.example`") {
		t.Errorf("own entry without groups: %q", got)
	}
	carol := console(t, c, "U0CAROL123", "whoami")
	if got := lineOn(t, carol, "mgmt-3"); !strings.HasPrefix(got, "user `carol`") {
		t.Errorf("carol's own entry without groups: %q", got)
	}
	for _, answer := range []string{alice, carol} {
		if got := lineOn(t, answer, "mgmt-2"); got != "cannot tell: the entry for the Slack user group `S0OPSTEAM1` might apply, but this bot cannot read Slack user groups" {
			t.Errorf("mgmt-2 without a group resolver: %q", got)
		}
	}

	c.Groups = failingGroups{errors.New("slack usergroups.users.list S0OPSTEAM1: <!channel> ratelimited")}
	// Through the handler: what Slack gets, escaped (the console shows it
	// unescaped).
	got := lineOn(t, cmd(c, "U0BOBBY123", chatops.Whoami{}).Text, "mgmt-2")
	if !strings.HasPrefix(got, "cannot tell:") || !strings.Contains(got, "could not be read from Slack") || strings.Contains(got, "<!channel>") {
		t.Errorf("mgmt-2 with a failing resolver: %q", got)
	}

	c.Groups = approval.StaticGroups{"S0OPSTEAM1": {"U0BOBBY123"}}
	c.Emails = nil
	got = lineOn(t, console(t, c, "U0BOBBY123", "whoami"), "mgmt-2")
	if got != "cannot tell: identities.map[1] (the Slack user group `S0OPSTEAM1`) makes your user name of your Slack e-mail, which could not be read: "+
		"no usable e-mail address in the Slack profile: this bot cannot read Slack e-mails" {
		t.Errorf("without an e-mail look-up: %q", got)
	}

	c.Emails = &command.SlackProfiles{Client: notify.NewSlackClient("xoxb-whoami", rec.APIURL(), nil)}
	rec.SetScopes("chat:write", "commands", "usergroups:read", "users:read")
	got = lineOn(t, console(t, c, "U0BOBBY123", "whoami"), "mgmt-2")
	if !strings.HasPrefix(got, "cannot tell: identities.map[1]") || !strings.Contains(got, "users:read.email") {
		t.Errorf("without the scope users:read.email: %q", got)
	}
}

type failingGroups struct{ err error }

func (f failingGroups) GroupMembers(context.Context, string) ([]string, error) { return nil, f.err }

// Names from the configuration are shown as code: a backtick or a mention
// in one cannot end the span or notify anyone.
func TestWhoamiEscapes(t *testing.T) {
	c, _ := whoamiHandler(t, identity.Map{Entries: []identity.Entry{{Slack: "U0ALICE123", User: "a`b <!channel>", Groups: []string{"g&h"}}}})
	got := lineOn(t, cmd(c, "U0ALICE123", chatops.Whoami{}).Text, "mgmt-1")
	if strings.Count(got, "`") != 4 || strings.Contains(got, "<!channel>") || strings.Contains(got, "g&h") {
		t.Errorf("not escaped: %q", got)
	}
}
