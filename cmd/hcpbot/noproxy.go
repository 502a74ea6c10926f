package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/hcpbot/hcpbot/noproxy"
	"github.com/hcpbot/hcpbot/redact"
)

func init() {
	extraCommands = append(extraCommands, command{
		name:    "noproxy",
		summary: "explain a NO_PROXY list for Go, curl, Python, urllib, wget and Node, or lint a proxy config",
		run:     runNoProxy,
	})
}

const noProxyUsage = `Usage: hcpbot noproxy <subcommand> [flags]

Subcommands:
  explain   show whether Go, curl, Python requests, urllib (Ansible), wget and Node (proxy-from-env)
            clients go direct or through the proxy for each URL
  lint      check proxy settings (noProxy coverage, ambiguous entries, entries some clients ignore, proxy URLs)
  java      translate a NO_PROXY list into Java's -Dhttp.nonProxyHosts (Java ignores NO_PROXY)

Run 'hcpbot noproxy <subcommand> --help' for the flags.
`

func runNoProxy(_ context.Context, c *cli, args []string) error {
	return c.runSubcommand(noProxyUsage, args,
		subcommand{"explain", func(args []string) error { return noProxyExplain(c, args) }},
		subcommand{"lint", func(args []string) error { return noProxyLint(c, args) }},
		subcommand{"java", func(args []string) error { return noProxyJava(c, args) }})
}

// noProxyRow is one explained URL; the JSON field names are the contract
// of `explain --json` (url, go, curl, python came first and keep their
// meaning; a family left out by --clients is omitted).
type noProxyRow struct {
	URL    string            `json:"url"`
	Go     string            `json:"go,omitempty"`
	Curl   string            `json:"curl,omitempty"`
	Python string            `json:"python,omitempty"`
	Urllib string            `json:"urllib,omitempty"`
	Wget   string            `json:"wget,omitempty"`
	Node   string            `json:"node,omitempty"`
	Errors map[string]string `json:"errors,omitempty"`
}

func (r *noProxyRow) cell(cl noproxy.Client) *string {
	switch cl {
	case noproxy.Go:
		return &r.Go
	case noproxy.Curl:
		return &r.Curl
	case noproxy.Python:
		return &r.Python
	case noproxy.Urllib:
		return &r.Urllib
	case noproxy.Wget:
		return &r.Wget
	}
	return &r.Node
}

// noProxyClients parses --clients: a comma-separated list of family names
// (go, curl, python, urllib, wget, node); empty means all of them.
func noProxyClients(v string) ([]noproxy.Client, error) {
	if strings.TrimSpace(v) == "" {
		return noproxy.AllClients(), nil
	}
	var out []noproxy.Client
	seen := map[noproxy.Client]bool{}
	for _, name := range strings.Split(v, ",") {
		cl, err := noproxy.ParseClient(name)
		if err != nil {
			return nil, err
		}
		if !seen[cl] {
			seen[cl] = true
			out = append(out, cl)
		}
	}
	return out, nil
}

