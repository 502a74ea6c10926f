package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/slack-go/slack"
	"golang.org/x/net/http/httpproxy"
	"golang.org/x/sys/unix"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/hcpbot/hcpbot/bot/notify"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/configs"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/identity"
	"github.com/hcpbot/hcpbot/redact"
)

func init() {
	extraCommands = append(extraCommands, command{
		name:    "config",
		summary: "check a configuration file without starting anything",
		run:     runConfig,
	})
}

const configUsage = `Usage: hcpbot config <subcommand> [flags]

Subcommands:
  check     validate a configuration file and resolve what it references (variables,
            files, the kubeconfig; with --online the API server and Slack): every
            problem with its line, or "ok" and a summary
  nats-mapping
            the nats.conf lines an external NATS needs for bot.partitions > 1: the
            account's subject mappings that tag every event with its group, and
            each agent's publish permission for its tag

Run 'hcpbot config <subcommand> --help' for the flags.
`

func runConfig(ctx context.Context, c *cli, args []string) error {
	return c.runSubcommand(configUsage, args,
		subcommand{"check", func(args []string) error { return configCheck(ctx, c, args) }},
		subcommand{"nats-mapping", func(args []string) error { return configNATSMapping(c, args) }})
}

// configNATSMapping prints what nats.conf needs for the file's bot
// groups (partition.Set.NATSConf and, per agent, the publish permission
// of its tag: nats-server checks permissions after the mapping). The
// agents are bot.partitionMap's and those --agents names.
func configNATSMapping(c *cli, args []string) error {
	fs := c.flagSet("config nats-mapping", "--config FILE [--agents SOURCE,...]")
	path := fs.String("config", c.getenv("HCPBOT_CONFIG"), "configuration file (env HCPBOT_CONFIG)")
	agents := fs.String("agents", "", "management clusters (agent sources) to print the publish permission for, besides bot.partitionMap's")
	if err := parseFlags(fs, args, "config"); err != nil {
		return err
	}
	cfg, err := configs.Load(*path)
	if err != nil {
		return err
	}
	if cfg.Bot == nil {
		return fmt.Errorf("%s: no bot section", *path)
	}
	set := cfg.Bot.PartitionSet()
	if !set.Partitioned() {
		fmt.Fprintln(c.stdout, "# bot.partitions is 1: no mapping, nats.conf stays as shipped.")
		return nil
	}
	fmt.Fprint(c.stdout, set.NATSConf())
	sources := slices.Sorted(maps.Keys(set.Static))
	for _, src := range splitList(*agents) {
		if !slices.Contains(sources, src) {
			sources = append(sources, src)
		}
	}
	for _, src := range sources {
		perms, err := bus.AgentPermissionsIn(src, set)
		if err != nil {
			return err
		}
		tok, _ := event.SourceToken(src)
		tag, tagged := set.Tag(src)
		if !tagged {
			fmt.Fprintf(c.stdout, "# agent %s: stored untagged (not in bot.partitionMap), group %d by the hash; its permissions stay as shipped.\n", src, set.Of(src))
			continue
		}
		line := event.TagSubject(event.EventsSubjectPrefix+"."+tok+".*.*.*", tag)
		if !slices.Contains(perms.Publish.Allow, line) {
			return fmt.Errorf("agent %s: permission %s not granted by bus.AgentPermissionsIn", src, line)
		}
		fmt.Fprintf(c.stdout, "# agent %s (group %d): add to its publish allow list, after %q:\n%q\n", src, tag.Index, event.EventsSubjectPrefix+"."+tok+".*.*.*", line)
	}
	return nil
}

// configReport is the result of `config check`; the JSON field names are
// the contract of --json.
type configReport struct {
	File     string            `json:"file"`
	For      string            `json:"for"` // the process checked for: agent, bot or all
	OK       bool              `json:"ok"`
	Problems []configs.Problem `json:"problems"`
	Warnings []string          `json:"warnings"`
	Summary  []string          `json:"summary"`
}

// errConfigInvalid makes the command exit 1 after the problems have been
// printed.
var errConfigInvalid = errors.New("configuration is invalid")

// configOnlineTimeout bounds each question --online asks (the API
// server's /version has its own bound, kubeCheckTimeout).
const configOnlineTimeout = 15 * time.Second

