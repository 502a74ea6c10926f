package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/rs/zerolog"
	"github.com/slack-go/slack"
	"github.com/slack-go/slack/socketmode"
	"k8s.io/client-go/rest"

	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bot"
	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/bot/checkpoint"
	botcmd "github.com/hcpbot/hcpbot/bot/command"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/bot/digest"
	"github.com/hcpbot/hcpbot/bot/fleet"
	"github.com/hcpbot/hcpbot/bot/notify"
	"github.com/hcpbot/hcpbot/bot/silence"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/configs"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/logging"
	"github.com/hcpbot/hcpbot/internal/version"
	"github.com/hcpbot/hcpbot/noproxy"
	"github.com/hcpbot/hcpbot/partition"
)

func init() {
	extraCommands = append(extraCommands,
		command{name: "bot", summary: "consume events, post incidents to Slack, answer /hcp (needs --config)", run: runBot},
		command{name: "all", summary: "agent and bot in one process (needs --config with both sections)", run: runAll})
}

func runBot(ctx context.Context, c *cli, args []string) error {
	return runFromConfig(ctx, c, "bot", args)
}
func runAll(ctx context.Context, c *cli, args []string) error {
	return runFromConfig(ctx, c, "all", args)
}

// runFromConfig starts the bot, or agent and bot, from one config file.
func runFromConfig(ctx context.Context, c *cli, name string, args []string) error {
	fs := c.flagSet(name, "--config FILE [--partition K]")
	path := fs.String("config", c.getenv("HCPBOT_CONFIG"), "config file (env HCPBOT_CONFIG); see configs/example.yaml")
	part := fs.String("partition", c.getenv("HCPBOT_PARTITION"), "this process's bot group, 0 to bot.partitions-1 (env HCPBOT_PARTITION); overrides bot.partition, so one Deployment per group shares the config file")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *path == "" {
		return usageErrorf("--config is required")
	}
	cfg, err := configs.Load(*path)
	if err != nil {
		return err
	}
	if cfg.Bot == nil {
		return fmt.Errorf("%s: no bot section", *path)
	}
	if err := overridePartition(cfg.Bot, *part); err != nil {
		return err
	}
	if name == "all" && cfg.Agent == nil {
		return fmt.Errorf("%s: no agent section (hcpbot all runs both)", *path)
	}
	sec, err := cfg.Secrets(c.getenv, os.ReadFile)
	if err != nil {
		return err
	}
	log, err := logging.New(c.stderr, cfg.Log.Level, cfg.Log.Format)
	if err != nil {
		return err
	}
	c.klog(log)
	log.Info().Str("version", version.String()).Str("mode", name).Msg("starting")

	return runConfigured(ctx, c, cfg, sec, name, log)
}

// overridePartition applies --partition (HCPBOT_PARTITION), "" leaving
// bot.partition as the file says; the group must exist.
func overridePartition(b *configs.Bot, flag string) error {
	if flag == "" {
		return nil
	}
	k, err := strconv.Atoi(flag)
	if err != nil {
		return usageErrorf("--partition %q: want a number, 0 to bot.partitions-1", flag)
	}
	if err := b.PartitionSet().ID(k).Check(); err != nil {
		return usageErrorf("--partition %d: bot.partitions is %d, so the groups are 0..%d", k, b.PartitionSet().Count, b.PartitionSet().Count-1)
	}
	b.Partition = k
	return nil
}

