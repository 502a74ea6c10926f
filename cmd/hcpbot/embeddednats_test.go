package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/rs/zerolog"

	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/configs"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/testenv"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
	"github.com/hcpbot/hcpbot/internal/testenv/slackrec"
	"github.com/hcpbot/hcpbot/internal/testenv/syncbuf"
)

// allEmbeddedConfig is an `hcpbot all` on the embedded server (no
// nats.urls) in store, with natsExtra added to the nats section.
func allEmbeddedConfig(store, natsExtra, source, kubeconfig, ns, agentAddr, botAddr, opsAddr, slackURL string) string {
	return fmt.Sprintf(`nats:
  storeDir: %q
%sagent:
  source: %s
  kubeconfig: %s
  listen: %q
  leaderElection: {namespace: %s}
bot:
  listen: %q
  opsListen: %q
  defaultChannel: C0EMBNATS1
slack:
  apiURL: %q
  botTokenEnv: TEST_SLACK_BOT_TOKEN
  signingSecretEnv: TEST_SLACK_SIGNING_SECRET
approvals:
  approvers: [U0EMBNATS1, U0EMBNATS2]
log: {level: info, format: json}
`, store, natsExtra, source, kubeconfig, agentAddr, ns, botAddr, opsAddr, slackURL)
}

