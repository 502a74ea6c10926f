package deploy_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/approval/wire"
	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/bot/checkpoint"
	botcmd "github.com/hcpbot/hcpbot/bot/command"
	"github.com/hcpbot/hcpbot/bot/digest"
	"github.com/hcpbot/hcpbot/bot/notify"
	"github.com/hcpbot/hcpbot/bot/silence"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/testenv"
	"github.com/hcpbot/hcpbot/internal/testenv/fakeagent"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/internal/testenv/syncbuf"
	"github.com/hcpbot/hcpbot/watchers"
)

// renderedNATS is what the nats kustomization gives a server: its config
// file, the public keys' environment and where the TLS Secret is mounted.
type renderedNATS struct {
	conf   string            // nats.conf as rendered
	nkeys  map[string]string // the nkeys ConfigMap (placeholders)
	tlsDir string            // mount path of the Secret nats-tls
}

func renderNATS(t *testing.T) renderedNATS {
	t.Helper()
	objs := render(t, "nats")
	var r renderedNATS
	r.conf, _, _ = unstructured.NestedString(find(t, objs, "ConfigMap", "nats-config").Object, "data", "nats.conf")
	keys := find(t, objs, "ConfigMap", "nats-nkeys")
	r.nkeys, _, _ = unstructured.NestedStringMap(keys.Object, "data")
	sts := as[appsv1.StatefulSet](t, find(t, objs, "StatefulSet", "nats"))
	c := sts.Spec.Template.Spec.Containers[0]
	if !slices.ContainsFunc(c.EnvFrom, func(e corev1.EnvFromSource) bool {
		return e.ConfigMapRef != nil && e.ConfigMapRef.Name == keys.GetName()
	}) {
		t.Errorf("the nats container does not take its environment from ConfigMap %s: %+v", keys.GetName(), c.EnvFrom)
	}
	for _, v := range sts.Spec.Template.Spec.Volumes {
		if v.Secret == nil || v.Secret.SecretName != "nats-tls" {
			continue
		}
		for _, m := range c.VolumeMounts {
			if m.Name == v.Name {
				r.tlsDir = m.MountPath
			}
		}
	}
	if r.tlsDir == "" || r.conf == "" {
		t.Fatalf("rendered nats: no nats.conf or no mount of Secret nats-tls")
	}
	return r
}

// withAgent adds the user of another management cluster the way
// README.md says: a copy of the mgmt-1 block with the names replaced.
func (r renderedNATS) withAgent(t *testing.T, source string) string {
	t.Helper()
	const begin, end = "# BEGIN agent mgmt-1", "# END agent mgmt-1\n"
	i, j := strings.Index(r.conf, begin), strings.Index(r.conf, end)
	if i < 0 || j < i {
		t.Fatalf("nats.conf has no %q ... %q block", begin, end)
	}
	j += len(end)
	token := strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(source))
	block := strings.NewReplacer("mgmt-1", source, "MGMT_1", token).Replace(r.conf[i:j])
	return r.conf[:j] + block + r.conf[j:]
}

