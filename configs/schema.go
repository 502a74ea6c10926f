package configs

import (
	"fmt"
	"maps"
	"net"
	"net/netip"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nkeys"
	"github.com/robfig/cron/v3"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	yaml "sigs.k8s.io/yaml/goyaml.v3"

	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/noproxy"
)

// Slack ID shapes. IDs, not names: names change and are ambiguous, IDs do
// not. Channels: C public, G private (legacy), D direct message. Users: U,
// or W on Enterprise Grid. User groups: S.
var (
	channelIDRE = regexp.MustCompile(`^[CGD][A-Z0-9]{8,}$`)
	userIDRE    = regexp.MustCompile(`^[UW][A-Z0-9]{8,}$`)
	groupIDRE   = regexp.MustCompile(`^S[A-Z0-9]{8,}$`)
	envNameRE   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// cronParser accepts 5 fields, 6 with leading seconds, and @descriptors;
// the same parser must be used by the scheduler, so it is exported through
// Digest.Next rather than re-created there.
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// SecretRef points at a secret: the name of an environment variable
// holding it, or a file containing it. At most one is set.
type SecretRef struct {
	Env  string
	File string
}

// IsSet reports whether the secret is configured.
func (r SecretRef) IsSet() bool { return r.Env != "" || r.File != "" }

// String says where the secret comes from, never what it is.
func (r SecretRef) String() string {
	switch {
	case r.Env != "":
		return "env " + r.Env
	case r.File != "":
		return "file " + r.File
	}
	return "unset"
}

func (d *decoder) root(n *yaml.Node, c *Config) {
	d.mapping(n, "", []field{
		{"nats", func(v *yaml.Node, p string) { d.nats(v, p, &c.NATS) }},
		{"agent", func(v *yaml.Node, p string) {
			c.Agent = &Agent{}
			if !d.agent(v, p, c.Agent) {
				c.Agent = nil // not a mapping: reported; no follow-on "x is required"
			}
		}},
		{"bot", func(v *yaml.Node, p string) {
			c.Bot = &Bot{}
			if !d.bot(v, p, c.Bot) {
				c.Bot = nil // not a mapping: reported; no follow-on "x is required"
			}
		}},
		{"slack", func(v *yaml.Node, p string) {
			c.Slack = &Slack{}
			if !d.slack(v, p, c.Slack) {
				c.Slack = nil // not a mapping: reported; no follow-on "x is required"
			}
		}},
		{"approvals", func(v *yaml.Node, p string) {
			c.Approvals = &Approvals{}
			if !d.approvals(v, p, c.Approvals) {
				c.Approvals = nil // not a mapping: reported; no follow-on "x is required"
			}
		}},
		{"identities", func(v *yaml.Node, p string) { d.identities(v, p, &c.Identities) }},
		{"digests", func(v *yaml.Node, p string) {
			d.sequence(v, p, func(v *yaml.Node, p string) {
				var dg Digest
				d.digest(v, p, &dg)
				c.Digests = append(c.Digests, dg)
			})
		}},
		{"log", func(v *yaml.Node, p string) { d.log(v, p, &c.Log) }},
	}, nil)
}

func (d *decoder) nats(n *yaml.Node, path string, c *NATS) {
	d.mapping(n, path, []field{
		{"urls", func(v *yaml.Node, p string) {
			d.strings(v, p, func(v *yaml.Node, p, s string) {
				if d.natsURL(v, p, s) {
					c.URLs = append(c.URLs, s)
				}
			})
		}},
		{"storeDir", func(v *yaml.Node, p string) {
			if s, ok := d.str(v, p); ok && d.absPath(v, p, s) {
				c.StoreDir = s
			}
		}},
		{"embeddedListen", func(v *yaml.Node, p string) {
			if s, ok := d.str(v, p); ok && (s == "" || d.listen(v, p, s)) {
				c.EmbeddedListen = s
			}
		}},
		{"credsFile", d.secretFile(&c.Creds.File)},
		{"credsEnv", d.secretEnv(&c.Creds.Env)},
		{"nkeySeedFile", d.secretFile(&c.NkeySeedFile)},
		{"caFile", func(v *yaml.Node, p string) {
			if s, ok := d.str(v, p); ok && d.path(v, p, s) {
				c.CAFile = s
			}
		}},
		{"streamReplicas", func(v *yaml.Node, p string) {
			if i, ok := d.integer(v, p); ok {
				if i != 1 && i != 3 && i != 5 {
					// JetStream's Raft needs a majority: 2 or 4 replicas
					// tolerate no more failures than 1 or 3 and cost more.
					d.problem(v, p, "%d: must be 1, 3 or 5 (JetStream replicas are a Raft quorum; even sizes add cost without tolerating more failures)", i)
					return
				}
				c.StreamReplicas = i
			}
		}},
		{"eventsMaxAge", func(v *yaml.Node, p string) {
			if t, ok := d.duration(v, p, time.Minute); ok {
				c.EventsMaxAge = t
			}
		}},
		{"duplicateWindow", func(v *yaml.Node, p string) {
			if t, ok := d.duration(v, p, time.Second); ok {
				c.DuplicateWindow = t
			}
		}},
	}, map[string]string{
		"token":    "use credsFile or credsEnv (a NATS .creds file)",
		"password": "use credsFile or credsEnv (a NATS .creds file)",
		"user":     "use credsFile or credsEnv (a NATS .creds file)",
		"nkey":     "use nkeySeedFile (a path to the nkey seed file) or credsFile/credsEnv (a NATS .creds file)",
		"nkeySeed": "use nkeySeedFile: a path to the file holding the seed, never the seed itself",
		"creds":    "use credsFile (a path) or credsEnv (an environment variable holding the .creds content)",
	})
}

func (d *decoder) agent(n *yaml.Node, path string, a *Agent) bool {
	return d.mapping(n, path, []field{
		{"source", func(v *yaml.Node, p string) {
			if s, ok := d.str(v, p); ok && d.dnsLabel(v, p, s, "a management cluster name") {
				a.Source = s
			}
		}},
		{"kubeconfig", func(v *yaml.Node, p string) {
			if s, ok := d.str(v, p); ok && (s == "" || d.path(v, p, s)) {
				a.Kubeconfig = s
			}
		}},
		{"listen", func(v *yaml.Node, p string) {
			if s, ok := d.str(v, p); ok && d.listen(v, p, s) {
				a.Listen = s
			}
		}},
		{"leaderElection", func(v *yaml.Node, p string) { d.leaderElection(v, p, &a.LeaderElection) }},
		{"bufferEvents", func(v *yaml.Node, p string) {
			if i, ok := d.integer(v, p); ok {
				if i < 1 || i > 1_000_000 {
					d.problem(v, p, "%d: must be between 1 and 1000000 (events are held in memory)", i)
					return
				}
				a.BufferEvents = i
			}
		}},
		{"hostedProbeInterval", func(v *yaml.Node, p string) {
			if t, ok := d.duration(v, p, time.Second); ok {
				a.HostedProbeInterval = t
			}
		}},
		{"nodeJoinGrace", func(v *yaml.Node, p string) {
			if t, ok := d.duration(v, p, 10*time.Second); ok {
				if t > 24*time.Hour {
					d.problem(v, p, "%s: at most 24h (a node without status for a day is not joining)", t)
					return
				}
				a.NodeJoinGrace = t
			}
		}},
		{"serviceNodePortRange", func(v *yaml.Node, p string) {
			if s, ok := d.str(v, p); ok {
				r, err := parseNodePortRange(s)
				if err != nil {
					d.problem(v, p, "%q: %v", s, err)
					return
				}
				a.ServiceNodePortRange = r
			}
		}},
		{"trustedKeys", func(v *yaml.Node, p string) {
			d.uniqueStrings(v, p, &a.TrustedKeys, func(s string) string {
				if !nkeys.IsValidPublicUserKey(s) {
					return fmt.Sprintf("%q is not an nkeys user public key (U…, 56 characters; `hcpbot keygen` prints one)", s)
				}
				return ""
			})
			if len(a.TrustedKeys) > 2 {
				d.problem(v, p, "%d keys: at most two (the current key and, during a rotation, the next or the previous one)", len(a.TrustedKeys))
			}
		}},
		{"requireFourEyes", func(v *yaml.Node, p string) {
			if b, ok := d.boolean(v, p); ok {
				a.RequireFourEyes = b
			}
		}},
		{"approvers", func(v *yaml.Node, p string) {
			d.userIDs(v, p, &a.Approvers)
		}},
		{"requiredApprovals", func(v *yaml.Node, p string) {
			if i, ok := d.approvalCount(v, p); ok {
				a.RequiredApprovals = i
			}
		}},
		{"actionAckWait", func(v *yaml.Node, p string) {
			if t, ok := d.duration(v, p, time.Second); ok {
				if t > 5*time.Minute {
					d.problem(v, p, "%s: must be at most 5m (a request left by a dead leader waits that long for the next)", t)
					return
				}
				a.ActionAckWait = t
			}
		}},
	}, nil)
}

// approvalCount reads a number of required approvals.
func (d *decoder) approvalCount(v *yaml.Node, p string) (int, bool) {
	i, ok := d.integer(v, p)
	if ok && (i < 1 || i > 5) {
		d.problem(v, p, "%d: must be between 1 and 5 distinct approvers", i)
		return 0, false
	}
	return i, ok
}

func (d *decoder) leaderElection(n *yaml.Node, path string, le *LeaderElection) {
	d.mapping(n, path, []field{
		{"enabled", func(v *yaml.Node, p string) {
			if b, ok := d.boolean(v, p); ok {
				le.Enabled = b
			}
		}},
		{"namespace", func(v *yaml.Node, p string) {
			if s, ok := d.str(v, p); ok && d.dnsLabel(v, p, s, "a namespace") {
				le.Namespace = s
			}
		}},
		{"leaseName", func(v *yaml.Node, p string) {
			if s, ok := d.str(v, p); ok && d.dnsSubdomain(v, p, s, "a Lease name") {
				le.LeaseName = s
			}
		}},
		{"leaseDuration", func(v *yaml.Node, p string) {
			if t, ok := d.duration(v, p, time.Second); ok {
				le.LeaseDuration = t
			}
		}},
		{"renewDeadline", func(v *yaml.Node, p string) {
			if t, ok := d.duration(v, p, time.Second); ok {
				le.RenewDeadline = t
			}
		}},
		{"retryPeriod", func(v *yaml.Node, p string) {
			if t, ok := d.duration(v, p, 100*time.Millisecond); ok {
				le.RetryPeriod = t
			}
		}},
	}, nil)
}

func (d *decoder) bot(n *yaml.Node, path string, b *Bot) bool {
	return d.mapping(n, path, []field{
		{"listen", func(v *yaml.Node, p string) {
			if s, ok := d.str(v, p); ok && d.listen(v, p, s) {
				b.Listen = s
			}
		}},
		{"opsListen", func(v *yaml.Node, p string) {
			if s, ok := d.str(v, p); ok && d.listen(v, p, s) {
				b.OpsListen = s
			}
		}},
		{"groupWait", func(v *yaml.Node, p string) {
			if t, ok := d.duration(v, p, 0); ok {
				b.GroupWait = t
			}
		}},
		{"groupInterval", func(v *yaml.Node, p string) {
			// Below a few seconds the bot would edit messages faster than
			// chat.update's rate limit (Tier 3, ~50/min) allows.
			if t, ok := d.duration(v, p, 5*time.Second); ok {
				b.GroupInterval = t
			}
		}},
		{"resolveTimeout", func(v *yaml.Node, p string) {
			if t, ok := d.duration(v, p, time.Second); ok {
				b.ResolveTimeout = t
			}
		}},
		{"healDeadline", func(v *yaml.Node, p string) {
			if t, ok := d.duration(v, p, time.Second); ok {
				b.HealDeadline = t
			}
		}},
		{"checkpointEvery", func(v *yaml.Node, p string) {
			if t, ok := d.duration(v, p, 0); ok {
				if t > 0 && t < MinCheckpointEvery {
					d.problem(v, p, "%s: must be at least %s (each checkpoint rewrites the bot's whole state), or 0s for a checkpoint at a clean shutdown only", t, MinCheckpointEvery)
					return
				}
				b.CheckpointEvery = t
			}
		}},
		{"storm", func(v *yaml.Node, p string) {
			d.mapping(v, p, []field{
				{"threshold", func(v *yaml.Node, p string) {
					if i, ok := d.intAtLeast(v, p, 2, ""); ok {
						b.Storm.Threshold = i
					}
				}},
				{"window", func(v *yaml.Node, p string) {
					if t, ok := d.duration(v, p, time.Second); ok {
						b.Storm.Window = t
					}
				}},
			}, nil)
		}},
		{"routes", func(v *yaml.Node, p string) {
			d.sequence(v, p, func(v *yaml.Node, p string) {
				var r Route
				d.route(v, p, &r)
				b.Routes = append(b.Routes, r)
			})
		}},
		{"defaultChannel", func(v *yaml.Node, p string) {
			if s, ok := d.str(v, p); ok && d.channel(v, p, s) {
				b.DefaultChannel = s
			}
		}},
		{"noProxyClients", func(v *yaml.Node, p string) { b.NoProxyClients = d.noProxyClients(v, p) }},
		{"partitions", func(v *yaml.Node, p string) {
			if i, ok := d.intAtLeast(v, p, 1, " (1 is one bot group)"); ok {
				b.Partitions = i
			}
		}},
		{"partition", func(v *yaml.Node, p string) {
			if i, ok := d.intAtLeast(v, p, 0, ""); ok {
				b.Partition = i
			}
		}},
		{"partitionMap", func(v *yaml.Node, p string) { b.PartitionMap = d.partitionMap(v, p) }},
	}, nil)
}

// intAtLeast decodes an integer of at least least; why ends the problem.
func (d *decoder) intAtLeast(v *yaml.Node, p string, least int, why string) (int, bool) {
	i, ok := d.integer(v, p)
	if ok && i < least {
		d.problem(v, p, "%d: must be at least %d%s", i, least, why)
		return 0, false
	}
	return i, ok
}

// partitionMap decodes bot.partitionMap: management cluster name (a
// DNS-1123 subdomain, as agent.source) to group, each group 0 or more
// (check compares them with bot.partitions).
func (d *decoder) partitionMap(n *yaml.Node, path string) map[string]int {
	r := resolve(n)
	if r.Kind != yaml.MappingNode {
		d.problem(n, path, "must be a mapping of management cluster to partition, not %s", describe(r))
		return nil
	}
	out := map[string]int{}
	for i := 0; i+1 < len(r.Content); i += 2 {
		k, v := r.Content[i], r.Content[i+1]
		p := path + "." + k.Value
		if _, dup := out[k.Value]; dup {
			d.problem(k, p, "is listed twice")
			continue
		}
		if !d.dnsSubdomain(k, p, k.Value, "a management cluster name") {
			continue
		}
		g, ok := d.intAtLeast(v, p, 0, "")
		if !ok {
			continue
		}
		d.lines[p] = k
		out[k.Value] = g
	}
	return out
}

// noProxyClients decodes a list of NO_PROXY client family names (go, curl,
// requests, urllib, wget, node and their aliases); duplicates are dropped,
// an empty list is refused (it would judge by no client at all).
func (d *decoder) noProxyClients(n *yaml.Node, path string) []noproxy.Client {
	var out []noproxy.Client
	d.sequence(n, path, func(v *yaml.Node, p string) {
		s, ok := d.str(v, p)
		if !ok {
			return
		}
		cl, err := noproxy.ParseClient(s)
		if err != nil {
			d.problem(v, p, "%q is not a client family (known: go, curl, requests, urllib, wget, node)", s)
			return
		}
		if !slices.Contains(out, cl) {
			out = append(out, cl)
		}
	})
	if s := resolve(n); s.Kind == yaml.SequenceNode && len(s.Content) == 0 {
		d.problem(n, path, "is empty: name at least one client family (go, curl, requests, urllib, wget, node), or remove it for the default [go, curl, requests, urllib]")
	}
	return out
}

func (d *decoder) route(n *yaml.Node, path string, r *Route) {
	ok := d.mapping(n, path, []field{
		{"match", func(v *yaml.Node, p string) {
			d.mapping(v, p, []field{
				{"source", func(v *yaml.Node, p string) {
					if s, ok := d.str(v, p); ok && d.dnsLabel(v, p, s, "a management cluster name") {
						r.Match.Source = s
					}
				}},
				{"namespace", func(v *yaml.Node, p string) {
					if s, ok := d.str(v, p); ok && d.dnsLabel(v, p, s, "a namespace") {
						r.Match.Namespace = s
					}
				}},
				{"cluster", func(v *yaml.Node, p string) {
					if s, ok := d.str(v, p); ok && d.dnsSubdomain(v, p, s, "a hosted cluster name") {
						r.Match.Cluster = s
					}
				}},
				{"kind", func(v *yaml.Node, p string) {
					if s, ok := d.str(v, p); ok {
						if !slices.Contains(incidentKinds(), s) {
							d.problem(v, p, "%q is not an incident kind (known: %s)", s, strings.Join(incidentKinds(), ", "))
							return
						}
						r.Match.Kind = s
					}
				}},
				{"type", func(v *yaml.Node, p string) {
					// Removed: it compared an event type, and an incident
					// is made of many events of several types, so no
					// route with it ever matched. Say what replaces it.
					hint := ""
					if s, ok := d.str(v, p); ok && kindOfEventType[s] != "" {
						hint = fmt.Sprintf(" (for %q events, probably kind: %s)", s, kindOfEventType[s])
					}
					d.problem(v, p, "type is no longer supported: an incident is many events of several types; route on what the incident is with match.kind%s, known kinds: %s", hint, strings.Join(incidentKinds(), ", "))
				}},
			}, nil)
		}},
		{"selector", func(v *yaml.Node, p string) {
			if s, ok := d.str(v, p); ok {
				if strings.TrimSpace(s) == "" {
					d.problem(v, p, "is empty, which would match every cluster: remove it or write a selector")
					return
				}
				sel, err := labels.Parse(s)
				if err != nil {
					d.problem(v, p, "%q is not a label selector: %v", s, err)
					return
				}
				r.Selector, r.selector = s, sel
			}
		}},
		{"channel", func(v *yaml.Node, p string) {
			if s, ok := d.str(v, p); ok && d.channel(v, p, s) {
				r.Channel = s
			}
		}},
		{"noProxyClients", func(v *yaml.Node, p string) { r.NoProxyClients = d.noProxyClients(v, p) }},
	}, nil)
	if !ok {
		return
	}
	_, hasClients := d.lines[path+".noProxyClients"]
	if _, set := d.lines[path+".channel"]; !set && !hasClients {
		d.problem(n, path, "channel is required (only a route with noProxyClients may leave it out)")
	}
	if hasClients && r.Match.Kind != "" {
		// The families belong to a cluster's workloads, not to one of its
		// incidents: a kind would make them change with the incident.
		d.problem(d.at(path+".match.kind"), path+".match.kind", "a route with noProxyClients applies to clusters, not incident kinds: remove kind or move noProxyClients to a route without it")
	}
	_, hasMatch := d.lines[path+".match"]
	_, hasSel := d.lines[path+".selector"]
	if hasMatch && r.Match == (RouteMatch{}) && !d.anyUnder(path+".match.") {
		d.problem(d.at(path+".match"), path+".match", "is empty, which would match every incident: name a source, namespace, cluster or kind")
	}
	if !hasMatch && !hasSel {
		// A route without a condition would swallow every incident and
		// make later routes and defaultChannel dead: say so.
		d.problem(n, path, "needs match or selector (a route matching everything is what bot.defaultChannel is for)")
	}
}

func (d *decoder) slack(n *yaml.Node, path string, s *Slack) bool {
	return d.mapping(n, path, []field{
		{"apiURL", func(v *yaml.Node, p string) {
			if u, ok := d.str(v, p); ok && d.apiURL(v, p, u) {
				s.APIURL = u
			}
		}},
		{"botTokenEnv", d.secretEnv(&s.BotToken.Env)},
		{"botTokenFile", d.secretFile(&s.BotToken.File)},
		{"signingSecretEnv", d.secretEnv(&s.SigningSecret.Env)},
		{"signingSecretFile", d.secretFile(&s.SigningSecret.File)},
		{"appTokenEnv", d.secretEnv(&s.AppToken.Env)},
		{"appTokenFile", d.secretFile(&s.AppToken.File)},
		{"socketMode", func(v *yaml.Node, p string) {
			if b, ok := d.boolean(v, p); ok {
				s.SocketMode = b
			}
		}},
	}, map[string]string{
		"botToken":      "use botTokenEnv (an environment variable) or botTokenFile (a file)",
		"appToken":      "use appTokenEnv (an environment variable) or appTokenFile (a file)",
		"signingSecret": "use signingSecretEnv (an environment variable) or signingSecretFile (a file)",
		"token":         "use botTokenEnv (an environment variable) or botTokenFile (a file)",
	})
}

func (d *decoder) approvals(n *yaml.Node, path string, a *Approvals) bool {
	return d.mapping(n, path, []field{
		{"approvers", func(v *yaml.Node, p string) {
			d.userIDs(v, p, &a.Approvers)
		}},
		{"approverGroups", func(v *yaml.Node, p string) {
			d.uniqueStrings(v, p, &a.ApproverGroups, func(s string) string {
				switch {
				case userIDRE.MatchString(s):
					return fmt.Sprintf("%q is a user ID: put it in approvals.approvers", s)
				case !groupIDRE.MatchString(s):
					return fmt.Sprintf("%q is not a Slack user group ID (S…)", s)
				}
				return ""
			})
		}},
		{"fourEyes", func(v *yaml.Node, p string) {
			if b, ok := d.boolean(v, p); ok {
				a.FourEyes = b
			}
		}},
		{"required", func(v *yaml.Node, p string) {
			if i, ok := d.approvalCount(v, p); ok {
				a.Required = i
			}
		}},
		{"proposalTTL", func(v *yaml.Node, p string) {
			if t, ok := d.duration(v, p, time.Minute); ok {
				if t > 7*24*time.Hour {
					// A week-old proposal was made against a cluster
					// state nobody remembers; make people propose again.
					d.problem(v, p, "%s: must be at most 168h", t)
					return
				}
				a.ProposalTTL = t
			}
		}},
		{"trustedKeys", func(v *yaml.Node, p string) {
			d.uniqueStrings(v, p, &a.TrustedKeys, func(s string) string {
				if !nkeys.IsValidPublicUserKey(s) {
					return fmt.Sprintf("%q is not an nkeys user public key (U…, 56 characters)", s)
				}
				return ""
			})
			if len(a.TrustedKeys) > 2 {
				d.problem(v, p, "%d keys: at most two (during a rotation, the next key and the previous one)", len(a.TrustedKeys))
			}
		}},
		{"signingKeyEnv", d.secretEnv(&a.SigningKey.Env)},
		{"signingKeyFile", d.secretFile(&a.SigningKey.File)},
	}, map[string]string{
		"signingKey": "use signingKeyEnv (an environment variable) or signingKeyFile (a file) holding the nkeys seed",
	})
}

// userIDs reads a list of Slack user IDs into dst.
func (d *decoder) userIDs(n *yaml.Node, path string, dst *[]string) {
	d.uniqueStrings(n, path, dst, func(s string) string {
		switch {
		case groupIDRE.MatchString(s):
			return fmt.Sprintf("%q is a user group ID: put it in approvals.approverGroups", s)
		case !userIDRE.MatchString(s):
			return fmt.Sprintf("%q is not a Slack user ID (U…/W…; names and @handles change, IDs do not: Slack profile → ⋮ → Copy member ID)", s)
		}
		return ""
	})
}

// uniqueStrings reads a list into dst: each entry that check finds no
// problem with ("") and that is not listed twice.
func (d *decoder) uniqueStrings(n *yaml.Node, path string, dst *[]string, check func(s string) string) {
	seen := map[string]int{}
	d.strings(n, path, func(v *yaml.Node, p, s string) {
		if msg := check(s); msg != "" {
			d.problem(v, p, "%s", msg)
			return
		}
		if seen[s] > 0 {
			d.problem(v, p, "%q is listed twice (first on line %d)", s, seen[s])
			return
		}
		seen[s] = v.Line
		*dst = append(*dst, s)
	})
}

func (d *decoder) digest(n *yaml.Node, path string, dg *Digest) {
	ok := d.mapping(n, path, []field{
		{"name", func(v *yaml.Node, p string) {
			if s, ok := d.str(v, p); ok && d.dnsLabel(v, p, s, "a digest name") {
				dg.Name = s
			}
		}},
		{"schedule", func(v *yaml.Node, p string) {
			s, ok := d.str(v, p)
			if !ok {
				return
			}
			if strings.HasPrefix(s, "TZ=") || strings.HasPrefix(s, "CRON_TZ=") {
				// Two places for the zone would disagree sooner or later.
				d.problem(v, p, "%q: set the time zone with the timezone field, not a TZ= prefix", s)
				return
			}
			sched, err := cronParser.Parse(s)
			if err != nil {
				d.problem(v, p, "%q is not a cron schedule (minute hour day-of-month month day-of-week, optionally seconds first, or @daily/@hourly/@every 1h): %v", s, err)
				return
			}
			dg.Schedule, dg.schedule = s, sched
		}},
		{"timezone", func(v *yaml.Node, p string) {
			s, ok := d.str(v, p)
			if !ok {
				return
			}
			if s == "" || s == "Local" {
				// Both mean "whatever the host is set to", which differs
				// between a laptop and a container.
				d.problem(v, p, "%q: name an IANA time zone such as Europe/Berlin or UTC", s)
				return
			}
			loc, err := time.LoadLocation(s)
			if err != nil {
				d.problem(v, p, "%q is not a known time zone (IANA names such as Europe/Berlin, America/New_York, UTC)", s)
				return
			}
			dg.Timezone, dg.location = s, loc
		}},
		{"channel", func(v *yaml.Node, p string) {
			if s, ok := d.str(v, p); ok && d.channel(v, p, s) {
				dg.Channel = s
			}
		}},
	}, nil)
	if !ok {
		return
	}
	for _, req := range []string{"name", "schedule", "channel"} {
		if _, set := d.lines[path+"."+req]; !set {
			d.problem(n, path+"."+req, "is required")
		}
	}
}

func (d *decoder) log(n *yaml.Node, path string, l *Log) {
	d.mapping(n, path, []field{
		{"level", func(v *yaml.Node, p string) {
			if s, ok := d.str(v, p); ok {
				switch s {
				case "debug", "info", "warn", "error":
					l.Level = s
				default:
					d.problem(v, p, "%q: want debug, info, warn or error", s)
				}
			}
		}},
		{"format", func(v *yaml.Node, p string) {
			if s, ok := d.str(v, p); ok {
				switch s {
				case "json", "console":
					l.Format = s
				default:
					d.problem(v, p, "%q: want json or console", s)
				}
			}
		}},
	}, nil)
}

// problemUnder reports whether a problem was already found at or below
// prefix, so a check that counts valid entries stays quiet when some were
// invalid.
func (d *decoder) problemUnder(prefix string) bool {
	for _, p := range d.problems {
		if strings.HasPrefix(p.Field, prefix) {
			return true
		}
	}
	return false
}

// anyUnder reports whether any field below prefix was written (valid or
// not), so an invalid field is not also reported as missing.
func (d *decoder) anyUnder(prefix string) bool {
	for p := range d.lines {
		if strings.HasPrefix(p, prefix) {
			return true
		}
	}
	return false
}

// ---- value checks; each reports its own problem and returns ok ----

func (d *decoder) secretEnv(dst *string) func(v *yaml.Node, p string) {
	return func(v *yaml.Node, p string) {
		s, ok := d.str(v, p)
		if !ok {
			return
		}
		if !envNameRE.MatchString(s) {
			// Do not quote it: a value that is not a variable name may be
			// the secret itself, pasted into the wrong field.
			d.problem(v, p, "must be the NAME of an environment variable (letters, digits, _), not the secret itself")
			return
		}
		*dst = s
	}
}

func (d *decoder) secretFile(dst *string) func(v *yaml.Node, p string) {
	return func(v *yaml.Node, p string) {
		if s, ok := d.str(v, p); ok && d.path(v, p, s) {
			*dst = s
		}
	}
}

func (d *decoder) path(v *yaml.Node, p, s string) bool {
	if strings.TrimSpace(s) == "" || strings.ContainsAny(s, "\x00\n") {
		d.problem(v, p, "must be a file path")
		return false
	}
	return true
}

func (d *decoder) absPath(v *yaml.Node, p, s string) bool {
	if !d.path(v, p, s) {
		return false
	}
	if !filepath.IsAbs(s) {
		// Relative to what? The working directory differs between a
		// container, a systemd unit and a shell.
		d.problem(v, p, "%q: must be an absolute path", s)
		return false
	}
	return true
}

func (d *decoder) dnsLabel(v *yaml.Node, p, s, what string) bool {
	// Our own wording: apimachinery's messages are long and explain the
	// regular expression rather than the fix.
	if len(validation.IsDNS1123Label(s)) > 0 {
		d.problem(v, p, "%q is not %s: a DNS-1123 label is lower-case letters, digits and '-', starts and ends with a letter or digit, at most 63 characters", s, what)
		return false
	}
	return true
}

func (d *decoder) dnsSubdomain(v *yaml.Node, p, s, what string) bool {
	if len(validation.IsDNS1123Subdomain(s)) > 0 {
		d.problem(v, p, "%q is not %s: a DNS-1123 subdomain is dot-separated DNS-1123 labels (lower-case letters, digits, '-'), at most 253 characters", s, what)
		return false
	}
	return true
}

func (d *decoder) channel(v *yaml.Node, p, s string) bool {
	if channelIDRE.MatchString(s) {
		return true
	}
	hint := ""
	switch {
	case strings.HasPrefix(s, "#") || strings.ToLower(s) == s:
		hint = ": channel names are not accepted, use the ID (channel details → bottom of the About tab)"
	case userIDRE.MatchString(s):
		hint = ": that is a user ID"
	}
	d.problem(v, p, "%q is not a Slack channel ID (C…, G… or D…)%s", s, hint)
	return false
}

// listen checks a listen address: host:port with a numeric port in
// 1..65535. Port 0 (random) is refused because probes and scrapers need
// a fixed port; service names (":http") because they depend on
// /etc/services inside the image.
func (d *decoder) listen(v *yaml.Node, p, s string) bool {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		d.problem(v, p, "%q is not a listen address (host:port, e.g. \":8080\" or \"127.0.0.1:8080\")", s)
		return false
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		d.problem(v, p, "%q: port must be a number from 1 to 65535", s)
		return false
	}
	if host != "" {
		if _, err := netip.ParseAddr(host); err != nil && len(validation.IsDNS1123Subdomain(host)) > 0 {
			d.problem(v, p, "%q: host must be empty (all interfaces), an IP address or a host name", s)
			return false
		}
	}
	return true
}

