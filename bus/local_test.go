package bus

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/rs/zerolog"

	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/testenv/syncbuf"
)

func startLocal(t *testing.T, cfg LocalConfig, log zerolog.Logger) *Local {
	t.Helper()
	if cfg.StoreDir == "" {
		cfg.StoreDir = t.TempDir()
	}
	l, err := StartLocal(testContext(t), cfg, log)
	if err != nil {
		t.Fatalf("StartLocal: %v", err)
	}
	t.Cleanup(l.Shutdown)
	return l
}

func connectRole(t *testing.T, l *Local, r Role) *Conn {
	t.Helper()
	c, err := l.Connect(testContext(t), r, Config{Name: r.String()}, testLogger(t))
	if err != nil {
		t.Fatalf("connect %s: %v", r, err)
	}
	t.Cleanup(c.Close)
	return c
}

// permErrs is a plain client's record of the server's permission
// violations, as a compromised process holding a role's key would see them.
type permErrs chan error

func (p permErrs) handler(_ *nats.Conn, _ *nats.Subscription, err error) {
	select {
	case p <- err:
	default:
	}
}

// rawRole is a plain nats.go client in-process with role's key.
func rawRole(t *testing.T, l *Local, r Role) (*nats.Conn, permErrs) {
	t.Helper()
	kp := l.keys[r]
	pub, _ := kp.PublicKey()
	inbox, err := r.InboxPrefix()
	if err != nil {
		t.Fatal(err)
	}
	errs := make(permErrs, 64)
	nc, err := nats.Connect(inProcessURL, nats.InProcessServer(l.e), nats.Nkey(pub, kp.Sign), nats.CustomInboxPrefix(inbox), nats.ErrorHandler(errs.handler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc, errs
}

// refused publishes a request on subject and waits for the server's
// permission violation.
func refused(t *testing.T, nc *nats.Conn, errs permErrs, subject string) {
	t.Helper()
	for len(errs) > 0 {
		<-errs
	}
	if err := nc.PublishMsg(&nats.Msg{Subject: subject, Reply: nc.NewInbox(), Data: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	_ = nc.Flush() // a round trip: the -ERR came before the PONG
	want := strings.ToLower(fmt.Sprintf("permissions violation for publish to %q", subject))
	timeout := time.After(testWait)
	for {
		select {
		case err := <-errs:
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(strings.ToLower(err.Error()), want) {
				return
			}
		case <-timeout:
			t.Fatalf("publish to %s: not refused", subject)
		}
	}
}

// The embedded server by default: no listener (nothing to dial), every
// role in-process with its own key and inbox, the start logged as such.
func TestLocalInProcessOnly(t *testing.T) {
	var logs syncbuf.Buffer
	store := t.TempDir()
	l := startLocal(t, LocalConfig{StoreDir: store, Agents: []string{"mgmt-1"}}, zerolog.New(&logs))
	if a := l.Listening(); a != nil || l.Server().Addr() != nil || l.e.ClientURL() != "" {
		t.Fatalf("listens on %v (%q)", a, l.e.ClientURL())
	}
	if !strings.Contains(logs.String(), "no listener, in-process connections only; authentication required") {
		t.Errorf("start log:\n%s", logs.String())
	}
	if _, err := os.Stat(filepath.Join(store, KeysDir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("keys written without a listener: %v", err)
	}
	// An in-process client without a key is refused too. (The refusal
	// can take the server's write deadline, 10s: net.Pipe is synchronous,
	// and the client may still be writing its PING when the server
	// answers its CONNECT. Hence aside, while the rest runs.)
	anonymous := make(chan error, 1)
	go func() {
		nc, err := nats.Connect(inProcessURL, nats.InProcessServer(l.e))
		if err == nil {
			nc.Close()
		}
		anonymous <- err
	}()
	for _, r := range []Role{BotRole(), AgentRole("mgmt-1")} {
		c := connectRole(t, l, r)
		inbox, _ := r.InboxPrefix()
		if got := c.NC.NewInbox(); !strings.HasPrefix(got, inbox+".") {
			t.Errorf("%s: inbox %q", r, got)
		}
	}
	if _, err := l.Connect(testContext(t), AgentRole("mgmt-2"), Config{}, testLogger(t)); err == nil {
		t.Error("connected as an agent the server was not started for")
	}
	if err := signalled(t, anonymous, "the in-process client without a key"); err == nil {
		t.Error("an in-process client without a key connected")
	}
}

// With a listen address: unauthenticated and unknown clients are refused,
// each role's seed file (0600, in the store's keys folder, never logged)
// connects with that role's rights only, the owner's key works
// in-process only, and Shutdown removes the files.
func TestLocalListenRequiresKeys(t *testing.T) {
	var logs syncbuf.Buffer
	store := t.TempDir()
	l := startLocal(t, LocalConfig{StoreDir: store, Listen: "127.0.0.1:0", Agents: []string{"mgmt-1"}}, zerolog.New(&logs))
	addr := l.Listening()
	if addr == nil || !addr.IP.IsLoopback() {
		t.Fatalf("listening on %v", addr)
	}
	url := "nats://" + addr.String()
	stranger, _ := nkeys.CreateUser()
	spub, _ := stranger.PublicKey()
	for name, opts := range map[string][]nats.Option{
		"no credentials": nil,
		"unknown key":    {nats.Nkey(spub, stranger.Sign)},
		"user/password":  {nats.UserInfo("bot", "bot")},
	} {
		nc, err := nats.Connect(url, append(opts, nats.Timeout(testWait))...)
		if err == nil {
			nc.Close()
			t.Errorf("%s: connected", name)
		} else if !strings.Contains(strings.ToLower(err.Error()), "authorization violation") {
			t.Errorf("%s: %v, want an authorization violation", name, err)
		}
	}
	opub, _ := l.owner.PublicKey()
	if nc, err := nats.Connect(url, nats.Nkey(opub, l.owner.Sign), nats.Timeout(testWait)); err == nil {
		nc.Close()
		t.Error("the owner's key connected over TCP")
	}

	for _, r := range []Role{BotRole(), AgentRole("mgmt-1")} {
		path := l.SeedFile(r)
		if filepath.Dir(path) != filepath.Join(store, KeysDir) {
			t.Errorf("%s: seed file %q not in %s", r, path, filepath.Join(store, KeysDir))
		}
		st, err := os.Stat(path)
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: seed file %v, %v: want mode 0600", r, st, err)
		}
		seed, _ := os.ReadFile(path)
		if strings.Contains(logs.String(), strings.TrimSpace(string(seed))) {
			t.Errorf("%s's seed reached the log", r)
		}
		if !strings.Contains(logs.String(), path) {
			t.Errorf("%s's seed file is not in the log:\n%s", r, logs.String())
		}
	}
	if st, err := os.Stat(filepath.Join(store, KeysDir)); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("keys folder %v, %v: want mode 0700", st, err)
	}
	if !strings.Contains(logs.String(), "listening on "+addr.String()+"; authentication required") {
		t.Errorf("start log:\n%s", logs.String())
	}

	// The bot's seed file, as a separate bot process would use it: the
	// bot's rights, not more.
	bot, err := Connect(testContext(t), Config{URLs: []string{url}, NkeySeedFile: l.SeedFile(BotRole()), InboxPrefix: event.BotInboxPrefix}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer bot.Close()
	if _, err := EnsureStream(testContext(t), bot.JS, EventsStream(0, 0)); err != nil {
		t.Fatalf("the bot's key cannot do the bot's work: %v", err)
	}
	seed, _ := os.ReadFile(l.SeedFile(BotRole()))
	kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(seed))))
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	errs := make(permErrs, 64)
	raw, err := nats.Connect(url, nats.Nkey(pub, kp.Sign), nats.CustomInboxPrefix(event.BotInboxPrefix), nats.ErrorHandler(errs.handler))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	refused(t, raw, errs, "hcpbot.events.mgmt-1._._.node")
	refused(t, raw, errs, jsStreamAPI("DELETE", EventsStreamName))

	files := []string{l.SeedFile(BotRole()), l.SeedFile(AgentRole("mgmt-1"))}
	bot.Close()
	l.Shutdown()
	for _, f := range files {
		if _, err := os.Stat(f); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left after Shutdown: %v", f, err)
		}
	}
}

