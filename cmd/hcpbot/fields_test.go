package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nkeys"
	"github.com/slack-go/slack"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bot"
	"github.com/hcpbot/hcpbot/bot/checkpoint"
	"github.com/hcpbot/hcpbot/bot/digest"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/configs"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv"
	"github.com/hcpbot/hcpbot/internal/testenv/fakeagent"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
	"github.com/hcpbot/hcpbot/internal/testenv/syncbuf"
)

// proof shows at runtime what one or more configuration fields do. Rows
// that share a proof run it once: the first row runs it, the others
// report its result.
type proof struct {
	name string
	run  func(t *testing.T)
}

// fieldRow is a field's runtime proof, or why there is none yet (skip:
// reported as a skipped subtest, never as a pass).
type fieldRow struct {
	proof *proof
	skip  string
}

// Every field of the configuration schema (configs.Fields, read from the
// decoder's own tables) has its effect shown at runtime: `hcpbot bot`,
// `hcpbot agent` or `hcpbot all` started from a config file setting it,
// and what the field changes observed on real parts (the NATS server, the
// API server, the Slack recorder, the listeners, the logs). A field
// without a row fails; so does a row naming a field that does not exist.
func TestConfigFieldsAtRuntime(t *testing.T) {
	rows := fieldRows(t)
	fields := configs.Fields()
	for name := range rows {
		if !slices.Contains(fields, name) {
			t.Errorf("row %s: not a field of the schema (renamed or removed?)", name)
		}
	}
	type result struct {
		field  string
		failed bool
	}
	done := map[*proof]result{}
	for _, field := range fields {
		t.Run(field, func(t *testing.T) {
			row, ok := rows[field]
			switch {
			case !ok:
				t.Fatalf("no runtime proof for %s: add a row to fieldRows", field)
			case row.skip != "":
				t.Skip("not yet shown at runtime: " + row.skip)
			}
			if r, ran := done[row.proof]; ran {
				if r.failed {
					t.Fatalf("%s failed (run under %s)", row.proof.name, r.field)
				}
				t.Logf("shown by %s (run under %s)", row.proof.name, r.field)
				return
			}
			ok = t.Run(row.proof.name, row.proof.run)
			done[row.proof] = result{field, !ok}
		})
	}
}