// runConfigured runs the bot, or agent and bot (name "all"), as cfg and
// sec describe: `hcpbot bot`, `hcpbot all` and `hcpbot demo` (which
// gives it its own config, secrets and chat transport, c.chat) all start
// here, so the demo runs the product's wiring.
func runConfigured(ctx context.Context, c *cli, cfg *configs.Config, sec *configs.Secrets, name string, log zerolog.Logger) error {
	var err error
	var agentKubeConfig *rest.Config
	if name == "all" {
		// Before anything starts: a process whose agent cannot reach its
		// management cluster must fail, not run a bot that knows nothing.
		if agentKubeConfig, err = agentKube(ctx, c.host(), cfg.Agent.Kubeconfig); err != nil {
			return fmt.Errorf("agent.kubeconfig: %w", err)
		}
	}
	// EnsureStream and EnsureKV log their retries with ctx's logger.
	ctx = log.WithContext(ctx)
	conn, err := connectNATS(ctx, botNATSClient(cfg, sec, name), log)
	if err != nil {
		return err
	}
	defer conn.Close()
	// Health and metrics are served from here on, while the streams and
	// buckets are ensured: on a fresh NATS cluster that takes retries, and
	// a process without /healthz meanwhile would be killed by its liveness
	// probe. /readyz says not ready until botRun has opened everything.
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	var opened atomic.Bool
	ops, err := serveOps(ctx, cfg.Bot.OpsListen, reg, func() error {
		if !opened.Load() {
			return errors.New("starting: streams and buckets not ensured yet")
		}
		if !conn.NC.IsConnected() {
			return errors.New("NATS not connected")
		}
		return nil
	}, log)
	if err != nil {
		return err
	}
	defer ops.Close()
	if err := botStream(ctx, cfg, conn, log); err != nil {
		return err
	}

	signer, err := approvalSigner(cfg, sec, name, log)
	if err != nil {
		return err
	}
	// Either half stopping ends the process, the agent's failure with a
	// non-zero exit: half of `all` running would look healthy and report
	// nothing.
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	var agentErr error
	if name == "all" {
		f := agentFlagsFromConfig(cfg, c.getenv)
		f.kube = agentKubeConfig
		if len(f.trustedKeys) == 0 && signer != nil {
			// One process: the agent trusts the bot beside it.
			f.trustedKeys = []string{signer.PublicKey()}
		}
		ac, closeAgentConn, err := agentConn(ctx, conn, f.source, log)
		if err != nil {
			return err
		}
		defer closeAgentConn()
		wg.Go(func() {
			defer stop()
			if err := agentRun(runCtx, f, ac, log); err != nil && runCtx.Err() == nil {
				log.Error().Err(err).Msg("agent stopped; stopping the bot")
				agentErr = fmt.Errorf("agent: %w", err)
			}
		})
	}
	err = botRun(runCtx, c, cfg, sec, signer, conn, reg, &opened, log)
	stop()
	wg.Wait()
	if agentErr != nil {
		return agentErr
	}
	return err
}

// botStream brings the events stream to the configured settings: the bot
// owns it (the agent only waits for it, or on its own embedded server
// creates it while absent), so these are the settings it keeps. The stream
// holds what happened within nats.eventsMaxAge only, and a quiet cluster's
// facts may have aged out: the bot then asks every agent leader to restate
// its clusters onto the stream, which it replays.
func botStream(ctx context.Context, cfg *configs.Config, conn *bus.Conn, log zerolog.Logger) error {
	spec := bus.EventsStream(cfg.NATS.EventsMaxAge, cfg.NATS.DuplicateWindow, bus.WithReplicas(cfg.NATS.StreamReplicas))
	var err error
	if l := conn.Local(); l != nil {
		// On its own server the process applies the configured settings
		// (the agent may have created the stream with the defaults).
		_, err = l.ApplyStream(ctx, spec, log)
	} else {
		_, err = bus.EnsureStream(ctx, conn.JS, spec)
	}
	if err != nil {
		return err
	}
	if err := conn.NC.Publish(event.RestateSubject, nil); err != nil {
		log.Warn().Err(err).Msg("restatement not requested; the bot knows what the stream holds")
	}
	return nil
}

// approvalSigner is the key approved requests are signed with: the
// configured one, or in `hcpbot all` without one a key made for this
// process (its agent trusts it; nothing else ever sees it). Nil without
// approvals.
func approvalSigner(cfg *configs.Config, sec *configs.Secrets, mode string, log zerolog.Logger) (*approval.Signer, error) {
	switch {
	case cfg.Approvals == nil:
		return nil, nil
	case len(sec.SigningKey) > 0:
		s, err := approval.NewSigner(sec.SigningKey)
		if err != nil {
			return nil, err
		}
		log.Info().Str("publicKey", s.PublicKey()).Msg("approved actions are signed with the configured key")
		return s, nil
	case mode == "all":
		s, err := approval.NewEphemeralSigner()
		if err != nil {
			return nil, err
		}
		log.Info().Str("publicKey", s.PublicKey()).Msg("no approvals.signingKey: approved actions are signed with a key made for this process, trusted by its own agent only")
		return s, nil
	}
	return nil, errNoSigningKey
}

