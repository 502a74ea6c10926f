package bus

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/hcpbot/hcpbot/internal/testenv/syncbuf"
	"github.com/hcpbot/hcpbot/redact"
)

var eventsSpec = StreamSpec{
	Name:       "EVENTS",
	Subjects:   []string{"events.>"},
	MaxAge:     time.Hour,
	Duplicates: time.Minute,
}

func TestPublishDedupAndDurablePull(t *testing.T) {
	e := startEmbedded(t, EmbeddedConfig{Name: "dedup"})
	c := connect(t, Config{URLs: []string{e.ClientURL()}})
	ctx := testContext(t)

	s, err := EnsureStream(ctx, c.JS, eventsSpec)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{false, true} {
		ack, err := c.JS.Publish(ctx, "events.pod", []byte("crashloop"), jetstream.WithMsgID("pod-1"))
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		if ack.Duplicate != want {
			t.Errorf("publish %d: Duplicate = %v, want %v", i, ack.Duplicate, want)
		}
	}
	if _, err := c.JS.Publish(ctx, "events.node", []byte("notready"), jetstream.WithMsgID("node-1")); err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 {
		t.Fatalf("stream holds %d messages, want 2 (one per Nats-Msg-Id)", info.State.Msgs)
	}

	cons, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:   "bot",
		AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(2, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for m := range batch.Messages() {
		got = append(got, string(m.Data()))
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := batch.Error(); err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != "crashloop,notready" {
		t.Fatalf("consumed %q, want [crashloop notready]", got)
	}
	ci, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ci.NumAckPending != 0 || ci.NumPending != 0 {
		t.Fatalf("consumer has %d unacked, %d pending; want 0, 0", ci.NumAckPending, ci.NumPending)
	}
}

// EnsureStream creates a stream while absent and never changes an
// existing one: a spec that differs is a warning naming the setting for an
// operator; a stream with sources (which write past every permission) is
// refused.
func TestEnsureStreamCreatesNeverUpdates(t *testing.T) {
	e := startEmbedded(t, EmbeddedConfig{})
	c := connect(t, Config{URLs: []string{e.ClientURL()}})
	ctx := testContext(t)

	first, err := EnsureStream(ctx, c.JS, eventsSpec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.JS.Publish(ctx, "events.x", []byte("kept")); err != nil {
		t.Fatal(err)
	}
	again, err := EnsureStream(ctx, c.JS, eventsSpec)
	if err != nil {
		t.Fatal(err)
	}
	a, b := first.CachedInfo(), again.CachedInfo()
	if !a.Created.Equal(b.Created) {
		t.Errorf("stream re-created: created %v, then %v", a.Created, b.Created)
	}
	if fmt.Sprintf("%+v", a.Config) != fmt.Sprintf("%+v", b.Config) {
		t.Errorf("config changed by a no-op ensure:\n%+v\n%+v", a.Config, b.Config)
	}
	if b.State.Msgs != 1 {
		t.Errorf("after second ensure: %d messages, want 1", b.State.Msgs)
	}

	changed := eventsSpec
	changed.MaxAge = 2 * time.Hour
	var warned syncbuf.Buffer
	if _, err := EnsureStream(zerolog.New(&warned).WithContext(ctx), c.JS, changed); err != nil {
		t.Fatal(err)
	}
	s, err := c.JS.Stream(ctx, eventsSpec.Name)
	if err != nil {
		t.Fatal(err)
	}
	info := s.CachedInfo()
	if info.Config.MaxAge != eventsSpec.MaxAge || !strings.Contains(warned.String(), "max age") || !strings.Contains(warned.String(), "operator") {
		t.Errorf("MaxAge = %v after an ensure with 2h, want %v kept and a warning naming it: %s", info.Config.MaxAge, eventsSpec.MaxAge, warned.String())
	}
	if info.State.Msgs != 1 {
		t.Errorf("ensure lost messages: %d, want 1", info.State.Msgs)
	}

	// Sources (set by someone with admin rights, or the stream made by
	// someone else): refused.
	src := eventsSpec.config()
	src.Name, src.Subjects = "SOURCED", []string{"sourced.>"}
	src.Sources = []*jetstream.StreamSource{{Name: eventsSpec.Name}}
	if _, err := c.JS.CreateStream(ctx, src); err != nil {
		t.Fatal(err)
	}
	sourced := eventsSpec
	sourced.Name, sourced.Subjects = "SOURCED", []string{"sourced.>"}
	if _, err := EnsureStream(ctx, c.JS, sourced); !errors.Is(err, ErrForeignStream) {
		t.Errorf("a stream with sources: %v, want ErrForeignStream", err)
	}
	if info.Config.Storage != jetstream.FileStorage || info.Config.Replicas != 1 {
		t.Errorf("storage %v replicas %d, want file R1", info.Config.Storage, info.Config.Replicas)
	}

	bad := eventsSpec
	bad.Name = "BAD"
	bad.Subjects = eventsSpec.Subjects // overlaps EVENTS: the server refuses
	if _, err := EnsureStream(ctx, c.JS, bad); err == nil || !strings.Contains(err.Error(), `"BAD"`) {
		t.Errorf("overlapping stream: err = %v, want an error naming the stream", err)
	}
}

func TestEnsureKV(t *testing.T) {
	e := startEmbedded(t, EmbeddedConfig{})
	c := connect(t, Config{URLs: []string{e.ClientURL()}})
	ctx := testContext(t)

	spec := KVSpec{Bucket: "incidents", History: 3, TTL: time.Hour}
	kv, err := EnsureKV(ctx, c.JS, spec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "inc-1", []byte("open")); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureKV(ctx, c.JS, spec); err != nil {
		t.Fatalf("second ensure: %v", err)
	}
	spec.TTL = 2 * time.Hour
	var warned syncbuf.Buffer
	kv, err = EnsureKV(zerolog.New(&warned).WithContext(ctx), c.JS, spec)
	if err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.TTL() != time.Hour || st.History() != 3 || !strings.Contains(warned.String(), "TTL") {
		t.Errorf("TTL %v history %d, want 1h and 3 kept, and a warning naming the TTL: %s", st.TTL(), st.History(), warned.String())
	}
	v, err := kv.Get(ctx, "inc-1")
	if err != nil || string(v.Value()) != "open" {
		t.Fatalf("value lost across ensure: %v, %v", v, err)
	}
	if _, err := EnsureKV(ctx, c.JS, KVSpec{Bucket: "bad name"}); err == nil || !strings.Contains(err.Error(), `"bad name"`) {
		t.Errorf("bad bucket: err = %v, want an error naming the bucket", err)
	}
}

// Without URLs Connect starts the embedded server, with no listener, and
// connects in-process as the bot (the zero Role).
func TestConnectStartsEmbeddedWhenNoURLs(t *testing.T) {
	ctx := testContext(t)
	c, err := Connect(ctx, Config{Embedded: LocalConfig{StoreDir: t.TempDir()}}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Local() == nil {
		t.Fatal("no embedded server started")
	}
	if a := c.Local().Listening(); a != nil || c.Local().Server().Addr() != nil {
		t.Errorf("embedded server listens on %v", a)
	}
	if got := c.NC.NewInbox(); !strings.HasPrefix(got, "_INBOX_bot.") {
		t.Errorf("inbox %q: want the bot's", got)
	}
	if _, err := c.JS.AccountInfo(ctx); err != nil {
		t.Fatalf("JetStream not usable: %v", err)
	}
	c.Close()
	if c.Local().Server().Running() {
		t.Error("Close left the embedded server running")
	}
	if !c.NC.IsClosed() {
		t.Error("Close left the connection open")
	}
}

func TestConnectEmbeddedNeedsStoreDir(t *testing.T) {
	_, err := Connect(testContext(t), Config{}, testLogger(t))
	if !errors.Is(err, ErrStoreDirRequired) {
		t.Fatalf("err = %v, want ErrStoreDirRequired", err)
	}
}

func TestClusterNodeNeedsName(t *testing.T) {
	_, err := StartEmbedded(testContext(t), EmbeddedConfig{StoreDir: t.TempDir(), Open: true, Cluster: &ClusterConfig{Name: "c"}})
	if !errors.Is(err, ErrServerNameRequired) {
		t.Fatalf("err = %v, want ErrServerNameRequired", err)
	}
}

func TestStartEmbeddedFailsFastOnTakenPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	start := time.Now()
	_, err = StartEmbedded(testContext(t), EmbeddedConfig{
		StoreDir: t.TempDir(),
		Open:     true,
		Port:     l.Addr().(*net.TCPAddr).Port,
	})
	if err == nil {
		t.Fatal("started on a port already in use")
	}
	t.Logf("error: %v", err)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v to notice; want the server's fatal error, not the deadline", d)
	}
}

func TestRestartKeepsMessages(t *testing.T) {
	dir := t.TempDir()
	ctx := testContext(t)

	e := startEmbedded(t, EmbeddedConfig{StoreDir: dir})
	c := connect(t, Config{URLs: []string{e.ClientURL()}})
	if _, err := EnsureStream(ctx, c.JS, eventsSpec); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := c.JS.Publish(ctx, "events.x", fmt.Appendf(nil, "m%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	e.Shutdown()

	e = startEmbedded(t, EmbeddedConfig{StoreDir: dir})
	c = connect(t, Config{URLs: []string{e.ClientURL()}})
	s, err := c.JS.Stream(ctx, eventsSpec.Name)
	if err != nil {
		t.Fatalf("stream gone after restart: %v", err)
	}
	if n := s.CachedInfo().State.Msgs; n != 3 {
		t.Fatalf("%d messages after restart, want 3", n)
	}
	m, err := s.GetLastMsgForSubject(ctx, "events.x")
	if err != nil || string(m.Data) != "m2" {
		t.Fatalf("last message after restart: %v, %v", m, err)
	}
}

func TestReconnectCallbackAfterServerRestart(t *testing.T) {
	dir := t.TempDir()
	e := startEmbedded(t, EmbeddedConfig{StoreDir: dir})
	port := e.Server().Addr().(*net.TCPAddr).Port
	c := connect(t, Config{
		URLs:             []string{e.ClientURL()},
		ReconnectWait:    10 * time.Millisecond,
		MaxReconnectWait: 100 * time.Millisecond,
	})
	reconnected := make(chan struct{}, 1)
	disconnected := make(chan error, 1)
	c.OnReconnect(func() { reconnected <- struct{}{} })
	c.OnDisconnect(func(err error) { disconnected <- err })

	e.Shutdown()
	signalled(t, disconnected, "disconnect callback")
	select {
	case <-reconnected:
		t.Fatal("reconnect callback with the server down")
	default:
	}

	e = startEmbedded(t, EmbeddedConfig{StoreDir: dir, Port: port})
	signalled(t, reconnected, "reconnect callback")

	ctx := testContext(t)
	if _, err := EnsureStream(ctx, c.JS, eventsSpec); err != nil {
		t.Fatalf("JetStream after reconnect: %v", err)
	}

	c.Close()
	select {
	case err := <-disconnected:
		t.Fatalf("disconnect callback on Close: %v", err)
	default:
	}
	select {
	case <-c.Done():
	default:
		t.Fatal("Done not closed after Close")
	}
}

func TestConnectWaitsForServerUntilContextEnds(t *testing.T) {
	// A port nobody listens on: reserve it, then release it.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "nats://" + l.Addr().String()
	l.Close()

	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = Connect(ctx, Config{URLs: []string{url}, ReconnectWait: 20 * time.Millisecond}, testLogger(t))
	if err == nil {
		t.Fatal("connected to nothing")
	}
	if d := time.Since(start); d < 250*time.Millisecond || d > 5*time.Second {
		t.Errorf("gave up after %v, want about the context's 300ms", d)
	}
}

func TestCredentialsNeverLogged(t *testing.T) {
	e := startEmbedded(t, EmbeddedConfig{})
	var buf syncbuf.Buffer
	log := zerolog.New(&buf).Level(zerolog.DebugLevel)

	// The embedded server has no auth and accepts any credentials.
	u := strings.Replace(e.ClientURL(), "nats://", "nats://alice:hunter2@", 1)
	c, err := Connect(testContext(t), Config{
		URLs:     []string{u, "nats://s3cr3t-token@127.0.0.1:1"},
		User:     "bob",
		Password: "correct-horse",
		Token:    "tok-xyzzy",
	}, log)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	out := buf.String()
	t.Logf("log:\n%s", out)
	if !strings.Contains(out, "connected to NATS") || !strings.Contains(out, redact.Mask+"@") {
		t.Fatalf("expected connect logs with redacted URLs, got:\n%s", out)
	}
	for _, secret := range []string{"hunter2", "s3cr3t-token", "correct-horse", "tok-xyzzy"} {
		if strings.Contains(out, secret) {
			t.Errorf("log contains %q:\n%s", secret, out)
		}
	}
}

func TestBackoff(t *testing.T) {
	base, limit := 100*time.Millisecond, 2*time.Second
	delay := reconnectDelay(base, limit)
	for attempt, ceil := range map[int]time.Duration{
		0: base, 1: base, 2: 2 * base, 3: 4 * base, 5: 16 * base, 6: limit, 100: limit,
	} {
		for range 50 {
			if d := delay(attempt); d < ceil/2 || d > ceil {
				t.Fatalf("attempt %d: delay %v outside [%v, %v]", attempt, d, ceil/2, ceil)
			}
		}
	}
}