func configCheck(ctx context.Context, c *cli, args []string) error {
	fs := c.flagSet("config check", "--config FILE [--for agent|bot|all] [--secrets=false] [--online] [--json]")
	path := fs.String("config", c.getenv("HCPBOT_CONFIG"), "configuration file (env HCPBOT_CONFIG)")
	asJSON := fs.Bool("json", false, "print {file, for, ok, problems, warnings, summary} as JSON")
	role := fs.String("for", "", "the process to check for, as it would start on this host: agent, bot or all (default: all with both sections, else the one the file has)")
	secrets := fs.Bool("secrets", true, "resolve what the process would read on this host: …Env variables, …File files, agent.kubeconfig, the embedded NATS store folder (values are never printed); false checks the file alone, e.g. in CI")
	online := fs.Bool("online", false, "also ask the management cluster's API server for /version (agent.kubeconfig, or in-cluster) and Slack for auth.test (and apps.connections.open with Socket Mode)")
	if err := parseFlags(fs, args, "config"); err != nil {
		return err
	}
	switch configs.Role(*role) {
	case "", configs.RoleAgent, configs.RoleBot, configs.RoleAll:
	default:
		return usageErrorf("--for %q: want agent, bot or all", *role)
	}

	rep := configReport{File: *path, For: *role, Problems: []configs.Problem{}, Warnings: []string{}, Summary: []string{}}
	cfg, err := configs.Load(*path)
	var invalid *configs.Error
	switch {
	case errors.As(err, &invalid):
		rep.Problems = invalid.Problems
	case err != nil:
		return err // unreadable file: nothing to report on
	default:
		r := configRole(cfg, configs.Role(*role))
		rep.For = string(r)
		rep.Problems = append(rep.Problems, configStartProblems(cfg, r)...)
		if *secrets {
			rep.Problems = append(rep.Problems, configStoreDirProblems(cfg, c.getenv)...)
		}
		var sec *configs.Secrets
		if *secrets {
			sec, err = cfg.SecretsFor(r, c.getenv, os.ReadFile)
			if errors.As(err, &invalid) {
				rep.Problems = append(rep.Problems, invalid.Problems...)
			} else if err != nil {
				return err
			}
		}
		if r != configs.RoleBot && *secrets {
			rep.Problems = append(rep.Problems, configKubeconfigProblems(ctx, cfg, c.host(), *online)...)
			rep.Warnings = configProxyWarnings(cfg, c.host(), os.ReadFile)
		}
		if *online && r != configs.RoleAgent && sec != nil {
			rep.Problems = append(rep.Problems, configSlackProblems(ctx, cfg, sec)...)
		}
		rep.Summary = configSummary(cfg, r)
	}
	rep.OK = len(rep.Problems) == 0

	if *asJSON {
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		configPrint(c, rep)
	}
	if !rep.OK {
		return fmt.Errorf("%w: %s: %d problem(s)", errConfigInvalid, *path, len(rep.Problems))
	}
	return nil
}

// configRole is the process checked for: the one asked, else the one the
// file's sections make.
func configRole(cfg *configs.Config, asked configs.Role) configs.Role {
	switch {
	case asked != "":
		return asked
	case cfg.Agent != nil && cfg.Bot != nil:
		return configs.RoleAll
	case cfg.Bot != nil:
		return configs.RoleBot
	}
	return configs.RoleAgent
}

// configStartProblems are the reasons, other than its references, for
// which the process would refuse to start with this file.
func configStartProblems(cfg *configs.Config, r configs.Role) []configs.Problem {
	var ps []configs.Problem
	if r != configs.RoleBot && cfg.Agent == nil {
		ps = append(ps, cfg.Problem("agent", "no agent section: hcpbot %s needs one", r))
	}
	if r != configs.RoleAgent && cfg.Bot == nil {
		ps = append(ps, cfg.Problem("bot", "no bot section: hcpbot %s needs one", r))
	}
	if r == configs.RoleBot && cfg.Approvals != nil && !cfg.Approvals.SigningKey.IsSet() {
		ps = append(ps, cfg.Problem("approvals", "%s", errNoSigningKey))
	}
	return ps
}