// The `hcpbot all` PROCESS on its defaults has no NATS listener: the
// sockets it listens on are exactly its three HTTP listeners (agent.listen,
// bot.listen, bot.opsListen, read from /proc), none of which speaks NATS
// (a raw TCP dial gets no INFO, a nats.go client does not connect), and
// it writes no keys. A local process finds no door to the approval store
// or the audit trail.
func TestAllEmbeddedNATSNoListener(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the hcpbot binary")
	}
	if _, err := os.Stat("/proc/self/net/tcp"); err != nil {
		t.Skip("needs /proc to list the process's sockets")
	}
	ns, _, _, kubeconfig := allCluster(t, "embnats")
	dir := t.TempDir()
	bin := buildBinary(t, dir)
	rec := slackrec.New(t)
	store := filepath.Join(dir, "nats")
	agentAddr, botAddr, opsAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	path := filepath.Join(dir, "hcpbot.yaml")
	if err := os.WriteFile(path, []byte(allEmbeddedConfig(store, "", "mgmt-embnats", kubeconfig, ns, agentAddr, botAddr, opsAddr, rec.APIURL())), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := startProcess(t, bin, dir, "all", path, "embnats-0")
	waitReady(t, opsAddr)
	waitReady(t, agentAddr)

	logs, _ := os.ReadFile(filepath.Join(dir, "embnats-0.log"))
	if !strings.Contains(string(logs), "no listener, in-process connections only; authentication required") {
		t.Errorf("the start log does not say the embedded server has no listener:\n%s", tail(string(logs), 4000))
	}
	if _, err := os.Stat(filepath.Join(store, bus.KeysDir)); !os.IsNotExist(err) {
		t.Errorf("keys written without a listener: %v", err)
	}
	// Bot and agent each work within their role's rights.
	if strings.Contains(string(logs), "Permissions Violation") {
		t.Errorf("the server refused the bot or the agent something:\n%s", tail(string(logs), 4000))
	}

	ports, err := listeningPorts(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	var want []int
	for _, a := range []string{agentAddr, botAddr, opsAddr} {
		_, p, _ := net.SplitHostPort(a)
		n, _ := strconv.Atoi(p)
		want = append(want, n)
	}
	slices.Sort(want)
	if !slices.Equal(ports, want) {
		t.Errorf("the process listens on ports %v, want only its HTTP listeners %v", ports, want)
	}
	for _, p := range ports {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
		if line := firstLine(t, addr); strings.HasPrefix(line, "INFO ") {
			t.Errorf("%s speaks NATS: %q", addr, line)
		}
		if nc, err := nats.Connect("nats://"+addr, nats.Timeout(2*time.Second)); err == nil {
			nc.Close()
			t.Errorf("a NATS client connected to %s", addr)
		}
	}
}

// listeningPorts are the TCP ports the process pid listens on: the
// LISTEN rows of /proc/<pid>/net/tcp{,6} whose socket is one of its file
// descriptors.
func listeningPorts(pid int) ([]int, error) {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return nil, err
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		target, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if inode, ok := strings.CutPrefix(target, "socket:["); ok && err == nil {
			inodes[strings.TrimSuffix(inode, "]")] = true
		}
	}
	var ports []int
	for _, table := range []string{"tcp", "tcp6"} {
		f, err := os.Open(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // header
		for sc.Scan() {
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || fields[3] != "0A" || !inodes[fields[9]] {
				continue
			}
			_, hexPort, _ := strings.Cut(fields[1], ":")
			if p, err := strconv.ParseUint(hexPort, 16, 16); err == nil && !slices.Contains(ports, int(p)) {
				ports = append(ports, int(p))
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return nil, err
		}
	}
	slices.Sort(ports)
	return ports, nil
}

// firstLine is what a server at addr says first, within a second, without
// being asked (a NATS server sends INFO at once; an HTTP server nothing).
func firstLine(t *testing.T, addr string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	line, _ := bufio.NewReader(c).ReadString('\n')
	return line
}

// The agent of `hcpbot all` on the embedded server has its own
// connection as its source's agent (agentConn, as runConfigured makes
// it): it reads the approval store but cannot write it, and cannot send
// action requests, which the bot's connection beside it can. On the same
// server with its defaults the bot's role cannot shorten the audit trail:
// the update (MaxMsgs 1, Discard old) is refused and all 50
// records remain; delete and purge are refused.
func TestAllEmbeddedRoles(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*natstest.Timeout)
	defer cancel()
	cfg, err := configs.Parse([]byte(fmt.Sprintf("nats:\n  storeDir: %s\nagent:\n  source: mgmt-roles\nbot:\n  defaultChannel: C0EMBROLE1\nslack:\n  botTokenEnv: T\n  signingSecretEnv: S\n", t.TempDir())), "hcpbot.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var botLogs, agentLogs syncbuf.Buffer
	conn, err := connectNATS(ctx, botNATSClient(cfg, nil, "all"), zerolog.New(&botLogs))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ac, closeAC, err := agentConn(ctx, conn, cfg.Agent.Source, zerolog.New(&agentLogs))
	if err != nil {
		t.Fatal(err)
	}
	defer closeAC()
	if ac == conn {
		t.Fatal("the agent shares the bot's connection on the embedded server")
	}
	inbox, _ := event.AgentInboxPrefix(cfg.Agent.Source)
	if got := ac.NC.NewInbox(); !strings.HasPrefix(got, inbox+".") {
		t.Errorf("agent's inbox %q, want %s", got, inbox)
	}

	// What the bot owns, made by the bot.
	proposals, err := bus.EnsureKV(ctx, conn.JS, bus.ProposalsKV(0))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := proposals.Put(ctx, "act-roles", []byte(`{"by":"bot"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := bus.EnsureStream(ctx, conn.JS, bus.ActionsStream()); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.JS.Publish(ctx, "hcpbot.actions.mgmt-roles.request", []byte(`{}`), jetstream.WithMsgID("bot-1")); err != nil {
		t.Fatalf("the bot cannot queue a request: %v", err)
	}

	akv, err := ac.JS.KeyValue(ctx, bus.ProposalsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if e, err := akv.Get(ctx, "act-roles"); err != nil || string(e.Value()) != `{"by":"bot"}` {
		t.Fatalf("the agent cannot read the proposal: %v, %v", e, err)
	}
	deniedFor(t, &agentLogs, "$KV."+bus.ProposalsBucket+".act-roles", func(ctx context.Context) error {
		_, err := akv.Put(ctx, "act-roles", []byte(`{"by":"agent"}`))
		return err
	})
	for _, subject := range []string{"hcpbot.actions.mgmt-roles.request", "hcpbot.actions.mgmt-other.request"} {
		deniedFor(t, &agentLogs, subject, func(ctx context.Context) error {
			_, err := ac.JS.Publish(ctx, subject, []byte(`{}`))
			return err
		})
	}
	if e, err := proposals.Get(ctx, "act-roles"); err != nil || string(e.Value()) != `{"by":"bot"}` {
		t.Errorf("proposal after the agent's attempts: %v, %v", e, err)
	}

	// The audit trail, on the same server.
	alog, err := audit.Open(ctx, conn.JS)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if err := alog.Append(ctx, audit.Record{Kind: audit.KindProposed, ActionID: fmt.Sprintf("act-%04d", i), Source: "mgmt-roles"}); err != nil {
			t.Fatal(err)
		}
	}
	s, err := conn.JS.Stream(ctx, audit.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	attack := s.CachedInfo().Config
	attack.MaxMsgs, attack.Discard = 1, jetstream.DiscardOld
	deniedFor(t, &botLogs, "$JS.API.STREAM.UPDATE."+audit.StreamName, func(ctx context.Context) error {
		_, err := conn.JS.UpdateStream(ctx, attack)
		return err
	})
	deniedFor(t, &botLogs, "$JS.API.STREAM.DELETE."+audit.StreamName, func(ctx context.Context) error {
		return conn.JS.DeleteStream(ctx, audit.StreamName)
	})
	deniedFor(t, &botLogs, "$JS.API.STREAM.PURGE."+audit.StreamName, func(ctx context.Context) error {
		return s.Purge(ctx)
	})
	deniedFor(t, &botLogs, "$JS.API.STREAM.MSG.DELETE."+audit.StreamName, func(ctx context.Context) error {
		return s.DeleteMsg(ctx, 1)
	})
	info, err := s.Info(ctx)
	if err != nil || info.State.Msgs != 50 || info.Config.MaxMsgs != -1 {
		t.Fatalf("audit stream after the attacks: %+v, %v; want 50 records, no message limit", info, err)
	}
	if recs, err := alog.Recent(ctx, 100); err != nil || len(recs) != 50 {
		t.Fatalf("audit.Recent: %d records, %v; want 50", len(recs), err)
	}
}

// deniedFor runs do, with a short deadline, as the product's client would,
// and expects it to fail with the server's permission violation for
// publishing on subject, which the connection logs (its asynchronous
// error) to logs.
func deniedFor(t *testing.T, logs *syncbuf.Buffer, subject string, do func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := do(ctx); err == nil {
		t.Errorf("publish to %s: allowed", subject)
		return
	}
	want := fmt.Sprintf("Permissions Violation for Publish to \\\"%s\\\"", subject)
	testenv.Eventually(t, natstest.Timeout, "the permission violation for "+subject, func() bool {
		return strings.Contains(logs.String(), want)
	})
}

// nats.embeddedListen: `hcpbot all` listens there too, and only for this
// start's keys: a client without credentials or with an unknown key is
// refused; the bot's seed file (0600, in the store's keys folder, its
// path logged, never the seed) connects with the bot's rights only (it
// may not update the audit stream nor publish events); the agent's with
// the agent's (it may not write the approval store or send requests).
func TestAllEmbeddedListen(t *testing.T) {
	ns, _, _, kubeconfig := allCluster(t, "emblisten")
	rec := slackrec.New(t)
	store := filepath.Join(t.TempDir(), "nats")
	natsAddr, agentAddr, botAddr, opsAddr := freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t)
	const source = "mgmt-emblisten"
	logs := startMode(t, "all", allEmbeddedConfig(store, fmt.Sprintf("  embeddedListen: %q\n", natsAddr), source, kubeconfig, ns, agentAddr, botAddr, opsAddr, rec.APIURL()),
		map[string]string{"TEST_SLACK_BOT_TOKEN": "xoxb-0000-emblisten", "TEST_SLACK_SIGNING_SECRET": "secret-emblisten", "POD_NAME": "emblisten-0"})
	waitReady(t, opsAddr)
	waitReady(t, agentAddr)
	if !strings.Contains(logs.String(), "listening on "+natsAddr+"; authentication required") {
		t.Errorf("start log:\n%s", tail(logs.String(), 4000))
	}
	// Bot and agent each work within their role's rights.
	if strings.Contains(logs.String(), "Permissions Violation") {
		t.Errorf("the server refused the bot or the agent something:\n%s", tail(logs.String(), 4000))
	}
	url := "nats://" + natsAddr
	stranger, _ := nkeys.CreateUser()
	spub, _ := stranger.PublicKey()
	for name, opts := range map[string][]nats.Option{"no credentials": nil, "unknown key": {nats.Nkey(spub, stranger.Sign)}} {
		nc, err := nats.Connect(url, append(opts, nats.Timeout(natstest.Timeout))...)
		if err == nil {
			nc.Close()
			t.Errorf("%s: connected", name)
		} else if !strings.Contains(strings.ToLower(err.Error()), "authorization violation") {
			t.Errorf("%s: %v, want an authorization violation", name, err)
		}
	}

	seeds := map[string]string{"bot": filepath.Join(store, bus.KeysDir, "bot.seed"), "agent": filepath.Join(store, bus.KeysDir, "agent-"+source+".seed")}
	for who, path := range seeds {
		st, err := os.Stat(path)
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s seed file %s: %v, %v; want mode 0600", who, path, st, err)
		}
		if !strings.Contains(logs.String(), path) {
			t.Errorf("the %s seed file is not logged", who)
		}
		if strings.Contains(logs.String(), seedOf(t, path)) {
			t.Errorf("the %s seed reached the logs", who)
		}
	}

	ctx := context.Background()
	var botLogs, agentLogs syncbuf.Buffer
	bot, err := bus.Connect(ctx, bus.Config{URLs: []string{url}, NkeySeedFile: seeds["bot"], InboxPrefix: event.BotInboxPrefix}, zerolog.New(&botLogs))
	if err != nil {
		t.Fatal(err)
	}
	defer bot.Close()
	testenv.Eventually(t, natstest.Timeout, "the audit stream, created by the bot of `all`", func() bool {
		_, err := bot.JS.Stream(ctx, audit.StreamName)
		return err == nil
	})
	s, _ := bot.JS.Stream(ctx, audit.StreamName)
	attack := s.CachedInfo().Config
	attack.MaxMsgs, attack.Discard = 1, jetstream.DiscardOld
	deniedFor(t, &botLogs, "$JS.API.STREAM.UPDATE."+audit.StreamName, func(ctx context.Context) error {
		_, err := bot.JS.UpdateStream(ctx, attack)
		return err
	})
	deniedFor(t, &botLogs, "hcpbot.events."+source+"._._.node", func(ctx context.Context) error {
		_, err := bot.JS.Publish(ctx, "hcpbot.events."+source+"._._.node", []byte(`{}`))
		return err
	})

	inbox, _ := event.AgentInboxPrefix(source)
	agent, err := bus.Connect(ctx, bus.Config{URLs: []string{url}, NkeySeedFile: seeds["agent"], InboxPrefix: inbox}, zerolog.New(&agentLogs))
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Close()
	deniedFor(t, &agentLogs, "$KV."+bus.ProposalsBucket+".act-x", func(ctx context.Context) error {
		_, err := agent.JS.Publish(ctx, "$KV."+bus.ProposalsBucket+".act-x", []byte(`{}`))
		return err
	})
	deniedFor(t, &agentLogs, "hcpbot.actions."+source+".request", func(ctx context.Context) error {
		_, err := agent.JS.Publish(ctx, "hcpbot.actions."+source+".request", []byte(`{}`))
		return err
	})
}