// fieldRows maps each field to its proof; fixtures shared by several
// proofs live as long as owner.
func fieldRows(owner *testing.T) map[string]fieldRow {
	p := func(name string, run func(t *testing.T)) *proof { return &proof{name, run} }
	var (
		natsCreds    = p("TestBotConfigNATSCreds", TestBotConfigNATSCreds)
		natsNkeyCA   = p("TestBotConfigNATSNkeyAndCA", TestBotConfigNATSNkeyAndCA)
		routes       = p("TestBotRoutesByIncident", TestBotRoutesByIncident)
		npClients    = p("TestBotNoProxyClients", TestBotNoProxyClients)
		allCmd       = p("TestAllCommand", TestAllCommand)
		keys         = p("TestAllAgentEnforcesConfiguredKeys", TestAllAgentEnforcesConfiguredKeys)
		twice        = p("TestAllRequiredApprovals", TestAllRequiredApprovals)
		rotated      = p("TestAllTrustsRotatedKey", TestAllTrustsRotatedKey)
		listeners    = p("TestBotListeners", TestBotListeners)
		socket       = p("TestBotSocketModeReplicasRefuseReplay", TestBotSocketModeReplicasRefuseReplay)
		bf           = &botFixture{owner: owner}
		botStream    = p("bot fixture: events stream", bf.stream)
		eventsStream = p("events stream: the bot's settings and the agent's", bf.eventsStream)
		botStorm     = p("bot fixture: storms and group wait", bf.storms)
		botSlack     = p("bot fixture: Slack token, API and signing secret", bf.slack)
		botDigest    = p("bot fixture: digest", bf.digest)
		botLog       = p("bot fixture: log", bf.log)
		botSigning   = p("bot fixture: signing key", bf.signingKey)
		storeDir     = p("embedded store", proveStoreDir)
		embListen    = p("TestAllEmbeddedListen", TestAllEmbeddedListen)
		botResolve   = p("bot fixture: resolution", bf.resolve)
		botHeal      = p("bot fixture: heal deadline", bf.healDeadline)
		botCkpt      = p("bot fixture: checkpoint schedule", bf.checkpointEvery)
		botApprovals = p("bot fixture: approvals", bf.approvals)
		appTokenFile = p("Socket Mode app token file", proveAppTokenFile)
		matchType    = p("match.type refused", proveMatchTypeRefused)
		af           = &agentFixture{owner: owner}
		agentLease   = p("agent fixture: lease", af.lease)
		agentEvents  = p("agent fixture: events", af.events)
		agentJoin    = p("agent fixture: node join grace", af.joinGrace)
		agentFile    = p("TestAgentCommandConfigFile", TestAgentCommandConfigFile)
		agentRenew   = p("TestAgentStepsDownAfterRenewDeadline", TestAgentStepsDownAfterRenewDeadline)
		agentBuffer  = p("TestAgentBufferEventsFullThenRestated", TestAgentBufferEventsFullThenRestated)
		agentRange   = p("TestAllAgentNodePortRange", TestAllAgentNodePortRange)
		whoami       = p("`/hcp whoami` from the identities", proveWhoami)
		partitions   = p("TestBotPartitionsAtRuntime", TestBotPartitionsAtRuntime)
	)
	return map[string]fieldRow{
		"nats.urls":            {proof: botStream},
		"nats.storeDir":        {proof: storeDir},
		"nats.embeddedListen":  {proof: embListen},
		"nats.credsFile":       {proof: natsCreds},
		"nats.credsEnv":        {proof: natsCreds},
		"nats.nkeySeedFile":    {proof: natsNkeyCA},
		"nats.caFile":          {proof: natsNkeyCA},
		"nats.streamReplicas":  {proof: eventsStream},
		"nats.eventsMaxAge":    {proof: eventsStream},
		"nats.duplicateWindow": {proof: eventsStream},

		"agent.source":                       {proof: agentEvents},
		"agent.kubeconfig":                   {proof: agentEvents},
		"agent.listen":                       {proof: agentEvents},
		"agent.leaderElection.enabled":       {proof: agentLease},
		"agent.leaderElection.namespace":     {proof: agentLease},
		"agent.leaderElection.leaseName":     {proof: agentLease},
		"agent.leaderElection.leaseDuration": {proof: agentLease},
		"agent.leaderElection.retryPeriod":   {proof: agentLease},
		"agent.leaderElection.renewDeadline": {proof: agentRenew},
		"agent.bufferEvents":                 {proof: agentBuffer},
		"agent.hostedProbeInterval":          {proof: agentFile},
		"agent.nodeJoinGrace":                {proof: agentJoin},
		"agent.serviceNodePortRange":         {proof: agentRange},
		"agent.trustedKeys":                  {proof: keys},
		"agent.requireFourEyes":              {proof: keys},
		"agent.approvers":                    {proof: keys},
		"agent.requiredApprovals":            {proof: keys},
		"agent.actionAckWait":                {proof: twice},
		"approvals.required":                 {proof: twice},
		"approvals.trustedKeys":              {proof: rotated},
		"bot.listen":                         {proof: listeners},
		"bot.opsListen":                      {proof: listeners},
		"bot.groupWait":                      {proof: botStorm},
		"bot.groupInterval":                  {proof: botResolve},
		"bot.resolveTimeout":                 {proof: botResolve},
		"bot.healDeadline":                   {proof: botHeal},
		"bot.checkpointEvery":                {proof: botCkpt},
		"bot.storm.threshold":                {proof: botStorm},
		"bot.storm.window":                   {proof: botStorm},
		"bot.routes[].match.source":          {proof: routes},
		"bot.routes[].match.namespace":       {proof: routes},
		"bot.routes[].match.cluster":         {proof: routes},
		"bot.routes[].match.kind":            {proof: routes},
		"bot.routes[].match.type":            {proof: matchType},
		"bot.routes[].selector":              {proof: routes},
		"bot.routes[].channel":               {proof: routes},
		"bot.routes[].noProxyClients":        {proof: npClients},
		"bot.noProxyClients":                 {proof: npClients},
		"bot.defaultChannel":                 {proof: routes},
		// The lease of group 0 of 2 held, one management cluster's
		// events skipped and the other's posted, the map against the
		// hash, HCPBOT_PARTITION over the file.
		"bot.partitions":           {proof: partitions},
		"bot.partition":            {proof: partitions},
		"bot.partitionMap":         {proof: partitions},
		"slack.apiURL":             {proof: botSlack},
		"slack.botTokenEnv":        {proof: listeners},
		"slack.botTokenFile":       {proof: botSlack},
		"slack.signingSecretEnv":   {proof: listeners},
		"slack.signingSecretFile":  {proof: botSlack},
		"slack.socketMode":         {proof: socket},
		"slack.appTokenEnv":        {proof: socket},
		"slack.appTokenFile":       {proof: appTokenFile},
		"approvals.approvers":      {proof: allCmd},
		"approvals.approverGroups": {proof: botApprovals},
		"approvals.fourEyes":       {proof: allCmd},
		"approvals.proposalTTL":    {proof: botApprovals},
		"approvals.signingKeyEnv":  {proof: botSigning},
		"approvals.signingKeyFile": {proof: keys},
		"digests[].name":           {proof: botDigest},
		"digests[].schedule":       {proof: botDigest},
		"digests[].timezone":       {proof: botDigest},
		"digests[].channel":        {proof: botDigest},
		"log.level":                {proof: botLog},
		"log.format":               {proof: botLog},
		// Their effect is the agent acting as the approver
		// (bot/command.TestImpersonationThroughSlackLive,
		// configs/deploy.TestDeployAsShipped, TestDemoScript); here `/hcp
		// whoami` of `hcpbot bot` shows each field read.
		"identities.required":             {proof: whoami},
		"identities.map[].slack":          {proof: whoami},
		"identities.map[].user":           {proof: whoami},
		"identities.map[].emailPrefix":    {proof: whoami},
		"identities.map[].groups":         {proof: whoami},
		"identities.map[].clusters":       {proof: whoami},
		"identities.map[].hostedClusters": {proof: whoami},
	}
}

// botFixture is one `hcpbot bot` from a config file setting every field
// its proofs look at to a value other than the default, on a 3-node NATS
// cluster, started by the first proof that needs it and running until
// TestConfigFieldsAtRuntime ends.
type botFixture struct {
	owner *testing.T
	once  sync.Once

	cluster        *natstest.Cluster
	rec            *slackrec.Recorder
	logs           *syncbuf.Buffer
	slackAddr      string
	secret, token  string
	signingPub     string
	signingSeed    []byte
	published      time.Time
	digestSchedule string
	resolveRef     event.ClusterRef
}

const (
	fpDefault = "C0FPDEF001"
	fpWindow  = "C0FPWIN001"
	fpDigest  = "C0FPDIG001"
	fpResolve = "C0FPRES001"

	fpGroupMember = "U0FPGROUPM"
)