// configStoreDirProblems: the embedded server creates its store folder
// (nats.storeDir, else in the user's cache folder: embeddedStoreDir, from
// getenv) and writes JetStream's files there, so the nearest existing
// folder on its path must be a folder this process may write to (not,
// say, the read-only root file system of a pod). Nothing is created.
func configStoreDirProblems(cfg *configs.Config, getenv func(string) string) []configs.Problem {
	if len(cfg.NATS.URLs) > 0 {
		return nil
	}
	dir, err := embeddedStoreDir(cfg.NATS.StoreDir, getenv)
	if err != nil {
		return []configs.Problem{cfg.Problem("nats.storeDir", "%v", err)}
	}
	p := filepath.Clean(dir)
	for {
		fi, err := os.Stat(p)
		switch {
		case err == nil && !fi.IsDir():
			return []configs.Problem{cfg.Problem("nats.storeDir", "%s is not a folder: the embedded server cannot store JetStream in %s", p, dir)}
		case err == nil:
			if err := unix.Access(p, unix.W_OK); err != nil {
				return []configs.Problem{cfg.Problem("nats.storeDir", "the embedded server cannot write to %s: %v", p, err)}
			}
			return nil
		case !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, unix.ENOTDIR): // ENOTDIR: a file on the way, found above
			return []configs.Problem{cfg.Problem("nats.storeDir", "%v", err)}
		}
		parent := filepath.Dir(p)
		if parent == p {
			return nil
		}
		p = parent
	}
}

// configKubeconfigProblems builds the agent's client from
// agent.kubeconfig as start-up will (agentKubeClient, from the same host
// h): the file parses, has a current context naming a cluster with a
// server, and the client builds from it (certificate files it names are
// read); empty, the pod's service account or else the kubeconfig loading
// rules must give one, as they must at start. With online the API server
// is asked for /version too, as the agent does at start (agentKube).
func configKubeconfigProblems(ctx context.Context, cfg *configs.Config, h host, online bool) []configs.Problem {
	if cfg.Agent == nil {
		return nil
	}
	path := cfg.Agent.Kubeconfig
	fail := func(err error) []configs.Problem {
		return []configs.Problem{cfg.Problem("agent.kubeconfig", "%v", err)}
	}
	if path != "" {
		// Says which part of the file is missing, where client-go says
		// only that the configuration is invalid.
		if _, _, err := configKubeServer(path, os.ReadFile); err != nil {
			return fail(err)
		}
	}
	var err error
	if online {
		_, err = agentKube(ctx, h, path)
	} else {
		_, _, _, err = agentKubeClient(h, path)
	}
	if err != nil {
		return fail(err)
	}
	return nil
}

// configSlackProblems asks Slack whether the tokens work: auth.test with
// the bot token, apps.connections.open with the app token in Socket Mode.
// Both are what the bot's first calls would find out.
func configSlackProblems(ctx context.Context, cfg *configs.Config, sec *configs.Secrets) []configs.Problem {
	s := cfg.Slack
	if s == nil || sec.SlackBotToken == "" {
		return nil
	}
	var ps []configs.Problem
	cctx, cancel := context.WithTimeout(ctx, configOnlineTimeout)
	defer cancel()
	api := notify.NewSlackClient(sec.SlackBotToken, s.APIURL, nil)
	if _, err := api.AuthTestContext(cctx); err != nil {
		ps = append(ps, cfg.Problem(s.BotToken.Field("slack.botToken"), "Slack auth.test at %s with %s: %s", s.APIURL, s.BotToken, redact.RedactText(err.Error())))
	}
	if s.SocketMode && sec.SlackAppToken != "" {
		app := slack.New(sec.SlackBotToken, slack.OptionAppLevelToken(sec.SlackAppToken), slack.OptionAPIURL(s.APIURL))
		if _, _, err := app.StartSocketModeContext(cctx); err != nil {
			ps = append(ps, cfg.Problem(s.AppToken.Field("slack.appToken"), "Slack apps.connections.open at %s with %s: %s", s.APIURL, s.AppToken, redact.RedactText(err.Error())))
		}
	}
	return ps
}

func configPrint(c *cli, rep configReport) {
	for _, w := range rep.Warnings {
		fmt.Fprintf(c.stderr, "warning: %s\n", w)
	}
	if !rep.OK {
		for _, p := range rep.Problems {
			fmt.Fprintln(c.stdout, p.String())
		}
		return
	}
	fmt.Fprintf(c.stdout, "ok: %s\n", rep.File)
	for _, s := range rep.Summary {
		fmt.Fprintf(c.stdout, "  %s\n", s)
	}
}

