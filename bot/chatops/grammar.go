package chatops

import (
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/validation"
)

// UsageError is what Parse returns for wrong or partial input: the usage
// line of the command (or of help, when the command is unknown) and a
// one-line hint saying what is wrong.
type UsageError struct {
	Command string // command name as in Usage; "" when unknown
	Usage   string // e.g. "/hcp diagnose <cluster>"
	Hint    string // e.g. "cluster must be [<mgmt>:]<namespace>/<name>, ..."
}

func (e *UsageError) Error() string { return e.Hint + " (usage: " + e.Usage + ")" }

// Prefix is the slash command the grammar belongs to.
const Prefix = "/hcp"

// spec describes one command for the parser, Usage and Help.
type spec struct {
	verb, sub string // sub is the required second word of two-word commands
	args      string // argument synopsis
	summary   string
	parse     func(args []string) (Command, error)
}

func (s spec) name() string { return join(s.verb, s.sub) }

func (s spec) usage() string { return Prefix + " " + join(s.name(), s.args) }

// specs lists the commands in the order Help shows them. It is filled in
// init because the parse functions refer back to it (help's topic).
var specs []spec

func init() {
	specs = []spec{
		{verb: "help", args: "[command]", summary: "list the commands, or explain one", parse: parseHelp},
		{verb: "status", args: "[cluster]", summary: "state of all clusters, of one, or of one management cluster's (mgmt-1:)", parse: parseStatus},
		{verb: "incidents", summary: "open incidents", parse: noArgs(Incidents{})},
		{verb: "diagnose", args: "<cluster|incident-id>", summary: "diagnose a cluster now", parse: parseDiagnose},
		{verb: "fix", sub: "noproxy", args: "<cluster> [--add ENTRY,...]", summary: "propose a noProxy fix (needs approval)", parse: parseFixNoProxy},
		{verb: "expose", args: "<cluster> <namespace>/<service> [port,...] [nodeports N,...]", summary: "expose a hosted Service through NodePorts, on node ports you may choose (needs approval)", parse: parseExpose},
		{verb: "rollback", args: "<action-id>", summary: "undo an applied action", parse: parseIDCommand(func(id string) Command { return Rollback{ActionID: id} })},
		{verb: "approve", args: "<action-id>", summary: "approve a proposed action", parse: parseIDCommand(func(id string) Command { return Approve{ActionID: id} })},
		{verb: "reject", args: "<action-id> [reason...]", summary: "reject a proposed action", parse: parseReject},
		{verb: "whoami", summary: "your Kubernetes identity on each management cluster: who the agent acts as on your approval", parse: noArgs(Whoami{})},
		{verb: "silence", args: "<cluster|incident-id> <duration> [reason...]", summary: "mute a cluster or incident (e.g. 2h, 1d; at most 30d)", parse: parseSilence},
		{verb: "timeline", args: "<incident-id>", summary: "an incident's story, step by step (a postmortem draft)", parse: parseTimeline},
		{verb: "audit", args: "[n|verify]", summary: "last n audit entries; verify: check the whole trail for gaps, broken links and forged records", parse: parseAudit},
		{verb: "digest", sub: "now", summary: "post the digest now", parse: noArgs(DigestNow{})},
		{verb: "noproxy", sub: "check", args: "<cluster> <host[:port]>", summary: "would this cluster's clients bypass the proxy for host?", parse: parseNoProxyCheck},
	}
}

func findSpec(verb string) (spec, bool) {
	for _, s := range specs {
		if s.verb == verb {
			return s, true
		}
	}
	return spec{}, false
}

// Usage returns the usage line of a command, given its name or first word
// ("fix noproxy" or "fix"), case-insensitively; "" if there is no such command.
func Usage(cmd string) string {
	verb, _, _ := strings.Cut(strings.TrimSpace(cmd), " ")
	s, ok := findSpec(asciiLower(verb))
	if !ok {
		return ""
	}
	return s.usage()
}

