package digest_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bot"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/bot/digest"
	"github.com/hcpbot/hcpbot/bot/notify"
	"github.com/hcpbot/hcpbot/bot/silence"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/internal/scenario"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
	"github.com/hcpbot/hcpbot/noproxy"
	"github.com/hcpbot/hcpbot/watchers"
)

const (
	digestChannel = "C0DIGEST01"
	password      = "s3cr3t"
)

// syncBuffer is a bytes.Buffer the console notifier may write while the
// test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// replica is one bot process: its own NATS connection, bot model (fed
// from the events stream), Slack notifier and digest runner.
type replica struct {
	bot       *bot.Bot
	runner    *digest.Runner
	proposals *approval.Flow
	silences  *silence.Store
}

// Slack-like user ids of the expose and the silence.
const (
	requester = "U0REQ0001"
	approver  = "U0APP0001"
	operator  = "U0OPS0001"
)

// The done-when test: real API servers, the real agent, embedded NATS.
// Three hosted clusters — compliant, missing `kubernetes` and the service
// CIDR, https:// proxy with credentials — give the expected findings (and a proxy CA expiring in 10 days: a
// proactive finding); two
// replicas firing the same tick post one digest; the password appears in
// no Slack call and no console line. An executed NodePort expose (with who
// and when) and an active silence are in the digest of their clusters; an
// exposure rolled back is not.
func TestDigestThreeClusters(t *testing.T) {
	env.Need(t)
	ctx, cancel := context.WithCancel(context.Background())
	ns := env.Namespace(t)
	source := "mgmt-" + ns

	good := scenario.Healthy(ns, "good")
	good.HTTPProxy, good.HTTPSProxy = "http://proxy.corp.example:3128", "http://proxy.corp.example:3128"
	good.NoProxy = "kubernetes,.svc,.cluster.local,localhost,127.0.0.1,172.31.0.0/16,10.132.0.0/14"
	missing := scenario.BehindProxy(ns, "missing")
	creds := scenario.Healthy(ns, "creds")
	creds.HTTPProxy = "http://proxy.corp.example:3128"
	creds.HTTPSProxy = "https://user:" + password + "@proxy.corp.example:3128"
	creds.NoProxy = good.NoProxy
	// missing's proxy CA expires in 10 days: a proactive finding.
	if err := scenario.SetTrustedCA(ctx, env.Kube, ns, missing.TrustedCA, "Corp Proxy CA", time.Now().Add(10*24*time.Hour+time.Hour)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []scenario.Cluster{good, missing, creds} {
		env.HostedCluster(t, c)
	}

	srv := natstest.RunServer(t)
	log := natstest.Logger(t)
	rec := slackrec.New(t)
	ds := digests(t, "  - {name: daily, schedule: '0 0 8 * * *', timezone: Europe/Berlin, channel: "+digestChannel+"}\n")
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })

	connect := func() *bus.Conn {
		conn, err := bus.Connect(ctx, bus.Config{URLs: []string{srv.ClientURL()}}, log)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(conn.Close)
		return conn
	}
	agentConn := connect()
	if _, err := bus.EnsureStream(ctx, agentConn.JS, bus.EventsStream(0, 0)); err != nil {
		t.Fatal(err)
	}
	m := watchers.NewMetrics(nil)
	pub := watchers.NewJetStreamPublisher(agentConn.JS, 1000, m, log)
	kf, df := informers.NewSharedInformerFactory(env.Kube, 0), dynamicinformer.NewDynamicSharedInformerFactory(env.Dynamic, 0)
	agent, err := watchers.New(watchers.Config{Source: source, SnapshotWait: 10 * time.Second}, env.Kube, kf, df, pub, m, log)
	if err != nil {
		t.Fatal(err)
	}
	kf.Start(ctx.Done())
	df.Start(ctx.Done())
	wg.Go(func() { pub.Run(ctx) })
	wg.Go(func() { _ = agent.Run(ctx) })

	// The bot's key, the same on every replica; the agent of source
	// trusts it and answers the exposures the test approves.
	signer, err := approval.NewEphemeralSigner()
	if err != nil {
		t.Fatal(err)
	}
	wg.Go(func() {
		_ = approval.Serve(ctx, agentConn.JS, approval.AgentConfig{Source: source, Executor: exposer{}, Log: log,
			Trust: approval.Trust{Keys: []string{signer.PublicKey()}, FourEyes: true}})
	})
	startReplica := func(out notify.Notifier, mode digest.Mode) replica {
		conn := connect()
		b := bot.New(bot.Config{Channel: "C0INCIDENTS"}, conn.JS, out, nil, log)
		// Each replica has its own proposal and silence stores on the
		// shared buckets, as in the bot.
		auditLog, err := audit.Open(ctx, conn.JS)
		if err != nil {
			t.Fatal(err)
		}
		props, err := approval.NewFlow(ctx, conn.JS, approval.Config{Signer: signer, Trail: auditLog, Log: log,
			Policy: approval.Policy{Approvers: []string{requester, approver}, FourEyes: true}})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { _ = props.Run(ctx) })
		sils, err := silence.NewStore(ctx, conn.JS, auditLog)
		if err != nil {
			t.Fatal(err)
		}
		r, err := digest.NewRunner(ctx, conn.JS, digest.Config{Digests: ds, Bot: b, Out: out, Mode: mode, Log: log,
			Exposures: props, Silences: sils,
			// This fleet runs no urllib: its CIDR-only noProxy is compliant.
			ClientsOf: func(diagnose.Key, map[string]string) []noproxy.Client { return goCurlRequests }})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { _ = out.Run(ctx) })
		wg.Go(func() { _ = b.Run(ctx) })
		wg.Go(func() { _ = sils.Run(ctx) })
		return replica{bot: b, runner: r, proposals: props, silences: sils}
	}
	slackReplica := func() replica {
		conn := connect()
		store, err := notify.NewKVStore(ctx, conn.JS, notify.KVConfig{})
		if err != nil {
			t.Fatal(err)
		}
		n, err := notify.NewSlack(notify.SlackConfig{Client: notify.NewSlackClient("xoxb-test", rec.APIURL(), nil), Store: store, Log: log})
		if err != nil {
			t.Fatal(err)
		}
		return startReplica(n, digest.Compact)
	}
	replicas := []replica{slackReplica(), slackReplica()}
	console := &syncBuffer{}
	consoleReplica := startReplica(notify.NewConsole(console), digest.Full)

	// Wait until every replica's model holds the three proxy specs.
	for _, r := range append(replicas, consoleReplica) {
		waitClusters(t, r.bot, ns, 3)
	}

	// An expose of the `missing` cluster's Service, approved and executed
	// (the result as the executor reports it); a second one rolled back.
	// A silence of `good`, added on one replica, with a password in its
	// reason.
	exposed := expose(ctx, t, replicas[0].proposals, source, ns, "web", 30080, false)
	rolledBack := expose(ctx, t, replicas[0].proposals, source, ns, "gone", 30081, true)
	sil, err := replicas[0].silences.Add(ctx, silence.Silence{
		Cluster: source + "/" + ns + "/good", CreatedBy: operator, ExpiresAt: time.Now().Add(48 * time.Hour),
		Reason: "proxy migration, see http://ops:" + password + "@wiki.corp.example",
	})
	if err != nil {
		t.Fatal(err)
	}
	// The other replicas follow the silence through the bucket's watch.
	for _, r := range append(replicas, consoleReplica) {
		deadline := time.Now().Add(10 * time.Second)
		for len(r.silences.Active(time.Now())) == 0 {
			if time.Now().After(deadline) {
				t.Fatal("a replica never saw the silence")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	// Both Slack replicas fire the same tick at once.
	fireOnce(ctx, t, ds[0], ds[0].Next(time.Now()), replicas[0].runner, replicas[1].runner)

	// Summary plus one thread reply per non-compliant cluster (missing, creds).
	var root slackrec.Message
	rec.WaitFor(t, 30*time.Second, func(r *slackrec.Recorder) bool {
		for _, m := range r.Messages(digestChannel) {
			if m.ThreadTS == "" {
				root = m
			}
		}
		if root.TS == "" {
			return false
		}
		th := threadOf(r, root.TS, ns)
		return th["missing"] != "" && th["creds"] != "" && th["good"] != ""
	})
	time.Sleep(time.Second) // a duplicate post, if any, would land now
	roots := 0
	for _, m := range rec.Messages(digestChannel) {
		if m.ThreadTS == "" {
			roots++
		}
	}
	if roots != 1 {
		t.Errorf("%d digest roots in the channel, want 1", roots)
	}
	summary := root.Text + string(root.Blocks)
	// Other tests' clusters may be listed too; ours must be counted right.
	for _, want := range []string{"needs action", "`" + ns + "/creds` (2)", "`" + ns + "/missing`", "🔕 1 silence", "🔌 1 NodePort exposure"} {
		if !strings.Contains(summary, want) {
			t.Errorf("summary lacks %q: %s", want, summary)
		}
	}
	if strings.Contains(summary, ns+"/good") {
		t.Errorf("summary lists the compliant cluster: %s", summary)
	}
	thread := threadOf(rec, root.TS, ns)
	// Slack calls carry the blocks as JSON, with < and > escaped.
	inJSON := strings.NewReplacer("<", `\u003c`, ">", `\u003e`).Replace
	// The compliant cluster has a reply only for its silence.
	if g := thread["good"]; !strings.Contains(g, "✅ compliant") || !strings.Contains(g, inJSON("🔕 Silenced cluster `"+source+"/"+ns+"/good` by <@"+operator+"> until ")) ||
		!strings.Contains(g, "proxy migration") {
		t.Errorf("good thread reply lacks its silence: %s", g)
	}
	exposure := "🔌 NodePort exposure of Service `shop/web` (8080→30080/TCP), requested by <@" + requester + ">, approved by <@" + approver + ">, executed " +
		exposed.ExecutedAt.UTC().Format(time.RFC3339) + " (`" + exposed.ID + "`)"
	if !strings.Contains(thread["missing"], inJSON(exposure)) {
		t.Errorf("missing thread lacks the exposure %q: %s", exposure, thread["missing"])
	}
	if strings.Contains(thread["missing"], rolledBack.ID) {
		t.Errorf("rolled-back exposure %s in the thread: %s", rolledBack.ID, thread["missing"])
	}
	expect := map[string][]string{
		"missing": {noproxy.CodeMissingKubernetes, noproxy.CodeMissingServiceCIDR, diagnose.WarnTrustedCAExpiring},
		"creds":   {noproxy.CodeCredentialsInProxyURL, noproxy.CodeHTTPSProxyWithoutTrustedCA},
	}
	for name, want := range expect {
		for _, code := range want {
			if !strings.Contains(thread[name], code) {
				t.Errorf("%s thread lacks %s: %q", name, code, thread[name])
			}
		}
	}

	// The findings themselves, from the model every replica built.
	d := digest.Build(time.Now(), digest.Input{Clients: goCurlRequests, Clusters: inputs(replicas[0].bot)})
	for _, s := range d.Sources {
		for _, c := range s.Clusters {
			if c.Key.Cluster.Namespace != ns {
				continue
			}
			got := codes(c)
			switch c.Key.Cluster.Name {
			case "good":
				if len(c.Findings) != 0 {
					t.Errorf("good: findings %v", got)
				}
			default:
				for _, code := range expect[c.Key.Cluster.Name] {
					if !got[code] {
						t.Errorf("%s: findings %v, want %s", c.Key.Cluster.Name, got, code)
					}
				}
			}
		}
	}

	// Console: complete, every cluster.
	if _, err := consoleReplica.runner.DigestNow(ctx); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"good", "missing", "creds"} {
		waitText(t, console, "*"+ns+"/"+name+"*", 10*time.Second)
	}
	out := console.String()
	for _, want := range []string{ns + "/good", ns + "/missing", ns + "/creds", noproxy.CodeMissingKubernetes, noproxy.CodeCredentialsInProxyURL, "fix:",
		exposure, "created Service shop/hcpbot-" + exposed.ID + " (hosted cluster)", "🔕 Silenced cluster `" + source + "/" + ns + "/good`", "`" + sil.ID + "`"} {
		if !strings.Contains(out, want) {
			t.Errorf("console digest lacks %q:\n%s", want, out)
		}
	}
	t.Logf("console digest:\n%s", out)

	// The password is nowhere: not in any Slack call, not on the console.
	for _, c := range rec.Calls() {
		if strings.Contains(fmt.Sprintf("%v %v", c.Form, c.JSON), password) {
			t.Errorf("Slack call %s carries the proxy password", c.Method)
		}
	}
	if strings.Contains(out, password) {
		t.Error("console digest carries the proxy password")
	}
	if strings.Contains(out, rolledBack.ID) {
		t.Errorf("rolled-back exposure %s on the console", rolledBack.ID)
	}
}

// expose proposes an expose of Service shop/<svc> on cluster ns/missing
// of source and approves it; the agent answers with what the executor
// reports (exposer), and the flow records it. rollBack rolls it back as
// well, approved likewise.
func expose(ctx context.Context, t *testing.T, f *approval.Flow, source, ns, svc string, nodePort int32, rollBack bool) approval.Proposal {
	t.Helper()
	ref := actions.ClusterRef{Namespace: ns, Name: "missing"}
	p, err := f.Propose(ctx, actions.Change{Type: actions.TypeExposeNodePort, Cluster: ref,
		Expose: &actions.ExposeParams{Namespace: "shop", Service: svc, Ports: []actions.ExposePort{{Port: 8080, NodePort: nodePort}}}}, requester, approval.ForSource(source))
	if err != nil {
		t.Fatal(err)
	}
	decided := func(id string, want approval.State) approval.Proposal {
		t.Helper()
		if _, err := f.Approve(ctx, id, approver); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			got, err := f.Get(ctx, p.ID)
			if err == nil && got.State == want {
				return got
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s is %s (%v), want %s", p.ID, got.State, err, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	p = decided(p.ID, approval.StateExecuted)
	if rollBack {
		rb, _, err := f.ProposeRollback(ctx, p.ID, requester)
		if err != nil {
			t.Fatal(err)
		}
		p = decided(rb.ID, approval.StateRolledBack)
	}
	return p
}

// exposer is the cluster side of the agent for the exposures of the
// digest: it reports what the executor would (no cluster is touched).
type exposer struct{}

func (exposer) Execute(_ context.Context, ch actions.Change) (*actions.Result, error) {
	if ch.Type == actions.TypeRollback {
		return &actions.Result{ActionID: ch.Rollback.Undo.ActionID, Type: actions.TypeRollback, Outcome: actions.OutcomeRolledBack, Summary: "deleted the Services"}, nil
	}
	name := "hcpbot-" + ch.ID
	nodePort := ch.Expose.Ports[0].NodePort
	return &actions.Result{
		ActionID: ch.ID, Type: actions.TypeExposeNodePort, Outcome: actions.OutcomeApplied,
		Summary: fmt.Sprintf("Exposed hosted Service shop/%s on NodePort %d", ch.Expose.Service, nodePort),
		Created: []actions.ObjectRef{
			{Cluster: actions.ClusterHosted, Kind: "Service", Namespace: "shop", Name: name},
			{Cluster: actions.ClusterManagement, Kind: "Service", Namespace: ch.Cluster.Namespace + "-missing", Name: name},
		},
		Ports:     []actions.ExposedPort{{Name: "http", Protocol: "TCP", Port: 8080, NodePort: nodePort}},
		Endpoints: []string{fmt.Sprintf("127.0.0.1:%d", nodePort)},
		Undo:      &actions.Undo{ActionID: ch.ID, Type: actions.TypeExposeNodePort, Cluster: ch.Cluster, Expose: &actions.ExposeUndo{HostedNamespace: "shop"}},
	}, nil
}

func (exposer) Observe(context.Context, actions.Change) (*actions.Result, bool, error) {
	return nil, false, nil
}

func (exposer) RecordEvent(context.Context, actions.Change, *actions.Result, actions.Actors) error {
	return nil
}

func inputs(b *bot.Bot) []digest.Cluster {
	var out []digest.Cluster
	for _, s := range b.ClusterStates() {
		out = append(out, digest.Cluster{Key: s.Key, HostedCluster: s.HostedCluster, Diagnoses: s.Diagnoses})
	}
	return out
}

// waitClusters waits for n clusters of namespace ns with a proxy and
// networks; the agent also sees the clusters of earlier tests.
func waitClusters(t *testing.T, b *bot.Bot, ns string, n int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		withProxy := 0
		for _, s := range b.ClusterStates() {
			if s.Key.Cluster.Namespace == ns && s.Known && s.HostedCluster.Proxy.HTTPSProxy != "" && len(s.HostedCluster.ServiceNetwork) > 0 {
				withProxy++
			}
		}
		if withProxy == n {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	var keys []diagnose.Key
	for _, s := range b.ClusterStates() {
		keys = append(keys, s.Key)
	}
	t.Fatalf("bot knows %v, want %d clusters with a proxy and networks", keys, n)
}

func waitText(t *testing.T, b *syncBuffer, want string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !strings.Contains(b.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("console never showed %q:\n%s", want, b.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// threadOf collects the digest thread's replies about the clusters of ns,
// by cluster name.
func threadOf(r *slackrec.Recorder, ts, ns string) map[string]string {
	thread := map[string]string{}
	for _, m := range r.Thread(digestChannel, ts) {
		for _, name := range []string{"good", "missing", "creds"} {
			if strings.Contains(m.Text+string(m.Blocks), ns+"/"+name+"*") {
				thread[name] += m.Text + string(m.Blocks)
			}
		}
	}
	return thread
}