// configSummary describes what the processes would do (r, the process
// checked), in a few lines, without secrets (Config holds only references
// to them).
func configSummary(cfg *configs.Config, r configs.Role) []string {
	var out []string
	n := cfg.NATS
	if len(n.URLs) == 0 {
		store := n.StoreDir
		if store == "" {
			store = "the user's cache folder"
		}
		listen := "no listener (in-process connections only)"
		if n.EmbeddedListen != "" {
			listen = "listening on " + n.EmbeddedListen + " (the seeds of each start in the store's " + bus.KeysDir + " folder)"
		}
		out = append(out, fmt.Sprintf("nats: embedded server, store %s, %s, authentication required (a key per role, made at each start)", store, listen))
	} else {
		auth := "no credentials"
		switch {
		case n.Creds.IsSet():
			auth = "credentials from " + n.Creds.String()
		case n.NkeySeedFile != "":
			auth = "nkey seed from file " + n.NkeySeedFile
		}
		if n.CAFile != "" {
			auth += ", CA " + n.CAFile
		}
		urls := make([]string, len(n.URLs))
		for i, u := range n.URLs {
			urls[i] = redact.RedactURL(u)
		}
		out = append(out, fmt.Sprintf("nats: %s, %s", strings.Join(urls, ", "), auth))
	}
	out = append(out, eventsStreamSummary(cfg, r))
	if a := cfg.Agent; a != nil {
		kc := "in-cluster"
		if a.Kubeconfig != "" {
			kc = a.Kubeconfig
		}
		le := "leader election off"
		if l := a.LeaderElection; l.Enabled {
			ns := l.Namespace
			if ns == "" {
				ns = "$POD_NAMESPACE"
			}
			le = fmt.Sprintf("leader election on Lease %s/%s (%s/%s/%s)", ns, l.LeaseName, configDur(l.LeaseDuration), configDur(l.RenewDeadline), configDur(l.RetryPeriod))
		}
		out = append(out, fmt.Sprintf("agent: source %s, kubeconfig %s, listen %s, %s, buffer %d events, probe every %s", a.Source, kc, a.Listen, le, a.BufferEvents, configDur(a.HostedProbeInterval)))
		out = append(out, "agent actions: "+agentActionsSummary(cfg))
	}
	out = append(out, "identities: "+identitiesSummary(cfg.Identities))
	if b := cfg.Bot; b != nil {
		out = append(out, fmt.Sprintf("bot: listen %s, ops %s, %d route(s), default channel %s, group wait %s, interval %s, resolve after %s, storm > %d in %s",
			b.Listen, b.OpsListen, len(b.Routes), b.DefaultChannel, configDur(b.GroupWait), configDur(b.GroupInterval), configDur(b.ResolveTimeout), b.Storm.Threshold, configDur(b.Storm.Window)))
	}
	if s := cfg.Slack; s != nil {
		mode := "HTTP requests (signing secret from " + s.SigningSecret.String() + ")"
		if s.SocketMode {
			mode = "Socket Mode (app token from " + s.AppToken.String() + ")"
		}
		out = append(out, fmt.Sprintf("slack: %s, bot token from %s, %s", s.APIURL, s.BotToken.String(), mode))
	}
	if a := cfg.Approvals; a != nil {
		eyes := "one approval"
		if a.FourEyes {
			eyes = "four-eyes"
		}
		key := "signed with the key from " + a.SigningKey.String()
		if !a.SigningKey.IsSet() {
			key = "signed with a key made per process (hcpbot all only)"
		}
		out = append(out, fmt.Sprintf("approvals: %d approver(s), %d group(s), %s, proposals expire after %s, %s", len(a.Approvers), len(a.ApproverGroups), eyes, configDur(a.ProposalTTL), key))
	}
	for _, d := range cfg.Digests {
		out = append(out, fmt.Sprintf("digest %s: %q (%s) → %s", d.Name, d.Schedule, d.Timezone, d.Channel))
	}
	out = append(out, fmt.Sprintf("log: %s, %s", cfg.Log.Level, cfg.Log.Format))
	return out
}

