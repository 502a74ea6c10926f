package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/configs"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/identity"
	"github.com/hcpbot/hcpbot/internal/logging"
	"github.com/hcpbot/hcpbot/internal/version"
	"github.com/hcpbot/hcpbot/partition"
	"github.com/hcpbot/hcpbot/watchers"
)

func init() {
	extraCommands = append(extraCommands, command{name: "agent", summary: "watch a management cluster and its hosted clusters; publish events to NATS", run: runAgent})
}

// agentFlags are the agent's settings, from the config file's sections
// and the command line (runAgent) or from the file alone (hcpbot all).
type agentFlags struct {
	kubeconfig string
	// host is what the agent reads of the machine it runs on (cli.host):
	// where its kubeconfig and its embedded NATS store are found.
	host host
	// kube is the management cluster's client config, loaded and checked
	// by agentKube before anything else starts.
	kube      *rest.Config
	source    string
	natsURLs  string
	natsStore string
	// natsListen is nats.embeddedListen: where the embedded server also
	// accepts TCP clients, with this start's keys only.
	natsListen   string
	natsCreds    string
	natsNkeySeed string
	natsCA       string
	// events: the events stream settings the file writes
	// (nats.streamReplicas, eventsMaxAge, duplicateWindow), zero where it
	// does not: what agentStream applies or checks.
	events bus.EventsSettings
	// ensureStream: agentRun makes sure the events stream exists before
	// it publishes (agentStream). False in `hcpbot all`, whose bot has
	// created it with the configured settings.
	ensureStream   bool
	listen         string
	leaderElect    bool
	leaseNamespace string
	leaseName      string
	identity       string
	bufferEvents   int
	logLevel       string
	logFormat      string
	probeInterval  time.Duration
	nodeJoinGrace  time.Duration     // 0: watchers.DefaultNodeJoinGrace
	nodePortRange  actions.PortRange // zero: actions.DefaultNodePortRange
	lease          watchers.LeaderConfig
	// Which action requests the agent runs (approval.Trust).
	trustedKeys     []string
	requireFourEyes bool
	approvers       []string
	// requiredApprovals is the least number of approvals accepted.
	requiredApprovals int
	// actionAckWait: how soon another replica takes over a request from
	// a leader that died (wire.ConsumerConfig); 0 is the default.
	actionAckWait time.Duration
	// natsCredsContent is a .creds file's content, from the variable
	// nats.credsEnv names.
	natsCredsContent []byte
	// identities: who the agent acts as on each approval (the file's
	// identities section, the same the bot reads).
	identities identity.Map
}

// agentFlagUsage is the one line of `hcpbot agent --help`.
const agentFlagUsage = "[--config FILE] [--source NAME] [flags]\n\n" +
	"Settings come from the config file's agent, nats and log sections (configs/example.yaml);\n" +
	"a flag given overrides its environment variable, which overrides the file.\n" +
	"Settings without a flag (lease timings, bufferEvents, hostedProbeInterval, requireFourEyes,\n" +
	"requiredApprovals, actionAckWait, approvers, log.level, nats.storeDir, nats.embeddedListen,\n" +
	"nats.credsFile, nats.streamReplicas, nats.eventsMaxAge, nats.duplicateWindow) are in the file\n" +
	"only. The events stream is the bot's against nats.urls: the agent warns at start where it lacks\n" +
	"what the file's nats.streamReplicas, eventsMaxAge or duplicateWindow say; on its own embedded\n" +
	"server it creates the stream with them and applies those the file writes.\n"

// runAgent starts the agent from the agent section of a config file
// (--config; the nats and log sections too), or from defaults without
// one. The command line has only the settings a Kubernetes manifest sets
// per cluster or per pod; everything else is in the file. Precedence: a
// flag given, else its environment variable if set, else the file, else
// the default. POD_NAMESPACE and POD_NAME are defaults, not overrides:
// the Lease namespace written in the file wins over the pod's.
func runAgent(ctx context.Context, c *cli, args []string) error {
	f, err := agentSettings(c, args)
	if err != nil {
		return err
	}
	log, err := logging.New(c.stderr, f.logLevel, f.logFormat)
	if err != nil {
		return usageErrorf("%v", err)
	}
	c.klog(log)
	return agentMain(ctx, f, log)
}