func (f *botFixture) start(t *testing.T) {
	t.Helper()
	f.once.Do(func() {
		owner := f.owner
		f.cluster = natstest.RunCluster(owner, 3)
		f.rec = slackrec.New(owner, slackrec.WithResponse("usergroups.users.list", map[string]any{"ok": true, "users": []string{fpGroupMember}}))
		dir := owner.TempDir()
		f.token, f.secret = "xoxb-0000-fieldproof", "fieldproof-signing-secret"
		write := func(name, v string) string {
			p := filepath.Join(dir, name)
			if err := os.WriteFile(p, []byte(v+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			return p
		}
		kp, err := nkeys.CreateUser()
		if err != nil {
			t.Fatal(err)
		}
		seed, _ := kp.Seed()
		f.signingSeed = seed
		f.signingPub, _ = kp.PublicKey()
		// Fires every 2 s, but only in the hours it is in Kolkata (UTC+5:30):
		// read in UTC it would not fire at all.
		h := time.Now().In(mustLocation(t, "Asia/Kolkata")).Hour()
		f.digestSchedule = fmt.Sprintf("*/2 * %d,%d * * *", h, (h+1)%24)
		f.slackAddr = freeAddr(t)
		ops := freeAddr(t)
		urls := `"` + strings.Join(f.cluster.URLs(), `", "`) + `"`
		f.logs = startModeFor(t, owner, "bot", fmt.Sprintf(`nats:
  urls: [%s]
  streamReplicas: 3
  eventsMaxAge: 2h
  duplicateWindow: 90s
bot:
  listen: %q
  opsListen: %q
  groupWait: 6s
  groupInterval: 5s
  resolveTimeout: 2s
  healDeadline: 3s
  checkpointEvery: 10s
  storm: {threshold: 2, window: 2s}
  routes:
    - match: {namespace: fp-win}
      channel: %s
    - match: {namespace: fp-res}
      channel: %s
  defaultChannel: %s
slack:
  apiURL: %q
  botTokenFile: %s
  signingSecretFile: %s
approvals:
  approvers: [U0FPAPPR01, U0FPAPPR02]
  approverGroups: [S0FPGROUP1]
  proposalTTL: 3h
  signingKeyEnv: TEST_FP_SIGNING_KEY
digests:
  - name: fieldproof
    schedule: %q
    timezone: Asia/Kolkata
    channel: %s
log: {level: debug, format: console}
`, urls, f.slackAddr, ops, fpWindow, fpResolve, fpDefault, f.rec.APIURL(), write("bot-token", f.token), write("signing-secret", f.secret),
			f.digestSchedule, fpDigest), map[string]string{"TEST_FP_SIGNING_KEY": string(seed), "POD_NAME": "fieldproof-0"})
		waitReady(t, ops)

		// Storm A: three clusters behind one proxy within the window → one
		// storm message. B: three behind the same proxy, 3 s apart (more
		// than the 2 s window, less than the default 30 s) → three messages.
		events, err := scenario.Storm("mgmt-fp", "fp-storm", 3, 1, time.Now().Add(-2*time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			es, err := scenario.Storm(fmt.Sprintf("mgmt-fp-%d", i), "fp-win", 1, 1, time.Now().Add(-30*time.Second+time.Duration(i)*3*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			events = append(events, es...)
		}
		// A nodes-notready incident the resolve proof clears.
		f.resolveRef = event.ClusterRef{Namespace: "fp-res", Name: "hc-res"}
		events = append(events, nodesNotReadyEvents(t, "mgmt-fp", f.resolveRef, time.Now())...)
		conn := f.conn(t)
		f.published = time.Now()
		if err := scenario.Publish(context.Background(), conn.JS, events); err != nil {
			t.Fatal(err)
		}
	})
	if f.cluster == nil || f.logs == nil {
		t.Fatal("the bot fixture did not start (see the first proof that used it)")
	}
}

// conn is a client of the fixture's NATS cluster, closed with the test.
func (f *botFixture) conn(t *testing.T) *bus.Conn {
	t.Helper()
	c, err := bus.Connect(context.Background(), bus.Config{URLs: f.cluster.URLs()}, natstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func mustLocation(t *testing.T, name string) *time.Location {
	t.Helper()
	l, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// stream: nats.urls, streamReplicas, eventsMaxAge, duplicateWindow — the
// events stream the bot created on the configured servers has them.
func (f *botFixture) stream(t *testing.T) {
	f.start(t)
	s, err := f.conn(t).JS.Stream(context.Background(), event.StreamName)
	if err != nil {
		t.Fatalf("events stream on the configured cluster: %v", err)
	}
	c := s.CachedInfo().Config
	if c.Replicas != 3 || c.MaxAge != 2*time.Hour || c.Duplicates != 90*time.Second {
		t.Errorf("events stream: replicas %d, max age %s, duplicate window %s; want 3, 2h, 1m30s", c.Replicas, c.MaxAge, c.Duplicates)
	}
	// streamReplicas reaches every stream and bucket the bot owns the same
	// way (bus.WithReplicas through the wiring), none left at 1.
	js := f.conn(t).JS
	for _, name := range []string{bus.AuditStreamName, bus.ActionsStreamName} {
		if s, err := js.Stream(context.Background(), name); err != nil {
			t.Errorf("stream %s: %v", name, err)
		} else if r := s.CachedInfo().Config.Replicas; r != 3 {
			t.Errorf("stream %s: %d replicas, want 3", name, r)
		}
	}
	for _, b := range []string{bus.LeasesBucket, bus.SilencesBucket, bus.ProposalsBucket, bus.SlackMessagesBucket, bus.SlackReplayBucket,
		bus.DigestTicksBucket, bus.DigestStateBucket, bus.ActionResultsBucket, bus.CheckpointsBucket} {
		if s, err := js.Stream(context.Background(), "KV_"+b); err != nil {
			t.Errorf("bucket %s: %v", b, err)
		} else if r := s.CachedInfo().Config.Replicas; r != 3 {
			t.Errorf("bucket %s: %d replicas, want 3", b, r)
		}
	}
}

// eventsStream: nats.streamReplicas, eventsMaxAge, duplicateWindow — the
// bot creates the stream with them (stream); the agent checks the bot's
// against those its file writes, and applies them on its own embedded
// server.
func (f *botFixture) eventsStream(t *testing.T) {
	t.Run("bot fixture", f.stream)
	t.Run("TestAgentChecksTheBotsEventsStream", TestAgentChecksTheBotsEventsStream)
	t.Run("TestAgentEventsStreamOnItsEmbeddedServer", TestAgentEventsStreamOnItsEmbeddedServer)
}

// storms: bot.groupWait (nothing posted before 6 s, more than the default
// 5 s), bot.storm.threshold (3 clusters > 2: one storm message; the
// default 20 would post three) and bot.storm.window (3 clusters 3 s apart
// do not make a storm within 2 s; within the default 30 s they would).
func (f *botFixture) storms(t *testing.T) {
	f.start(t)
	roots := func(ch string) []slackrec.Message {
		var out []slackrec.Message
		for _, m := range f.rec.Messages(ch) {
			if m.ThreadTS == "" || m.ThreadTS == m.TS {
				out = append(out, m)
			}
		}
		return out
	}
	f.rec.WaitFor(t, 60*time.Second, func(r *slackrec.Recorder) bool {
		return len(roots(fpDefault)) >= 1 && len(roots(fpWindow)) >= 3
	})
	if rs := roots(fpDefault); len(rs) != 1 || !strings.Contains(rs[0].Text, "STORM · 3 hosted clusters") {
		t.Errorf("default channel: %d root messages %v, want one storm of 3 clusters", len(rs), texts(rs))
	}
	if rs := roots(fpWindow); len(rs) != 3 || slices.ContainsFunc(rs, func(m slackrec.Message) bool { return strings.Contains(m.Text, "STORM") }) {
		t.Errorf("window channel: %d root messages %v, want three single incidents", len(rs), texts(rs))
	}
	for _, c := range f.rec.CallsTo("chat.postMessage") {
		if (c.Channel == fpDefault || c.Channel == fpWindow) && c.Time.Sub(f.published) < 6*time.Second {
			t.Errorf("posted to %s %s after publishing, before groupWait (6s)", c.Channel, c.Time.Sub(f.published))
		}
	}
}

func texts(ms []slackrec.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Text
	}
	return out
}

// slack: slack.apiURL (the recorder at that address gets the bot's calls),
// slack.botTokenFile (they carry the file's token) and
// slack.signingSecretFile (a command signed with the file's secret is
// answered, one signed with another secret refused).
func (f *botFixture) slack(t *testing.T) {
	f.start(t)
	f.rec.WaitFor(t, 60*time.Second, func(r *slackrec.Recorder) bool { return len(r.CallsTo("chat.postMessage")) > 0 })
	for _, c := range f.rec.CallsTo("chat.postMessage") {
		if c.Form.Get("token") != f.token {
			t.Fatalf("chat.postMessage without the botTokenFile token")
		}
	}
	for secret, want := range map[string]int{f.secret: 200, "another-secret": 401} {
		req, err := slackrec.CommandRequest(context.Background(), "http://"+f.slackAddr+"/slack/commands", secret,
			slack.SlashCommand{Command: "/hcp", Text: "help", UserID: "U0FPAPPR01", ChannelID: fpDefault, ResponseURL: f.rec.ResponseURL(fpDefault)}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("command signed with %s: %d, want %d", map[bool]string{true: "the signingSecretFile secret", false: "another secret"}[secret == f.secret], resp.StatusCode, want)
		}
	}
}

// digest: digests[].name, schedule, timezone and channel — the digest is
// posted to its channel, at ticks named after it, every 2 s of seconds
// field, in hours that are now only in its time zone.
func (f *botFixture) digest(t *testing.T) {
	f.start(t)
	f.rec.WaitFor(t, 60*time.Second, func(r *slackrec.Recorder) bool {
		return len(r.CallsTo("chat.postMessage")) > 0 && len(rootsIn(r, fpDigest)) > 0
	})
	kv, err := f.conn(t).JS.KeyValue(context.Background(), digest.TicksBucket)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kv.Keys(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		name, unix, ok := strings.Cut(k, ".")
		var sec int64
		if _, err := fmt.Sscan(unix, &sec); !ok || err != nil || name != "fieldproof" || sec%2 != 0 {
			t.Errorf("tick %q: want fieldproof.<even unix second>", k)
		}
	}
	if len(keys) == 0 {
		t.Error("no digest tick recorded")
	}
}

func rootsIn(r *slackrec.Recorder, ch string) []slackrec.Message {
	var out []slackrec.Message
	for _, m := range r.Messages(ch) {
		if m.ThreadTS == "" {
			out = append(out, m)
		}
	}
	return out
}

// log: log.level debug shows debug lines; log.format console writes text
// lines, not JSON.
func (f *botFixture) log(t *testing.T) {
	f.start(t)
	testenv.Eventually(t, 30*time.Second, "a debug line", func() bool { return strings.Contains(f.logs.String(), "DBG") })
	for line := range strings.SplitSeq(strings.TrimSpace(f.logs.String()), "\n") {
		if strings.HasPrefix(line, "{") {
			t.Fatalf("a JSON line with log.format console: %s", line)
		}
	}
}

// signingKey: approvals.signingKeyEnv — approved requests are signed with
// the seed in the variable (its public key logged at start).
func (f *botFixture) signingKey(t *testing.T) {
	f.start(t)
	testenv.Eventually(t, 30*time.Second, "the signing key's line", func() bool {
		for line := range strings.SplitSeq(f.logs.String(), "\n") {
			if strings.Contains(line, "signed with the configured key") && strings.Contains(line, f.signingPub) {
				return true
			}
		}
		return false
	})
}

// proveStoreDir: nats.storeDir — the embedded server keeps JetStream in it.
func proveStoreDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	cfg, err := configs.Parse([]byte("nats:\n  storeDir: "+dir+"\nbot:\n  defaultChannel: C0FPSTORE1\nslack:\n  botTokenEnv: T\n  signingSecretEnv: S\n"), "hcpbot.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), natstest.Timeout)
	defer cancel()
	conn, err := connectNATS(ctx, botNATSClient(cfg, nil, "bot"), natstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := bus.EnsureStream(ctx, conn.JS, bus.EventsStream(0, 0)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "jetstream")); !conn.Embedded() || err != nil {
		t.Errorf("embedded %v; JetStream store in %s: %v", conn.Embedded(), dir, err)
	}
}

// proveMatchTypeRefused: bot.routes[].match.type — refused by `config
// check` and by `hcpbot bot` alike, naming match.kind.
func proveMatchTypeRefused(t *testing.T) {
	path := configFile(t, "bot:\n  routes:\n    - match: {type: crashloop}\n      channel: C0FPTYPE01\n  defaultChannel: C0FPTYPE01\nslack:\n  botTokenEnv: T\n  signingSecretEnv: S\n")
	for _, args := range [][]string{{"config", "check", "--config", path}, {"bot", "--config", path}} {
		code, stdout, stderr := run(t, args...)
		if code == 0 || !strings.Contains(stdout+stderr, "bot.routes[0].match.type") || !strings.Contains(stdout+stderr, "match.kind") {
			t.Errorf("hcpbot %s: exit %d, want non-zero naming match.kind:\n%s%s", args[0], code, stdout, stderr)
		}
	}
}

// TestConfigCheckIdentities: `config check` checks the identities section
// as `hcpbot agent` and `hcpbot bot` read it (the same file, no flag):
// a system identity is refused by all three naming the field and line,
// and a valid map passes.
func TestConfigCheckIdentities(t *testing.T) {
	const bad = "identities:\n  required: true\n  map:\n    - slack: U0ALICE123\n      user: alice\n      groups: [\"system:masters\"]\n"
	agentFile := configFile(t, "agent:\n  source: mgmt-1\n"+bad)
	botFile := configFile(t, "bot:\n  defaultChannel: C0IDENT001\nslack:\n  botTokenEnv: T\n  signingSecretEnv: S\n"+bad)
	for _, tc := range []struct {
		args []string
		line int
	}{
		{[]string{"config", "check", "--secrets=false", "--config", agentFile}, 8},
		{[]string{"agent", "--config", agentFile}, 8},
		{[]string{"config", "check", "--secrets=false", "--config", botFile}, 11},
		{[]string{"bot", "--config", botFile}, 11},
	} {
		code, stdout, stderr := run(t, tc.args...)
		want := fmt.Sprintf(":%d: identities.map[0].groups[0]: ", tc.line)
		if out := stdout + stderr; code == 0 || !strings.Contains(out, want) || !strings.Contains(out, "without asking RBAC") {
			t.Errorf("hcpbot %s: exit %d, want non-zero with %q:\n%s", strings.Join(tc.args, " "), code, want, out)
		}
	}
	good := configFile(t, "agent:\n  source: mgmt-1\nidentities:\n  required: true\n  map:\n    - {slack: U0ALICE123, user: alice, clusters: [mgmt-1]}\n    - {slack: S0OPSTEAM1, emailPrefix: \"oidc:\"}\n")
	if code, stdout, stderr := run(t, "config", "check", "--secrets=false", "--config", good); code != 0 {
		t.Errorf("a valid identities section: exit %d\n%s%s", code, stdout, stderr)
	}
}

// agentFixture is one `hcpbot all` whose agent section sets the fields
// its proofs look at, watching a hosted cluster on the real API server.
type agentFixture struct {
	owner *testing.T
	once  sync.Once

	ns, cluster, listen string
	hosted              *testenv.Hosted
	logs                *syncbuf.Buffer
	srv                 *bus.Embedded
}

func (f *agentFixture) start(t *testing.T) {
	t.Helper()
	env.Need(t)
	f.once.Do(func() {
		owner := f.owner
		ns, hosted, _, kubeconfig := allCluster(owner, "fpagent")
		f.ns, f.cluster, f.hosted = ns, "fpagent", hosted
		f.srv = natstest.RunServer(owner)
		rec := slackrec.New(owner)
		f.listen = freeAddr(t)
		f.logs = startModeFor(t, owner, "all", fmt.Sprintf(`nats:
  urls: [%q]
agent:
  source: mgmt-fieldproof
  kubeconfig: %s
  listen: %q
  leaderElection:
    enabled: true
    namespace: %s
    leaseName: fieldproof-lease
    leaseDuration: 8s
    renewDeadline: 5s
    retryPeriod: 3s
  nodeJoinGrace: %s
bot:
  listen: %q
  opsListen: %q
  defaultChannel: C0FPAGENT1
slack:
  apiURL: %q
  botTokenEnv: TEST_SLACK_BOT_TOKEN
  signingSecretEnv: TEST_SLACK_SIGNING_SECRET
`, f.srv.ClientURL(), kubeconfig, f.listen, ns, fpJoinGrace, freeAddr(t), freeAddr(t), rec.APIURL()),
			map[string]string{"TEST_SLACK_BOT_TOKEN": "xoxb-0000-fpagent", "TEST_SLACK_SIGNING_SECRET": "fieldproof-agent-secret", "POD_NAME": fpAgentPod})
	})
	if f.logs == nil {
		t.Fatal("the agent fixture did not start (see the first proof that used it)")
	}
}

const (
	// fpAgentPod is the agent fixture's POD_NAME.
	fpAgentPod = "fpagent-0"
	// fpJoinGrace is its agent.nodeJoinGrace, the shortest allowed.
	fpJoinGrace = 10 * time.Second
)

// lease: agent.leaderElection.enabled, namespace, leaseName,
// leaseDuration and retryPeriod — the agent holds the Lease of that name
// in that namespace, as POD_NAME, with that duration, renewed every 3 s
// (the default would renew every 2 s; a busy machine only makes renewals
// later).
func (f *agentFixture) lease(t *testing.T) {
	f.start(t)
	ctx := context.Background()
	var renewals []time.Time
	testenv.Eventually(t, 90*time.Second, "three renewals of the Lease", func() bool {
		l, err := env.Kube.CoordinationV1().Leases(f.ns).Get(ctx, "fieldproof-lease", metav1.GetOptions{})
		if err != nil || l.Spec.RenewTime == nil || l.Spec.HolderIdentity == nil {
			return false
		}
		// `hcpbot all` names its agent replica POD_NAME, from its own
		// environment (the cli's), not the test process's.
		if *l.Spec.HolderIdentity != fpAgentPod || l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds != 8 {
			t.Fatalf("Lease held by %q for %v s, want %q (POD_NAME) for 8 s", *l.Spec.HolderIdentity, ptrString(l.Spec.LeaseDurationSeconds), fpAgentPod)
		}
		if rt := l.Spec.RenewTime.Time; len(renewals) == 0 || !rt.Equal(renewals[len(renewals)-1]) {
			renewals = append(renewals, rt)
		}
		return len(renewals) >= 4
	})
	for i := 1; i < len(renewals); i++ {
		if d := renewals[i].Sub(renewals[i-1]); d < 2500*time.Millisecond {
			t.Errorf("renewals %s apart, want about retryPeriod 3s (renewals %v)", d, renewals)
		}
	}
}

// events: agent.source, agent.kubeconfig and agent.listen — the agent,
// ready on its listen address, publishes the hosted cluster of the API
// server its kubeconfig names, under its source.
func (f *agentFixture) events(t *testing.T) {
	f.start(t)
	waitReady(t, f.listen)
	conn, err := bus.Connect(context.Background(), bus.Config{URLs: []string{f.srv.ClientURL()}}, natstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	testenv.Eventually(t, 60*time.Second, "the hosted cluster's events under agent.source", func() bool {
		events, _ := streamEvents(t, context.Background(), conn.JS)
		return slices.ContainsFunc(events, func(e event.Event) bool {
			return e.Source == "mgmt-fieldproof" && e.Cluster != nil && e.Cluster.Namespace == f.ns && e.Cluster.Name == f.cluster
		})
	})
}

// joinGrace: agent.nodeJoinGrace — a hosted Node whose kubelet never
// posts status is counted "joining" in the node summary at first, then
// published "not joining" once the 10 s grace since its creation is over,
// and not before (the default 10m would keep it joining, and quiet,
// throughout the test).
func (f *agentFixture) joinGrace(t *testing.T) {
	f.start(t)
	ctx := context.Background()
	conn, err := bus.Connect(ctx, bus.Config{URLs: []string{f.srv.ClientURL()}}, natstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	created := time.Now()
	stuck, err := scenario.CreateNodes(ctx, f.hosted.Kube, "fp-join", 1, "")
	if err != nil {
		t.Fatal(err)
	}
	node, err := f.hosted.Kube.CoreV1().Nodes().Get(ctx, stuck[0], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ref := event.ClusterRef{Namespace: f.ns, Name: f.cluster}
	var notJoining, joining *event.Event
	var last event.NodeSummary
	testenv.Eventually(t, 90*time.Second, "the node published not joining and counted so", func() bool {
		events, _ := streamEvents(t, ctx, conn.JS)
		notJoining, joining = nil, nil
		for _, e := range events {
			if e.Cluster == nil || *e.Cluster != ref {
				continue
			}
			switch p, _ := e.DecodePayload(); p := p.(type) {
			case event.NodeReadiness:
				if p.Node != stuck[0] {
					continue
				}
				if !p.NotJoining {
					t.Fatalf("the joining node published as %+v", p)
				}
				if notJoining == nil {
					notJoining = &e
				}
			case event.NodeSummary:
				if p.Total == 2 && p.Joining == 1 && p.JoinGrace == fpJoinGrace && joining == nil {
					joining = &e
				}
				last = p
			}
		}
		return notJoining != nil && last.Total == 2 && last.NotJoining == 1
	})
	d := notJoining.Time.Sub(created)
	t.Logf("not joining published %s after the node was created (grace %s)", d.Round(10*time.Millisecond), fpJoinGrace)
	// creationTimestamp has whole seconds: it may be up to 1 s before created.
	if notJoining.Time.Before(node.CreationTimestamp.Add(fpJoinGrace)) || d < fpJoinGrace-time.Second {
		t.Errorf("not joining published %s after creation (creationTimestamp %s), before the %s grace", d, node.CreationTimestamp.UTC(), fpJoinGrace)
	}
	if joining == nil || !joining.Time.Before(notJoining.Time) {
		t.Errorf("no summary counting the node joining before it was reported not joining (joining %v)", joining)
	}
}

func ptrString[T any](p *T) string {
	if p == nil {
		return "<nil>"
	}
	return fmt.Sprint(*p)
}

// resolve: bot.resolveTimeout and bot.groupInterval — an incident clear
// for 2 s is resolved (the default 5m would keep it open), and its message
// is updated no sooner than 5 s after it was posted and long before the
// default 1m.
func (f *botFixture) resolve(t *testing.T) {
	f.start(t)
	f.rec.WaitFor(t, 60*time.Second, func(r *slackrec.Recorder) bool { return len(rootsIn(r, fpResolve)) > 0 })
	posted := f.rec.CallsTo("chat.postMessage")
	var first time.Time
	for _, c := range posted {
		if c.Channel == fpResolve {
			first = c.Time
			break
		}
	}
	now := time.Now()
	node := f.resolveRef.Name + "-np-0"
	nr := event.NodeReadiness{Node: node, Ready: event.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status", LastTransitionTime: now}
	e, err := event.New("mgmt-fp", &f.resolveRef, event.ObjectRef{Kind: "Node", Name: node, UID: "uid-" + node, Hosted: true}, nr, event.TransitionAt("Ready=True", now), now)
	if err != nil {
		t.Fatal(err)
	}
	if err := scenario.Publish(context.Background(), f.conn(t).JS, []event.Event{e}); err != nil {
		t.Fatal(err)
	}
	var resolved time.Time
	f.rec.WaitFor(t, 50*time.Second, func(r *slackrec.Recorder) bool {
		for _, c := range r.CallsTo("chat.update") {
			if c.Channel == fpResolve && strings.Contains(c.Form.Get("text"), "RESOLVED") {
				resolved = c.Time
				return true
			}
		}
		return false
	})
	if d := resolved.Sub(now); d < 2*time.Second {
		t.Errorf("resolved %s after the clear, before resolveTimeout (2s)", d)
	}
	// The recorder stamps a call when it arrives, the bot its interval
	// before sending: allow for the first post's transit.
	if d := resolved.Sub(first); d < 4*time.Second || d > 50*time.Second {
		t.Errorf("resolution posted %s after the first message, want about groupInterval (5s) or more, well under the default 1m", d)
	}
}

// checkpointEvery: bot.checkpointEvery — the running leader writes a
// checkpoint every 10 s, each sealed with the bot's key: two generations
// appear in the bucket while it runs, 10 s apart (the default 1h would
// write none before its shutdown).
func (f *botFixture) checkpointEvery(t *testing.T) {
	f.start(t)
	ctx := context.Background()
	signer, err := approval.NewSigner(f.signingSeed)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := f.conn(t).JS.KeyValue(ctx, bus.CheckpointsBucket)
	if err != nil {
		t.Fatal(err)
	}
	store, err := checkpoint.New(kv, signer.ForCheckpoints())
	if err != nil {
		t.Fatal(err)
	}
	var first, next checkpoint.Manifest
	testenv.Eventually(t, 60*time.Second, "a checkpoint written while the bot runs", func() bool {
		m, _, err := store.Load(ctx, bot.DefaultCheckpointName)
		first = m
		return err == nil
	})
	testenv.Eventually(t, 40*time.Second, "the next checkpoint", func() bool {
		m, _, err := store.Load(ctx, bot.DefaultCheckpointName)
		next = m
		return err == nil && m.Generation != first.Generation
	})
	if d := next.Written.Sub(first.Written); d < 9*time.Second || d > 30*time.Second {
		t.Errorf("checkpoints written %s apart, want about 10s (%s, then %s)", d, first.Written, next.Written)
	}
}

// healDeadline: bot.healDeadline — a fix executed on an incident that does
// not heal is "not healed" 3 s after it ran (the default 30m would keep it
// "rolling out"), with the rollback offered. The fix is written to the
// proposals bucket as another bot replica would (sealed with the bot's
// key), and the bot learns it from there.
func (f *botFixture) healDeadline(t *testing.T) {
	f.start(t)
	ctx := context.Background()
	f.rec.WaitFor(t, 60*time.Second, func(r *slackrec.Recorder) bool {
		for _, m := range rootsIn(r, fpWindow) {
			if strings.Contains(m.Text, "mgmt-fp-1/fp-win/hc-0") {
				return true
			}
		}
		return false
	})
	conn := f.conn(t)
	log, err := audit.Open(ctx, conn.JS, audit.WithReplicas(3))
	if err != nil {
		t.Fatal(err)
	}
	signer, err := approval.NewSigner(f.signingSeed)
	if err != nil {
		t.Fatal(err)
	}
	// Another bot replica (same key) and an agent of mgmt-fp-1 that
	// reports the fix applied without touching the cluster: the fix does
	// not heal it.
	flow, err := approval.NewFlow(ctx, conn.JS, approval.Config{Signer: signer, Trail: log, Replicas: 3, Log: natstest.Logger(t),
		Policy: approval.Policy{Approvers: []string{"U0FPAPPR01", "U0FPAPPR02"}, FourEyes: true}})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	flowDone := make(chan struct{})
	go func() { defer close(flowDone); _ = flow.Run(rctx) }()
	t.Cleanup(func() { stop(); <-flowDone })
	fakeagent.Serve(t, f.conn(t).JS, "mgmt-fp-1", signer.PublicKey(), &fakeagent.Executor{})
	req := actions.Change{Type: actions.TypeNoProxyPatch, Cluster: actions.ClusterRef{Namespace: "fp-win", Name: "hc-0"},
		NoProxy: &actions.NoProxyParams{Target: actions.TargetHostedCluster, Expected: scenario.SeedNoProxy, Add: []string{"kubernetes", "172.31.0.0/16", "10.132.0.0/14"}}}
	p, err := flow.Propose(ctx, req, "U0FPAPPR01", approval.ForSource("mgmt-fp-1"),
		approval.ForDiagnosis("proxy-tunnel", "API traffic of fp-win/hc-0 on mgmt-fp-1 is tunnelled through the HTTPS proxy", "The noProxy of fp-win/hc-0 lacks kubernetes."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := flow.Approve(ctx, p.ID, "U0FPAPPR02"); err != nil {
		t.Fatal(err)
	}
	// The outcome is recorded by whichever replica wins (this flow or the
	// bot's own, which shares the store): read it from the store, not
	// from OnOutcome, which only the winner calls.
	var executed approval.Proposal
	testenv.Eventually(t, 60*time.Second, "the fix executed", func() bool {
		got, err := flow.Get(ctx, p.ID)
		if err == nil && got.State != approval.StateApproved && got.State != approval.StatePending {
			executed = got
			return true
		}
		return false
	})
	if executed.State != approval.StateExecuted {
		t.Fatalf("fix %s: %s", executed.State, executed.Reason)
	}
	var notHealed time.Time
	f.rec.WaitFor(t, 60*time.Second, func(r *slackrec.Recorder) bool {
		for _, c := range r.CallsTo("chat.update") {
			if c.Channel == fpWindow && strings.Contains(c.Form.Get("text"), "NOT HEALED") && strings.Contains(c.Form.Get("blocks"), p.ID) {
				notHealed = c.Time
				return true
			}
		}
		return false
	})
	if d := notHealed.Sub(executed.ExecutedAt); d < 3*time.Second {
		t.Errorf("not healed %s after the fix ran, before healDeadline (3s)", d)
	}
}

// approvals: approvals.proposalTTL (a proposed fix expires 3 h from now,
// not the default 1 h) and approvals.approverGroups (a member of the
// group may approve; someone in neither list may not).
func (f *botFixture) approvals(t *testing.T) {
	f.start(t)
	ctx := context.Background()
	hcp := slashCommander{t: t, url: "http://" + f.slackAddr + "/slack/commands", secret: f.secret, channel: fpDefault, rec: f.rec}
	var id, reply string
	testenv.Eventually(t, 60*time.Second, "noProxy fix proposed", func() bool {
		before := time.Now()
		reply = hcp.run(ctx, "fix noproxy fp-storm/hc-0", "U0FPAPPR01", func(s string) bool {
			return actionIDPattern.MatchString(s) || strings.Contains(s, "No noProxy fix") || strings.Contains(s, "Unknown cluster")
		})
		if id = actionIDPattern.FindString(reply); id == "" {
			return false
		}
		after := time.Now()
		if !strings.Contains(reply, before.Add(3*time.Hour).UTC().Format("15:04 UTC")) && !strings.Contains(reply, after.Add(3*time.Hour).UTC().Format("15:04 UTC")) {
			t.Errorf("proposal reply does not expire in 3h (%s): %q", before.Add(3*time.Hour).UTC().Format("15:04 UTC"), reply)
		}
		return true
	})
	decided := func(s string) bool { return strings.Contains(s, id) }
	if r := hcp.run(ctx, "approve "+id, "U0FPSTRANG", decided); !strings.Contains(r, "not allowed") {
		t.Errorf("approval by someone in no list: %q", r)
	}
	if r := hcp.run(ctx, "approve "+id, fpGroupMember, decided); strings.Contains(r, "not allowed") {
		t.Errorf("approval by a member of approverGroups refused: %q", r)
	}
}

// proveAppTokenFile: slack.appTokenFile — in Socket Mode the bot opens its
// connection with the token in the file.
func proveAppTokenFile(t *testing.T) {
	srv := natstest.RunServer(t)
	rec := slackrec.New(t)
	const token = "xapp-1-A0-fieldproof-file"
	file := filepath.Join(t.TempDir(), "app-token")
	if err := os.WriteFile(file, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ops := freeAddr(t)
	startBot(t, fmt.Sprintf(`nats:
  urls: [%q]
bot:
  opsListen: %q
  defaultChannel: C0FPAPPT01
slack:
  apiURL: %q
  botTokenEnv: TEST_SLACK_BOT_TOKEN
  socketMode: true
  appTokenFile: %s
`, srv.ClientURL(), ops, rec.APIURL(), file), map[string]string{"TEST_SLACK_BOT_TOKEN": "xoxb-0000-apptoken"})
	rec.Socket(t, token, 60*time.Second)
	waitReady(t, ops) // stopped only once started
}

// proveWhoami: identities.required, identities.map[].slack, user,
// emailPrefix, groups, clusters and hostedClusters — `hcpbot bot` with an identities
// section answers `/hcp whoami` per management cluster it has events from:
// a person's own entry on the cluster it names, a Slack user group's
// entry making the user of the prefix and the member's Slack e-mail (from
// users.info), its groups, and for someone unmapped, with required, that
// the agent will not act on their approval.
func proveWhoami(t *testing.T) {
	srv := natstest.RunServer(t)
	rec := slackrec.New(t)
	rec.AddUser(slackrec.User{ID: "U0WHOALICE", Name: "alice", Email: "alice@corp.example"})
	rec.AddUser(slackrec.User{ID: "U0WHOCAROL", Name: "carol", Email: "carol@corp.example"})
	rec.SetUserGroup("S0WHOOPSTM", "U0WHOALICE")
	const secret = "whoami-signing-secret"
	slackAddr, ops := freeAddr(t), freeAddr(t)
	startBot(t, fmt.Sprintf(`nats:
  urls: [%q]
bot:
  listen: %q
  opsListen: %q
  defaultChannel: C0WHOAMI01
slack:
  apiURL: %q
  botTokenEnv: TEST_SLACK_BOT_TOKEN
  signingSecretEnv: TEST_SLACK_SIGNING_SECRET
identities:
  required: true
  map:
    - slack: U0WHOALICE
      user: alice
      groups: [platform-ops]
      clusters: [mgmt-who-a]
      hostedClusters: [clusters/who-1]
    - slack: S0WHOOPSTM
      emailPrefix: "oidc:"
      groups: [ops]
`, srv.ClientURL(), slackAddr, ops, rec.APIURL()), map[string]string{"TEST_SLACK_BOT_TOKEN": "xoxb-0000-whoami", "TEST_SLACK_SIGNING_SECRET": secret})
	waitReady(t, ops)
	ctx := context.Background()
	conn, err := bus.Connect(ctx, bus.Config{URLs: []string{srv.ClientURL()}}, natstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, source := range []string{"mgmt-who-a", "mgmt-who-b"} {
		events, err := scenario.Storm(source, "who", 1, 1, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if err := scenario.Publish(ctx, conn.JS, events); err != nil {
			t.Fatal(err)
		}
	}
	hcp := slashCommander{t: t, url: "http://" + slackAddr + "/slack/commands", secret: secret, channel: "C0WHOAMI01", rec: rec}
	var alice string
	testenv.Eventually(t, 60*time.Second, "whoami naming both management clusters", func() bool {
		alice = hcp.run(ctx, "whoami", "U0WHOALICE", func(s string) bool { return s != "" })
		return strings.Contains(alice, "`mgmt-who-a`") && strings.Contains(alice, "`mgmt-who-b`")
	})
	t.Logf("alice:\n%s", alice)
	for _, want := range []string{
		"• `mgmt-who-a`: user `alice`, groups `platform-ops` — identities.map[0] (your user ID); in hosted clusters `clusters/who-1` too",
		"• `mgmt-who-b`: user `oidc:alice@corp.example`, groups `ops` — identities.map[1] (the Slack user group `S0WHOOPSTM`)",
		"identities.required is on",
	} {
		if !strings.Contains(alice, want) {
			t.Errorf("alice's whoami lacks %q", want)
		}
	}
	carol := hcp.run(ctx, "whoami", "U0WHOCAROL", func(s string) bool { return s != "" })
	if !strings.Contains(carol, "• `mgmt-who-a`: no identity: with identities.required the agent will not act on your approval there") {
		t.Errorf("carol's whoami:\n%s", carol)
	}
}
