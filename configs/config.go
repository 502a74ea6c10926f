package configs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	"k8s.io/apimachinery/pkg/labels"
	yaml "sigs.k8s.io/yaml/goyaml.v3"

	"github.com/hcpbot/hcpbot/identity"
	"github.com/hcpbot/hcpbot/noproxy"
	"github.com/hcpbot/hcpbot/partition"
)

// Config is one hcpbot configuration file, validated, with defaults
// applied. A section that is absent from the file is nil (Agent, Bot,
// Slack, Approvals) or empty (Digests): the process does not run that part
// (an empty Identities: the agent acts as itself).
type Config struct {
	// File is the name the configuration was read from, for messages.
	File string

	NATS      NATS
	Agent     *Agent
	Bot       *Bot
	Slack     *Slack
	Approvals *Approvals
	// Identities map the people who approve changes in Slack to the
	// Kubernetes identities the agent acts as (impersonates) when it makes
	// a change they approved, so that the management cluster's RBAC has
	// the last word and its audit log names them. The bot and the agent
	// read the same section. Absent: nothing mapped, nothing required,
	// the agent acts as itself.
	Identities identity.Map
	Digests    []Digest
	Log        Log

	// lines records where each field was written (YAML path → key node),
	// so that problems found after parsing (Secrets, `config check`)
	// point at the line as parse problems do.
	lines map[string]*yaml.Node
}

// Line is the line field (a YAML path such as "slack.botTokenEnv") was
// written on, or that of its nearest enclosing section written in the
// file; 0 when neither is.
func (c *Config) Line(field string) int {
	if n := nearest(c.lines, field); n != nil {
		return n.Line
	}
	return 0
}

// Written reports whether the file gives field (a YAML path such as
// "nats.eventsMaxAge") a value: false for a field left out or null, whose
// value is the default. A process that does not own a setting (the agent
// and the events stream's, Agent) acts only on what the file says.
func (c *Config) Written(field string) bool {
	_, ok := c.lines[field]
	return ok
}

// Problem is a problem about field found after parsing, located like the
// parser's own.
func (c *Config) Problem(field, format string, a ...any) Problem {
	p := Problem{File: c.File, Field: field, Message: fmt.Sprintf(format, a...)}
	if n := nearest(c.lines, field); n != nil {
		p.Line, p.Column = n.Line, n.Column
	}
	return p
}

// NATS says how agent and bot reach NATS JetStream.
type NATS struct {
	// URLs of the NATS servers (nats://, tls://, ws://, wss:// or
	// host:port), without credentials. Default: none, which starts an
	// embedded server with JetStream on disk.
	URLs []string
	// StoreDir is the embedded server's JetStream store (absolute path;
	// only with an empty URLs). Default: empty, which means the user's
	// cache folder + /hcpbot/nats.
	StoreDir string
	// EmbeddedListen ("host:port"; only with an empty URLs) makes the
	// embedded server accept TCP clients there too, each with one of the
	// nkeys it makes per role at each start (their seeds in files of
	// StoreDir/keys, mode 0600): the bot, and the agent the process runs.
	// Default: empty, no listener at all (in-process connections only).
	EmbeddedListen string
	// Creds is the NATS .creds file (JWT + NKey seed), as credsFile (a
	// path the NATS client reads) or credsEnv (a variable holding the
	// file's content). Only with URLs. Default: none (no authentication).
	Creds SecretRef
	// NkeySeedFile is a file holding the nkey user seed (SU...) of this
	// process's NATS user, for servers that know users by public nkey
	// (configs/deploy/nats). A path only: the seed itself is refused
	// anywhere in the file. Only with URLs; not with Creds. Default: none.
	NkeySeedFile string
	// CAFile verifies the servers' TLS certificates (only with URLs).
	// Default: the system roots.
	CAFile string
	// StreamReplicas, EventsMaxAge and DuplicateWindow are the events
	// stream's settings. The bot creates the stream with them (on its own
	// embedded server, brings it to them). The agent against URLs may
	// not create or change a stream: it checks the bot's against those
	// its file writes (Written) and warns at start for each that
	// differs; on its own embedded server it creates the stream with them
	// and applies to an existing one those its file writes. `config check`
	// says which for the process checked.
	//
	// StreamReplicas of the events stream: 1, 3 or 5 (JetStream's
	// quorum sizes). Default 1; more needs a NATS cluster (URLs).
	StreamReplicas int
	// EventsMaxAge is how long events stay in the stream. Default 72h.
	EventsMaxAge time.Duration
	// DuplicateWindow is JetStream's deduplication window, in which a
	// restated fact (same Nats-Msg-Id) is dropped. Default 15m; at most
	// EventsMaxAge.
	DuplicateWindow time.Duration
}