// agentSettings reads the file and the command line into the agent's
// settings, and checks them.
func agentSettings(c *cli, args []string) (agentFlags, error) {
	fs := c.flagSet("agent", agentFlagUsage)
	path := fs.String("config", c.getenv("HCPBOT_CONFIG"), "config file; its agent, nats and log sections are read (env HCPBOT_CONFIG; see configs/example.yaml)")
	fs.String("kubeconfig", "", "agent.kubeconfig: the management cluster's kubeconfig (default: in-cluster, then $KUBECONFIG, then ~/.kube/config)")
	fs.String("source", "", "agent.source: this management cluster's name in events (env HCPBOT_SOURCE)")
	fs.String("nats-url", "", "nats.urls, comma-separated; none starts an embedded server (env HCPBOT_NATS_URL)")
	fs.String("nats-nkey-seed", "", "nats.nkeySeedFile: file holding this agent's NATS nkey user seed (env HCPBOT_NATS_NKEY_SEED)")
	fs.String("nats-ca", "", "nats.caFile: CA file verifying the NATS servers' TLS certificates (env HCPBOT_NATS_CA)")
	fs.String("trusted-keys", "", "agent.trustedKeys, comma-separated public keys (U…) whose signed action requests the agent runs (env HCPBOT_TRUSTED_KEYS)")
	fs.String("listen", "", "agent.listen: address of /healthz, /readyz and /metrics (default "+configs.DefaultAgentListen+")")
	fs.Bool("leader-elect", true, "agent.leaderElection.enabled: compete for a Lease so that only one replica publishes")
	fs.String("lease-name", "", "agent.leaderElection.leaseName (default "+configs.DefaultLeaseName+")")
	fs.String("lease-namespace", "", "agent.leaderElection.namespace (default $POD_NAMESPACE, else \"default\")")
	fs.String("log-format", "", "log.format: json or console (default "+configs.DefaultLogFormat+")")
	identity := fs.String("identity", c.getenv("POD_NAME"), "this replica's name (env POD_NAME; default the host name)")
	if err := parseFlags(fs, args); err != nil {
		return agentFlags{}, err
	}
	cfg := configs.AgentDefaults()
	if *path != "" {
		var err error
		if cfg, err = configs.Load(*path); err != nil {
			return agentFlags{}, err
		}
		if cfg.Agent == nil {
			return agentFlags{}, usageErrorf("%s: no agent section", *path)
		}
	}
	agentOverride(cfg, fs, c.getenv)
	if cfg.Agent.Source == "" {
		return agentFlags{}, usageErrorf("--source is required (or agent.source in --config): the name of this management cluster")
	}
	if len(cfg.NATS.URLs) == 0 && (cfg.NATS.Creds.IsSet() || cfg.NATS.NkeySeedFile != "" || cfg.NATS.CAFile != "") {
		return agentFlags{}, usageErrorf("NATS credentials and CA (--nats-nkey-seed, --nats-ca, nats.credsFile) are for an external NATS (--nats-url, nats.urls): the embedded server makes a key per role at each start and has no TLS")
	}
	if cfg.NATS.Creds.IsSet() && cfg.NATS.NkeySeedFile != "" {
		return agentFlags{}, usageErrorf("set a .creds file (nats.credsFile) or an nkey seed (--nats-nkey-seed, nats.nkeySeedFile), not both")
	}
	if len(cfg.Agent.TrustedKeys) > 0 {
		if err := approval.CheckKeys(cfg.Agent.TrustedKeys); err != nil {
			return agentFlags{}, usageErrorf("trusted keys (--trusted-keys, agent.trustedKeys): %v", err)
		}
	}
	var sec *configs.Secrets
	if *path != "" {
		// The files the file names, read before anything starts, each
		// problem with its field and line.
		var err error
		if sec, err = cfg.SecretsFor(configs.RoleAgent, c.getenv, os.ReadFile); err != nil {
			return agentFlags{}, err
		}
	}
	f := agentFlagsFromConfig(cfg, c.getenv)
	f.host = c.host()
	if sec != nil {
		f.natsCredsContent = sec.NATSCreds
	}
	f.identity = *identity
	if f.leaseNamespace == "" {
		f.leaseNamespace = c.getenv("POD_NAMESPACE")
	}
	return f, nil
}