func noProxyExplain(c *cli, args []string) error {
	fs := c.flagSet("noproxy explain", "--no-proxy LIST [--clients LIST] [--json] URL...")
	list := fs.String("no-proxy", "", "the NO_PROXY / noProxy value to evaluate (required; '' for an empty list)")
	clientsFlag := fs.String("clients", "", "comma-separated families to show: go, curl, python (requests), urllib (Ansible), wget, node (proxy-from-env); default all")
	asJSON := fs.Bool("json", false, "print a JSON array of {url, go, curl, python, urllib, wget, node}")
	urls, err := noProxyParseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if !noProxyFlagSet(fs, "no-proxy") {
		return usageErrorf("--no-proxy is required (use --no-proxy '' for an empty list)")
	}
	clients, err := noProxyClients(*clientsFlag)
	if err != nil {
		return usageErrorf("--clients: %v", err)
	}
	if len(urls) == 0 {
		return usageErrorf("at least one URL is required, e.g. https://kubernetes:443")
	}
	rows := make([]noProxyRow, 0, len(urls))
	for _, u := range urls {
		row := noProxyRow{URL: redact.RedactURL(u)}
		// Go's parser is the common gate: when it fails the URL itself is bad.
		if _, err := noproxy.Decide(noproxy.Go, *list, u); err != nil {
			return usageErrorf("URL %q: %s", row.URL, redact.RedactText(err.Error()))
		}
		for _, cl := range clients {
			d, err := noproxy.Decide(cl, *list, u)
			cell := d.String()
			if err != nil {
				cell = "error"
				if row.Errors == nil {
					row.Errors = map[string]string{}
				}
				row.Errors[cl.String()] = redact.RedactText(err.Error())
			}
			*row.cell(cl) = cell
		}
		rows = append(rows, row)
	}
	if *asJSON {
		return noProxyWriteJSON(c.stdout, rows)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprint(tw, "URL")
	for _, cl := range clients {
		fmt.Fprintf(tw, "\t%s", strings.ToUpper(cl.String()))
	}
	fmt.Fprintln(tw)
	for _, r := range rows {
		fmt.Fprint(tw, r.URL)
		for _, cl := range clients {
			fmt.Fprintf(tw, "\t%s", *r.cell(cl))
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range rows {
		for _, cl := range clients {
			if msg, ok := r.Errors[cl.String()]; ok {
				fmt.Fprintf(c.stdout, "%s: %s: %s\n", r.URL, cl, msg)
			}
		}
	}
	return nil
}

// noProxyJava prints the http.nonProxyHosts value for a NO_PROXY list and
// the entries Java cannot express. With --json the JavaTranslation is the
// contract.
func noProxyJava(c *cli, args []string) error {
	fs := c.flagSet("noproxy java", "--no-proxy LIST [--json]")
	list := fs.String("no-proxy", "", "the NO_PROXY / noProxy value to translate (required)")
	asJSON := fs.Bool("json", false, "print {nonProxyHosts, notes}")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErrorf("unexpected argument %q: java takes flags only", fs.Arg(0))
	}
	if !noProxyFlagSet(fs, "no-proxy") {
		return usageErrorf("--no-proxy is required")
	}
	tr := noproxy.JavaNonProxyHosts(*list)
	for i := range tr.Notes {
		tr.Notes[i].Entry = redact.RedactText(tr.Notes[i].Entry)
	}
	tr.NonProxyHosts = redact.RedactText(tr.NonProxyHosts)
	if *asJSON {
		return noProxyWriteJSON(c.stdout, tr)
	}
	fmt.Fprintf(c.stdout, "http.nonProxyHosts=%s\n", tr.NonProxyHosts)
	fmt.Fprintf(c.stdout, "export JAVA_TOOL_OPTIONS=%s\n", noProxyShellQuote("-Dhttp.nonProxyHosts="+tr.NonProxyHosts))
	fmt.Fprintln(c.stdout, "(Java ignores NO_PROXY; the property applies to http and https; loopback is always direct)")
	for _, n := range tr.Notes {
		what := "dropped"
		if !n.Dropped {
			what = "approximated as " + n.Translated
		}
		fmt.Fprintf(c.stdout, "cannot express %s (%s): %s\n", n.Entry, what, n.Reason)
	}
	return nil
}

// noProxyShellQuote quotes a value for a POSIX shell: "|" and "*" would
// otherwise be a pipe and a glob.
func noProxyShellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func noProxyLint(c *cli, args []string) error {
	fs := c.flagSet("noproxy lint", "--no-proxy LIST [--http-proxy URL] [--https-proxy URL] [--trusted-ca NAME] "+
		"[--service-cidr CIDR]... [--cluster-cidr CIDR]... [--machine-cidr CIDR]... [--platform TYPE] [--api-server HOST[:PORT]] [--clients LIST] [--json]")
	var (
		cp                 noproxy.ClusterProxy
		svc, cluster, mach noProxyCIDRList
		apiServer          string
		clientsFlag        string
		asJSON             bool
	)
	fs.StringVar(&cp.NoProxy, "no-proxy", "", "the noProxy / NO_PROXY value")
	fs.StringVar(&cp.HTTPProxy, "http-proxy", "", "the httpProxy / HTTP_PROXY URL")
	fs.StringVar(&cp.HTTPSProxy, "https-proxy", "", "the httpsProxy / HTTPS_PROXY URL")
	fs.StringVar(&cp.TrustedCA, "trusted-ca", "", "name of the trustedCA ConfigMap, if any")
	fs.Var(&svc, "service-cidr", "service network CIDR (repeatable or comma-separated; first = primary)")
	fs.Var(&cluster, "cluster-cidr", "cluster (pod) network CIDR (repeatable or comma-separated)")
	fs.Var(&mach, "machine-cidr", "machine (node) network CIDR (repeatable or comma-separated)")
	fs.StringVar(&cp.Platform, "platform", "", "HyperShift platform type (KubeVirt, AWS, Agent, ...), Konvoy, or empty for a plain workload")
	fs.StringVar(&apiServer, "api-server", "", "API server endpoint the nodes use, HOST[:PORT] (port defaults to 443)")
	fs.StringVar(&clientsFlag, "clients", "", "comma-separated families the workloads use: go, curl, python (requests), urllib (Ansible), wget, node; default: every family for the per-entry check, go,curl,python,urllib for coverage")
	fs.BoolVar(&asJSON, "json", false, "print the findings as a JSON array")
	if err := parse(fs, args); err != nil {
		return err
	}
	clients, err := noProxyClients(clientsFlag)
	if err != nil {
		return usageErrorf("--clients: %v", err)
	}
	if clientsFlag != "" {
		cp.Clients = clients // the coverage findings judge by them too (default noproxy.DefaultClients)
	}
	if fs.NArg() > 0 {
		return usageErrorf("unexpected argument %q: lint takes flags only", fs.Arg(0))
	}
	cp.ServiceCIDRs, cp.ClusterCIDRs, cp.MachineCIDRs = svc, cluster, mach
	if apiServer != "" {
		host, port, err := noProxySplitAPIServer(apiServer)
		if err != nil {
			return usageErrorf("--api-server %q: %v", apiServer, err)
		}
		cp.APIServerHost, cp.APIServerPort = host, port
	}
	findings := append(noproxy.Lint(cp), noproxy.LintClients(cp, clients)...)
	noproxy.SortBySeverity(findings)
	if asJSON {
		if findings == nil {
			findings = []noproxy.Finding{}
		}
		return noProxyWriteJSON(c.stdout, findings)
	}
	if len(findings) == 0 {
		fmt.Fprintln(c.stdout, "no findings")
		return nil
	}
	// Reasons are long sentences: align only the heading line of each
	// finding and indent the rest.
	width := 0
	for _, f := range findings {
		width = max(width, len(f.Code))
	}
	for _, f := range findings {
		head := fmt.Sprintf("%-8s  %-*s  %s", strings.ToUpper(string(f.Severity)), width, f.Code, f.Entry)
		fmt.Fprintln(c.stdout, strings.TrimRight(head, " "))
		fmt.Fprintf(c.stdout, "          %s\n", f.Reason)
		if f.Fix != "" {
			fmt.Fprintf(c.stdout, "          fix: %s\n", f.Fix)
		}
	}
	return nil
}

// noProxyCIDRList collects repeatable, comma-separated CIDR flags and
// rejects anything that is not a CIDR, naming it.
type noProxyCIDRList []string

func (l *noProxyCIDRList) String() string { return strings.Join(*l, ",") }

func (l *noProxyCIDRList) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if _, err := netip.ParsePrefix(s); err != nil {
			return fmt.Errorf("%q is not a CIDR", s)
		}
		*l = append(*l, s)
	}
	return nil
}

func noProxySplitAPIServer(s string) (string, int32, error) {
	host, portText, err := net.SplitHostPort(s)
	if err != nil {
		// A bare host (or bare IPv6 address) has no port.
		if strings.Count(s, ":") > 1 || !strings.Contains(s, ":") {
			return strings.Trim(s, "[]"), 443, nil
		}
		return "", 0, err
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil || port == 0 {
		return "", 0, fmt.Errorf("port %q is not a number between 1 and 65535", portText)
	}
	if host == "" {
		return "", 0, errors.New("missing host")
	}
	return host, int32(port), nil
}

// noProxyParseInterleaved parses flags that may come before, between or
// after the positional arguments; everything after "--" is positional.
func noProxyParseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var tail []string
	for i, a := range args {
		if a == "--" {
			args, tail = args[:i], args[i+1:]
			break
		}
	}
	var pos []string
	for {
		if err := parse(fs, args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return append(pos, tail...), nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func noProxyFlagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func noProxyWriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