// Agent configures `hcpbot agent` for one management cluster.
type Agent struct {
	// Source is the management cluster's name in events and subjects,
	// a DNS-1123 label. Required.
	Source string
	// Kubeconfig of the management cluster. Default: empty, in-cluster
	// (then $KUBECONFIG and ~/.kube/config); the agent's --kubeconfig
	// overrides it.
	Kubeconfig string
	// Listen is the address of /healthz, /readyz and /metrics. Default ":8080".
	Listen         string
	LeaderElection LeaderElection
	// BufferEvents is how many events are held in memory while NATS is
	// unreachable; beyond that a resync restates. Default 10000.
	BufferEvents int
	// HostedProbeInterval is how often each hosted API server is probed
	// for reachability. Default 15s.
	HostedProbeInterval time.Duration
	// NodeJoinGrace is how long a hosted Node without a Ready condition
	// (its kubelet has not posted status yet) counts as joining rather than
	// a problem; after it the node is reported as not joining. Default 10m.
	NodeJoinGrace time.Duration
	// ServiceNodePortRange is the management cluster's
	// --service-node-port-range (OpenShift: the Network config's
	// serviceNodePortRange), which node ports to expose are checked against
	// before anything is written. Default 30000-32767.
	ServiceNodePortRange NodePortRange
	// TrustedKeys are the public keys (nkeys user keys, U…) whose
	// signature the agent accepts on action requests: the bot's, two
	// during a key rotation. Default: none, and every action request is
	// refused — except in `hcpbot all`, whose agent trusts the key of the
	// bot in the same process.
	TrustedKeys []string
	// RequireFourEyes makes the agent refuse actions not approved by two
	// distinct people (a person who requested, another who approved),
	// whatever the bot's policy. Default: approvals.fourEyes when the file
	// has an approvals section, else true.
	RequireFourEyes bool
	// Approvers, if set, are the only Slack user IDs whose approval the
	// agent accepts (approver groups cannot be checked by the agent).
	// Default: none, trust the bot's check.
	Approvers []string
	// RequiredApprovals is the least number of distinct people whose
	// sealed approvals the agent accepts, whatever the bot's policy
	// (1–5). Default: approvals.required when the file has an approvals
	// section, else 1.
	RequiredApprovals int
	// ActionAckWait is how long a request handed to a leader that died
	// waits before the next leader gets it; the leader says it is still
	// working every third of it. Default 30s (1s–5m).
	ActionAckWait time.Duration
}

// DefaultServiceNodePortRange is Kubernetes' and OpenShift's default.
var DefaultServiceNodePortRange = NodePortRange{Min: 30000, Max: 32767}

// NodePortRange is an inclusive range of node ports ("30000-32767").
type NodePortRange struct{ Min, Max int32 }

func (r NodePortRange) String() string { return fmt.Sprintf("%d-%d", r.Min, r.Max) }