// agentOverride applies the command line (flags given, else their
// environment variables) onto cfg.
func agentOverride(cfg *configs.Config, fs *flag.FlagSet, getenv func(string) string) {
	given := map[string]string{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = f.Value.String() })
	value := func(name, env string) (string, bool) {
		if v, ok := given[name]; ok {
			return v, true
		}
		if v := getenv(env); env != "" && v != "" {
			return v, true
		}
		return "", false
	}
	a := cfg.Agent
	for _, o := range []struct {
		flag, env string
		set       func(string)
	}{
		{"kubeconfig", "", func(v string) { a.Kubeconfig = v }},
		{"source", "HCPBOT_SOURCE", func(v string) { a.Source = v }},
		{"nats-url", "HCPBOT_NATS_URL", func(v string) { cfg.NATS.URLs = splitList(v) }},
		{"nats-nkey-seed", "HCPBOT_NATS_NKEY_SEED", func(v string) { cfg.NATS.NkeySeedFile = v }},
		{"nats-ca", "HCPBOT_NATS_CA", func(v string) { cfg.NATS.CAFile = v }},
		{"trusted-keys", "HCPBOT_TRUSTED_KEYS", func(v string) { a.TrustedKeys = splitList(v) }},
		{"listen", "", func(v string) { a.Listen = v }},
		{"lease-name", "", func(v string) { a.LeaderElection.LeaseName = v }},
		{"lease-namespace", "", func(v string) { a.LeaderElection.Namespace = v }},
		{"log-format", "", func(v string) { cfg.Log.Format = v }},
	} {
		if v, ok := value(o.flag, o.env); ok {
			o.set(v)
		}
	}
	if v, ok := given["leader-elect"]; ok {
		a.LeaderElection.Enabled = v == "true"
	}
}

func agentMain(ctx context.Context, f agentFlags, log zerolog.Logger) error {
	if f.identity == "" {
		f.identity, _ = os.Hostname()
	}
	if f.leaseNamespace == "" {
		f.leaseNamespace = "default"
	}
	log = log.With().Str("component", "agent").Logger()
	log.Info().Str("version", version.String()).Str("source", f.source).Msg("starting")
	inbox, err := event.AgentInboxPrefix(f.source)
	if err != nil {
		return usageErrorf("--source: %v", err)
	}
	if f.kube, err = agentKube(ctx, f.host, f.kubeconfig); err != nil {
		return err
	}
	conn, err := connectNATS(ctx, agentNATSClient(f, inbox), log)
	if err != nil {
		return err
	}
	defer conn.Close()
	f.ensureStream = true
	return agentRun(ctx, f, conn, log)
}

// agentNATSClient is the agent's NATS connection from its flags, with
// the inbox prefix of its source (event.AgentInboxPrefix); on its own
// embedded server it connects as its source's agent.
func agentNATSClient(f agentFlags, inbox string) natsClient {
	return natsClient{
		urls: f.natsURLs, storeDir: f.natsStore, listen: f.natsListen, creds: f.natsCreds, credsContent: f.natsCredsContent, nkeySeed: f.natsNkeySeed, caFile: f.natsCA,
		name: "hcpbot-agent-" + f.identity, inboxPrefix: inbox, role: bus.AgentRole(f.source), getenv: f.host.getenv,
	}
}

