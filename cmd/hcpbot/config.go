package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"golang.org/x/net/http/httpproxy"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/hcpbot/hcpbot/configs"
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
  check     validate a configuration file: every problem with its line, or "ok" and a summary

Run 'hcpbot config <subcommand> --help' for the flags.
`

func runConfig(_ context.Context, c *cli, args []string) error {
	if len(args) == 0 {
		return usageErrorf("missing subcommand: check")
	}
	switch args[0] {
	case "check":
		return configCheck(c, args[1:])
	case "help", "-h", "-help", "--help":
		fmt.Fprint(c.stdout, configUsage)
		return flag.ErrHelp
	}
	return usageErrorf("unknown subcommand %q: want check", args[0])
}

// configReport is the result of `config check`; the JSON field names are
// the contract of --json.
type configReport struct {
	File     string            `json:"file"`
	OK       bool              `json:"ok"`
	Problems []configs.Problem `json:"problems"`
	Warnings []string          `json:"warnings"`
	Summary  []string          `json:"summary"`
}

// errConfigInvalid makes the command exit 1 after the problems have been
// printed.
var errConfigInvalid = errors.New("configuration is invalid")

func configCheck(c *cli, args []string) error {
	fs := c.flagSet("config check", "--config FILE [--json] [--secrets]")
	path := fs.String("config", c.getenv("HCPBOT_CONFIG"), "configuration file (env HCPBOT_CONFIG)")
	asJSON := fs.Bool("json", false, "print {file, ok, problems, warnings, summary} as JSON")
	secrets := fs.Bool("secrets", false, "also resolve the secrets the file references, from this process's environment and files (values are never printed)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErrorf("unexpected argument %q", fs.Arg(0))
	}
	if *path == "" {
		return usageErrorf("--config is required")
	}

	rep := configReport{File: *path, Problems: []configs.Problem{}, Warnings: []string{}, Summary: []string{}}
	cfg, err := configs.Load(*path)
	var invalid *configs.Error
	switch {
	case errors.As(err, &invalid):
		rep.Problems = invalid.Problems
	case err != nil:
		return err // unreadable file: nothing to report on
	default:
		if *secrets {
			if _, err := cfg.Secrets(c.getenv, os.ReadFile); err != nil {
				for line := range strings.SplitSeq(err.Error(), "\n") {
					rep.Problems = append(rep.Problems, configProblemFromLine(*path, line))
				}
			}
		}
		if p, ok := configKubeconfigProblem(cfg, os.ReadFile); !ok {
			rep.Problems = append(rep.Problems, p)
		}
		rep.Warnings = configProxyWarnings(cfg, c.getenv, os.ReadFile)
		rep.Summary = configSummary(cfg)
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

// configProblemFromLine wraps one line of a Secrets error ("file: msg").
func configProblemFromLine(file, line string) configs.Problem {
	return configs.Problem{File: file, Message: strings.TrimPrefix(line, file+": ")}
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

// configSummary describes what the processes would do, in a few lines,
// without secrets (Config holds only references to them).
func configSummary(cfg *configs.Config) []string {
	var out []string
	n := cfg.NATS
	if len(n.URLs) == 0 {
		store := n.StoreDir
		if store == "" {
			store = "the user's cache folder"
		}
		out = append(out, fmt.Sprintf("nats: embedded server, store %s", store))
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
	out = append(out, fmt.Sprintf("events stream: %d replica(s), max age %s, duplicate window %s", n.StreamReplicas, configDur(n.EventsMaxAge), configDur(n.DuplicateWindow)))
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
// problems it is meant to report. Nothing is dialled; only the variables
// and the kubeconfig file are read.
func configProxyWarnings(cfg *configs.Config, getenv func(string) string, readFile func(string) ([]byte, error)) []string {
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
			return warnings // a problem of its own (configKubeconfigProblem)
		case proxyURL != "":
			return warnings // the kubeconfig names its own proxy: the environment does not apply
		}
		targets = append(targets, target{server, "the API server of " + kc})
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

// configKubeconfigProblem reads agent.kubeconfig the way the agent will
// load it: the file exists, parses and has a current context naming a
// cluster with a server. Nothing is dialled (the agent checks the server
// when it starts). Unset is fine: the agent then uses in-cluster config.
func configKubeconfigProblem(cfg *configs.Config, readFile func(string) ([]byte, error)) (configs.Problem, bool) {
	if cfg.Agent == nil || cfg.Agent.Kubeconfig == "" {
		return configs.Problem{}, true
	}
	if _, _, err := configKubeServer(cfg.Agent.Kubeconfig, readFile); err != nil {
		return configs.Problem{File: cfg.File, Field: "agent.kubeconfig", Message: err.Error()}, false
	}
	return configs.Problem{}, true
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