// errNoSigningKey: `hcpbot bot` with approvals and no key to sign with.
var errNoSigningKey = errors.New("approvals need approvals.signingKeyEnv or approvals.signingKeyFile: agents run only requests signed with a key they trust (create one with `hcpbot keygen`)")

// botNATSClient is the NATS connection of `hcpbot bot` or `hcpbot all`
// from the config file and its resolved secrets (nats.credsEnv's content;
// sec may be nil without it), as the bot's role. On the embedded server
// of `all` the agent's user exists too: its agent connects as itself
// (agentConn).
func botNATSClient(cfg *configs.Config, sec *configs.Secrets, mode string) natsClient {
	nc := natsClient{
		urls: joinURLs(cfg.NATS.URLs), storeDir: cfg.NATS.StoreDir, listen: cfg.NATS.EmbeddedListen, creds: cfg.NATS.Creds.File, nkeySeed: cfg.NATS.NkeySeedFile,
		caFile: cfg.NATS.CAFile, name: "hcpbot-" + mode, inboxPrefix: event.BotInboxPrefix, role: bus.BotRole(),
	}
	if mode == "all" && cfg.Agent != nil {
		nc.agents = []string{cfg.Agent.Source}
	}
	if cfg.Bot != nil {
		nc.partitions = cfg.Bot.PartitionSet()
	}
	if sec != nil {
		nc.credsContent = sec.NATSCreds
	}
	return nc
}

// auditVerifyEvery is how often the lease holder verifies the audit
// trail: a full read, about 10 s per 100,000 signed records.
const auditVerifyEvery = time.Hour

// agentConn is the NATS connection of the agent of `hcpbot all`. On the
// embedded server (conn runs it) a connection of its own, as the agent of
// its source: the agent has exactly a deployed agent's rights, not the
// bot's beside it. Against an external NATS the file names one user, so
// the agent shares the bot's connection and that user's rights. The
// returned close is the caller's, before conn's.
func agentConn(ctx context.Context, conn *bus.Conn, source string, log zerolog.Logger) (*bus.Conn, func(), error) {
	l := conn.Local()
	if l == nil {
		return conn, func() {}, nil
	}
	ac, err := l.Connect(ctx, bus.AgentRole(source), bus.Config{Name: "hcpbot-all-agent"}, log)
	if err != nil {
		return nil, nil, fmt.Errorf("agent's NATS connection: %w", err)
	}
	return ac, ac.Close, nil
}

// commandDrain bounds how long a stopping bot waits for running slash
// commands and their delayed replies.
const commandDrain = 5 * time.Second

func joinURLs(urls []string) string {
	out := ""
	for i, u := range urls {
		if i > 0 {
			out += ","
		}
		out += u
	}
	return out
}