// agentStream makes sure the events stream exists before the agent
// publishes, and returns it. Of the stream's settings, set holds those the
// agent's file writes (nats.streamReplicas, eventsMaxAge, duplicateWindow);
// one it leaves unset is the bot's to choose, so the agent neither checks
// nor applies it. What it does with each written one depends on who may
// change the stream:
//
//   - Against an external NATS the bot creates the stream: the agent's user
//     may neither create nor update a stream (AgentPermissions, nats.conf:
//     an update could add sources that write what the agent may not), so it
//     waits for it and then compares. Each written setting that differs is
//     logged in one warning, and the agent publishes to the stream as it is
//     rather than refusing: refusing would stop the events over a setting
//     only the bot's configuration, or an operator with admin credentials,
//     can change. The three matter to the agent thus: streamReplicas is how
//     many servers may fail before published events are lost; eventsMaxAge
//     is how long they stay (the agent restates every sixth of the stream's
//     real max age, read from the stream, whatever its file says);
//     duplicateWindow is how long a republished fact, same Nats-Msg-Id, is
//     dropped.
//   - On its own embedded server no role may change the stream, only the
//     process that runs the server, in its own name (bus.Local: an
//     in-process user for the events stream alone, whose key never leaves
//     the process). It creates the stream while absent with the written
//     settings and the defaults for the others, and brings an existing one
//     to the written settings, keeping the others, which a bot on this
//     store may have set (bus.Local.ApplyEventsSettings): nobody else
//     could, so a changed setting would otherwise never take effect.
//     streamReplicas can only be 1 there (the schema refuses more: one
//     node).
func agentStream(ctx context.Context, conn *bus.Conn, set bus.EventsSettings, log zerolog.Logger) (jetstream.Stream, error) {
	l := conn.Local()
	if l == nil {
		s, err := bus.WaitForStream(ctx, conn.JS, event.StreamName, log)
		if err != nil {
			return nil, err
		}
		if drift := set.Drift(s.CachedInfo().Config); len(drift) > 0 {
			log.Warn().Str("stream", event.StreamName).Strs("differs", drift).
				Msg("the events stream lacks settings of the agent's file (nats.streamReplicas, eventsMaxAge, duplicateWindow); the agent publishes to it as it is: the bot creates it and no agent may change it. Write the same values in the bot's configuration (an existing stream takes an operator with admin NATS credentials), or remove them from the agent's")
		}
		return s, nil
	}
	s, changed, left, err := l.ApplyEventsSettings(ctx, set, log)
	if err != nil {
		return nil, err
	}
	if len(changed) > 0 {
		log.Info().Str("stream", event.StreamName).Strs("changed", changed).Msg("the events stream on the agent's embedded server now has the settings of the agent's file")
	}
	if len(left) > 0 {
		log.Warn().Str("stream", event.StreamName).Strs("differs", left).Msg("the events stream cannot have these settings of the agent's file: the duplicate window must fit in the stream's max age")
	}
	return s, nil
}

