package configs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/nats-io/nkeys"
)

// botBase and slackBase are the smallest valid bot configuration, ending
// in the bot and the slack section respectively, so cases can append keys
// to that section; appended lines start at line 6.
const (
	botBase = `slack:
  botTokenEnv: SLACK_BOT_TOKEN
  signingSecretEnv: SLACK_SIGNING_SECRET
bot:
  defaultChannel: C0123456789
`
	// withApprovals gives the bot a signing key (checkpoints need one).
	withApprovals = "approvals:\n  approverGroups: [S01234ABCD]\n"
	slackBase     = `bot:
  defaultChannel: C0123456789
slack:
  botTokenEnv: SLACK_BOT_TOKEN
  signingSecretEnv: SLACK_SIGNING_SECRET
`
)

func TestExampleIsValid(t *testing.T) {
	c, err := Parse([]byte(Example), "example.yaml")
	if err != nil {
		t.Fatalf("example.yaml must parse clean:\n%v", err)
	}
	// Spot checks that the example means what its comments say.
	if c.Agent == nil || c.Agent.Source != "mgmt-1" || !c.Agent.LeaderElection.Enabled || c.Agent.LeaderElection.Namespace != "hcpbot" {
		t.Errorf("agent: %+v", c.Agent)
	}
	if c.Bot == nil || len(c.Bot.Routes) != 2 || c.Bot.DefaultChannel != "C0123456789" {
		t.Errorf("bot: %+v", c.Bot)
	}
	if c.Slack == nil || c.Slack.BotToken != (SecretRef{Env: "SLACK_BOT_TOKEN"}) || c.Slack.SocketMode {
		t.Errorf("slack: %+v", c.Slack)
	}
	if len(c.Digests) != 2 || c.Digests[0].Location().String() != "Europe/Berlin" || c.Digests[1].Timezone != "UTC" {
		t.Errorf("digests: %+v", c.Digests)
	}
	if c.Approvals == nil || len(c.Approvals.Approvers) != 2 || !c.Approvals.FourEyes {
		t.Errorf("approvals: %+v", c.Approvals)
	}
	// The production setting: changes only as a mapped identity, the
	// approvers mapped (one by user ID, the group by e-mail).
	if id := c.Identities; !id.Required || len(id.Entries) != 3 || id.Entries[2].EmailPrefix != "oidc:" || !id.Entries[2].Group() {
		t.Errorf("identities: %+v", id)
	}
}

// TestExampleDefaultsMatchCode: every value example.yaml writes for a field
// that has a default must equal that default, since its comments call them
// defaults. Removing the explicit values must not change the result.
func TestExampleDefaultsMatchCode(t *testing.T) {
	full, err := Parse([]byte(Example), "example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	drop := map[string]bool{
		"streamReplicas": true, "eventsMaxAge": true, "duplicateWindow": true, "listen": true, "opsListen": true,
		"enabled": true, "leaseName": true, "leaseDuration": true, "renewDeadline": true, "retryPeriod": true,
		"bufferEvents": true, "hostedProbeInterval": true, "nodeJoinGrace": true, "groupWait": true, "groupInterval": true,
		"resolveTimeout": true, "healDeadline": true, "threshold": true, "window": true, "apiURL": true, "socketMode": true,
		"fourEyes": true, "requireFourEyes": true, "proposalTTL": true, "level": true, "format": true, "kubeconfig": true,
		"noProxyClients": true, "serviceNodePortRange": true, "checkpointEvery": true, "partitions": true, "partition": true,
	}
	for _, line := range strings.Split(Example, "\n") {
		key, _, _ := strings.Cut(strings.TrimSpace(line), ":")
		if drop[key] {
			continue
		}
		kept = append(kept, line)
	}
	bare, err := Parse([]byte(strings.Join(kept, "\n")), "bare.yaml")
	if err != nil {
		t.Fatal(err)
	}
	bare.File, bare.lines = full.File, full.lines
	if !reflect.DeepEqual(full, bare) {
		t.Errorf("defaults differ from the values example.yaml writes:\nexample: %+v\ndefaults: %+v", *full, *bare)
	}
}