// botRun runs the bot until ctx ends: the pipeline, the notifier and the
// Slack endpoints (or Socket Mode), with its metrics in reg (served by
// runConfigured); it sets opened once every stream and bucket is there.
func botRun(ctx context.Context, c *cli, cfg *configs.Config, sec *configs.Secrets, signer *approval.Signer, conn *bus.Conn, reg *prometheus.Registry, opened *atomic.Bool, log zerolog.Logger) error {
	log = log.With().Str("component", "bot").Logger()

	// Every replica keeps the whole state of its group; the holder of
	// the group's lease notifies ("bot", or "bot-p<P>-<k>").
	parts := cfg.Bot.PartitionSet()
	group := parts.ID(cfg.Bot.Partition)
	if group.Count > 1 {
		log = log.With().Str("partition", group.Name()).Logger()
		log.Info().Int("partition", group.Index).Int("partitions", group.Count).Msg("one bot group of several: holding the management clusters of this partition only")
	}
	// A change of leader wakes the bot's flush: a standby taking over
	// sends what the dead leader left at once (the bot is made below).
	var woken atomic.Pointer[bot.Bot]
	lease, err := bus.NewLease(ctx, conn.JS, group.Suffix("bot"), replicaIdentity(c), log, bus.WithReplicas(cfg.NATS.StreamReplicas),
		bus.OnLeaderChange(func(leader bool) {
			if b := woken.Load(); b != nil {
				b.LeaderChanged(leader)
			}
		}))
	if err != nil {
		return err
	}

	console := notify.NewConsole(c.stdout)
	console.SetStyle(chatops.ConsoleStyle(c.users))
	var notifier notify.Notifier = console
	if sec.SlackBotToken != "" {
		store, err := notify.NewKVStore(ctx, conn.JS, notify.KVConfig{}, bus.WithReplicas(cfg.NATS.StreamReplicas))
		if err != nil {
			return err
		}
		n, err := notify.NewSlack(notify.SlackConfig{Client: notify.NewSlackClient(sec.SlackBotToken, cfg.Slack.APIURL, nil), Store: store, Registerer: reg, Log: log,
			// The correlator's incidents and storms (notify.Message.LeaderOnly)
			// go out only while this replica holds the lease: queued behind
			// Slack's pace, they are dropped once another replica leads.
			Leading: lease.Leader})
		if err != nil {
			return err
		}
		notifier = n
	}
	replicas := max(cfg.NATS.StreamReplicas, 1)
	auditOpts := []audit.Option{audit.WithReplicas(replicas)}
	var trusted []string // the keys bot records are signed with, now and before
	if signer != nil {
		// Records the bot writes are signed: whoever holds only its NATS
		// credentials can append, not a record that verifies.
		auditOpts = append(auditOpts, audit.WithSigner(signer.ForAudit()))
		trusted = append([]string{signer.PublicKey()}, cfg.Approvals.TrustedKeys...)
	}
	auditLog, err := audit.Open(ctx, conn.JS, auditOpts...)
	if err != nil {
		return err
	}
	auditMetrics, err := audit.NewMetrics(reg)
	if err != nil {
		return err
	}
	verifier := audit.NewVerifier(auditLog, audit.VerifyOptions{TrustedKeys: trusted}, auditMetrics, log)
	silences, err := silence.NewStore(ctx, conn.JS, auditLog, silenceOptions(cfg, signer, replicas, log)...)
	if err != nil {
		return err
	}
	bcfg := botConfig(cfg.Bot, lease.Leader)
	bcfg.Partitions, bcfg.Partition = parts, group.Index
	// Checkpoints: a start replays an hour of events at most, not the
	// stream's 72 h (bot/checkpoint). Each is sealed with the signing key,
	// as everything the bot reads back and acts on: without one (no
	// approvals) every start replays the whole stream.
	if signer != nil {
		checkpoints, err := bus.EnsureKV(ctx, conn.JS, bus.CheckpointsKV(0, bus.WithReplicas(cfg.NATS.StreamReplicas)))
		if err != nil {
			return err
		}
		if bcfg.Checkpoints, err = checkpoint.New(checkpoints, signer.ForCheckpoints(), cfg.Approvals.TrustedKeys...); err != nil {
			return err
		}
	} else {
		log.Info().Msg("no signing key (no approvals): no checkpoints, every start replays the whole events stream")
	}
	bcfg.Silenced = func(cluster, incident string, now time.Time) (bot.SilenceInfo, bool) {
		s, ok := silences.Match(cluster, incident, now)
		return bot.SilenceInfo{ID: s.ID, By: s.CreatedBy, Reason: s.Reason, Until: s.ExpiresAt}, ok
	}
	b := bot.New(bcfg, conn.JS, notifier, reg, log)
	woken.Store(b)
	reader, serveFleet, err := botFleet(cfg, group, parts, conn, signer, b, log)
	if err != nil {
		return err
	}
	commands := &botcmd.Handler{Bot: reader, Audit: auditLog, AuditVerifier: verifier, Silences: silences, Identities: cfg.Identities}
	if n, isSlack := notifier.(*notify.Slack); isSlack {
		commands.Delivery = n // `/hcp status` lists the channels Slack refuses
	}
	people := slackPeople(cfg, sec)
	commands.Groups, commands.Emails = people.groups, people.emails
	var flow *approval.Flow
	if cfg.Approvals != nil {
		if flow, err = newFlow(ctx, cfg, people, signer, conn, auditLog, notifier, reg, log); err != nil {
			return err
		}
		commands.Changes = &botcmd.Changes{Flow: flow, Audit: auditLog, Log: log}
	}
	var runner *digest.Runner
	if len(cfg.Digests) > 0 {
		mode := digest.Full
		if sec.SlackBotToken != "" {
			mode = digest.Compact
		}
		dc := digest.Config{Digests: cfg.Digests, Bot: reader, Out: notifier, Mode: mode, ClientsOf: clientsOf(cfg.Bot), Log: log}
		dc.Audit = auditLog
		dc.Silences = silences
		if flow != nil {
			dc.Exposures = flow
		}
		r, err := digest.NewRunner(ctx, conn.JS, dc, bus.WithReplicas(cfg.NATS.StreamReplicas))
		if err != nil {
			return err
		}
		runner = r
		commands.Digester = runner
	}

	// Slack's requests, over HTTP and over Socket Mode, share one replay
	// guard in NATS KV (a replay reaching another replica is refused too)
	// and one responder for late replies (response_urls checked alike).
	slackOpts, err := slackOptions(ctx, cfg, conn, reg, log)
	if err != nil {
		return err
	}
	if sec.SlackSigningSecret != "" {
		srv, err := chatops.NewServer(sec.SlackSigningSecret, commands, slackOpts...)
		if err != nil {
			return err
		}
		// The listener that faces Slack serves only /slack/*: the Server
		// answers 404 for any other path. Health and metrics are on
		// bot.opsListen, which stays inside the cluster.
		web, err := serveHTTP(ctx, cfg.Bot.Listen, srv, slackLimits, chatops.CommandsPath+", "+chatops.ActionsPath, log)
		if err != nil {
			return err
		}
		defer func() {
			// Slash commands still running get a moment to answer, not
			// longer: the pod's grace period is short.
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commandDrain)
			defer cancel()
			_ = web.Shutdown(sctx)
			_ = srv.Shutdown(sctx)
		}()
	}
	// Every stream and bucket is there: ready (runConfigured's /readyz).
	opened.Store(true)
	log.Info().Msg("streams and buckets ensured; ready")

	var wg sync.WaitGroup
	wg.Go(func() { _ = lease.Run(ctx) })
	if serveFleet != nil {
		wg.Go(func() { _ = serveFleet(ctx) })
	}
	// The lease holder checks the whole trail's chain (and signatures)
	// every hour; hcpbot_audit_verify_problems says what it found.
	// One check per fleet, not per group: group 0's leader.
	wg.Go(func() { _ = verifier.Run(ctx, auditVerifyEvery, fleetOnce(group, lease.Leader)) })
	wg.Go(func() {
		if err := silences.Run(ctx); err != nil && ctx.Err() == nil {
			log.Error().Err(err).Msg("silence watch stopped")
		}
	})
	if flow != nil {
		// Every replica: approved changes are sent and followed to their
		// outcome, what a dead replica left is adopted, what nobody
		// decided expires. Safe in parallel (approval.Flow.Run).
		wg.Go(func() { _ = flow.Run(ctx) })
	}
	wg.Go(func() { _ = notifier.Run(ctx) })
	refusals := &botcmd.RefusalNotices{
		JS: conn.JS, Out: notifier, Leader: lease.Leader, Log: log,
		Channel: func(source string) string { return cfg.Bot.Channel(configs.Incident{Source: source}) },
		// Each group tells about the management clusters it holds.
		Owns: func(source string) bool { return parts.Of(source) == group.Index },
	}
	wg.Go(func() {
		if err := refusals.Run(ctx); err != nil && ctx.Err() == nil {
			log.Error().Err(err).Msg("refusal notices stopped")
		}
	})
	if runner != nil && group.Index == 0 {
		// A digest covers the whole fleet, gathered from every group
		// (bot/fleet): group 0 alone posts it on schedule. Other groups
		// keep the runner for /hcp digest answers.
		wg.Go(func() {
			if err := runner.Run(ctx); err != nil && ctx.Err() == nil {
				log.Error().Err(err).Msg("digest scheduler stopped")
			}
		})
	}
	if cfg.Slack != nil && cfg.Slack.SocketMode && sec.SlackAppToken != "" {
		api := slack.New(sec.SlackBotToken, slack.OptionAppLevelToken(sec.SlackAppToken), slack.OptionAPIURL(cfg.Slack.APIURL))
		wg.Go(func() {
			if err := chatops.RunSocketMode(ctx, socketmode.New(api), commands, log, slackOpts...); err != nil && ctx.Err() == nil {
				log.Error().Err(err).Msg("socket mode stopped")
			}
		})
	}
	if flow != nil {
		// The fixes already executed are known before the events replay,
		// so each incident's timeline comes out the same on every run.
		if err := botcmd.FollowFixes(ctx, flow, b); err != nil && ctx.Err() == nil {
			return err
		}
	}
	if c.chat != nil {
		c.chat(b, commands)
	}
	err = b.Run(ctx)
	wg.Wait()
	return err
}