// agentRun runs the agent on an open NATS connection until ctx ends.
func agentRun(ctx context.Context, f agentFlags, conn *bus.Conn, log zerolog.Logger) error {
	if f.identity == "" {
		f.identity, _ = os.Hostname()
	}
	if f.leaseNamespace == "" {
		f.leaseNamespace = "default"
	}
	cfg := f.kube
	if cfg == nil {
		// agentMain and runConfigured load it (agentKube) before anything
		// starts, so that a cluster the agent cannot reach fails the start.
		return errors.New("agent: the management cluster's client is not loaded")
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	executor, err := newExecutor(cfg)
	if err != nil {
		return err
	}
	executor.NodePortRange = f.nodePortRange
	// The Events it records name the replica that made the change.
	executor.Instance = f.identity
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := watchers.NewMetrics(reg)
	pub := watchers.NewJetStreamPublisher(conn.JS, f.bufferEvents, metrics, log)
	// The management informers live as long as the process, across leader
	// terms (a replica that does not lead keeps its caches warm); the
	// agent registers its informers, then they start. Their clients wait
	// for an API server that refuses connections (watchers.InformerConfig).
	kf, df, err := watchers.NewInformerFactories(cfg)
	if err != nil {
		return err
	}
	agent, err := watchers.New(watchers.Config{Source: f.source, Identity: f.identity, ProbeInterval: f.probeInterval, NodeJoinGrace: f.nodeJoinGrace}, kube, kf, df, pub, metrics, log)
	if err != nil {
		return usageErrorf("%v", err)
	}
	ictx, stopInformers := context.WithCancel(ctx)
	defer stopInformers()
	kf.Start(ictx.Done())
	df.Start(ictx.Done())
	pub.OnResync(agent.Resync)
	conn.OnReconnect(agent.Resync)
	if f.ensureStream && conn.Embedded() {
		// Its own server: nobody else would bring a deleted stream back.
		pub.OnStreamMissing(func(ctx context.Context) error {
			_, err := agentStream(ctx, conn, f.events, log)
			return err
		})
	}

	var streamMissing atomic.Bool
	streamMissing.Store(f.ensureStream)
	srv, err := serveOps(ctx, f.listen, reg, func() error {
		if !conn.NC.IsConnected() {
			return errors.New("NATS not connected")
		}
		if streamMissing.Load() {
			return errors.New("waiting for the events stream")
		}
		return pub.Problem()
	}, log)
	if err != nil {
		return err
	}
	defer srv.Close()
	// After serveOps: waiting for the bot can take a while, and the
	// liveness probe must not restart the agent meanwhile.
	if f.ensureStream {
		if _, err := agentStream(ctx, conn, f.events, log); err != nil {
			if ctx.Err() != nil {
				return nil // stopped while waiting
			}
			return err
		}
		streamMissing.Store(false)
	}
	if s, err := conn.JS.Stream(ctx, event.StreamName); err == nil {
		// Restate well within the stream's max age (the bot's setting).
		agent.SetRestateInterval(watchers.RestateInterval(s.CachedInfo().Config.MaxAge))
	}

	var wg sync.WaitGroup
	wg.Go(func() { pub.Run(ctx) })
	// Approved actions are executed by the replica that watches: inside
	// the leader's run, so that one replica at a time acts and stops
	// acting (and finishes what it started) before losing the lease.
	trail, err := audit.ForAgent(conn.JS, f.source)
	if err != nil {
		return err
	}
	serve := approval.AgentConfig{
		Source:   f.source,
		Executor: executor,
		Trust: approval.Trust{
			Keys: f.trustedKeys, FourEyes: f.requireFourEyes, Approvers: f.approvers, Approvals: f.requiredApprovals,
		},
		Trail:      trail,
		Log:        log,
		AckWait:    f.actionAckWait,
		Registerer: reg,
		// Each approved change is made as the approver who completed the
		// decision (actions.Executor.As): the API server's RBAC, admission
		// and audit log see that person, with the action id, the requester
		// and the approvers.
		Identities: f.identities,
		As: func(id identity.Identity, extra map[string][]string) (approval.Executor, error) {
			return executor.As(id, extra)
		},
		// Every other counted approver's identity is reviewed before the
		// write (an unanswered check at approval counted with a note).
		Access: executor.Access,
	}
	// Every replica answers the bots' identity checks and exposure
	// preflights (any one may): they read, they write nothing. An agent without identities answers too,
	// so that a bot requiring them hears at approval, not at execution,
	// that this agent acts as nobody.
	wg.Go(func() {
		err := approval.ServeChecks(ctx, conn.NC, approval.CheckConfig{
			Source: f.source, Keys: f.trustedKeys, Identities: f.identities, Access: executor.Access, Log: log,
			// An exposure's node ports, checked when it is proposed
			// (reads only; execution checks them again).
			Preflight: executor.Preflight,
		})
		if err != nil && ctx.Err() == nil {
			log.Error().Err(err).Msg("not answering identity checks")
		}
	})
	run := func(ctx context.Context) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		// The leader answers bots asking for a restatement (one starts);
		// the agent folds a flood of requests into one per RestateMinGap.
		if sub, err := conn.NC.Subscribe(event.RestateSubject, func(*nats.Msg) { agent.Restate() }); err != nil {
			log.Warn().Err(err).Msg("not answering restatement requests")
		} else {
			defer func() { _ = sub.Unsubscribe() }()
		}
		var served sync.WaitGroup
		served.Go(func() {
			if err := approval.Serve(ctx, conn.JS, serve); err != nil {
				log.Error().Err(err).Msg("not serving action requests")
			}
		})
		if err := agent.Run(ctx); err != nil && ctx.Err() == nil {
			log.Error().Err(err).Msg("agent stopped")
		}
		cancel()
		served.Wait()
	}
	if f.leaderElect {
		lc := f.lease
		lc.Namespace, lc.Name, lc.Identity = f.leaseNamespace, f.leaseName, f.identity
		err = watchers.RunElected(ctx, kube, lc, metrics, log, run)
	} else {
		run(ctx)
	}
	wg.Wait()
	log.Info().Msg("stopped")
	return err
}