// parseNATS parses conf as nats-server does, with env set for its
// variables and the certificate files (a test CA and a certificate for
// 127.0.0.1) written where the StatefulSet mounts Secret nats-tls. It
// returns the options and the CA file.
func parseNATS(t *testing.T, conf, tlsDir string, env map[string]string) (*natsserver.Options, string, error) {
	t.Helper()
	dir := t.TempDir()
	natstest.WriteTLS(t, dir)
	rewritten := strings.ReplaceAll(conf, tlsDir+"/", dir+"/")
	if rewritten == conf {
		t.Fatalf("nats.conf names no file under %s, where the StatefulSet mounts Secret nats-tls", tlsDir)
	}
	path := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(path, []byte(rewritten), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("POD_NAME", "nats-0")
	t.Setenv("CLUSTER_ADVERTISE", "nats-0.nats.hcpbot.svc")
	for k, v := range env {
		t.Setenv(k, v)
	}
	opts, err := natsserver.ProcessConfigFile(path)
	return opts, filepath.Join(dir, natstest.TLSCA), err
}

// startNATS starts a real nats-server from conf with only what depends
// on the environment replaced: the listeners (127.0.0.1, random port, no
// monitoring), the store (a TempDir), the cluster block (one server, no
// routes) and the certificate files (parseNATS). Users and permissions
// are those of conf.
func startNATS(t *testing.T, conf, tlsDir string, env map[string]string) (url, caFile string) {
	t.Helper()
	opts, caFile, err := parseNATS(t, conf, tlsDir, env)
	if err != nil {
		t.Fatalf("nats.conf: %v", err)
	}
	if opts.TLSConfig == nil || opts.NoAuthUser != "" || len(opts.Nkeys) == 0 {
		t.Fatalf("nats.conf: TLS %v, no_auth_user %q, %d nkey users", opts.TLSConfig != nil, opts.NoAuthUser, len(opts.Nkeys))
	}
	opts.Host, opts.Port = "127.0.0.1", natsserver.RANDOM_PORT
	opts.HTTPHost, opts.HTTPPort = "", 0
	opts.StoreDir = t.TempDir()
	opts.Cluster, opts.Routes, opts.RoutesStr = natsserver.ClusterOpts{}, nil, ""
	opts.LeafNode = natsserver.LeafNodeOpts{}
	opts.PidFile = ""
	srv := natstest.StartOptions(t, opts)
	return "tls://" + srv.Addr().String(), caFile
}

// The permission split has one reviewed text, nats.conf, and one Go
// definition, bus.BotPermissions and bus.AgentPermissions, which the
// embedded server of `hcpbot all` grants: the shipped file as the
// kustomization renders it (variables substituted, a second agent added by
// the README's recipe), parsed by nats-server itself, grants each user
// exactly the Go lists, allow and deny, publish and subscribe.
func TestNATSConfMatchesGoPermissions(t *testing.T) {
	r := renderNATS(t)
	bot, ag1, ag2 := natstest.NewUser(t), natstest.NewUser(t), natstest.NewUser(t)
	opts, _, err := parseNATS(t, r.withAgent(t, "mgmt-2"), r.tlsDir, map[string]string{
		"HCPBOT_BOT_NKEY": bot.Public, "HCPBOT_AGENT_MGMT_1_NKEY": ag1.Public, "HCPBOT_AGENT_MGMT_2_NKEY": ag2.Public,
	})
	if err != nil {
		t.Fatalf("nats.conf: %v", err)
	}
	if len(opts.Nkeys) != 3 || len(opts.Users) != 0 || opts.NoAuthUser != "" {
		t.Fatalf("nats.conf: %d nkey users, %d other users, no_auth_user %q; want the bot and two agents only", len(opts.Nkeys), len(opts.Users), opts.NoAuthUser)
	}
	conf := map[string]*natsserver.Permissions{}
	for _, u := range opts.Nkeys {
		conf[u.Nkey] = u.Permissions
	}
	agent := func(source string) *natsserver.Permissions {
		p, err := bus.AgentPermissions(source)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		who  string
		user natstest.User
		want *natsserver.Permissions
	}{
		{"bot", bot, bus.BotPermissions()},
		{"agent mgmt-1", ag1, agent("mgmt-1")},
		{"agent mgmt-2 (the README's recipe)", ag2, agent("mgmt-2")},
	} {
		t.Run(tc.who, func(t *testing.T) {
			got := conf[tc.user.Public]
			if got == nil || got.Publish == nil || got.Subscribe == nil {
				t.Fatalf("nats.conf grants %+v", got)
			}
			if !reflect.DeepEqual(got.Response, tc.want.Response) {
				t.Errorf("responses: nats.conf allows %+v, Go %+v", got.Response, tc.want.Response)
			}
			for _, l := range []struct {
				name      string
				conf, gos []string
			}{
				{"publish allow", got.Publish.Allow, tc.want.Publish.Allow},
				{"publish deny", got.Publish.Deny, tc.want.Publish.Deny},
				{"subscribe allow", got.Subscribe.Allow, tc.want.Subscribe.Allow},
				{"subscribe deny", got.Subscribe.Deny, tc.want.Subscribe.Deny},
			} {
				c, g := slices.Sorted(slices.Values(l.conf)), slices.Sorted(slices.Values(l.gos))
				if len(slices.Compact(slices.Clone(g))) != len(g) {
					t.Errorf("%s: the Go list repeats a subject: %q", l.name, g)
				}
				for _, s := range c {
					if !slices.Contains(g, s) {
						t.Errorf("%s: nats.conf grants %q, Go does not", l.name, s)
					}
				}
				for _, s := range g {
					if !slices.Contains(c, s) {
						t.Errorf("%s: Go grants %q, nats.conf does not", l.name, s)
					}
				}
			}
		})
	}
}

// natsRole is one NATS user of the shipped configuration.
type natsRole struct {
	name  string
	user  natstest.User
	inbox string
}

func newRole(t *testing.T, name, inbox string) natsRole {
	return natsRole{name: name, user: natstest.NewUser(t), inbox: inbox}
}

// conn connects as the product does (bus.Connect with the role's seed
// file, the CA and the role's inbox prefix).
func (r natsRole) conn(t *testing.T, ctx context.Context, url, ca string, log zerolog.Logger) *bus.Conn {
	t.Helper()
	cctx, cancel := context.WithTimeout(ctx, natstest.Timeout)
	defer cancel()
	c, err := bus.Connect(cctx, bus.Config{URLs: []string{url}, Name: r.name, NkeySeedFile: r.user.SeedFile, CAFile: ca, InboxPrefix: r.inbox}, log)
	if err != nil {
		t.Fatalf("%s: %v", r.name, err)
	}
	t.Cleanup(c.Close)
	return c
}

// rawConn is a plain client holding a role's credentials, as a
// compromised pod would use them, with the server's asynchronous errors.
type rawConn struct {
	nc   *nats.Conn
	errs chan error
}

func (r natsRole) raw(t *testing.T, url, ca string) *rawConn {
	t.Helper()
	nkey, err := nats.NkeyOptionFromSeed(r.user.SeedFile)
	if err != nil {
		t.Fatal(err)
	}
	c := &rawConn{errs: make(chan error, 256)}
	c.nc, err = nats.Connect(url, nats.Name(r.name+"-raw"), nats.RootCAs(ca), nkey, nats.CustomInboxPrefix(r.inbox),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case c.errs <- err:
			default:
			}
		}))
	if err != nil {
		t.Fatalf("%s: %v", r.name, err)
	}
	t.Cleanup(c.nc.Close)
	return c
}

// refused runs do and waits for the server's permission violation for
// kind ("Publish" or "Subscription") on subject.
func (c *rawConn) refused(t *testing.T, kind, subject string, do func(nc *nats.Conn) error) {
	t.Helper()
	for len(c.errs) > 0 {
		<-c.errs
	}
	if err := do(c.nc); err != nil {
		t.Fatalf("%s %s: %v", kind, subject, err)
	}
	// Flush is a round trip: the -ERR, sent before the PONG, has arrived.
	_ = c.nc.Flush()
	want := strings.ToLower(fmt.Sprintf("permissions violation for %s to %q", kind, subject))
	timeout := time.After(natstest.Timeout)
	for {
		select {
		case err := <-c.errs:
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(strings.ToLower(err.Error()), want) {
				return
			}
		case <-timeout:
			t.Fatalf("%s %s: the server did not refuse it", kind, subject)
		}
	}
}

func publish(subject string, hdr nats.Header) func(*nats.Conn) error {
	return func(nc *nats.Conn) error {
		// A request, as JetStream publishes and API calls are.
		return nc.PublishMsg(&nats.Msg{Subject: subject, Reply: nc.NewInbox(), Header: hdr, Data: []byte(`{}`)})
	}
}

func subscribe(subject, queue string) func(*nats.Conn) error {
	return func(nc *nats.Conn) error {
		_, err := nc.QueueSubscribe(subject, queue, func(*nats.Msg) {})
		return err
	}
}