// LeaderElection makes only one agent replica watch and publish.
type LeaderElection struct {
	// Enabled: compete for a Lease. Default true.
	Enabled bool
	// Namespace of the Lease. Default: empty, which means $POD_NAMESPACE,
	// else "default" (as the --lease-namespace flag).
	Namespace string
	// LeaseName. Default "hcpbot-agent".
	LeaseName string
	// LeaseDuration, RenewDeadline and RetryPeriod as in client-go's
	// leader election. Defaults 15s, 10s, 2s; LeaseDuration must exceed
	// RenewDeadline, which must exceed 1.2 × RetryPeriod.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// Bot configures `hcpbot bot`: correlation, incident messages, routing.
type Bot struct {
	// Listen is the address Slack's requests come to: /slack/* only,
	// anything else is 404. Not opened with Socket Mode and no signing
	// secret. Default ":8081".
	Listen string
	// OpsListen is the address of /healthz, /readyz and /metrics, kept
	// apart from Listen so that publishing the Slack endpoints does not
	// publish the metrics. Default ":8082".
	OpsListen string
	// GroupWait is how long the first event of an incident waits for
	// related events before the first message. Default 5s; 0 posts at once.
	GroupWait time.Duration
	// GroupInterval is the shortest time between two updates of one
	// incident's message. Default 1m.
	GroupInterval time.Duration
	// ResolveTimeout is how long an incident must stay clear before it
	// is marked resolved. Default 5m.
	ResolveTimeout time.Duration
	// HealDeadline is how long an incident may take to heal after its
	// approved fix ran before it says "fix applied, not healed" and offers
	// the rollback. Default 30m.
	HealDeadline time.Duration
	// CheckpointEvery is how often the leader writes a checkpoint of its
	// state (bot/checkpoint), so that a start replays at most this much
	// of the events stream; it writes one at a clean shutdown too.
	// Default 1h; 0s written explicitly: at a clean shutdown only; else at
	// least MinCheckpointEvery and shorter than nats.eventsMaxAge. Needs a
	// signing key (approvals): checkpoints are sealed with it.
	CheckpointEvery time.Duration
	Storm           Storm
	// Routes send incidents to channels; the first matching route wins.
	Routes []Route
	// DefaultChannel gets every incident no route matches. Required.
	DefaultChannel string
	// NoProxyClients are the NO_PROXY client families the hosted
	// clusters' workloads use (see Clients). Default
	// noproxy.DefaultClients: go, curl, requests, urllib.
	NoProxyClients []noproxy.Client
	// Partitions is the number of bot groups sharing the events stream,
	// each holding the management clusters partition.Set.Of gives it
	// (docs/capacity.md). Default 1: one group, nothing changes. More
	// than one needs approvals' signing key (checkpoints are sealed
	// with it).
	Partitions int
	// Partition is this process's group, 0 <= Partition < Partitions;
	// `hcpbot bot --partition` (HCPBOT_PARTITION) overrides it so one
	// Deployment per group shares the file. Default 0.
	Partition int
	// PartitionMap, optional, puts a management cluster (source) in a
	// group; the others fall back to the hash. Every group < Partitions.
	PartitionMap map[string]int
}

// PartitionSet is the bot groups as package partition reads them.
func (b *Bot) PartitionSet() partition.Set {
	return partition.Set{Count: max(b.Partitions, 1), Static: b.PartitionMap}
}

// Storm: when more than Threshold incidents open within Window, the bot
// posts one summary instead of one message each (Slack allows about one
// message per second per channel).
type Storm struct {
	Threshold int           // default 20, at least 2
	Window    time.Duration // default 30s
}

// Route sends the incidents it matches to Channel. At least one of Match
// and Selector is set; when both are, both must match.
type Route struct {
	Match RouteMatch
	// Selector is a Kubernetes label selector ("env=prod,tier!=dev")
	// over the hosted cluster's labels.
	Selector string
	// Channel gets the incidents the route matches; empty only when
	// NoProxyClients is set (the route then only chooses families).
	Channel string
	// NoProxyClients override Bot.NoProxyClients for the clusters the
	// route matches (see Bot.Clients); nil leaves them alone.
	NoProxyClients []noproxy.Client

	selector labels.Selector // parsed Selector; nil when empty
}

// RouteMatch compares an incident's fields (Incident) for equality;
// empty fields match anything.
type RouteMatch struct {
	Source    string // management cluster the incident was reported from
	Namespace string // hosted cluster's namespace
	Cluster   string // hosted cluster's name
	// Kind is the rule ID of the incident's main diagnosis when it opened
	// (operator-crashloop, nodes-notready, ...: bot/diagnose's rules).
	// It replaces the former type, which compared an event type and so
	// never matched an incident.
	Kind string
}

// Slack configures the Slack app.
type Slack struct {
	// APIURL is the Web API base, ending in "/". Default
	// "https://slack.com/api/".
	APIURL string
	// BotToken (xoxb-…): botTokenEnv or botTokenFile. Required.
	BotToken SecretRef
	// SigningSecret verifies Slack's HTTP requests: signingSecretEnv or
	// signingSecretFile. Required unless SocketMode.
	SigningSecret SecretRef
	// AppToken (xapp-…) opens the Socket Mode connection: appTokenEnv or
	// appTokenFile. Required with SocketMode, refused without.
	AppToken SecretRef
	// SocketMode receives interactions over a WebSocket the bot opens,
	// instead of HTTP requests from Slack. Default false.
	SocketMode bool
}

// Approvals says who may approve fixes.
type Approvals struct {
	// Approvers are Slack user IDs (U…/W…).
	Approvers []string
	// ApproverGroups are Slack user group IDs (S…); their members approve.
	ApproverGroups []string
	// FourEyes requires the approver to differ from who requested the
	// fix. Default true.
	FourEyes bool
	// Required is how many distinct people must approve (1–5), besides
	// the requester under four-eyes. Default 1.
	Required int
	// ProposalTTL is how long a proposed fix can be approved. Default 1h.
	ProposalTTL time.Duration
	// SigningKey is the bot's ed25519 key (an nkeys user seed, SU…, as
	// `hcpbot keygen` writes), as signingKeyEnv or signingKeyFile. Every
	// approved request the bot sends is signed with it; agents list its
	// public key in agent.trustedKeys. Required unless the file has an
	// agent section (`hcpbot all`, which makes a key per process).
	SigningKey SecretRef
	// TrustedKeys are other public keys (U…) whose seals count as the
	// bot's own, during a key rotation: first the next key (before the
	// replicas switch to it), then the previous one. Proposals, decisions
	// and audit records they sealed verify. At most two. Default: none.
	TrustedKeys []string
}

// Digest is a scheduled summary posted to a channel.
type Digest struct {
	// Name identifies the digest (DNS-1123 label, unique).
	Name string
	// Schedule is a cron spec (5 fields, or 6 with seconds first, or a
	// descriptor such as @daily). Required.
	Schedule string
	// Timezone is an IANA zone the schedule is read in. Default "UTC".
	Timezone string
	// Channel receives the digest. Required.
	Channel string

	schedule cron.Schedule
	location *time.Location
}

// Next returns the first run of the digest after t.
func (d Digest) Next(t time.Time) time.Time {
	return d.schedule.Next(t.In(d.location))
}

// Location is the digest's time zone.
func (d Digest) Location() *time.Location { return d.location }

// Log configures the process log.
type Log struct {
	Level  string // debug, info, warn or error; default info
	Format string // json or console; default json
}

// Defaults, one place so documentation, example.yaml and code agree.
const (
	DefaultStreamReplicas      = 1
	DefaultEventsMaxAge        = 72 * time.Hour
	DefaultDuplicateWindow     = 15 * time.Minute
	DefaultAgentListen         = ":8080"
	DefaultLeaseName           = "hcpbot-agent"
	DefaultLeaseDuration       = 15 * time.Second
	DefaultRenewDeadline       = 10 * time.Second
	DefaultRetryPeriod         = 2 * time.Second
	DefaultBufferEvents        = 10000
	DefaultHostedProbeInterval = 15 * time.Second
	DefaultNodeJoinGrace       = 10 * time.Minute
	DefaultBotListen           = ":8081"
	DefaultBotOpsListen        = ":8082"
	DefaultGroupWait           = 5 * time.Second
	DefaultGroupInterval       = time.Minute
	DefaultResolveTimeout      = 5 * time.Minute
	DefaultHealDeadline        = 30 * time.Minute
	DefaultCheckpointEvery     = time.Hour
	DefaultStormThreshold      = 20
	DefaultStormWindow         = 30 * time.Second
	DefaultSlackAPIURL         = "https://slack.com/api/"
	DefaultProposalTTL         = time.Hour
	DefaultActionAckWait       = 30 * time.Second
	DefaultTimezone            = "UTC"
	DefaultLogLevel            = "info"
	DefaultLogFormat           = "json"
	// MinCheckpointEvery: each checkpoint rewrites the bot's whole state
	// (about 14 MB at 2,000 hosted clusters, docs/capacity.md), times the
	// replicas; more often costs NATS more than the replay it saves.
	MinCheckpointEvery = 10 * time.Second
)

// AgentDefaults is the configuration of `hcpbot agent` run without a file:
// an agent section (without source) and everything else at its default,
// the same defaults a file gets.
func AgentDefaults() *Config {
	c := &Config{File: "(command line)", Agent: &Agent{}}
	c.applyDefaults(func(string) bool { return false })
	return c
}

// maxConfigSize bounds what Load reads: a configuration is a few KiB, and
// a mistaken path (a log file, a device) should fail fast.
const maxConfigSize = 1 << 20

// Load reads and parses the configuration file at path.
func Load(path string) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxConfigSize+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(data) > maxConfigSize {
		return nil, fmt.Errorf("%s: larger than %d bytes: not a configuration file", path, maxConfigSize)
	}
	return Parse(data, path)
}