// fleetReader is what the commands and the digest read: the local bot,
// or with partitions the whole fleet through it.
type fleetReader interface {
	botcmd.Correlator
	digest.States
}

// botFleet makes the commands and the digest of a partitioned bot (P > 1)
// read every group (package bot/fleet): the returned run answers the
// other groups' requests from b on hcpbot.fleet.<P>.<k> until its context
// ends. Answers are sealed with the signing key, so partitions need one.
// With one group it returns b and no run: no subscription, no subject.
func botFleet(cfg *configs.Config, group partition.ID, set partition.Set, conn *bus.Conn, signer *approval.Signer, b *bot.Bot, log zerolog.Logger) (fleetReader, func(context.Context) error, error) {
	if group.Count <= 1 {
		return b, nil, nil
	}
	if signer == nil {
		return nil, nil, errors.New("bot.partitions > 1 needs approvals with a signing key: the groups' answers to each other are sealed with it")
	}
	log = log.With().Str("component", "fleet").Int("group", group.Index).Int("groups", group.Count).Logger()
	srv, err := fleet.NewServer(fleet.ServerConfig{Group: group, Bot: b, Conn: conn.NC, Signer: signer.ForFleet(), Log: log})
	if err != nil {
		return nil, nil, err
	}
	client, err := fleet.NewClient(fleet.ClientConfig{Set: set, Self: group.Index, Bot: b, Conn: conn.NC,
		Trusted: append([]string{signer.PublicKey()}, cfg.Approvals.TrustedKeys...), Log: log})
	if err != nil {
		return nil, nil, err
	}
	return client, srv.Run, nil
}