func TestDefaults(t *testing.T) {
	c, err := Parse([]byte("agent:\n  source: mgmt-1\n"+botBase+"approvals:\n  approverGroups: [S01234ABCD]\ndigests:\n  - {name: d, schedule: '@daily', channel: C0123456789}\n"), "min.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := NATS{StreamReplicas: 1, EventsMaxAge: 72 * time.Hour, DuplicateWindow: 15 * time.Minute}
	if !reflect.DeepEqual(c.NATS, want) {
		t.Errorf("nats = %+v, want %+v", c.NATS, want)
	}
	a := c.Agent
	if a.Listen != ":8080" || a.BufferEvents != 10000 || a.HostedProbeInterval != 15*time.Second || a.NodeJoinGrace != 10*time.Minute ||
		a.ServiceNodePortRange != (NodePortRange{30000, 32767}) ||
		a.LeaderElection != (LeaderElection{Enabled: true, LeaseName: "hcpbot-agent", LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}) {
		t.Errorf("agent = %+v", a)
	}
	b := c.Bot
	if b.Listen != ":8081" || b.OpsListen != ":8082" || b.GroupWait != 5*time.Second || b.GroupInterval != time.Minute || b.ResolveTimeout != 5*time.Minute || b.Storm != (Storm{20, 30 * time.Second}) {
		t.Errorf("bot = %+v", b)
	}
	if c.Slack.APIURL != "https://slack.com/api/" || !c.Approvals.FourEyes || c.Approvals.ProposalTTL != time.Hour {
		t.Errorf("slack %+v approvals %+v", c.Slack, c.Approvals)
	}
	if c.Digests[0].Timezone != "UTC" || c.Digests[0].Location() != time.UTC {
		t.Errorf("digest %+v", c.Digests[0])
	}
	if c.Log != (Log{Level: "info", Format: "json"}) {
		t.Errorf("log %+v", c.Log)
	}
	// Explicit values the defaults would otherwise overwrite.
	c, err = Parse([]byte("agent:\n  source: mgmt-1\n  leaderElection: {enabled: false}\n"+botBase+"  groupWait: 0s\napprovals:\n  approvers: [U01234ABCD]\n  fourEyes: false\n"), "explicit.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Agent.LeaderElection.Enabled || c.Bot.GroupWait != 0 || c.Approvals.FourEyes {
		t.Errorf("explicit false/0 overwritten: %+v %+v %+v", c.Agent.LeaderElection, c.Bot, c.Approvals)
	}
}

// Each malformed configuration must be refused with a problem naming the
// field and the line the operator has to edit.
func TestRejected(t *testing.T) {
	cases := []struct {
		name, yaml string
		line       int
		field      string
		msg        string
	}{
		{"unknown top-level key", "agent:\n  source: mgmt-1\nnast:\n  urls: []\n", 3, "nast", "unknown key (known: nats, agent"},
		{"unknown nested key", "agent:\n  source: mgmt-1\n  leaderElection:\n    enabled: true\n    leaseDurration: 15s\n", 5, "agent.leaderElection.leaseDurration", "unknown key"},
		{"wrong-case key", "nats:\n  streamreplicas: 1\nagent:\n  source: mgmt-1\n", 2, "nats.streamreplicas", `did you mean "streamReplicas"`},
		{"bad duration", "agent:\n  source: mgmt-1\n  hostedProbeInterval: 15 seconds\n", 3, "agent.hostedProbeInterval", `"15 seconds" is not a duration`},
		{"join grace too short", "agent:\n  source: mgmt-1\n  nodeJoinGrace: 1s\n", 3, "agent.nodeJoinGrace", "must be at least 10s"},
		{"join grace too long", "agent:\n  source: mgmt-1\n  nodeJoinGrace: 48h\n", 3, "agent.nodeJoinGrace", "at most 24h"},
		{"node-port range not a range", "agent:\n  source: mgmt-1\n  serviceNodePortRange: \"30000\"\n", 3, "agent.serviceNodePortRange", "must be MIN-MAX"},
		{"node-port range reversed", "agent:\n  source: mgmt-1\n  serviceNodePortRange: 32767-30000\n", 3, "agent.serviceNodePortRange", "1 <= MIN <= MAX"},
		{"node-port range past 65535", "agent:\n  source: mgmt-1\n  serviceNodePortRange: 30000-70000\n", 3, "agent.serviceNodePortRange", "must be MIN-MAX"},
		{"node-port range from 0", "agent:\n  source: mgmt-1\n  serviceNodePortRange: 0-100\n", 3, "agent.serviceNodePortRange", "1 <= MIN"},
		{"node-port range with signs", "agent:\n  source: mgmt-1\n  serviceNodePortRange: +30000-32767\n", 3, "agent.serviceNodePortRange", "must be MIN-MAX"},
		{"duration without unit", "nats:\n  eventsMaxAge: 72\nagent:\n  source: mgmt-1\n", 2, "nats.eventsMaxAge", "has no unit"},
		{"negative duration", botBase + "  groupWait: -5s\n", 6, "bot.groupWait", "must not be negative"},
		{"bad cron", botBase + "digests:\n  - name: daily\n    schedule: \"0 25 * * *\"\n    channel: C0123456789\n", 8, "digests[0].schedule", "is not a cron schedule"},
		{"cron TZ prefix", botBase + "digests:\n  - name: daily\n    schedule: \"TZ=UTC 0 8 * * *\"\n    channel: C0123456789\n", 8, "digests[0].schedule", "timezone field"},
		{"unknown time zone", botBase + "digests:\n  - name: daily\n    schedule: \"0 8 * * *\"\n    timezone: Europe/Bielefeld\n    channel: C0123456789\n", 9, "digests[0].timezone", `"Europe/Bielefeld" is not a known time zone`},
		{"channel name instead of id", botBase + "  routes:\n    - match: {source: mgmt-1}\n      channel: \"#alerts\"\n", 8, "bot.routes[0].channel", `"#alerts" is not a Slack channel ID`},
		{"channel id lower case", "bot:\n  defaultChannel: c0123456789\nslack:\n  botTokenEnv: T\n  signingSecretEnv: S\n", 2, "bot.defaultChannel", "is not a Slack channel ID"},
		{"approver wrong shape", botBase + "approvals:\n  approvers: [U01234ABCD, bob]\n  approverGroups: [S01234ABCD]\n", 7, "approvals.approvers[1]", `"bob" is not a Slack user ID (U…/W…`},
		{"group in approvers", botBase + "approvals:\n  approvers:\n    - U01234ABCD\n    - S01234ABCD\n", 9, "approvals.approvers[1]", "is a user group ID"},
		{"approver group wrong shape", botBase + "approvals:\n  approverGroups: [admins]\n", 7, "approvals.approverGroups[0]", "is not a Slack user group ID"},
		{"bot token literal", slackBase + "  botToken: xoxb-1234-5678-abcdef\n", 6, "slack.botToken", "use botTokenEnv (an environment variable) or botTokenFile (a file)"},
		{"signing secret literal", "bot:\n  defaultChannel: C0123456789\nslack:\n  botTokenEnv: SLACK_BOT_TOKEN\n  signingSecret: 8f742231b10e8888abcd99yyyzzz85a5\n", 5, "slack.signingSecret", "use signingSecretEnv"},
		{"token in an env field", "bot:\n  defaultChannel: C0123456789\nslack:\n  botTokenEnv: xoxb-1234-5678-abcdef\n  signingSecretEnv: S\n", 4, "slack.botTokenEnv", "looks like a Slack token"},
		{"app token under unknown key", slackBase + "  socket: xapp-1-A0-123-abc\n", 6, "slack.socket", "looks like a Slack token"},
		{"password in nats url", "nats:\n  urls: [\"nats://hcpbot:s3cret@nats:4222\"]\nagent:\n  source: mgmt-1\n", 2, "nats.urls[0]", "credentials must not be written in URLs"},
		{"replicas 2", "nats:\n  urls: [nats://nats:4222]\n  streamReplicas: 2\nagent:\n  source: mgmt-1\n", 3, "nats.streamReplicas", "must be 1, 3 or 5"},
		{"replicas on embedded server", "nats:\n  streamReplicas: 3\nagent:\n  source: mgmt-1\n", 2, "nats.streamReplicas", "need a NATS cluster"},
		{"source not a DNS label", "agent:\n  source: Mgmt_1.example\n", 2, "agent.source", "is not a management cluster name: a DNS-1123 label"},
		{"source missing", "agent:\n  listen: \":8080\"\n", 1, "agent.source", "is required"},
		{"bad label selector", botBase + "  routes:\n    - selector: \"env in (prod\"\n      channel: C0123456789\n", 7, "bot.routes[0].selector", "is not a label selector"},
		{"route with empty match", botBase + "  routes:\n    - match: {}\n      channel: C0123456789\n", 7, "bot.routes[0].match", "is empty"},
		{"comma-separated nats urls", "nats:\n  urls: [\"nats://a:4222,nats://b:4222\"]\nagent:\n  source: mgmt-1\n", 2, "nats.urls[0]", "one URL per list entry"},
		{"nats url scheme", "nats:\n  urls: [http://nats:4222]\nagent:\n  source: mgmt-1\n", 2, "nats.urls[0]", "scheme must be nats, tls, ws or wss"},
		{"nats url path", "nats:\n  urls: [nats://nats:4222/x]\nagent:\n  source: mgmt-1\n", 2, "nats.urls[0]", "no path or query"},
		{"relative store dir", "nats:\n  storeDir: data/nats\nagent:\n  source: mgmt-1\n", 2, "nats.storeDir", "must be an absolute path"},
		{"ca file with embedded server", "nats:\n  caFile: /etc/ca.crt\nagent:\n  source: mgmt-1\n", 2, "nats.caFile", "only used with nats.urls"},
		{"duplicate window beyond max age", "nats:\n  eventsMaxAge: 10m\n  duplicateWindow: 20m\nagent:\n  source: mgmt-1\n", 3, "nats.duplicateWindow", "longer than nats.eventsMaxAge (10m0s)"},
		{"retry period too long", "agent:\n  source: mgmt-1\n  leaderElection:\n    retryPeriod: 9s\n", 4, "agent.leaderElection.retryPeriod", "must exceed 1.2 × retryPeriod"},
		{"lease name invalid", "agent:\n  source: mgmt-1\n  leaderElection: {leaseName: Hcpbot_Lease}\n", 3, "agent.leaderElection.leaseName", "is not a Lease name"},
		{"buffer zero", "agent:\n  source: mgmt-1\n  bufferEvents: 0\n", 3, "agent.bufferEvents", "between 1 and 1000000"},
		{"storm threshold 1", botBase + "  storm: {threshold: 1}\n", 6, "bot.storm.threshold", "at least 2"},
		{"group interval too short", botBase + "  groupInterval: 1s\n", 6, "bot.groupInterval", "must be at least 5s"},
		{"route cluster invalid", botBase + "  routes:\n    - match: {cluster: Example_1}\n      channel: C0123456789\n", 7, "bot.routes[0].match.cluster", "is not a hosted cluster name"},
		{"user id in approver groups", botBase + "approvals:\n  approverGroups: [U01234ABCD]\n", 7, "approvals.approverGroups[0]", "is a user ID"},
		{"proposal ttl too long", botBase + "approvals:\n  approverGroups: [S01234ABCD]\n  proposalTTL: 720h\n", 8, "approvals.proposalTTL", "at most 168h"},
		{"api url not http", slackBase + "  apiURL: slack.com/api/\n", 6, "slack.apiURL", "is not an http(s) URL"},
		{"api url with query", slackBase + "  apiURL: https://slack.com/api/?a=b\n", 6, "slack.apiURL", "must not carry credentials or a query"},
		{"app token without socket mode", slackBase + "  appTokenFile: /run/secrets/app\n", 6, "slack.appTokenFile", "only used with socketMode: true"},
		{"env name not a name", "bot:\n  defaultChannel: C0123456789\nslack:\n  botTokenEnv: \"$SLACK_BOT_TOKEN\"\n  signingSecretEnv: S\n", 4, "slack.botTokenEnv", "must be the NAME of an environment variable"},
		{"approvals without bot", "agent:\n  source: mgmt-1\napprovals:\n  approvers: [U01234ABCD, U05678EFGH]\n", 3, "approvals", "no bot section"},
		{"empty approvals", botBase + "approvals:\n  fourEyes: false\n", 6, "approvals", "nobody could approve"},
		{"bad log format", "agent:\n  source: mgmt-1\nlog: {format: text}\n", 3, "log.format", "want json or console"},
		{"route without condition", botBase + "  routes:\n    - channel: C0123456789\n", 7, "bot.routes[0]", "needs match or selector"},
		{"partitions 0", botBase + "  partitions: 0\n", 6, "bot.partitions", "at least 1"},
		{"partition past partitions", botBase + "  partitions: 2\n  partition: 2\napprovals:\n  approverGroups: [S01234ABCD]\n  signingKeyEnv: K\n", 7, "bot.partition", "below bot.partitions (2)"},
		{"partition negative", botBase + "  partition: -1\n", 6, "bot.partition", "at least 0"},
		{"partition map past partitions", botBase + "  partitions: 2\n  partitionMap:\n    mgmt-1: 1\n    mgmt-2: 3\napprovals:\n  approverGroups: [S01234ABCD]\n  signingKeyEnv: K\n", 9, "bot.partitionMap.mgmt-2", "below bot.partitions (2)"},
		{"partition map with one partition", botBase + "  partitionMap: {mgmt-1: 0}\n", 6, "bot.partitionMap", "2 or more"},
		{"partition map not a name", botBase + "  partitions: 2\n  partitionMap: {Mgmt_1: 0}\napprovals:\n  approverGroups: [S01234ABCD]\n  signingKeyEnv: K\n", 7, "bot.partitionMap.Mgmt_1", "management cluster"},
		{"partitions without signing key", botBase + "  partitions: 2\n", 6, "bot.partitions", "signingKey"},
		{"unknown incident kind", botBase + "  routes:\n    - match: {kind: crash}\n      channel: C0123456789\n", 7, "bot.routes[0].match.kind", `"crash" is not an incident kind (known: proxy-tunnel,`},
		{"removed match.type", botBase + "  routes:\n    - match: {type: crashloop}\n      channel: C0123456789\n", 7, "bot.routes[0].match.type", `type is no longer supported: an incident is many events of several types; route on what the incident is with match.kind (for "crashloop" events, probably kind: operator-crashloop)`},
		{"digest without channel", botBase + "digests:\n  - name: daily\n    schedule: \"@daily\"\n", 7, "digests[0].channel", "is required"},
		{"duplicate digest names", botBase + "digests:\n  - {name: daily, schedule: \"@daily\", channel: C0123456789}\n  - {name: daily, schedule: \"@weekly\", channel: C0123456789}\n", 8, "digests[1].name", `"daily" is already the name of digests[0]`},
		{"listen malformed", "agent:\n  source: mgmt-1\n  listen: \"8080\"\n", 3, "agent.listen", `"8080" is not a listen address`},
		{"listen port out of range", "agent:\n  source: mgmt-1\n  listen: \":80800\"\n", 3, "agent.listen", "port must be a number from 1 to 65535"},
		{"listen clash", "agent:\n  source: mgmt-1\n  listen: \":9000\"\n" + botBase + "  listen: \"0.0.0.0:9000\"\n", 9, "bot.listen", "collides with agent.listen"},
		{"ops listen malformed", botBase + "  opsListen: \"localhost\"\n", 6, "bot.opsListen", `"localhost" is not a listen address`},
		{"ops listen port out of range", botBase + "  opsListen: \":0\"\n", 6, "bot.opsListen", "port must be a number from 1 to 65535"},
		{"ops listen on the slack listener", botBase + "  listen: \"127.0.0.1:9000\"\n  opsListen: \":9000\"\n", 7, "bot.opsListen", "must not share the listener that faces Slack"},
		{"ops listen on the default slack port", botBase + "  opsListen: \":8081\"\n", 6, "bot.opsListen", `collides with bot.listen ":8081"`},
		{"ops listen clash with agent", "agent:\n  source: mgmt-1\n  listen: \":9000\"\n" + botBase + "  opsListen: \"[::]:9000\"\n", 9, "bot.opsListen", "collides with agent.listen"},
		{"ops listen clash with default agent", "agent:\n  source: mgmt-1\n" + botBase + "  opsListen: \"127.0.0.1:8080\"\n", 8, "bot.opsListen", `collides with agent.listen ":8080"`},
		{"string where integer", "agent:\n  source: mgmt-1\n  bufferEvents: \"100\"\n", 3, "agent.bufferEvents", "must be an integer"},
		{"yes is not a boolean", "agent:\n  source: mgmt-1\n  leaderElection:\n    enabled: yes\n", 4, "agent.leaderElection.enabled", "must be true or false"},
		{"duplicate key", "agent:\n  source: mgmt-1\n  source: mgmt-2\n", 3, "agent.source", "duplicate key (first set on line 2)"},
		{"renew deadline too long", "agent:\n  source: mgmt-1\n  leaderElection:\n    renewDeadline: 20s\n", 4, "agent.leaderElection.renewDeadline", "must be shorter than leaseDuration (15s)"},
		{"bot without slack", "bot:\n  defaultChannel: C0123456789\n", 1, "slack", "is required with bot"},
		{"slack without bot", "agent:\n  source: mgmt-1\nslack:\n  botTokenEnv: T\n", 3, "slack", "no bot section"},
		{"socket mode without app token", slackBase + "  socketMode: true\n", 3, "slack.appTokenEnv", "appTokenEnv or appTokenFile is required"},
		{"both env and file", slackBase + "  botTokenFile: /run/secrets/bot\n", 6, "slack.botTokenFile", "not both"},
		{"four eyes with one approver", botBase + "approvals:\n  approvers: [U01234ABCD]\n", 7, "approvals.approvers", "needs at least two approvers"},
		{"creds with embedded server", "nats:\n  credsFile: /etc/hcpbot/nats.creds\nagent:\n  source: mgmt-1\n", 2, "nats.credsFile", "embedded server"},
		{"nkey seed with embedded server", "nats:\n  nkeySeedFile: /etc/hcpbot/nkey.seed\nagent:\n  source: mgmt-1\n", 2, "nats.nkeySeedFile", "embedded server"},
		{"nkey seed and creds", "nats:\n  urls: [tls://n:4222]\n  credsFile: /etc/nats.creds\n  nkeySeedFile: /etc/nkey.seed\nagent:\n  source: mgmt-1\n", 4, "nats.nkeySeedFile", "not both"},
		{"nkey seed literal", "nats:\n  urls: [tls://n:4222]\n  nkeySeedFile: SUAMK2FG4MI6UE3ACF3FK3OIQBCEIEZV7NSWFFEW63UXMRLFM2XLAXK4GY\nagent:\n  source: mgmt-1\n", 3, "nats.nkeySeedFile", "looks like NATS credentials"},
		{"nkey key", "nats:\n  urls: [tls://n:4222]\n  nkeySeed: /etc/nkey.seed\nagent:\n  source: mgmt-1\n", 3, "nats.nkeySeed", "use nkeySeedFile"},
		{"store dir with urls", "nats:\n  urls: [nats://n:4222]\n  storeDir: /var/lib/x\nagent:\n  source: mgmt-1\n", 3, "nats.storeDir", "only used by the embedded server"},
		{"embedded listen with urls", "nats:\n  urls: [nats://n:4222]\n  embeddedListen: 127.0.0.1:4222\nagent:\n  source: mgmt-1\n", 3, "nats.embeddedListen", "only used by the embedded server"},
		{"embedded listen without a port", "nats:\n  embeddedListen: 127.0.0.1\nagent:\n  source: mgmt-1\n", 2, "nats.embeddedListen", "is not a listen address"},
		{"embedded listen on port 0", "nats:\n  embeddedListen: 127.0.0.1:0\nagent:\n  source: mgmt-1\n", 2, "nats.embeddedListen", "port must be a number from 1 to 65535"},
		{"nats seed literal", "nats:\n  urls: [nats://n:4222]\n  credsEnv: SUAMK2FG4MI6UE3ACF3FK3OIQBCEIEZV7NSWFFEW63UXMRLFM2XLAXK4GY\nagent:\n  source: mgmt-1\n", 3, "nats.credsEnv", "looks like NATS credentials"},
		{"slack api url without slash", slackBase + "  apiURL: https://slack.com/api\n", 6, "slack.apiURL", `must end with "/"`},
		{"section not a mapping", "agent: mgmt-1\n", 1, "agent", "must be a mapping"},
		{"list expected", "agent:\n  source: mgmt-1\nnats:\n  urls: nats://n:4222\n", 4, "nats.urls", "must be a list"},
		{"yaml syntax", "agent:\n  source: mgmt-1\n   listen: x\n", 3, "", "invalid YAML"},
		{"two documents", "agent:\n  source: mgmt-1\n---\nagent:\n  source: mgmt-2\n", 3, "", "second YAML document"},
		{"empty file", "", 0, "", "empty configuration"},
		{"neither agent nor bot", "log:\n  level: info\n", 0, "", "neither agent nor bot"},
		{"bad log level", "agent:\n  source: mgmt-1\nlog:\n  level: verbose\n", 4, "log.level", "want debug, info, warn or error"},
		{"checkpoint too often", botBase + "  checkpointEvery: 1s\n" + withApprovals, 6, "bot.checkpointEvery", "must be at least 10s (each checkpoint rewrites the bot's whole state), or 0s"},
		{"checkpoint negative", botBase + "  checkpointEvery: -1h\n" + withApprovals, 6, "bot.checkpointEvery", "must not be negative"},
		{"checkpoint without unit", botBase + "  checkpointEvery: 3600\n" + withApprovals, 6, "bot.checkpointEvery", "has no unit"},
		{"checkpoint not a duration", botBase + "  checkpointEvery: hourly\n" + withApprovals, 6, "bot.checkpointEvery", "is not a duration"},
		{"checkpoint past the stream", "nats:\n  eventsMaxAge: 2h\n" + botBase + "  checkpointEvery: 2h\n" + withApprovals, 8, "bot.checkpointEvery", "2h0m0s is not shorter than nats.eventsMaxAge (2h0m0s)"},
		{"checkpoint past the default stream", botBase + "  checkpointEvery: 100h\n" + withApprovals, 6, "bot.checkpointEvery", "is not shorter than nats.eventsMaxAge (72h0m0s)"},
		{"checkpoint without a signing key", botBase + "  checkpointEvery: 30m\n", 6, "bot.checkpointEvery", "needs approvals"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { expectProblem(t, tc.yaml, tc.field, tc.msg, tc.line) })
	}
}

// expectProblem parses src as hcpbot.yaml and wants it refused with a
// problem on field whose message contains msg, on line, in the form
// editors link ("hcpbot.yaml:line: field: message").
func expectProblem(t *testing.T, src, field, msg string, line int) {
	t.Helper()
	c, err := Parse([]byte(src), "hcpbot.yaml")
	if err == nil {
		t.Fatalf("accepted: %+v", c)
	}
	if c != nil {
		t.Errorf("a Config was returned with the error")
	}
	var perr *Error
	if !errors.As(err, &perr) {
		t.Fatalf("error is %T, want *Error: %v", err, err)
	}
	for _, p := range perr.Problems {
		if p.Field == field && strings.Contains(p.Message, msg) {
			if p.Line != line {
				t.Errorf("line %d, want %d: %s", p.Line, line, p)
			}
			if p.File != "hcpbot.yaml" {
				t.Errorf("file %q", p.File)
			}
			want := fmt.Sprintf("hcpbot.yaml:%d: %s: ", line, field)
			if line == 0 {
				want = "hcpbot.yaml: "
			}
			if field == "" && line > 0 {
				want = fmt.Sprintf("hcpbot.yaml:%d: ", line)
			}
			if !strings.HasPrefix(p.String(), want) {
				t.Errorf("String() = %q, want prefix %q", p.String(), want)
			}
			return
		}
	}
	t.Fatalf("no problem on field %q containing %q; got:\n%v", field, msg, err)
}

// A token-shaped value must never be echoed: not by the token check, and
// not by any other check that would quote the value (a channel check, an
// unknown-key message).
func TestSecretValuesNeverEchoed(t *testing.T) {
	const tok = "xoxb-1111-2222-SECRETSECRET"
	const seed = "SUAMK2FG4MI6UE3ACF3FK3OIQBCEIEZV7NSWFFEW63UXMRLFM2XLAXK4GY"
	yml := "agent: " + tok + "\nlog: [" + tok + "]\napprovals:\n  fourEyes: " + tok + "\n  approvers: " + tok + "\n" + "bot:\n  defaultChannel: " + tok + "\n  routes:\n    - match: {source: " + tok + "}\n      channel: C0123456789\nslack:\n  botToken: " + tok +
		"\n  botTokenEnv: " + tok + "\n  signingSecretEnv: not-a-var-name-but-a-secret\n  " + tok + ": x\nnats:\n  urls: [\"nats://u:" + seed + "@n:4222\"]\n  password: hunter2\n"
	_, err := Parse([]byte(yml), "s.yaml")
	if err == nil {
		t.Fatal("accepted")
	}
	for _, secret := range []string{"SECRETSECRET", seed, "hunter2", "not-a-var-name-but-a-secret"} {
		if strings.Contains(err.Error(), secret) {
			t.Errorf("error echoes a secret %q:\n%v", secret, err)
		}
	}
	if n := len(err.(*Error).Problems); n < 6 {
		t.Errorf("want every secret reported, got %d problems:\n%v", n, err)
	}
}

func TestAllProblemsAtOnce(t *testing.T) {
	yml := `nats:
  streamReplicas: 2
agent:
  source: MGMT
  listen: nope
  bogus: 1
bot:
  defaultChannel: general
slack:
  botTokenEnv: SLACK_BOT_TOKEN
  signingSecretEnv: SLACK_SIGNING_SECRET
digests:
  - name: daily
    schedule: "every day"
    timezone: Mars/Olympus
`
	_, err := Parse([]byte(yml), "many.yaml")
	var perr *Error
	if !errors.As(err, &perr) {
		t.Fatalf("got %v", err)
	}
	want := []string{
		"many.yaml:2: nats.streamReplicas:",
		"many.yaml:4: agent.source:",
		"many.yaml:5: agent.listen:",
		"many.yaml:6: agent.bogus: unknown key",
		"many.yaml:8: bot.defaultChannel:",
		"many.yaml:13: digests[0].channel: is required",
		"many.yaml:14: digests[0].schedule:",
		"many.yaml:15: digests[0].timezone:",
	}
	got := strings.Split(perr.Error(), "\n")
	if len(got) != len(want) {
		t.Fatalf("got %d problems, want %d:\n%v", len(got), len(want), perr)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("problem %d = %q, want prefix %q", i, got[i], want[i])
		}
	}
}