// On the embedded server with its defaults, the bot's role creates the
// audit stream, reads the last record of a subject and appends, but
// cannot update (the attack: MaxMsgs 1, Discard old), delete or
// purge it, or delete a record: after 50 appends, 50 remain. The agent's
// role reads the last record too, and writes neither the proposals
// bucket nor action requests.
func TestLocalRolesOnTheAuditStream(t *testing.T) {
	l := startLocal(t, LocalConfig{Agents: []string{"mgmt-1"}}, testLogger(t))
	ctx := testContext(t)
	bot := connectRole(t, l, BotRole())
	if _, err := CreateStream(ctx, bot.JS, AuditStream(0, 0)); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if _, err := bot.JS.Publish(ctx, "hcpbot.audit.mgmt-1", fmt.Appendf(nil, `{"n":%d}`, i)); err != nil {
			t.Fatal(err)
		}
	}
	s, err := bot.JS.Stream(ctx, AuditStreamName)
	if err != nil {
		t.Fatal(err)
	}
	attack := s.CachedInfo().Config
	attack.MaxMsgs, attack.Discard = 1, jetstream.DiscardOld
	uctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = bot.JS.UpdateStream(uctx, attack)
	cancel()
	if err == nil {
		t.Fatal("the bot's role updated the audit stream to MaxMsgs 1, Discard old")
	}
	// Creating it again with the attack's settings is refused by the
	// server itself (the stream exists with others).
	if _, err := bot.JS.CreateStream(ctx, attack); err == nil {
		t.Fatal("a create over the existing audit stream changed it")
	}
	info, err := s.Info(ctx)
	if err != nil || info.State.Msgs != 50 || info.Config.MaxMsgs != -1 {
		t.Fatalf("audit stream after the attack: %+v, %v; want 50 records and no message limit", info, err)
	}
	if m, err := s.GetLastMsgForSubject(ctx, "hcpbot.audit.mgmt-1"); err != nil || string(m.Data) != `{"n":49}` {
		t.Fatalf("bot: last record %v, %v", m, err)
	}

	raw, errs := rawRole(t, l, BotRole())
	for _, op := range []string{"UPDATE", "DELETE", "PURGE", "MSG.DELETE"} {
		refused(t, raw, errs, jsStreamAPI(op, AuditStreamName))
	}

	agent := connectRole(t, l, AgentRole("mgmt-1"))
	if _, err := agent.JS.Publish(ctx, "hcpbot.audit.mgmt-1.agent", []byte(`{"agent":1}`)); err != nil {
		t.Fatal(err)
	}
	as, err := agent.JS.Stream(ctx, AuditStreamName)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := as.GetLastMsgForSubject(ctx, "hcpbot.audit.mgmt-1.agent"); err != nil || string(m.Data) != `{"agent":1}` {
		t.Fatalf("agent: last record %v, %v", m, err)
	}
	araw, aerrs := rawRole(t, l, AgentRole("mgmt-1"))
	for _, subject := range []string{
		"$KV." + ProposalsBucket + ".act-x", "hcpbot.actions.mgmt-1.request", "hcpbot.actions.mgmt-2.request",
		jsStreamAPI("UPDATE", AuditStreamName), jsStreamAPI("CREATE", EventsStreamName),
	} {
		refused(t, araw, aerrs, subject)
	}
	if info, err := s.Info(ctx); err != nil || info.State.Msgs != 51 {
		t.Fatalf("audit stream: %+v, %v; want 51 records", info, err)
	}
}