func (d *decoder) natsURL(v *yaml.Node, p, s string) bool {
	if strings.ContainsAny(s, ", ") {
		d.problem(v, p, "%q: one URL per list entry", s)
		return false
	}
	raw := s
	if !strings.Contains(s, "://") {
		raw = "nats://" + s // host:port, as the NATS client accepts
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		d.problem(v, p, "is not a NATS URL (nats://host:4222, tls://host:4222, ws(s)://host or host:port)")
		return false
	}
	if u.User != nil {
		d.problem(v, p, "credentials must not be written in URLs: remove user/password/token and use nats.credsFile or nats.credsEnv")
		return false
	}
	switch u.Scheme {
	case "nats", "tls", "ws", "wss":
	default:
		d.problem(v, p, "%q: scheme must be nats, tls, ws or wss", s)
		return false
	}
	if u.Path != "" && u.Path != "/" || u.RawQuery != "" {
		d.problem(v, p, "%q: a NATS URL has no path or query", s)
		return false
	}
	return true
}

func (d *decoder) apiURL(v *yaml.Node, p, s string) bool {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		d.problem(v, p, "is not an http(s) URL")
		return false
	}
	if u.User != nil || u.RawQuery != "" {
		d.problem(v, p, "must not carry credentials or a query")
		return false
	}
	if !strings.HasSuffix(u.Path, "/") {
		// slack-go appends method names ("chat.postMessage") to the base.
		d.problem(v, p, "%q: must end with \"/\" (e.g. https://slack.com/api/)", s)
		return false
	}
	return true
}