func TestAliasesAndNulls(t *testing.T) {
	yml := "bot:\n  defaultChannel: &main C0123456789\n  routes:\n    - {match: {source: mgmt-1}, channel: *main}\n  storm:\nslack:\n  botTokenEnv: T\n  signingSecretEnv: S\n"
	c, err := Parse([]byte(yml), "a.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Bot.Routes[0].Channel != "C0123456789" || c.Bot.Storm.Threshold != 20 {
		t.Errorf("%+v", c.Bot)
	}
	// An alias to a bad value is reported where it is used.
	_, err = Parse([]byte("bot:\n  defaultChannel: C0123456789\n  routes:\n    - {match: {source: &s Bad_Name}, channel: C0123456789}\n    - {match: {source: *s}, channel: C0123456789}\nslack:\n  botTokenEnv: T\n  signingSecretEnv: S\n"), "a.yaml")
	if err == nil || !strings.Contains(err.Error(), "a.yaml:5: bot.routes[1].match.source") {
		t.Errorf("alias problem not located: %v", err)
	}
}

func TestRouting(t *testing.T) {
	c, err := Parse([]byte(Example), "example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	b := c.Bot
	for _, tc := range []struct {
		source, kind string
		labels       map[string]string
		want         string
	}{
		{"mgmt-1", "operator-crashloop", nil, "C0123456789"},
		{"mgmt-1", "proxy-tunnel", nil, "C0234567890"},
		{"mgmt-2", "proxy-tunnel", map[string]string{"env": "prod"}, "C0999999999"},
		{"mgmt-2", "nodes-notready", map[string]string{"env": "dev"}, "C0123456789"},
		{"mgmt-1", "nodes-notready", nil, "C0123456789"},
	} {
		if got := b.Channel(Incident{Source: tc.source, Namespace: "clusters", Cluster: "example", Kind: tc.kind, Labels: tc.labels}); got != tc.want {
			t.Errorf("Channel(%s, %s, %v) = %s, want %s", tc.source, tc.kind, tc.labels, got, tc.want)
		}
	}
	next := c.Digests[0].Next(time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)) // a Friday
	if want := time.Date(2026, 12, 7, 8, 0, 0, 0, c.Digests[0].Location()); !next.Equal(want) {
		t.Errorf("next daily digest = %v, want %v (Monday 08:00 Berlin)", next, want)
	}
}