// eventsStreamSummary says what the process checked does with the events
// stream's settings, each value printed being one it acts on. The bot
// creates the stream with them (so does `hcpbot all`, whose agent uses the
// bot's stream). An agent alone acts on what the file writes only, as
// agentStream does: on its own embedded server it creates the stream with
// them (the defaults for those unwritten) and brings an existing one to
// those written; against URLs the stream is the bot's and it warns where
// the stream lacks one written.
func eventsStreamSummary(cfg *configs.Config, r configs.Role) string {
	n := cfg.NATS
	every := fmt.Sprintf("%d replica(s), max age %s, duplicate window %s", n.StreamReplicas, configDur(n.EventsMaxAge), configDur(n.DuplicateWindow))
	if r != configs.RoleAgent {
		return "events stream: " + every
	}
	set := agentEventsSettings(cfg)
	var written []string
	if set.Replicas > 0 {
		written = append(written, fmt.Sprintf("%d replica(s)", set.Replicas))
	}
	if set.MaxAge > 0 {
		written = append(written, "max age "+configDur(set.MaxAge))
	}
	if set.Duplicates > 0 {
		written = append(written, "duplicate window "+configDur(set.Duplicates))
	}
	const none = "the file writes no nats.streamReplicas, eventsMaxAge or duplicateWindow"
	switch {
	case len(n.URLs) == 0 && len(written) == 0:
		return "events stream: the agent's process creates it on its embedded server while absent with " + every + ", and changes nothing of an existing one: " + none
	case len(n.URLs) == 0:
		return "events stream: the agent's process creates it on its embedded server while absent with " + every + ", and brings an existing one to " + strings.Join(written, ", ")
	case len(written) == 0:
		return "events stream: the bot's (the agent waits for it and may not change it); the agent checks none of its settings: " + none
	}
	return "events stream: the bot's (the agent waits for it and may not change it); the agent warns at start unless it has " + strings.Join(written, ", ")
}

// agentActionsSummary says which action requests the agent will run.
func agentActionsSummary(cfg *configs.Config) string {
	a := cfg.Agent
	var keys string
	switch {
	case len(a.TrustedKeys) > 0:
		keys = fmt.Sprintf("signed by %d trusted key(s)", len(a.TrustedKeys))
	case cfg.Approvals != nil:
		keys = "signed by the bot of the same process (hcpbot all)"
	default:
		keys = "none: no agent.trustedKeys, every action request is refused"
	}
	if a.RequireFourEyes {
		keys += ", two people required"
	}
	if len(a.Approvers) > 0 {
		keys += fmt.Sprintf(", approved by one of %d listed approver(s)", len(a.Approvers))
	}
	return keys
}

// identitiesSummary says whom the agent acts as on an approval.
func identitiesSummary(m identity.Map) string {
	switch {
	case m.Empty():
		return "none: the agent makes approved changes with its own rights"
	case m.Required:
		return fmt.Sprintf("%d entr(ies), required: changes only as the approver's mapped identity (apply `hcpbot rbac` after each change)", len(m.Entries))
	}
	return fmt.Sprintf("%d entr(ies), not required: a mapped approver's change is made as their identity, anyone else's with the agent's rights", len(m.Entries))
}