// ---- cross-field checks, after the walk ----

func (d *decoder) check(c *Config) {
	set := func(p string) bool { _, ok := d.lines[p]; return ok }

	if c.Agent == nil && c.Bot == nil && !set("agent") && !set("bot") {
		d.problem(nil, "", "neither agent nor bot is configured: add at least one of the two sections")
	}

	// NATS: what the embedded server can and cannot do.
	n := c.NATS
	if len(n.URLs) == 0 && !set("nats.urls[0]") {
		if n.StreamReplicas > 1 {
			d.problem(d.at("nats.streamReplicas"), "nats.streamReplicas", "%d replicas need a NATS cluster: the embedded server (nats.urls empty) is one node", n.StreamReplicas)
		}
		if n.Creds.IsSet() {
			d.problem(d.at(credsField(n.Creds)), credsField(n.Creds), "credentials are for external servers: the embedded server (nats.urls empty) makes a key per role at each start")
		}
		if n.CAFile != "" {
			d.problem(d.at("nats.caFile"), "nats.caFile", "only used with nats.urls: the embedded server has no TLS")
		}
		if n.NkeySeedFile != "" {
			d.problem(d.at("nats.nkeySeedFile"), "nats.nkeySeedFile", "credentials are for external servers: the embedded server (nats.urls empty) makes a key per role at each start")
		}
	} else {
		if n.StoreDir != "" {
			d.problem(d.at("nats.storeDir"), "nats.storeDir", "only used by the embedded server, but nats.urls is set: remove one of the two")
		}
		if n.EmbeddedListen != "" {
			d.problem(d.at("nats.embeddedListen"), "nats.embeddedListen", "only used by the embedded server, but nats.urls is set: remove one of the two")
		}
	}
	if set("nats.credsFile") && set("nats.credsEnv") {
		d.problem(d.at("nats.credsEnv"), "nats.credsEnv", "set credsFile or credsEnv, not both")
	}
	if set("nats.nkeySeedFile") && (set("nats.credsFile") || set("nats.credsEnv")) {
		d.problem(d.at("nats.nkeySeedFile"), "nats.nkeySeedFile", "set nkeySeedFile or a .creds file (credsFile, credsEnv), not both: a .creds file carries its own seed")
	}
	maxAge := orDuration(n.EventsMaxAge, DefaultEventsMaxAge)
	if dup := orDuration(n.DuplicateWindow, DefaultDuplicateWindow); dup > maxAge {
		d.problem(d.at("nats.duplicateWindow"), "nats.duplicateWindow", "%s is longer than nats.eventsMaxAge (%s): JetStream requires the window to fit in the retention", dup, maxAge)
	}

	if b := c.Bot; b != nil && set("bot.checkpointEvery") && c.Approvals == nil && !set("approvals") {
		// Accepted and ignored would be worse than refused.
		d.problem(d.at("bot.checkpointEvery"), "bot.checkpointEvery", "needs approvals: checkpoints are sealed with approvals' signing key, and without one the bot keeps none (every start replays the whole events stream)")
	}
	if b := c.Bot; b != nil && b.CheckpointEvery >= maxAge {
		// The events after a checkpoint must still be in the stream when
		// a start restores it, or it is refused and the whole stream
		// replayed: one this old would be, near the end of every interval.
		d.problem(d.at("bot.checkpointEvery"), "bot.checkpointEvery", "%s is not shorter than nats.eventsMaxAge (%s): a start would find the events after the checkpoint aged out of the stream, refuse it and replay in full", b.CheckpointEvery, maxAge)
	}

	if a := c.Agent; a != nil {
		if !set("agent.source") && a.Source == "" {
			d.problem(d.at("agent"), "agent.source", "is required: the name of this management cluster (DNS-1123 label)")
		}
		le := a.LeaderElection
		ld := orDuration(le.LeaseDuration, DefaultLeaseDuration)
		rd := orDuration(le.RenewDeadline, DefaultRenewDeadline)
		rp := orDuration(le.RetryPeriod, DefaultRetryPeriod)
		// client-go's leader election refuses these combinations at start
		// (leaderelection.NewLeaderElector); catch them here instead.
		if ld <= rd {
			d.problem(d.at("agent.leaderElection.renewDeadline"), "agent.leaderElection.renewDeadline", "%s must be shorter than leaseDuration (%s)", rd, ld)
		}
		if float64(rd) <= 1.2*float64(rp) {
			d.problem(d.at("agent.leaderElection.retryPeriod"), "agent.leaderElection.retryPeriod", "%s: renewDeadline (%s) must exceed 1.2 × retryPeriod", rp, rd)
		}
	}

	if c.Bot != nil {
		if c.Slack == nil {
			d.problem(d.at("bot"), "slack", "is required with bot: the bot posts to Slack")
		}
		if !set("bot.defaultChannel") {
			d.problem(d.at("bot"), "bot.defaultChannel", "is required: the channel for incidents no route matches")
		}
		bl := orString(c.Bot.Listen, DefaultBotListen)
		ol := orString(c.Bot.OpsListen, DefaultBotOpsListen)
		// Without a signing secret (Socket Mode) there is no Slack listener.
		if slackListener := c.Slack == nil || !c.Slack.SocketMode || c.Slack.SigningSecret.IsSet(); slackListener && listenClash(bl, ol) {
			d.problem(d.at("bot.opsListen"), "bot.opsListen", "%q collides with bot.listen %q: /metrics must not share the listener that faces Slack", ol, bl)
		}
		d.checkPartitions(c)
		if c.Agent != nil {
			// `hcpbot all` runs both in one process.
			al := orString(c.Agent.Listen, DefaultAgentListen)
			if listenClash(al, bl) {
				d.problem(d.at("bot.listen"), "bot.listen", "%q collides with agent.listen %q (hcpbot all serves both from one process)", bl, al)
			}
			if listenClash(al, ol) {
				d.problem(d.at("bot.opsListen"), "bot.opsListen", "%q collides with agent.listen %q (hcpbot all serves both from one process)", ol, al)
			}
		}
	} else {
		for _, s := range []string{"slack", "approvals", "digests"} {
			if set(s) {
				d.problem(d.at(s), s, "is used by the bot only, but there is no bot section")
			}
		}
	}

	if s := c.Slack; s != nil {
		d.oneOf("slack", "botToken", true, "the bot's token (xoxb-…)")
		d.oneOf("slack", "signingSecret", !s.SocketMode, "verifies Slack's HTTP requests; not needed with socketMode: true")
		if s.SocketMode {
			d.oneOf("slack", "appToken", true, "the app-level token (xapp-…) Socket Mode connects with")
		} else if s.AppToken.IsSet() {
			f := "slack.appTokenEnv"
			if s.AppToken.File != "" {
				f = "slack.appTokenFile"
			}
			d.problem(d.at(f), f, "is only used with socketMode: true")
		}
	}

	if a := c.Approvals; a != nil {
		if len(a.Approvers) == 0 && len(a.ApproverGroups) == 0 && !set("approvals.approvers[0]") && !set("approvals.approverGroups[0]") {
			d.problem(d.at("approvals"), "approvals", "no approvers and no approverGroups: nobody could approve a fix (remove the section to disable approvals)")
		}
		fourEyes := !set("approvals.fourEyes") || a.FourEyes
		if fourEyes && len(a.ApproverGroups) == 0 && len(a.Approvers) == 1 && !d.problemUnder("approvals.approver") {
			d.problem(d.at("approvals.approvers"), "approvals.approvers", "four-eyes approval (fourEyes, default true) needs at least two approvers or a group: with one, nobody can approve that person's own request")
		}
		if need := max(a.Required, 1) + b2i(fourEyes); len(a.ApproverGroups) == 0 && len(a.Approvers) > 1 && len(a.Approvers) < need && !d.problemUnder("approvals.approver") {
			d.problem(d.at("approvals.required"), "approvals.required", "%d approvals besides the requester need at least %d approvers; %d are listed", max(a.Required, 1), need, len(a.Approvers))
		}
		d.oneOf("approvals", "signingKey", c.Agent == nil, "signs every approved request: agents run only requests signed with a key they trust (create one with `hcpbot keygen`; only `hcpbot all` can do without, with a key made per process)")
	}

	names := map[string]int{}
	for i, dg := range c.Digests {
		if dg.Name == "" {
			continue
		}
		p := fmt.Sprintf("digests[%d].name", i)
		if first, dup := names[dg.Name]; dup {
			d.problem(d.at(p), p, "%q is already the name of digests[%d]: names must be unique", dg.Name, first)
			continue
		}
		names[dg.Name] = i
	}
}