func splitList(s string) []string {
	var out []string
	for v := range strings.SplitSeq(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// The executor's client-side rate limit on the management API server
// (client-go's default is 5 requests/s, burst 10).
const (
	executorQPS   = 20
	executorBurst = 40
)

// executorConfig is cfg for the executor's own clients: their own
// client-side rate limiter, so that the watchers' requests (relists,
// probes, the lease) never hold an approved action back, and a higher
// limit than client-go's default. A noProxy fix is three requests (read,
// server-side dry run, write): with the default limiter, a few approvals
// in a row spent its burst and every further fix waited about 360 ms for
// tokens before its write (B2-approve, docs/performance.md). Approved
// actions run one at a time (the consumer's MaxAckPending 1) and only as
// people approve them, so the higher limit cannot flood the API server.
func executorConfig(cfg *rest.Config) *rest.Config {
	x := rest.CopyConfig(cfg)
	x.RateLimiter = nil
	x.QPS, x.Burst = max(x.QPS, executorQPS), max(x.Burst, executorBurst)
	return x
}

// newExecutor builds the executor with its own clients (executorConfig).
func newExecutor(cfg *rest.Config) (*actions.Executor, error) {
	x := executorConfig(cfg)
	kube, err := kubernetes.NewForConfig(x)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(x)
	if err != nil {
		return nil, err
	}
	// Config: the base of the clients an approver's execution writes
	// with (actions.Executor.As, impersonating the mapped identity).
	return &actions.Executor{Dynamic: dyn, Kube: kube, Config: x}, nil
}

// natsClient is how a process connects to NATS: the URLs, or none and the
// embedded server's store and listen address; the user's credentials (a
// .creds file, its content, or an nkey seed file) and CA; the client name
// and the role's inbox prefix.
type natsClient struct {
	urls, storeDir, listen  string
	creds, nkeySeed, caFile string
	// credsContent is a .creds file's content (nats.credsEnv), kept in
	// memory only.
	credsContent      []byte
	name, inboxPrefix string
	// role is whom the process connects as to its own embedded server
	// (with urls, the credentials say who), and agents the sources of
	// the agents it runs: each has a user there (the bot always has).
	role   bus.Role
	agents []string
	// getenv finds the user's cache folder, the embedded server's store
	// without storeDir, as `config check` does (embeddedStoreDir).
	getenv func(string) string
	// partitions are the bot groups: the embedded server tags the events
	// with their group (bus.LocalConfig.Partitions).
	partitions partition.Set
}

// connectNATS connects to the given URLs, or starts the embedded server
// and connects to it in-process as nc.role.
func connectNATS(ctx context.Context, nc natsClient, log zerolog.Logger) (*bus.Conn, error) {
	cfg := bus.Config{Name: nc.name, CredsFile: nc.creds, Creds: nc.credsContent, NkeySeedFile: nc.nkeySeed, CAFile: nc.caFile, InboxPrefix: nc.inboxPrefix, Role: nc.role}
	storeDir := nc.storeDir
	cfg.URLs = splitList(nc.urls)
	if len(cfg.URLs) == 0 {
		getenv := nc.getenv
		if getenv == nil { // the bot's (botNATSClient): the same in production
			getenv = os.Getenv
		}
		var err error
		if storeDir, err = embeddedStoreDir(storeDir, getenv); err != nil {
			return nil, err
		}
		cfg.Embedded = bus.LocalConfig{StoreDir: storeDir, Name: "hcpbot-embedded", Listen: nc.listen, Agents: nc.agents, Partitions: nc.partitions}
		log.Info().Str("store", storeDir).Msg("no NATS URL configured: starting the embedded server")
	}
	if pd := bus.ProxyFromEnvironment(); pd != nil && len(cfg.URLs) > 0 {
		// Behind a corporate proxy, NATS goes where HTTPS_PROXY/NO_PROXY
		// send it, like the Slack traffic.
		cfg.Dialer = pd
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return bus.Connect(cctx, cfg, log)
}

// embeddedStoreDir is where the embedded server keeps JetStream: dir
// (nats.storeDir), else hcpbot/nats in the user's cache folder, found as
// os.UserCacheDir finds it on Linux (go/src/os/file.go:528-538) but in
// getenv: $XDG_CACHE_HOME (absolute), else $HOME/.cache.
func embeddedStoreDir(dir string, getenv func(string) string) (string, error) {
	if dir != "" {
		return dir, nil
	}
	cache := getenv("XDG_CACHE_HOME")
	switch {
	case cache == "" && getenv("HOME") == "":
		return "", errors.New("nats.storeDir is not set and neither $XDG_CACHE_HOME nor $HOME is, so the embedded NATS server has no folder for its store: set nats.storeDir, or nats.urls")
	case cache == "":
		cache = filepath.Join(getenv("HOME"), ".cache")
	case !filepath.IsAbs(cache):
		return "", fmt.Errorf("nats.storeDir is not set and $XDG_CACHE_HOME (%s) is relative, so the embedded NATS server has no folder for its store: set nats.storeDir, or nats.urls", cache)
	}
	return filepath.Join(cache, "hcpbot", "nats"), nil
}

// listenerLimits bound what one client can hold of an HTTP listener: a
// slow or oversized request is cut off instead of pinning a goroutine and
// a connection.
type listenerLimits struct {
	readHeader, read, write, idle time.Duration
	maxHeaderBytes                int
}

var (
	// opsLimits: probes and scrapes are small and quick; a scrape of a
	// large registry still fits in write.
	opsLimits = listenerLimits{readHeader: 5 * time.Second, read: 10 * time.Second, write: 30 * time.Second, idle: 2 * time.Minute, maxHeaderBytes: 64 << 10}
	// slackLimits: Slack sends small signed forms (bodies are capped by
	// chatops.Server) and wants the answer within 3 s; write covers the
	// body, chatops' acknowledgement deadline and the reply.
	slackLimits = listenerLimits{readHeader: 5 * time.Second, read: 10 * time.Second, write: 15 * time.Second, idle: time.Minute, maxHeaderBytes: 16 << 10}
)

// serveOps serves /healthz, /readyz and /metrics until ctx ends.
func serveOps(ctx context.Context, addr string, reg *prometheus.Registry, ready func() error, log zerolog.Logger) (*http.Server, error) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := ready(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	return serveHTTP(ctx, addr, mux, opsLimits, "/healthz, /readyz, /metrics", log)
}

// serveHTTP serves h on addr within limits until ctx ends; what names the
// endpoints in logs.
func serveHTTP(ctx context.Context, addr string, h http.Handler, lim listenerLimits, what string, log zerolog.Logger) (*http.Server, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: lim.readHeader, ReadTimeout: lim.read, WriteTimeout: lim.write,
		IdleTimeout: lim.idle, MaxHeaderBytes: lim.maxHeaderBytes}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error().Err(err).Str("endpoints", what).Msg("http server")
		}
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.Info().Str("addr", l.Addr().String()).Msg("serving " + what)
	return srv, nil
}

// agentFlagsFromConfig maps the config file's agent, nats and log
// sections onto the agent (`hcpbot all` uses its bot's NATS connection);
// the replica's name is POD_NAME from getenv (the cli's environment), else
// the host name (agentRun).
func agentFlagsFromConfig(cfg *configs.Config, getenv func(string) string) agentFlags {
	a, n := cfg.Agent, cfg.NATS
	return agentFlags{
		kubeconfig: a.Kubeconfig, source: a.Source, listen: a.Listen,
		natsURLs: joinURLs(n.URLs), natsStore: n.StoreDir, natsListen: n.EmbeddedListen, natsCreds: n.Creds.File, natsNkeySeed: n.NkeySeedFile, natsCA: n.CAFile,
		events:      agentEventsSettings(cfg),
		leaderElect: a.LeaderElection.Enabled, leaseNamespace: a.LeaderElection.Namespace, leaseName: a.LeaderElection.LeaseName,
		identity: getenv("POD_NAME"), bufferEvents: a.BufferEvents, probeInterval: a.HostedProbeInterval, nodeJoinGrace: a.NodeJoinGrace,
		nodePortRange: actions.PortRange{Min: a.ServiceNodePortRange.Min, Max: a.ServiceNodePortRange.Max},
		logLevel:      cfg.Log.Level, logFormat: cfg.Log.Format,
		lease:       watchers.LeaderConfig{LeaseDuration: a.LeaderElection.LeaseDuration, RenewDeadline: a.LeaderElection.RenewDeadline, RetryPeriod: a.LeaderElection.RetryPeriod},
		trustedKeys: a.TrustedKeys, requireFourEyes: a.RequireFourEyes, approvers: a.Approvers,
		requiredApprovals: a.RequiredApprovals, actionAckWait: a.ActionAckWait,
		identities: cfg.Identities,
	}
}

// agentEventsSettings are the events stream settings cfg's file writes;
// defaults the file leaves to them are not the agent's (agentStream).
func agentEventsSettings(cfg *configs.Config) bus.EventsSettings {
	var s bus.EventsSettings
	if cfg.Written("nats.streamReplicas") {
		s.Replicas = cfg.NATS.StreamReplicas
	}
	if cfg.Written("nats.eventsMaxAge") {
		s.MaxAge = cfg.NATS.EventsMaxAge
	}
	if cfg.Written("nats.duplicateWindow") {
		s.Duplicates = cfg.NATS.DuplicateWindow
	}
	return s
}