// fleetOnce is leader for what one replica of the whole fleet does (the
// audit trail's check): group 0's lease holder.
func fleetOnce(group partition.ID, leader func() bool) func() bool {
	if group.Index == 0 {
		return leader
	}
	return func() bool { return false }
}

// slackOptions are the chatops options of both transports: the replay
// guard shared by all replicas (bucket ensured whichever transport runs),
// the responder for late replies, metrics and log.
func slackOptions(ctx context.Context, cfg *configs.Config, conn *bus.Conn, reg prometheus.Registerer, log zerolog.Logger) ([]chatops.Option, error) {
	kv, err := chatops.EnsureReplayBucket(ctx, conn.JS, bus.WithReplicas(cfg.NATS.StreamReplicas))
	if err != nil {
		return nil, err
	}
	guard, err := chatops.NewKVReplayGuard(ctx, kv)
	if err != nil {
		return nil, err
	}
	var apiURL string // "" means Slack's own hosts
	if cfg.Slack != nil {
		apiURL = cfg.Slack.APIURL
	}
	responder, err := chatops.NewResponderFor(&http.Client{Timeout: 10 * time.Second}, responseURLPrefixes(apiURL)...)
	if err != nil {
		return nil, err
	}
	return []chatops.Option{chatops.WithReplayGuard(guard), chatops.WithResponder(responder), chatops.WithRegisterer(reg), chatops.WithLogger(log)}, nil
}