// A process without a bot (a standalone agent) has the events stream
// created in the owner's name: the agent's role may not create it, the
// owner creates it once and keeps a bot's settings, and may create
// nothing else.
func TestLocalOwnerCreatesEventsStreamOnly(t *testing.T) {
	l := startLocal(t, LocalConfig{Agents: []string{"mgmt-1"}}, testLogger(t))
	ctx := testContext(t)
	agent := connectRole(t, l, AgentRole("mgmt-1"))
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err := agent.JS.CreateStream(cctx, EventsStream(0, 0).config())
	cancel()
	if err == nil {
		t.Fatal("the agent's role created the events stream")
	}
	if _, err := l.CreateStream(ctx, EventsStream(0, 0), testLogger(t)); err != nil {
		t.Fatal(err)
	}
	bot := connectRole(t, l, BotRole())
	if _, err := EnsureStream(ctx, bot.JS, EventsStream(5*time.Hour, 0)); err != nil {
		t.Fatal(err)
	}
	// The owner created it first: its settings stay, the bot's differ
	// (a warning for an operator); nobody rewrites them.
	if s, err := l.CreateStream(ctx, EventsStream(0, 0), testLogger(t)); err != nil || s.CachedInfo().Config.MaxAge != DefaultEventsMaxAge {
		t.Fatalf("owner's create after the bot's ensure: %v, %v", s, err)
	}
	if _, err := l.CreateStream(ctx, AuditStream(0, 0), testLogger(t)); err == nil {
		t.Error("the owner created the audit stream")
	}
	// The bot of this process applies its settings through the owner,
	// the events stream's only.
	if s, err := l.ApplyStream(ctx, EventsStream(5*time.Hour, 0), testLogger(t)); err != nil || s.CachedInfo().Config.MaxAge != 5*time.Hour {
		t.Fatalf("owner's apply of the bot's settings: %v, %v", s, err)
	}
	if _, err := l.ApplyStream(ctx, AuditStream(0, 0), testLogger(t)); err == nil {
		t.Error("the owner applied the audit stream")
	}
	// Its user, whatever this package asks: nothing but the events stream.
	owner, err := l.connect(ctx, l.owner, ownerInbox, Config{}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	cctx, cancel = context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := owner.JS.CreateStream(cctx, AuditStream(0, 0).config()); err == nil {
		t.Error("the owner's user created the audit stream")
	}
	if _, err := owner.JS.UpdateStream(cctx, ActionsStream().config()); err == nil {
		t.Error("the owner's user updated the actions stream")
	}
}

// The agent's permissions follow package actions' and event's spelling
// of a source with a dot: '~' in subjects, '_' in the consumer name and
// result keys.
func TestAgentPermissionsDottedSource(t *testing.T) {
	p, err := AgentPermissions("mgmt.corp")
	if err != nil {
		t.Fatal(err)
	}
	allow := strings.Join(p.Publish.Allow, " ")
	for _, want := range []string{
		"hcpbot.events.mgmt~corp.*.*.*", "hcpbot.audit.mgmt~corp.agent",
		"$JS.API.CONSUMER.CREATE.HCPBOT_ACTIONS.agent-mgmt_corp.hcpbot.actions.mgmt~corp.request",
		"$KV.hcpbot-action-results.mgmt_corp.>",
	} {
		if !strings.Contains(allow, want) {
			t.Errorf("allow lacks %s: %s", want, allow)
		}
	}
	if got := p.Subscribe.Allow[0]; got != "_INBOX_agent_mgmt~corp.>" {
		t.Errorf("subscribe %q", got)
	}
	if _, err := AgentPermissions("Not_A.Name*"); err == nil {
		t.Error("a bad source was accepted")
	}
}

// A listen address that cannot be read stops the start.
func TestLocalBadListen(t *testing.T) {
	for _, addr := range []string{"nohost", "127.0.0.1:http", "127.0.0.1:70000"} {
		if _, err := StartLocal(testContext(t), LocalConfig{StoreDir: t.TempDir(), Listen: addr}, testLogger(t)); err == nil {
			t.Errorf("%q: started", addr)
		}
	}
}

// StreamDrift names what an existing stream has other than the spec, and
// nothing for a stream to spec.
func TestStreamDrift(t *testing.T) {
	e := startEmbedded(t, EmbeddedConfig{})
	c := connect(t, Config{URLs: []string{e.ClientURL()}})
	ctx := testContext(t)
	s, err := CreateStream(ctx, c.JS, AuditStream(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	if d := StreamDrift(s.CachedInfo().Config, AuditStream(0, 0)); d != nil {
		t.Errorf("drift of a stream to spec: %q", d)
	}
	d := StreamDrift(s.CachedInfo().Config, AuditStream(time.Hour, 0, WithReplicas(3)))
	if len(d) != 2 || !strings.HasPrefix(d[0], "replicas: 1 → 3") || !strings.HasPrefix(d[1], "max age: 9600h0m0s → 1h0m0s") {
		t.Errorf("drift %q: want replicas and max age", d)
	}
	if s, err := CreateStream(ctx, c.JS, AuditStream(time.Hour, 0)); err != nil || s.CachedInfo().Config.MaxAge != AuditMaxAge {
		t.Errorf("CreateStream over an existing stream: %v, %v; want it unchanged", s, err)
	}
}