// A permission table for each NATS role, enforced by a real nats-server
// started from the nats.conf the kustomization renders (TLS on, users and
// permissions exactly as shipped, a second agent added by the README's
// recipe). Everything the bot and the agents do, done by the product's
// own code, works; everything else a compromised pod could try with a
// role's credentials is refused by the server.
func TestNATSPermissions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	log := natstest.Logger(t)
	r := renderNATS(t)
	wantKeys := []string{"HCPBOT_AGENT_MGMT_1_NKEY", "HCPBOT_BOT_NKEY"}
	if got := slices.Sorted(maps.Keys(r.nkeys)); !slices.Equal(got, wantKeys) {
		t.Fatalf("nkeys ConfigMap keys %v, want %v", got, wantKeys)
	}
	const src1, src2 = "mgmt-1", "mgmt-2"
	inbox := func(source string) string {
		p, err := event.AgentInboxPrefix(source)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	bot := newRole(t, "bot", event.BotInboxPrefix)
	ag1, ag2 := newRole(t, "agent-"+src1, inbox(src1)), newRole(t, "agent-"+src2, inbox(src2))
	url, ca := startNATS(t, r.withAgent(t, src2), r.tlsDir, map[string]string{
		"HCPBOT_BOT_NKEY": bot.user.Public, "HCPBOT_AGENT_MGMT_1_NKEY": ag1.user.Public, "HCPBOT_AGENT_MGMT_2_NKEY": ag2.user.Public,
	})

	t.Run("no user, unknown user, no TLS: refused", func(t *testing.T) {
		for name, opts := range map[string][]nats.Option{
			"no user":      {nats.RootCAs(ca)},
			"unknown user": {nats.RootCAs(ca), nkeyOption(t, natstest.NewUser(t))},
		} {
			nc, err := nats.Connect(url, append(opts, nats.Timeout(natstest.Timeout))...)
			if err == nil {
				nc.Close()
				t.Errorf("%s: connected", name)
			} else if !errors.Is(err, nats.ErrAuthorization) && !strings.Contains(strings.ToLower(err.Error()), "authorization violation") {
				t.Errorf("%s: %v, want an authorization violation", name, err)
			}
		}
		checkTLSRequired(t, strings.TrimPrefix(url, "tls://"))
	})

	botC := bot.conn(t, ctx, url, ca, log)
	ag1C, ag2C := ag1.conn(t, ctx, url, ca, log), ag2.conn(t, ctx, url, ca, log)

	// The agent against an external NATS waits for the bot's stream.
	var waitLog syncbuf.Buffer
	waited := make(chan error, 1)
	go func() {
		_, err := bus.WaitForStream(ctx, ag1C.JS, event.StreamName, zerolog.New(&waitLog))
		waited <- err
	}()
	testenv.Eventually(t, natstest.Timeout, "the agent's waiting line", func() bool {
		return strings.Contains(waitLog.String(), "waiting for the bot to create stream "+event.StreamName)
	})

	var proposal approval.Proposal
	var proposalRev uint64 // its revision in the bucket
	var alog *audit.Log
	var flow *approval.Flow
	signer, err := approval.NewEphemeralSigner()
	if err != nil {
		t.Fatal(err)
	}
	eventsPublished := 0
	allowed := []struct {
		name string
		do   func(t *testing.T, ctx context.Context)
	}{
		{"bot creates the events stream (bus.EnsureStream); the waiting agent finds it", func(t *testing.T, ctx context.Context) {
			if _, err := bus.EnsureStream(ctx, botC.JS, bus.EventsStream(0, 0)); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-waited:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(natstest.Timeout):
				t.Fatal("the agent still waits for the stream")
			}
		}},
		{"bot opens the audit stream and appends (audit.Open, Append)", func(t *testing.T, ctx context.Context) {
			var err error
			if alog, err = audit.Open(ctx, botC.JS); err != nil {
				t.Fatal(err)
			}
			if err := alog.Append(ctx, audit.Record{Kind: audit.KindProposed, Source: src1, Summary: "bot"}); err != nil {
				t.Fatal(err)
			}
		}},
		{"bot creates, writes and watches the approval store and creates the action queue (approval.NewFlow, Propose, Get)", func(t *testing.T, ctx context.Context) {
			var err error
			flow, err = approval.NewFlow(ctx, botC.JS, approval.Config{Signer: signer, Trail: alog, Log: log,
				Policy: approval.Policy{Approvers: []string{"U1", "U2"}, FourEyes: true}})
			if err != nil {
				t.Fatal(err)
			}
			store := flow
			proposal, err = store.Propose(ctx, actions.Change{
				Type: actions.TypeNoProxyPatch, Cluster: actions.ClusterRef{Namespace: "clusters", Name: "example"},
				NoProxy: &actions.NoProxyParams{Expected: ".cluster.local", Add: []string{"kubernetes"}},
			}, "U1", approval.ForSource(src1))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := store.Get(ctx, proposal.ID); err != nil {
				t.Fatal(err)
			}
			if _, err := store.Exposures(ctx); err != nil {
				t.Fatal(err)
			}
		}},
		{"bot creates, writes and watches silences (silence.NewStore, Add, Run)", func(t *testing.T, ctx context.Context) {
			s1, err := silence.NewStore(ctx, botC.JS, alog)
			if err != nil {
				t.Fatal(err)
			}
			sil, err := s1.Add(ctx, silence.Silence{Cluster: src1 + "/clusters/example", CreatedBy: "U1", ExpiresAt: time.Now().Add(time.Hour)})
			if err != nil {
				t.Fatal(err)
			}
			s2, err := silence.NewStore(ctx, botC.JS, alog)
			if err != nil {
				t.Fatal(err)
			}
			rctx, stop := context.WithCancel(ctx)
			defer stop()
			ran := make(chan error, 1)
			go func() { ran <- s2.Run(rctx) }()
			testenv.Eventually(t, natstest.Timeout, "the silence seen through the watch", func() bool {
				got, ok := s2.Match(sil.Cluster, "", time.Now())
				return ok && got.ID == sil.ID
			})
			stop()
			if err := <-ran; err != nil {
				t.Fatal(err)
			}
		}},
		{"bot holds its lease (bus.NewLease, Run)", func(t *testing.T, ctx context.Context) {
			l, err := bus.NewLease(ctx, botC.JS, "bot", "replica-1", log)
			if err != nil {
				t.Fatal(err)
			}
			rctx, stop := context.WithCancel(ctx)
			ran := make(chan error, 1)
			go func() { ran <- l.Run(rctx) }()
			testenv.Eventually(t, natstest.Timeout, "the lease", l.Leader)
			stop()
			if err := <-ran; err != nil {
				t.Fatal(err)
			}
		}},
		{"bot writes the Slack message store (notify.NewKVStore: Create, Update, Get, Delete)", func(t *testing.T, ctx context.Context) {
			s, err := notify.NewKVStore(ctx, botC.JS, notify.KVConfig{})
			if err != nil {
				t.Fatal(err)
			}
			rev, err := s.Create(ctx, "root.x", notify.Record{Channel: "C1"})
			if err != nil {
				t.Fatal(err)
			}
			if rev, err = s.Update(ctx, "root.x", notify.Record{Channel: "C1", TS: "1.2"}, rev); err != nil {
				t.Fatal(err)
			}
			if _, _, err := s.Get(ctx, "root.x"); err != nil {
				t.Fatal(err)
			}
			if err := s.Delete(ctx, "root.x", rev); err != nil {
				t.Fatal(err)
			}
		}},
		{"bot guards against replays (chatops.EnsureReplayBucket, KVReplayGuard)", func(t *testing.T, ctx context.Context) {
			kv, err := chatops.EnsureReplayBucket(ctx, botC.JS)
			if err != nil {
				t.Fatal(err)
			}
			g, err := chatops.NewKVReplayGuard(ctx, kv)
			if err != nil {
				t.Fatal(err)
			}
			for i, want := range []bool{true, false} {
				if first, err := g.FirstSeen(ctx, "abc"); err != nil || first != want {
					t.Fatalf("FirstSeen #%d = %v, %v", i, first, err)
				}
			}
		}},
		{"bot writes the digest buckets (bus.EnsureKV " + digest.TicksBucket + ", " + digest.StateBucket + ")", func(t *testing.T, ctx context.Context) {
			ticks, err := bus.EnsureKV(ctx, botC.JS, bus.DigestTicksKV())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ticks.Create(ctx, "daily.1", []byte("r1")); err != nil {
				t.Fatal(err)
			}
			state, err := bus.EnsureKV(ctx, botC.JS, bus.DigestStateKV())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := state.Put(ctx, "prev.daily", []byte("{}")); err != nil {
				t.Fatal(err)
			}
			if _, err := state.Get(ctx, "prev.daily"); err != nil {
				t.Fatal(err)
			}
		}},
		{"bot writes and reads its checkpoints (bus.EnsureKV " + bus.CheckpointsBucket + ", checkpoint.Save, Load)", func(t *testing.T, ctx context.Context) {
			kv, err := bus.EnsureKV(ctx, botC.JS, bus.CheckpointsKV(0))
			if err != nil {
				t.Fatal(err)
			}
			key, err := approval.NewEphemeralSigner()
			if err != nil {
				t.Fatal(err)
			}
			store, err := checkpoint.New(kv, key.ForCheckpoints())
			if err != nil {
				t.Fatal(err)
			}
			content := bytes.Repeat([]byte("state "), checkpoint.ChunkSize/3) // two chunks
			for range 2 {                                                     // the second replaces the first and purges its chunks
				if _, err := store.Save(ctx, "bot", checkpoint.Manifest{Format: checkpoint.Format, Seq: 1, Written: time.Now()},
					func(w io.Writer) error { _, err := w.Write(content); return err }); err != nil {
					t.Fatal(err)
				}
			}
			if _, got, err := store.Load(ctx, "bot"); err != nil || !bytes.Equal(got, content) {
				t.Fatalf("load: %d bytes, %v", len(got), err)
			}
		}},
		{"agents publish their own events (watchers.JetStreamPublisher), the bot consumes them", func(t *testing.T, ctx context.Context) {
			for _, c := range []struct {
				source string
				conn   *bus.Conn
			}{{src1, ag1C}, {src2, ag2C}} {
				pub := watchers.NewJetStreamPublisher(c.conn.JS, 10, watchers.NewMetrics(prometheus.NewRegistry()), log)
				pctx, stop := context.WithCancel(ctx)
				done := make(chan struct{})
				go func() { pub.Run(pctx); close(done) }()
				if err := pub.PublishWait(ctx, nodeEvent(t, c.source)); err != nil {
					t.Fatal(err)
				}
				eventsPublished++
				testenv.Eventually(t, natstest.Timeout, c.source+"'s event stored", func() bool {
					info, err := botC.JS.Stream(ctx, event.StreamName)
					return err == nil && info.CachedInfo().State.Msgs == uint64(eventsPublished)
				})
				stop()
				<-done
			}
			// As bot.Run reads them: an ordered consumer on every event.
			cons, err := botC.JS.OrderedConsumer(ctx, event.StreamName, jetstream.OrderedConsumerConfig{FilterSubjects: []string{event.EventsStreamSubjects}})
			if err != nil {
				t.Fatal(err)
			}
			batch, err := cons.Fetch(eventsPublished, jetstream.FetchMaxWait(natstest.Timeout))
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for range batch.Messages() {
				n++
			}
			if n != eventsPublished {
				t.Fatalf("the bot read %d events, want %d (%v)", n, eventsPublished, batch.Error())
			}
		}},
		{"bot asks for a restatement (" + event.RestateSubject + "), every agent hears it", func(t *testing.T, ctx context.Context) {
			heard := make(chan string, 4)
			for _, c := range []struct {
				source string
				conn   *bus.Conn
			}{{src1, ag1C}, {src2, ag2C}} {
				s, err := c.conn.NC.Subscribe(event.RestateSubject, func(*nats.Msg) { heard <- c.source })
				if err != nil {
					t.Fatal(err)
				}
				defer func() { _ = s.Unsubscribe() }()
				if err := c.conn.NC.Flush(); err != nil {
					t.Fatal(err)
				}
			}
			if err := botC.NC.Publish(event.RestateSubject, nil); err != nil {
				t.Fatal(err)
			}
			got := map[string]bool{}
			for len(got) < 2 {
				select {
				case src := <-heard:
					got[src] = true
				case <-time.After(natstest.Timeout):
					t.Fatalf("heard by %v only", got)
				}
			}
		}},
		{"agent reads the approval store (KeyValue + Get " + bus.ProposalsBucket + ")", func(t *testing.T, ctx context.Context) {
			kv, err := ag1C.JS.KeyValue(ctx, bus.ProposalsBucket)
			if err != nil {
				t.Fatal(err)
			}
			e, err := kv.Get(ctx, proposal.ID)
			if err != nil {
				t.Fatal(err)
			}
			var rec approval.Record
			if err := json.Unmarshal(e.Value(), &rec); err != nil || len(rec.Proposal.Sig) == 0 {
				t.Fatalf("record %s: %v", e.Value(), err)
			}
			proposalRev = e.Revision()
		}},
		{"agent appends audit records on its own subject (audit.ForAgent), the bot reads them", func(t *testing.T, ctx context.Context) {
			l, err := audit.ForAgent(ag1C.JS, src1)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Append(ctx, audit.Record{Kind: audit.KindRefused, Summary: "from the agent"}); err != nil {
				t.Fatal(err)
			}
			recs, err := alog.Recent(ctx, 10)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(recs, func(r audit.Record) bool { return r.Summary == "from the agent" && r.Source == src1 }) {
				t.Fatalf("the agent's record is not in %+v", recs)
			}
		}},
		{"bot and agent read the last audit record of a subject (MSG.GET, the records' chain)", func(t *testing.T, ctx context.Context) {
			for who, c := range map[string]struct {
				conn    *bus.Conn
				subject string
			}{"bot": {botC, "hcpbot.audit." + src1}, "agent " + src1: {ag1C, "hcpbot.audit." + src1 + ".agent"}} {
				s, err := c.conn.JS.Stream(ctx, audit.StreamName)
				if err != nil {
					t.Fatalf("%s: %v", who, err)
				}
				if m, err := s.GetLastMsgForSubject(ctx, c.subject); err != nil || m.Subject != c.subject {
					t.Fatalf("%s: last record of %s: %v, %v", who, c.subject, m, err)
				}
			}
		}},
		{"bot opens the audit stream again with other settings (audit.Open): warned, not changed, not failed", func(t *testing.T, ctx context.Context) {
			var warn syncbuf.Buffer
			if _, err := audit.Open(zerolog.New(&warn).WithContext(ctx), botC.JS, audit.WithMaxAge(time.Hour)); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(warn.String(), "an operator with admin NATS credentials must update the stream") || !strings.Contains(warn.String(), "max age") {
				t.Errorf("no warning naming the setting: %s", warn.String())
			}
			s, err := botC.JS.Stream(ctx, audit.StreamName)
			if err != nil {
				t.Fatal(err)
			}
			if got := s.CachedInfo().Config.MaxAge; got != bus.AuditMaxAge {
				t.Errorf("audit stream max age %s, want %s kept", got, bus.AuditMaxAge)
			}
		}},
		{"bot sends approved requests, each agent consumes its own, reads the approval store, records the answer and its refusals (approval.Flow, approval.Serve)", func(t *testing.T, ctx context.Context) {
			sctx, stop := context.WithCancel(ctx)
			defer stop()
			go func() { _ = flow.Run(sctx) }()
			for _, c := range []struct {
				source string
				conn   *bus.Conn
			}{{src1, ag1C}, {src2, ag2C}} {
				trail, err := audit.ForAgent(c.conn.JS, c.source)
				if err != nil {
					t.Fatal(err)
				}
				// The agent's whole path under its permissions: the
				// consumer, the approval store, the results bucket
				// (running, then the answer), its audit subject. Its
				// executor touches no cluster.
				go func() {
					_ = approval.Serve(sctx, c.conn.JS, approval.AgentConfig{
						Source: c.source, Executor: &fakeagent.Executor{}, Log: log, Trail: trail,
						Trust: approval.Trust{Keys: []string{signer.PublicKey()}, FourEyes: true},
					})
				}()
				p, err := flow.Propose(ctx, actions.Change{Type: actions.TypeNoProxyPatch, Cluster: actions.ClusterRef{Namespace: "clusters", Name: "example"},
					NoProxy: &actions.NoProxyParams{Expected: ".cluster.local", Add: []string{"kubernetes"}}}, "U1", approval.ForSource(c.source))
				if err != nil {
					t.Fatal(err)
				}
				outcome := make(chan approval.Proposal, 1)
				if _, err := flow.Approve(ctx, p.ID, "U2", approval.OnOutcome(func(p approval.Proposal) { outcome <- p })); err != nil {
					t.Fatal(err)
				}
				select {
				case o := <-outcome:
					if o.State != approval.StateExecuted {
						t.Fatalf("%s: %s %s", c.source, o.State, o.Reason)
					}
				case <-time.After(natstest.Timeout):
					t.Fatalf("%s: no outcome", c.source)
				}
				// A request the agent cannot verify: refused and audited
				// on its own subject (the bot's refusal notices read it).
				subject, err := wire.Subject(c.source)
				if err != nil {
					t.Fatal(err)
				}
				msgID := "forged-" + strings.ReplaceAll(c.source, "-", "")
				if _, err := botC.JS.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: []byte(`{}`)}, jetstream.WithMsgID(msgID)); err != nil {
					t.Fatalf("queue for %s: %v", c.source, err)
				}
				testenv.Eventually(t, natstest.Timeout, c.source+"'s refusal audited", func() bool {
					recs, err := alog.Recent(ctx, 50)
					return err == nil && slices.ContainsFunc(recs, func(r audit.Record) bool {
						return r.Kind == audit.KindRefused && r.Source == c.source && strings.HasPrefix(r.Summary, approval.RefusedByAgent)
					})
				})
			}
		}},
		{"bot reads the agents' refusals from their audit subjects (bot/command.RefusalNotices)", func(t *testing.T, ctx context.Context) {
			var out syncbuf.Buffer
			console := notify.NewConsole(&out)
			nctx, stop := context.WithCancel(ctx)
			defer stop()
			notices := &botcmd.RefusalNotices{JS: botC.JS, Out: console, Channel: func(string) string { return "C0NATSAUTH" }, Log: log}
			go func() { _ = console.Run(nctx) }()
			go func() { _ = notices.Run(nctx) }()
			testenv.Eventually(t, natstest.Timeout, "both agents' refusals shown", func() bool {
				return strings.Contains(out.String(), "The agent of `"+src1+"` refused") && strings.Contains(out.String(), "The agent of `"+src2+"` refused")
			})
		}},
	}
	for _, tc := range allowed {
		ok := t.Run("allowed: "+tc.name, func(t *testing.T) {
			sctx, cancel := context.WithTimeout(ctx, natstest.Timeout)
			defer cancel()
			tc.do(t, sctx)
		})
		if !ok {
			t.FailNow()
		}
	}

	botR, ag1R, ag2R := bot.raw(t, url, ca), ag1.raw(t, url, ca), ag2.raw(t, url, ca)
	kvSubject := "$KV." + bus.ProposalsBucket + "." + proposal.ID
	ownStreams := []string{event.StreamName, audit.StreamName}
	ownStreams = append(ownStreams, bus.ActionsStreamName)
	for _, b := range []string{bus.ProposalsBucket, silence.Bucket, bus.LeasesBucket, notify.DefaultBucket, chatops.ReplayBucket, digest.TicksBucket, digest.StateBucket, bus.ActionResultsBucket, bus.CheckpointsBucket} {
		ownStreams = append(ownStreams, "KV_"+b)
	}
	type refusal struct {
		who     string
		conn    *rawConn
		kind    string // Publish or Subscription
		subject string
		do      func(*nats.Conn) error
	}
	pub := func(who string, c *rawConn, subject string, hdr nats.Header) refusal {
		return refusal{who, c, "Publish", subject, publish(subject, hdr)}
	}
	sub := func(who string, c *rawConn, subject, queue string) refusal {
		return refusal{who, c, "Subscription", subject, subscribe(subject, queue)}
	}
	kvOp := func(op string) nats.Header {
		h := nats.Header{}
		switch op {
		case "create":
			h.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
		case "delete":
			h.Set("KV-Operation", "DEL")
		case "purge":
			h.Set("KV-Operation", "PURGE")
			h.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
		}
		return h
	}
	refusals := []refusal{
		// An agent: only its own events, no requests, no writes, no
		// stream changes, nobody else's messages.
		pub("agent mgmt-1: another cluster's event", ag1R, "hcpbot.events.mgmt-2._._.node", nil),
		// Seven or eight tokens: a tag it chose itself (partitions).
		pub("agent mgmt-1: its event with a tag of its own", ag1R, "hcpbot.events.mgmt-1._._.node.2.1", nil),
		pub("agent mgmt-1: its event with a seventh token", ag1R, "hcpbot.events.mgmt-1._._.node.x", nil),
		pub("agent mgmt-1: an action request to itself", ag1R, "hcpbot.actions.mgmt-1.request", nil),
		pub("agent mgmt-1: an action request to another agent", ag1R, "hcpbot.actions.mgmt-2.request", nil),
		pub("agent mgmt-1: ask every agent to restate", ag1R, event.RestateSubject, nil),
		pub("agent mgmt-1: an audit record of another cluster", ag1R, "hcpbot.audit.mgmt-2.agent", nil),
		pub("agent mgmt-1: an audit record on the bot's subject for its cluster", ag1R, "hcpbot.audit.mgmt-1", nil),
		pub("agent mgmt-1: create the events stream", ag1R, "$JS.API.STREAM.CREATE."+event.StreamName, nil),
		pub("agent mgmt-1: update the events stream", ag1R, "$JS.API.STREAM.UPDATE."+event.StreamName, nil),
		pub("agent mgmt-1: create a stream of its own", ag1R, "$JS.API.STREAM.CREATE.ROGUE", nil),
		pub("agent mgmt-1: update the audit stream", ag1R, "$JS.API.STREAM.UPDATE."+audit.StreamName, nil),
		pub("agent mgmt-1: delete the events stream", ag1R, "$JS.API.STREAM.DELETE."+event.StreamName, nil),
		pub("agent mgmt-1: delete the proposals bucket", ag1R, "$JS.API.STREAM.DELETE.KV_"+bus.ProposalsBucket, nil),
		pub("agent mgmt-1: purge the events stream", ag1R, "$JS.API.STREAM.PURGE."+event.StreamName, nil),
		pub("agent mgmt-1: delete an audit record", ag1R, "$JS.API.STREAM.MSG.DELETE."+audit.StreamName, nil),
		pub("agent mgmt-1: read every cluster's events", ag1R, "$JS.API.CONSUMER.CREATE."+event.StreamName, nil),
		pub("agent mgmt-1: KV Put of a proposal", ag1R, kvSubject, kvOp("put")),
		pub("agent mgmt-1: KV Create of a proposal", ag1R, kvSubject, kvOp("create")),
		pub("agent mgmt-1: KV Delete of a proposal", ag1R, kvSubject, kvOp("delete")),
		pub("agent mgmt-1: KV Purge of a proposal", ag1R, kvSubject, kvOp("purge")),
		pub("agent mgmt-1: KV Put of the bot's lease", ag1R, "$KV."+bus.LeasesBucket+".bot", kvOp("put")),
		// The bot's checkpoint is its whole state: no agent reads it or
		// plants one the bot would restore.
		pub("agent mgmt-1: KV Put of the bot's checkpoint", ag1R, "$KV."+bus.CheckpointsBucket+".bot", kvOp("put")),
		pub("agent mgmt-1: KV Purge of the bot's checkpoint", ag1R, "$KV."+bus.CheckpointsBucket+".bot", kvOp("purge")),
		pub("agent mgmt-1: read the bot's checkpoint", ag1R, "$JS.API.DIRECT.GET.KV_"+bus.CheckpointsBucket+".$KV."+bus.CheckpointsBucket+".bot", nil),
		pub("agent mgmt-1: look up the checkpoints bucket", ag1R, "$JS.API.STREAM.INFO.KV_"+bus.CheckpointsBucket, nil),
		pub("agent mgmt-1: a consumer of the checkpoints bucket", ag1R, "$JS.API.CONSUMER.CREATE.KV_"+bus.CheckpointsBucket, nil),
		sub("agent mgmt-1: another cluster's action requests", ag1R, "hcpbot.actions.mgmt-2.request", ""),
		sub("agent mgmt-1: its own requests on the wire", ag1R, "hcpbot.actions.mgmt-1.request", ""),
		pub("agent mgmt-1: a consumer for mgmt-2's requests", ag1R, "$JS.API.CONSUMER.CREATE."+bus.ActionsStreamName+".agent-mgmt-2.hcpbot.actions.mgmt-2.request", nil),
		pub("agent mgmt-1: its consumer name with every request", ag1R, "$JS.API.CONSUMER.CREATE."+bus.ActionsStreamName+".agent-mgmt-1.hcpbot.actions.*.request", nil),
		pub("agent mgmt-1: an unfiltered consumer of the requests", ag1R, "$JS.API.CONSUMER.CREATE."+bus.ActionsStreamName+".agent-mgmt-1", nil),
		pub("agent mgmt-1: fetch mgmt-2's requests", ag1R, "$JS.API.CONSUMER.MSG.NEXT."+bus.ActionsStreamName+".agent-mgmt-2", nil),
		pub("agent mgmt-1: acknowledge mgmt-2's requests", ag1R, "$JS.ACK."+bus.ActionsStreamName+".agent-mgmt-2.1.1.1.1.0", nil),
		pub("agent mgmt-1: delete its consumer", ag1R, "$JS.API.CONSUMER.DELETE."+bus.ActionsStreamName+".agent-mgmt-1", nil),
		pub("agent mgmt-1: write mgmt-2's result", ag1R, "$KV."+bus.ActionResultsBucket+".mgmt-2."+proposal.ID, kvOp("create")),
		pub("agent mgmt-1: read mgmt-2's result", ag1R, "$JS.API.DIRECT.GET.KV_"+bus.ActionResultsBucket+".$KV."+bus.ActionResultsBucket+".mgmt-2."+proposal.ID, nil),
		pub("agent mgmt-1: update the results bucket", ag1R, "$JS.API.STREAM.UPDATE.KV_"+bus.ActionResultsBucket, nil),
		sub("agent mgmt-1: the bot's inbox", ag1R, event.BotInboxPrefix+".>", ""),
		sub("agent mgmt-1: another agent's inbox", ag1R, inbox(src2)+".>", ""),
		sub("agent mgmt-1: every event", ag1R, "hcpbot.events.>", ""),
		sub("agent mgmt-1: everything", ag1R, ">", ""),
		pub("agent mgmt-2: mgmt-1's event", ag2R, "hcpbot.events.mgmt-1._._.node", nil),
		pub("agent mgmt-2: a KV write", ag2R, kvSubject, kvOp("put")),
		sub("agent mgmt-2: mgmt-1's action requests", ag2R, "hcpbot.actions.mgmt-1.request", ""),
		pub("agent mgmt-2: fetch mgmt-1's requests", ag2R, "$JS.API.CONSUMER.MSG.NEXT."+bus.ActionsStreamName+".agent-mgmt-1", nil),
		pub("agent mgmt-2: write mgmt-1's result", ag2R, "$KV."+bus.ActionResultsBucket+".mgmt-1."+proposal.ID, kvOp("put")),
		sub("agent mgmt-2: mgmt-1's inbox", ag2R, inbox(src1)+".>", ""),
		// The bot: no events, no deletion of anything.
		pub("bot: an event", botR, "hcpbot.events.mgmt-1._._.node", nil),
		pub("bot: an audit record in an agent's name", botR, "hcpbot.audit.mgmt-1.agent", nil),
		pub("bot: update the audit stream", botR, "$JS.API.STREAM.UPDATE."+audit.StreamName, nil),
		pub("bot: purge the audit stream", botR, "$JS.API.STREAM.PURGE."+audit.StreamName, nil),
		pub("bot: purge the proposals bucket", botR, "$JS.API.STREAM.PURGE.KV_"+bus.ProposalsBucket, nil),
		pub("bot: delete an event", botR, "$JS.API.STREAM.MSG.DELETE."+event.StreamName, nil),
		pub("bot: delete an audit record", botR, "$JS.API.STREAM.MSG.DELETE."+audit.StreamName, nil),
		pub("bot: create a stream it does not own", botR, "$JS.API.STREAM.CREATE.ROGUE", nil),
		sub("bot: an agent's inbox", botR, inbox(src1)+".>", ""),
		sub("bot: an agent's action requests", botR, "hcpbot.actions.mgmt-1.request", ""),
		pub("bot: consume an agent's requests", botR, "$JS.API.CONSUMER.MSG.NEXT."+bus.ActionsStreamName+".agent-mgmt-1", nil),
		pub("bot: a consumer of the requests", botR, "$JS.API.CONSUMER.CREATE."+bus.ActionsStreamName+".rogue", nil),
		pub("bot: an answer in an agent's name", botR, "$KV."+bus.ActionResultsBucket+".mgmt-1."+proposal.ID, kvOp("create")),
	}
	for _, s := range ownStreams {
		refusals = append(refusals,
			pub("bot: delete "+s, botR, "$JS.API.STREAM.DELETE."+s, nil),
			// With an update it could add sources or a republish: store
			// subjects it may not publish on (answers, events), or copy
			// what the stream holds to itself. Streams are created only.
			pub("bot: update "+s, botR, "$JS.API.STREAM.UPDATE."+s, nil),
			pub("agent mgmt-2: update "+s, ag2R, "$JS.API.STREAM.UPDATE."+s, nil),
			pub("agent mgmt-2: delete "+s, ag2R, "$JS.API.STREAM.DELETE."+s, nil))
	}
	for _, tc := range refusals {
		t.Run("refused: "+tc.who, func(t *testing.T) { tc.conn.refused(t, tc.kind, tc.subject, tc.do) })
	}

	// The attack, with the product's client: the bot's user
	// shortens the audit trail to one record (MaxMsgs 1, Discard old),
	// deny_delete and deny_purge notwithstanding. Refused, as a create
	// over it, a delete and a purge: the 50 records appended stay.
	t.Run("refused: the bot shortening the audit trail (update to MaxMsgs=1, Discard=Old; create over it; delete; purge)", func(t *testing.T) {
		s, err := botC.JS.Stream(ctx, audit.StreamName)
		if err != nil {
			t.Fatal(err)
		}
		before := s.CachedInfo().State.Msgs
		for i := range 50 {
			if err := alog.Append(ctx, audit.Record{Kind: audit.KindProposed, ActionID: fmt.Sprintf("act-%04d", i), Source: src1}); err != nil {
				t.Fatal(err)
			}
		}
		attack := s.CachedInfo().Config
		attack.MaxMsgs, attack.Discard = 1, jetstream.DiscardOld
		for name, do := range map[string]func(context.Context) error{
			"update": func(ctx context.Context) error { _, err := botC.JS.UpdateStream(ctx, attack); return err },
			"create": func(ctx context.Context) error { _, err := botC.JS.CreateStream(ctx, attack); return err },
			"delete": func(ctx context.Context) error { return botC.JS.DeleteStream(ctx, audit.StreamName) },
			"purge":  func(ctx context.Context) error { return s.Purge(ctx) },
		} {
			actx, cancel := context.WithTimeout(ctx, 2*time.Second)
			if err := do(actx); err == nil {
				t.Errorf("%s: the server accepted it", name)
			}
			cancel()
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs != before+50 || info.Config.MaxMsgs != -1 || info.Config.Discard != jetstream.DiscardNew {
			t.Fatalf("audit stream: %d records (want %d), max messages %d, discard %v", info.State.Msgs, before+50, info.Config.MaxMsgs, info.Config.Discard)
		}
	})

	t.Run("refused: agent mgmt-1 changing the events stream, directly or with the product's code (bus.EnsureStream)", func(t *testing.T) {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		// EnsureStream creates, never updates: the stream there is left
		// as it is, other settings or not.
		if _, err := bus.EnsureStream(cctx, ag1C.JS, bus.EventsStream(time.Hour, 0)); err != nil {
			t.Fatalf("EnsureStream of the existing events stream: %v", err)
		}
		cur, err := botC.JS.Stream(ctx, event.StreamName)
		if err != nil {
			t.Fatal(err)
		}
		cfg := cur.CachedInfo().Config
		cfg.MaxAge = time.Hour
		if _, err := ag1C.JS.UpdateStream(cctx, cfg); err == nil {
			t.Fatal("the agent updated the events stream")
		}
		// The refusal is the server's (the request times out behind a
		// permission violation), and the stream keeps the bot's settings.
		s, err := botC.JS.Stream(ctx, event.StreamName)
		if err != nil {
			t.Fatal(err)
		}
		if maxAge := s.CachedInfo().Config.MaxAge; maxAge == time.Hour {
			t.Fatalf("events stream max age %s: the agent's settings", maxAge)
		}
	})

	// Nothing refused had an effect.
	t.Run("state unchanged", func(t *testing.T) {
		for _, s := range ownStreams {
			if _, err := botC.JS.Stream(ctx, s); err != nil {
				t.Errorf("stream %s: %v", s, err)
			}
		}
		info, err := botC.JS.Stream(ctx, event.StreamName)
		if err != nil {
			t.Fatal(err)
		}
		if cfg, st := info.CachedInfo().Config, info.CachedInfo().State; st.Msgs != uint64(eventsPublished) || cfg.MaxAge != bus.EventsStream(0, 0).MaxAge {
			t.Errorf("events stream: %d messages (want %d), max age %s", st.Msgs, eventsPublished, cfg.MaxAge)
		}
		kv, err := botC.JS.KeyValue(ctx, bus.ProposalsBucket)
		if err != nil {
			t.Fatal(err)
		}
		e, err := kv.Get(ctx, proposal.ID)
		if err != nil || e.Revision() != proposalRev {
			t.Errorf("proposal %s: revision %v (want %d), %v", proposal.ID, e, proposalRev, err)
		}
	})
}