// Written tells a value the file gives from a default: a null, or a key
// left out, is the default and not written; a value equal to the default
// is written.
func TestWritten(t *testing.T) {
	c, err := Parse([]byte("nats:\n  streamReplicas: 1\n  eventsMaxAge:\nagent:\n  source: mgmt-1\n"), "a.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for field, want := range map[string]bool{
		"nats.streamReplicas": true, "nats.eventsMaxAge": false, "nats.duplicateWindow": false, "nats": true, "agent.source": true,
	} {
		if got := c.Written(field); got != want {
			t.Errorf("Written(%q) = %v, want %v", field, got, want)
		}
	}
	if c.NATS.EventsMaxAge != DefaultEventsMaxAge {
		t.Errorf("null eventsMaxAge: %v, want the default", c.NATS.EventsMaxAge)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "hcpbot.yaml")
	if err := os.WriteFile(p, []byte(Example), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(p)
	if err != nil || c.File != p {
		t.Fatalf("Load: %v %v", c, err)
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	if err := os.WriteFile(p, []byte("agent:\n  source: x_y\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p); err == nil || !strings.HasPrefix(err.Error(), p+":2: agent.source:") {
		t.Errorf("Load of a bad file: %v", err)
	}
}

func TestSecrets(t *testing.T) {
	const creds = "-----BEGIN NATS USER JWT-----\neyJ0eXAi\n------END NATS USER JWT------\n\n-----BEGIN USER NKEY SEED-----\nSUAxxx\n------END USER NKEY SEED------\n"
	yml := `nats:
  urls: [nats://nats:4222]
  credsEnv: NATS_CREDS
bot:
  defaultChannel: C0123456789
slack:
  botTokenFile: /run/secrets/bot-token
  signingSecretEnv: SLACK_SIGNING_SECRET
  appTokenEnv: SLACK_APP_TOKEN
  socketMode: true
`
	c, err := Parse([]byte(yml), "s.yaml")
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"NATS_CREDS": creds, "SLACK_SIGNING_SECRET": "8f742231b10e8888abcd99yyyzzz85a5", "SLACK_APP_TOKEN": "xapp-1-A0-123-appsecret"}
	files := map[string]string{"/run/secrets/bot-token": "xoxb-1-2-botsecret\n"}
	getenv := func(k string) string { return env[k] }
	readFile := func(p string) ([]byte, error) {
		v, ok := files[p]
		if !ok {
			return nil, &fs.PathError{Op: "open", Path: p, Err: fs.ErrNotExist}
		}
		return []byte(v), nil
	}
	s, err := c.Secrets(getenv, readFile)
	if err != nil {
		t.Fatal(err)
	}
	if s.SlackBotToken != "xoxb-1-2-botsecret" || s.SlackAppToken != "xapp-1-A0-123-appsecret" || s.SlackSigningSecret != env["SLACK_SIGNING_SECRET"] || string(s.NATSCreds) != creds {
		t.Errorf("resolved wrongly: bot %q app %q", s.SlackBotToken, s.SlackAppToken)
	}
	for _, f := range []string{"%v", "%+v", "%#v", "%s"} {
		if out := fmt.Sprintf(f, s); strings.Contains(out, "secret") && !strings.Contains(out, "redacted") || strings.Contains(out, "botsecret") {
			t.Errorf("%s prints secrets: %s", f, out)
		}
	}

	// Missing and malformed: every one named, no value in the error.
	env = map[string]string{"NATS_CREDS": "garbage-creds-value", "SLACK_APP_TOKEN": "xoxb-wrong-kind-tokenvalue"}
	files = map[string]string{}
	_, err = c.Secrets(getenv, readFile)
	if err == nil {
		t.Fatal("resolved with missing secrets")
	}
	msg := err.Error()
	for _, want := range []string{
		// file:line: field: what, in file order.
		"s.yaml:3: nats.credsEnv: env NATS_CREDS is not a NATS .creds file",
		"s.yaml:7: slack.botTokenFile: open /run/secrets/bot-token: file does not exist",
		"s.yaml:8: slack.signingSecretEnv: environment variable SLACK_SIGNING_SECRET is not set or empty",
		"s.yaml:9: slack.appTokenEnv: env SLACK_APP_TOKEN does not hold an app-level token (xapp-…)",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("missing %q in:\n%s", want, msg)
		}
	}
	for _, secret := range []string{"garbage-creds-value", "wrong-kind-tokenvalue"} {
		if strings.Contains(msg, secret) {
			t.Errorf("error echoes a secret value %q:\n%s", secret, msg)
		}
	}

	// An empty file is as missing as a missing one.
	files = map[string]string{"/run/secrets/bot-token": "\n"}
	env = map[string]string{"NATS_CREDS": creds, "SLACK_SIGNING_SECRET": "x", "SLACK_APP_TOKEN": "xapp-1"}
	if _, err := c.Secrets(getenv, readFile); err == nil || !strings.Contains(err.Error(), "slack.botTokenFile: /run/secrets/bot-token is empty") {
		t.Errorf("empty file: %v", err)
	}
}

// With credsFile the NATS client reads the file itself; Secrets only
// checks it.
func TestSecretsNATSCredsFile(t *testing.T) {
	c, err := Parse([]byte("nats:\n  urls: [nats://n:4222]\n  credsFile: /etc/nats.creds\nagent:\n  source: m\n"), "n.yaml")
	if err != nil {
		t.Fatal(err)
	}
	read := func(string) ([]byte, error) {
		return []byte("-----BEGIN NATS USER JWT-----\nx\n-----BEGIN USER NKEY SEED-----\ny\n"), nil
	}
	s, err := c.Secrets(func(string) string { return "" }, read)
	if err != nil || s.NATSCreds != nil || s.SlackBotToken != "" {
		t.Fatalf("%v %v", s, err)
	}
}

// With Socket Mode and no signing secret no Slack listener is opened, so
// bot.listen's port is free for the ops endpoints.
func TestOpsListenSocketModeOnly(t *testing.T) {
	c, err := Parse([]byte("bot:\n  defaultChannel: C0123456789\n  opsListen: \":8081\"\nslack:\n  botTokenEnv: B\n  socketMode: true\n  appTokenEnv: A\n"), "socket.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Bot.OpsListen != ":8081" {
		t.Errorf("opsListen %q", c.Bot.OpsListen)
	}
}

// nkeySeedFile is checked at start (a user seed, not an account's, not
// garbage) and never quoted; the NATS client reads the file itself.
func TestSecretsNATSNkeySeedFile(t *testing.T) {
	c, err := Parse([]byte("nats:\n  urls: [tls://n:4222]\n  nkeySeedFile: /etc/nkey.seed\nagent:\n  source: m\n"), "n.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.NATS.NkeySeedFile != "/etc/nkey.seed" {
		t.Fatalf("nkeySeedFile %q", c.NATS.NkeySeedFile)
	}
	seed := func(kp nkeys.KeyPair) string {
		s, err := kp.Seed()
		if err != nil {
			t.Fatal(err)
		}
		return string(s)
	}
	user, _ := nkeys.CreateUser()
	account, _ := nkeys.CreateAccount()
	for _, tc := range []struct {
		name, content, want string
	}{
		{"user seed", seed(user) + "\n", ""},
		{"account seed", seed(account), "holds a seed of another kind"},
		{"garbage", "SUnot-a-seed", "does not hold an nkey seed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			read := func(p string) ([]byte, error) {
				if p != "/etc/nkey.seed" {
					t.Errorf("read %s", p)
				}
				return []byte(tc.content), nil
			}
			_, err := c.Secrets(func(string) string { return "" }, read)
			switch {
			case tc.want == "" && err != nil:
				t.Fatal(err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want %q", err, tc.want)
			case err != nil && strings.Contains(err.Error(), strings.TrimSpace(tc.content)):
				t.Fatalf("error quotes the file: %v", err)
			}
		})
	}
}