// checkPartitions refuses bot groups the bot and NATS could not agree on,
// and partitions without what they need.
func (d *decoder) checkPartitions(c *Config) {
	b := c.Bot
	p := max(b.Partitions, 1)
	if b.Partition >= p {
		d.problem(d.at("bot.partition"), "bot.partition", "%d: must be below bot.partitions (%d): the groups are 0..%d", b.Partition, p, p-1)
	}
	for _, src := range slices.Sorted(maps.Keys(b.PartitionMap)) {
		if g := b.PartitionMap[src]; g >= p {
			f := "bot.partitionMap." + src
			d.problem(d.at(f), f, "partition %d: must be below bot.partitions (%d)", g, p)
		}
	}
	if p == 1 && len(b.PartitionMap) > 0 {
		d.problem(d.at("bot.partitionMap"), "bot.partitionMap", "needs bot.partitions of 2 or more: with one group every management cluster is in it")
	}
	if p > 1 && (c.Approvals == nil || !c.Approvals.SigningKey.IsSet()) {
		d.problem(d.at("bot.partitions"), "bot.partitions", "%d bot groups need approvals.signingKeyEnv or approvals.signingKeyFile: each group restores its checkpoint at start (one group replaying the whole stream is what partitions are for), and checkpoints and the groups' answers to each other are sealed with that key", p)
	}
}