func nkeyOption(t *testing.T, u natstest.User) nats.Option {
	t.Helper()
	o, err := nats.NkeyOptionFromSeed(u.SeedFile)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// checkTLSRequired speaks plain NATS to addr: the server announces that
// TLS is required and never answers a plain-text CONNECT + PING.
func checkTLSRequired(t *testing.T, addr string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, natstest.Timeout)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(natstest.Timeout))
	rd := bufio.NewReader(c)
	line, err := rd.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	info, ok := strings.CutPrefix(line, "INFO ")
	var v struct {
		TLSRequired bool `json:"tls_required"`
	}
	if !ok || json.Unmarshal([]byte(info), &v) != nil || !v.TLSRequired {
		t.Fatalf("INFO %q: want tls_required", line)
	}
	if _, err := c.Write([]byte("CONNECT {\"verbose\":false}\r\nPING\r\n")); err != nil {
		return // closed already
	}
	rest, _ := rd.ReadString(0) // until the server closes (or the deadline)
	if strings.Contains(rest, "PONG") {
		t.Fatalf("plain-text client answered: %q", rest)
	}
}

func nodeEvent(t *testing.T, source string) event.Event {
	t.Helper()
	now := time.Now().UTC()
	p := event.NodeReadiness{Node: "worker-0", Ready: event.ConditionFalse, Reason: "KubeletNotReady", LastTransitionTime: now}
	e, err := event.New(source, &event.ClusterRef{Namespace: "clusters", Name: "example"},
		event.ObjectRef{Kind: "Node", Name: "worker-0", UID: "uid-0", Hosted: true}, p, event.TransitionAt("Ready=False", now), now)
	if err != nil {
		t.Fatal(err)
	}
	return e
}