// Help lists every command with its usage and summary, one per line.
func Help() string {
	var b strings.Builder
	b.WriteString("Commands (a cluster is [<mgmt>:]<namespace>/<name>):\n")
	for _, s := range specs {
		b.WriteString(s.usage())
		b.WriteString(" — ")
		b.WriteString(s.summary)
		b.WriteByte('\n')
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// asciiLower lower-cases ASCII letters only. Unicode case folding would map
// lookalikes onto commands (the Kelvin sign folds to "k", "ſ" to "s").
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// Parse reads the text after "/hcp". Words are separated by any white
// space; command words are case-insensitive (ASCII only); arguments are
// validated strictly: see ParseClusterRef, IDPattern, ParseDuration,
// ParseNoProxyEntry and the Max* limits. Empty text is ShowHelp. Wrong
// input returns a *UsageError, never a panic.
func Parse(text string) (Command, error) {
	helpUsage := Prefix + " help [command]"
	if len(text) > MaxInputBytes {
		return nil, &UsageError{Usage: helpUsage, Hint: "input longer than " + strconv.Itoa(MaxInputBytes) + " bytes"}
	}
	if !utf8.ValidString(text) {
		return nil, &UsageError{Usage: helpUsage, Hint: "input is not valid UTF-8"}
	}
	words := strings.Fields(text)
	if len(words) == 0 {
		return ShowHelp{}, nil
	}
	s, ok := findSpec(asciiLower(words[0]))
	if !ok {
		return nil, &UsageError{Usage: helpUsage, Hint: "unknown command " + quote(words[0]) + "; try " + Prefix + " help"}
	}
	args := words[1:]
	if s.sub != "" {
		if len(args) == 0 || asciiLower(args[0]) != s.sub {
			return nil, &UsageError{Command: s.name(), Usage: s.usage(), Hint: "did you mean " + quote(s.name()) + "?"}
		}
		args = args[1:]
	}
	c, err := s.parse(args)
	if err != nil {
		hint, ok := asHint(err)
		if !ok {
			hint = "invalid arguments"
		}
		return nil, &UsageError{Command: s.name(), Usage: s.usage(), Hint: hint}
	}
	return c, nil
}

const (
	hintTooMany = hintError("too many arguments")
	hintTooFew  = hintError("missing arguments")
)

// arity checks the argument count; the errors become hints.
func arity(args []string, minN, maxN int) error {
	switch {
	case len(args) < minN:
		return hintTooFew
	case maxN >= 0 && len(args) > maxN:
		return hintTooMany
	}
	return nil
}

func noArgs(c Command) func([]string) (Command, error) {
	return func(args []string) (Command, error) {
		if err := arity(args, 0, 0); err != nil {
			return nil, err
		}
		return c, nil
	}
}

func parseHelp(args []string) (Command, error) {
	if err := arity(args, 0, 2); err != nil {
		return nil, err
	}
	if len(args) == 0 {
		return ShowHelp{}, nil
	}
	s, ok := findSpec(asciiLower(args[0]))
	if !ok {
		return nil, hintf("unknown command %s", quote(args[0]))
	}
	if len(args) == 2 && (s.sub == "" || asciiLower(args[1]) != s.sub) {
		return nil, hintTooMany
	}
	return ShowHelp{Topic: s.verb}, nil
}

func parseStatus(args []string) (Command, error) {
	if err := arity(args, 0, 1); err != nil {
		return nil, err
	}
	if len(args) == 0 {
		return Status{}, nil
	}
	// "mgmt-1:" is every hosted cluster of one management cluster: the
	// fleet's answer counts the healthy ones per management cluster and
	// points here to list them.
	if mgmt, rest, _ := strings.Cut(args[0], ":"); rest == "" && strings.HasSuffix(args[0], ":") {
		if errs := validation.IsDNS1123Label(mgmt); len(errs) > 0 {
			return nil, hintf("%s: management cluster %s is not a DNS label", clusterHint, quote(mgmt))
		}
		return Status{Mgmt: mgmt}, nil
	}
	c, err := ParseClusterRef(args[0])
	if err != nil {
		return nil, err
	}
	return Status{Cluster: &c}, nil
}

func parseDiagnose(args []string) (Command, error) {
	if err := arity(args, 1, 1); err != nil {
		return nil, err
	}
	if !strings.Contains(args[0], "/") && ValidID(args[0]) {
		return Diagnose{IncidentID: args[0]}, nil // what the Details button does
	}
	c, err := ParseClusterRef(args[0])
	if err != nil {
		return nil, err
	}
	return Diagnose{Cluster: c}, nil
}

func parseFixNoProxy(args []string) (Command, error) {
	if err := arity(args, 1, 3); err != nil {
		return nil, err
	}
	c, err := ParseClusterRef(args[0])
	if err != nil {
		return nil, err
	}
	cmd := FixNoProxy{Cluster: c}
	rest := args[1:]
	if len(rest) == 0 {
		return cmd, nil
	}
	var list string
	switch {
	case rest[0] == "--add" && len(rest) == 2:
		list = rest[1]
	case strings.HasPrefix(rest[0], "--add=") && len(rest) == 1:
		list = strings.TrimPrefix(rest[0], "--add=")
	case rest[0] == "--add":
		return nil, hintError("--add needs ENTRY,... (comma-separated, no spaces)")
	default:
		return nil, hintf("unexpected %s; only --add ENTRY,... may follow the cluster", quote(rest[0]))
	}
	if cmd.Add, err = parseNoProxyList(list); err != nil {
		return nil, err
	}
	return cmd, nil
}

func parseExpose(args []string) (Command, error) {
	if err := arity(args, 2, -1); err != nil {
		return nil, err
	}
	c, err := ParseClusterRef(args[0])
	if err != nil {
		return nil, err
	}
	ns, svc, found := strings.Cut(args[1], "/")
	if !found {
		return nil, hintError("service must be <namespace>/<service>, e.g. default/web")
	}
	if !isASCII(ns) || len(validation.IsDNS1123Label(ns)) > 0 {
		return nil, hintf("namespace %s is not a DNS-1123 label (lower-case letters, digits, '-')", quote(ns))
	}
	if !isASCII(svc) || len(validation.IsDNS1035Label(svc)) > 0 {
		return nil, hintf("service %s is not a valid Service name (DNS-1035 label)", quote(svc))
	}
	cmd := Expose{Cluster: c, Namespace: ns, Service: svc}
	portToks, nodeToks := args[2:], []string(nil)
	if i := slices.IndexFunc(portToks, func(w string) bool { return asciiLower(w) == nodePortsWord }); i >= 0 {
		portToks, nodeToks = portToks[:i], portToks[i+1:]
		if len(nodeToks) == 0 {
			return nil, hintError(nodePortsWord + " needs N,... (comma-separated node ports, e.g. 30001,30002)")
		}
	}
	if len(portToks) > 0 {
		if cmd.Ports, err = parsePorts(portToks); err != nil {
			return nil, err
		}
	}
	if nodeToks == nil {
		return cmd, nil
	}
	if cmd.NodePorts, err = parseNodePorts(nodeToks); err != nil {
		return nil, err
	}
	if len(cmd.Ports) > 0 {
		// Node ports pair with the ports in the same place: a port listed
		// twice would shift the pairs.
		if n := countPorts(portToks); n != len(cmd.Ports) {
			return nil, hintError("a port is listed twice; with nodeports each port pairs with the node port in the same place")
		}
		if len(cmd.NodePorts) > len(cmd.Ports) {
			return nil, hintf("%d node ports for %d ports: at most one node port per port, in the same order", len(cmd.NodePorts), len(cmd.Ports))
		}
	}
	return cmd, nil
}

// nodePortsWord introduces the chosen node ports of expose.
const nodePortsWord = "nodeports"

func parseIDCommand(mk func(id string) Command) func([]string) (Command, error) {
	return func(args []string) (Command, error) {
		if err := arity(args, 1, 1); err != nil {
			return nil, err
		}
		id, err := parseID("action id", args[0])
		if err != nil {
			return nil, err
		}
		return mk(id), nil
	}
}

func parseTimeline(args []string) (Command, error) {
	if err := arity(args, 1, 1); err != nil {
		return nil, err
	}
	id, err := parseID("incident id", args[0])
	if err != nil {
		return nil, err
	}
	return Timeline{IncidentID: id}, nil
}

func parseReject(args []string) (Command, error) {
	if err := arity(args, 1, -1); err != nil {
		return nil, err
	}
	id, err := parseID("action id", args[0])
	if err != nil {
		return nil, err
	}
	reason, err := parseReason(args[1:])
	if err != nil {
		return nil, err
	}
	return Reject{ActionID: id, Reason: reason}, nil
}

func parseSilence(args []string) (Command, error) {
	if err := arity(args, 2, -1); err != nil {
		return nil, err
	}
	var cmd Silence
	if strings.Contains(args[0], "/") {
		c, err := ParseClusterRef(args[0])
		if err != nil {
			return nil, err
		}
		cmd.Cluster = &c
	} else {
		if !ValidID(args[0]) {
			return nil, hintf("%s is neither a cluster ([<mgmt>:]<namespace>/<name>) nor an incident id", quote(args[0]))
		}
		cmd.IncidentID = args[0]
	}
	var err error
	if cmd.Duration, err = ParseDuration(args[1]); err != nil {
		return nil, err
	}
	if cmd.Reason, err = parseReason(args[2:]); err != nil {
		return nil, err
	}
	return cmd, nil
}

func parseAudit(args []string) (Command, error) {
	if err := arity(args, 0, 1); err != nil {
		return nil, err
	}
	if len(args) == 0 {
		return Audit{}, nil
	}
	s := args[0]
	if asciiLower(s) == auditVerifyWord {
		return AuditVerify{}, nil
	}
	if s == "" || len(s) > 4 || strings.TrimLeft(s, "0123456789") != "" {
		return nil, hintf("n must be a number between 1 and %d, or %s", MaxAudit, auditVerifyWord)
	}
	n, _ := strconv.Atoi(s) // 1-4 digits: cannot fail
	if n < 1 || n > MaxAudit {
		return nil, hintf("n must be a number between 1 and %d, or %s", MaxAudit, auditVerifyWord)
	}
	return Audit{N: n}, nil
}

// auditVerifyWord follows audit to verify the trail instead of listing it.
const auditVerifyWord = "verify"

func parseNoProxyCheck(args []string) (Command, error) {
	if err := arity(args, 2, 2); err != nil {
		return nil, err
	}
	c, err := ParseClusterRef(args[0])
	if err != nil {
		return nil, err
	}
	if !isASCII(args[1]) || len(args[1]) > MaxNoProxyEntryLen {
		return nil, hintf("host %s is not a DNS name or IP address", quote(args[1]))
	}
	host, port, err := parseHost(args[1])
	if err != nil {
		return nil, err
	}
	return NoProxyCheck{Cluster: c, Host: host, Port: port}, nil
}