// Parse parses and validates a configuration; name is used in messages.
// On any problem it returns an *Error listing all of them (and no Config);
// otherwise the Config with defaults applied.
func Parse(data []byte, name string) (*Config, error) {
	d := &decoder{file: name, secret: map[*yaml.Node]int{}, lines: map[string]*yaml.Node{}}
	root, err := parseYAML(data)
	if err != nil {
		return nil, &Error{Problems: []Problem{yamlProblem(name, err)}}
	}
	if root == nil {
		return nil, &Error{Problems: []Problem{{File: name, Message: "empty configuration: at least one of agent and bot is needed"}}}
	}
	d.scanSecrets(root, "")
	c := &Config{File: name, lines: d.lines}
	d.root(root, c)
	d.check(c)
	if len(d.problems) > 0 {
		sortProblems(d.problems)
		return nil, &Error{Problems: d.problems}
	}
	c.applyDefaults(func(path string) bool { _, ok := d.lines[path]; return ok })
	return c, nil
}

// parseYAML returns the single document's top node (nil for an empty
// file). Several documents are refused: the later ones would be silently
// ignored by a single-document reader.
func parseYAML(data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, fmt.Errorf("line %d: a second YAML document (---): a configuration is one document", extra.Line)
	} else if !errors.Is(err, io.EOF) {
		return nil, err
	}
	if len(doc.Content) == 0 {
		return nil, nil
	}
	return doc.Content[0], nil
}

// yamlProblem turns a YAML syntax error ("yaml: line 3: ...") into a
// Problem with the line pulled out, so it reads like every other problem.
func yamlProblem(file string, err error) Problem {
	msg := err.Error()
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return Problem{File: file, Line: line, Message: "invalid YAML: " + unquote(m[2])}
	}
	return Problem{File: file, Message: "invalid YAML: " + unquote(strings.TrimPrefix(msg, "yaml: "))}
}

var yamlLineRE = regexp.MustCompile(`(?s)^(?:yaml: )?line (\d+): (.*)$`)

// yamlQuotedRE matches what the YAML parser quotes from the file (an
// anchor name, a scalar), which may be a secret put in the wrong place.
var yamlQuotedRE = regexp.MustCompile("'[^']*'|`[^`]*`|\"[^\"]*\"")

// unquote replaces the file's content quoted in a YAML error with "…":
// the line number says where to look.
func unquote(msg string) string {
	return yamlQuotedRE.ReplaceAllStringFunc(msg, func(q string) string { return q[:1] + "…" + q[len(q)-1:] })
}