// configDur prints 1h instead of 1h0m0s.
func configDur(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// configProxyWarnings says when this process's proxy variables would send
// the agent's Kubernetes API traffic through the proxy. client-go takes
// its proxy from net/http.ProxyFromEnvironment, so a corporate HTTPS_PROXY
// set for Slack also catches the API server unless NO_PROXY exempts it:
// the agent then depends on the proxy to see the very clusters whose proxy
// problems it is meant to report. The API server is the one the agent
// would take on h (agent.kubeconfig's, the pod's, else the kubeconfig
// loading rules'). Nothing is dialled; only the variables and the
// kubeconfig files are read.
func configProxyWarnings(cfg *configs.Config, h host, readFile func(string) ([]byte, error)) []string {
	getenv := h.getenv
	warnings := []string{}
	if cfg.Agent == nil {
		return warnings
	}
	// The same precedence as net/http's copy of httpproxy (upper case
	// first), which is what client-go uses; golang.org/x/net's own
	// FromEnvironment prefers lower case, and reads os.Getenv, not ours.
	lookup := func(names ...string) (value, from string) {
		for _, n := range names {
			if v := getenv(n); v != "" {
				return v, n
			}
		}
		return "", ""
	}
	httpsProxy, httpsFrom := lookup("HTTPS_PROXY", "https_proxy")
	httpProxy, httpFrom := lookup("HTTP_PROXY", "http_proxy")
	noProxy, noFrom := lookup("NO_PROXY", "no_proxy")
	if httpsProxy == "" && httpProxy == "" {
		return warnings
	}
	proxyFor := (&httpproxy.Config{HTTPProxy: httpProxy, HTTPSProxy: httpsProxy, NoProxy: noProxy, CGI: getenv("REQUEST_METHOD") != ""}).ProxyFunc()

	type target struct{ url, what string }
	var targets []target
	if kc := cfg.Agent.Kubeconfig; kc != "" {
		server, proxyURL, err := configKubeServer(kc, readFile)
		switch {
		case err != nil:
			return warnings // a problem of its own (configKubeconfigProblems)
		case proxyURL != "":
			return warnings // the kubeconfig names its own proxy: the environment does not apply
		}
		targets = append(targets, target{server, "the API server of " + kc})
	} else if _, err := h.inCluster(); err != nil {
		// Not in a pod: the agent takes what the loading rules find.
		rc, from, err := kubeConfig(h, "")
		switch {
		case err != nil:
			return warnings // a problem of its own (configKubeconfigProblems)
		case rc.Proxy != nil:
			return warnings // the kubeconfig names its own proxy
		}
		targets = append(targets, target{rc.Host, "the API server of " + from})
	} else {
		targets = append(targets, target{"https://kubernetes.default.svc", "the in-cluster API name"})
		if host := getenv("KUBERNETES_SERVICE_HOST"); host != "" {
			port := getenv("KUBERNETES_SERVICE_PORT")
			if port == "" {
				port = "443"
			}
			// What rest.InClusterConfig actually dials.
			targets = append(targets, target{"https://" + net.JoinHostPort(host, port), "the in-cluster API address (KUBERNETES_SERVICE_HOST)"})
		}
	}
	for _, t := range targets {
		u, err := url.Parse(t.url)
		if err != nil || u.Host == "" {
			warnings = append(warnings, fmt.Sprintf("agent: %s %q is not a URL; cannot check the proxy", t.what, redact.RedactURL(t.url)))
			continue
		}
		p, err := proxyFor(u)
		if err != nil {
			warnings = append(warnings, fmt.Sprintf("agent: the proxy variables are invalid (%v); client-go would fail to reach %s", redact.RedactText(err.Error()), t.url))
			continue
		}
		if p == nil {
			continue
		}
		from := httpsFrom
		if u.Scheme == "http" {
			from = httpFrom
		}
		exempt := "NO_PROXY is not set"
		if noFrom != "" {
			exempt = noFrom + " does not exempt " + u.Hostname()
		}
		warnings = append(warnings, fmt.Sprintf("agent: Kubernetes API traffic to %s, %s, would go through the proxy %s from %s: %s; add it (or its CIDR) to NO_PROXY so the agent does not depend on the proxy it diagnoses",
			t.url, t.what, redact.RedactURL(p.String()), from, exempt))
	}
	return warnings
}

// configKubeServer returns the server URL (and proxy-url, if any) of the
// kubeconfig's current context.
func configKubeServer(path string, readFile func(string) ([]byte, error)) (server, proxyURL string, err error) {
	data, err := readFile(path)
	if err != nil {
		return "", "", err
	}
	kc, err := clientcmd.Load(data)
	if err != nil {
		return "", "", fmt.Errorf("%s: %w", path, err)
	}
	if kc.CurrentContext == "" {
		return "", "", fmt.Errorf("%s: no current-context", path)
	}
	ctx, ok := kc.Contexts[kc.CurrentContext]
	if !ok {
		return "", "", fmt.Errorf("%s: current-context %q not found", path, kc.CurrentContext)
	}
	cl, ok := kc.Clusters[ctx.Cluster]
	if !ok || cl.Server == "" {
		return "", "", fmt.Errorf("%s: cluster %q of context %q has no server", path, ctx.Cluster, kc.CurrentContext)
	}
	return cl.Server, cl.ProxyURL, nil
}