// Fields lists the schema's leaves, read from the decoder's tables: every
// section's fields, list items as [], and no section itself.
func TestFields(t *testing.T) {
	fields := Fields()
	for _, want := range []string{"nats.urls", "nats.credsEnv", "agent.leaderElection.retryPeriod", "bot.routes[].match.kind", "bot.storm.window", "digests[].timezone", "slack.appTokenFile", "log.format",
		"identities.required", "identities.map[].slack", "identities.map[].user", "identities.map[].emailPrefix", "identities.map[].groups", "identities.map[].clusters"} {
		if !slices.Contains(fields, want) {
			t.Errorf("Fields() lacks %s", want)
		}
	}
	for _, section := range []string{"nats", "bot.storm", "bot.routes", "bot.routes[].match", "digests", "identities", "identities.map"} {
		if slices.Contains(fields, section) {
			t.Errorf("Fields() lists the section %s", section)
		}
	}
	if len(fields) < 50 {
		t.Errorf("%d fields: %v", len(fields), fields)
	}
}

// TestRouteKindsAreTheRules: every built-in rule's ID, the issue 18 ones
// included, is an incident kind a route may match.
func TestRouteKindsAreTheRules(t *testing.T) {
	for _, r := range diagnose.DefaultRules() {
		src := botBase + "  routes:\n    - match: {kind: " + r.ID + "}\n      channel: C0123456789\n"
		if _, err := Parse([]byte(src), "routes.yaml"); err != nil {
			t.Errorf("match.kind %s refused: %v", r.ID, err)
		}
	}
}