// newFlow opens the approval flow with the configured policy, audited to
// log. Outcomes that no conversation of this replica waits for (its
// approver's replica died, a restart) are posted to the channel the
// decision was asked in, else the incident channel of the cluster.
// Without approvals, commands that change clusters answer that they are
// unavailable.
func newFlow(ctx context.Context, cfg *configs.Config, people people, signer *approval.Signer, conn *bus.Conn, log *audit.Log,
	out notify.Notifier, reg prometheus.Registerer, logger zerolog.Logger) (*approval.Flow, error) {
	a := cfg.Approvals
	fc := approval.Config{
		Signer: signer, TrustedKeys: a.TrustedKeys, Trail: log, Replicas: max(cfg.NATS.StreamReplicas, 1), Log: logger, Registerer: reg,
		Identities: cfg.Identities, Groups: people.groups, Emails: people.emails,
		Policy: approval.Policy{Approvers: a.Approvers, ApproverGroups: a.ApproverGroups, FourEyes: a.FourEyes, Approvals: a.Required, TTL: a.ProposalTTL},
		Outcomes: func(ctx context.Context, p approval.Proposal) {
			channel := p.Channel
			if channel == "" {
				channel = cfg.Bot.Channel(configs.Incident{Source: p.Source, Namespace: p.Change.Cluster.Namespace, Cluster: p.Change.Cluster.Name})
			}
			r := botcmd.Outcome(p)
			if err := out.Upsert(ctx, notify.Message{Key: "outcome-" + p.ID, Channel: channel, Text: r.Text, Blocks: r.Blocks, Version: 1}); err != nil {
				logger.Warn().Err(err).Str("action", p.ID).Msg("outcome not posted")
			}
		},
	}
	if len(a.ApproverGroups) > 0 && people.groups == nil {
		return nil, errors.New("approvals.approverGroups need the Slack bot token to read group members")
	}
	return approval.NewFlow(ctx, conn.JS, fc)
}

// people reads who is who in Slack: the members of user groups (approver
// groups, identities naming a group) and e-mails (identities with an
// emailPrefix), both read at each approval. Without the bot token there is
// neither.
type people struct {
	groups approval.Groups
	emails approval.Emails
}

func slackPeople(cfg *configs.Config, sec *configs.Secrets) people {
	if sec.SlackBotToken == "" || cfg.Slack == nil {
		return people{}
	}
	client := notify.NewSlackClient(sec.SlackBotToken, cfg.Slack.APIURL, nil)
	return people{groups: botcmd.SlackGroups{Client: client}, emails: &botcmd.SlackProfiles{Client: client}}
}

// responseURLPrefixes are where the bot may POST delayed replies: Slack's
// hooks host (real Slack sends https://hooks.slack.com/… whatever API
// address the bot uses), and with a Slack-compatible API at another
// address that host too, since its response_urls point there. Anything
// else in a payload is refused.
func responseURLPrefixes(apiURL string) []string {
	u, err := url.Parse(apiURL)
	if err != nil || u.Host == "" || u.Host == "slack.com" {
		return []string{chatops.DefaultResponseURLPrefix}
	}
	return []string{chatops.DefaultResponseURLPrefix, u.Scheme + "://" + u.Host + "/"}
}

// botConfig maps the bot section onto the correlator's settings.
func botConfig(c *configs.Bot, leader func() bool) bot.Config {
	return bot.Config{
		Channel: c.DefaultChannel,
		Route: func(k diagnose.Key, kind string, labels map[string]string) string {
			return c.Channel(configs.Incident{Source: k.Source, Namespace: k.Cluster.Namespace, Cluster: k.Cluster.Name, Kind: kind, Labels: labels})
		},
		GroupWait: c.GroupWait, GroupInterval: c.GroupInterval, ResolveTimeout: c.ResolveTimeout,
		HealDeadline: c.HealDeadline, CheckpointEvery: checkpointEvery(c.CheckpointEvery),
		StormThreshold: c.Storm.Threshold, StormWindow: c.Storm.Window,
		Clients: clientsOf(c),
		Leader:  leader,
	}
}

// clientsOf chooses a hosted cluster's NO_PROXY client families from the
// bot section (configs.Bot.Clients: first route with noProxyClients, else
// bot.noProxyClients, else the default families).
func clientsOf(c *configs.Bot) diagnose.ClientsFunc {
	return func(k diagnose.Key, labels map[string]string) []noproxy.Client {
		return c.Clients(configs.Incident{Source: k.Source, Namespace: k.Cluster.Namespace, Cluster: k.Cluster.Name, Labels: labels})
	}
}

// replicaIdentity names this bot replica in its lease: the pod name, else
// the host name, plus the process id (two processes on one host differ).
func replicaIdentity(c *cli) string {
	name := c.getenv("POD_NAME")
	if name == "" {
		name, _ = os.Hostname()
	}
	return fmt.Sprintf("%s-%d", name, os.Getpid())
}