// oneOf checks a secret written as <name>Env or <name>File: exactly one
// when required, at most one otherwise.
func (d *decoder) oneOf(section, name string, required bool, why string) {
	env, file := section+"."+name+"Env", section+"."+name+"File"
	_, hasEnv := d.lines[env]
	_, hasFile := d.lines[file]
	switch {
	case hasEnv && hasFile:
		d.problem(d.at(file), file, "set %sEnv or %sFile, not both", name, name)
	case required && !hasEnv && !hasFile:
		d.problem(d.at(section), env, "%sEnv or %sFile is required: %s", name, name, why)
	}
}

func credsField(r SecretRef) string {
	if r.File != "" {
		return "nats.credsFile"
	}
	return "nats.credsEnv"
}

// listenClash reports whether two listen addresses would bind the same
// port: same port and the same host, or either on all interfaces.
func listenClash(a, b string) bool {
	ah, ap, err1 := net.SplitHostPort(a)
	bh, bp, err2 := net.SplitHostPort(b)
	if err1 != nil || err2 != nil || ap != bp {
		return false
	}
	wild := func(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }
	return ah == bh || wild(ah) || wild(bh)
}

func orDuration(v, def time.Duration) time.Duration {
	if v == 0 {
		return def
	}
	return v
}

func orString(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// applyDefaults fills what the file left out; set reports whether a YAML
// path was written. It runs only on a valid configuration, so the
// validation above judged what the operator wrote, not what we filled in.
func (c *Config) applyDefaults(set func(path string) bool) {
	if !set("nats.streamReplicas") {
		c.NATS.StreamReplicas = DefaultStreamReplicas
	}
	if !set("nats.eventsMaxAge") {
		c.NATS.EventsMaxAge = DefaultEventsMaxAge
	}
	if !set("nats.duplicateWindow") {
		c.NATS.DuplicateWindow = DefaultDuplicateWindow
	}
	if a := c.Agent; a != nil {
		a.Listen = orString(a.Listen, DefaultAgentListen)
		le := &a.LeaderElection
		if !set("agent.leaderElection.enabled") {
			le.Enabled = true
		}
		le.LeaseName = orString(le.LeaseName, DefaultLeaseName)
		le.LeaseDuration = orDuration(le.LeaseDuration, DefaultLeaseDuration)
		le.RenewDeadline = orDuration(le.RenewDeadline, DefaultRenewDeadline)
		le.RetryPeriod = orDuration(le.RetryPeriod, DefaultRetryPeriod)
		if !set("agent.bufferEvents") {
			a.BufferEvents = DefaultBufferEvents
		}
		a.HostedProbeInterval = orDuration(a.HostedProbeInterval, DefaultHostedProbeInterval)
		a.NodeJoinGrace = orDuration(a.NodeJoinGrace, DefaultNodeJoinGrace)
		if a.ServiceNodePortRange == (NodePortRange{}) {
			a.ServiceNodePortRange = DefaultServiceNodePortRange
		}
	}
	if b := c.Bot; b != nil {
		b.Listen = orString(b.Listen, DefaultBotListen)
		b.OpsListen = orString(b.OpsListen, DefaultBotOpsListen)
		if !set("bot.groupWait") {
			b.GroupWait = DefaultGroupWait // 0s written explicitly means "post at once"
		}
		b.GroupInterval = orDuration(b.GroupInterval, DefaultGroupInterval)
		b.ResolveTimeout = orDuration(b.ResolveTimeout, DefaultResolveTimeout)
		b.HealDeadline = orDuration(b.HealDeadline, DefaultHealDeadline)
		if !set("bot.checkpointEvery") {
			b.CheckpointEvery = DefaultCheckpointEvery // 0s written explicitly means "at shutdown only"
		}
		if b.Storm.Threshold == 0 {
			b.Storm.Threshold = DefaultStormThreshold
		}
		b.Storm.Window = orDuration(b.Storm.Window, DefaultStormWindow)
		if len(b.NoProxyClients) == 0 {
			b.NoProxyClients = noproxy.DefaultClients()
		}
		b.Partitions = max(b.Partitions, 1)
	}
	if s := c.Slack; s != nil {
		s.APIURL = orString(s.APIURL, DefaultSlackAPIURL)
	}
	if a := c.Approvals; a != nil {
		if !set("approvals.fourEyes") {
			a.FourEyes = true
		}
	}
	if ag := c.Agent; ag != nil && !set("agent.requireFourEyes") {
		// The agent enforces what the bot in the same file promises; on
		// its own it assumes the safe default.
		ag.RequireFourEyes = c.Approvals == nil || c.Approvals.FourEyes
	}
	if a := c.Approvals; a != nil {
		a.ProposalTTL = orDuration(a.ProposalTTL, DefaultProposalTTL)
		a.Required = max(a.Required, 1)
	}
	if ag := c.Agent; ag != nil {
		if !set("agent.requiredApprovals") {
			ag.RequiredApprovals = 1
			if c.Approvals != nil {
				ag.RequiredApprovals = c.Approvals.Required
			}
		}
		ag.ActionAckWait = orDuration(ag.ActionAckWait, DefaultActionAckWait)
	}
	for i := range c.Digests {
		dg := &c.Digests[i]
		if dg.Timezone == "" {
			dg.Timezone, dg.location = DefaultTimezone, time.UTC
		}
	}
	c.Log.Level = orString(c.Log.Level, DefaultLogLevel)
	c.Log.Format = orString(c.Log.Format, DefaultLogFormat)
}

// Incident is what a route sees of an incident: where it is (the
// management cluster it was reported from, the hosted cluster's namespace,
// name and labels) and what it is, its kind: the rule ID of its main
// diagnosis when it opened (operator-crashloop, nodes-notready, ...; see
// bot/diagnose).
type Incident struct {
	Source, Namespace, Cluster string
	Kind                       string
	// Labels are the hosted cluster's labels (nil when unknown: a selector
	// route then matches only if its selector matches an empty set).
	Labels map[string]string
}

// Channel returns where an incident goes: the channel of the first route
// that matches and has a channel, else DefaultChannel.
func (b *Bot) Channel(inc Incident) string {
	for _, r := range b.Routes {
		if r.Channel != "" && r.Matches(inc) {
			return r.Channel
		}
	}
	return b.DefaultChannel
}

// Clients returns the NO_PROXY client families a hosted cluster's
// workloads use, which the digest's noProxy findings and the
// risky-proxy-change warning judge by: those of the first route that
// matches the cluster (source, namespace, cluster, selector; such a route
// has no kind) and sets noProxyClients, else bot.noProxyClients, else
// noproxy.DefaultClients (Go, curl, Python requests, urllib).
func (b *Bot) Clients(c Incident) []noproxy.Client {
	c.Kind = ""
	for _, r := range b.Routes {
		if len(r.NoProxyClients) > 0 && r.Matches(c) {
			return r.NoProxyClients
		}
	}
	if len(b.NoProxyClients) > 0 {
		return b.NoProxyClients
	}
	return noproxy.DefaultClients()
}

// Matches reports whether the route applies to an incident.
func (r Route) Matches(inc Incident) bool {
	m := r.Match
	if m.Source != "" && m.Source != inc.Source ||
		m.Namespace != "" && m.Namespace != inc.Namespace ||
		m.Cluster != "" && m.Cluster != inc.Cluster ||
		m.Kind != "" && m.Kind != inc.Kind {
		return false
	}
	if r.selector != nil && !r.selector.Matches(labels.Set(inc.Labels)) {
		return false
	}
	return true
}

// incidentKinds are the kinds an incident can have: the built-in rules'
// IDs, in priority order.
func incidentKinds() []string {
	rules := diagnose.DefaultRules()
	out := make([]string, len(rules))
	for i, r := range rules {
		out[i] = r.ID
	}
	return out
}

// kindOfEventType suggests the incident kind that the removed match.type
// most likely meant.
var kindOfEventType = map[string]string{
	string(event.TypeCrashLoop):      diagnose.RuleOperatorCrashLoop,
	string(event.TypeNode):           diagnose.RuleNodesNotReady,
	string(event.TypeNodePool):       diagnose.RuleNodesNotReady,
	string(event.TypeReachability):   diagnose.RuleHostedAPIUnreachable,
	string(event.TypeProxyChange):    diagnose.RuleRiskyProxyChange,
	string(event.TypeAPIServerProxy): diagnose.RuleProxyTunnel,
	string(event.TypeOCPProxy):       diagnose.RuleManagementProxyLint,
	string(event.TypeVirtLauncher):   diagnose.RuleKubeVirtVMs,
}

// parseNodePortRange reads "MIN-MAX" as kube-apiserver's
// --service-node-port-range does: 1 <= MIN <= MAX <= 65535.
func parseNodePortRange(s string) (NodePortRange, error) {
	lo, hi, ok := strings.Cut(s, "-")
	a, errA := strconv.ParseUint(lo, 10, 16)
	b, errB := strconv.ParseUint(hi, 10, 16)
	if !ok || errA != nil || errB != nil {
		return NodePortRange{}, fmt.Errorf("must be MIN-MAX, e.g. 30000-32767")
	}
	if a < 1 || a > b {
		return NodePortRange{}, fmt.Errorf("must be MIN-MAX with 1 <= MIN <= MAX <= 65535")
	}
	return NodePortRange{Min: int32(a), Max: int32(b)}, nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
