package bot

import (
	"time"

	"github.com/hcpbot/hcpbot/bot/checkpoint"
	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/partition"
)

// Config of a Bot.
type Config struct {
	// Channel receives the incidents Route sends nowhere else.
	Channel string
	// Route returns the channel of a new incident from its cluster's key,
	// its kind (the rule ID of its main diagnosis, Diagnoses[0].Rule, when
	// it opens) and its HostedCluster's labels (nil while unknown); nil or
	// "" means Channel. An incident keeps its channel for its life: its
	// message is not moved when its main diagnosis changes.
	Route func(k diagnose.Key, kind string, labels map[string]string) string
	// Clients returns the NO_PROXY client families a cluster's workloads
	// use, from its key and labels; the risky-proxy-change rule judges by
	// them. Nil means noproxy.DefaultClients.
	Clients diagnose.ClientsFunc
	// GroupWait is how long a new incident gathers signals before its
	// first notification (and how long the correlator waits for others
	// to form a storm with). 0 notifies at once.
	GroupWait time.Duration
	// GroupInterval is the least time between two notifications of one
	// incident or storm: updates in between are folded into the next.
	GroupInterval time.Duration
	// ResolveTimeout is how long an incident's signals must stay clear
	// before it is resolved; signals back within it continue the same
	// incident. 0 resolves at once.
	ResolveTimeout time.Duration
	// StormThreshold incidents sharing a cause within StormWindow make a
	// storm: one message for all of them. 0 means DefaultStormThreshold;
	// a negative value disables storms.
	StormThreshold int
	StormWindow    time.Duration
	// StormPage is how many clusters one thread reply of a storm lists.
	StormPage int
	// Silenced tells whether an incident is silenced; nil silences nothing.
	Silenced Silencer
	// Leader reports whether this replica sends notifications; nil means
	// always. Every replica keeps the full state so that any of them can
	// answer commands and take over at once.
	Leader func() bool
	// ForgetAfter is how long the bot keeps a deleted hosted cluster
	// (its tombstones drop stale facts about it still under way, e.g. from
	// an agent's publish buffer) before it forgets it: its state, its
	// incident and its place in a storm. 0 means DefaultForgetAfter.
	ForgetAfter time.Duration
	// PendingHorizon is how long, by the events' own clock, the bot keeps
	// the unsent resolution of an incident replaced by its cluster's next
	// one (pending.go): the events stream's retention, beyond which a
	// replica started now would not know it either. 0 means
	// bus.DefaultEventsMaxAge.
	PendingHorizon time.Duration
	// HealDeadline is how long an incident may take to heal after its
	// approved fix ran before it says "fix applied, not healed" and offers
	// the rollback. 0 means DefaultHealDeadline.
	HealDeadline time.Duration
	// Checkpoints stores the bot's checkpoints (package bot/checkpoint),
	// sealed with the bot's signing key; nil writes and reads none: every
	// start replays the whole stream.
	Checkpoints *checkpoint.Store
	// CheckpointName names this bot group's checkpoint; "" means
	// DefaultCheckpointName.
	CheckpointName string
	// CheckpointEvery is how often the leader writes a checkpoint once it
	// has replayed the stream (and it writes one at a clean shutdown); a
	// start replays at most this much of the stream. 0 means
	// DefaultCheckpointEvery; negative writes one at shutdown only.
	CheckpointEvery time.Duration
	// Partitions are the bot groups that share the events stream and
	// Partition this bot's group, 0 <= Partition < Partitions.Count
	// (partition.go). With Count <= 1, the default, the bot holds every
	// source and nothing is named differently.
	Partitions partition.Set
	Partition  int
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Defaults of Config.
const (
	DefaultGroupWait      = 5 * time.Second
	DefaultGroupInterval  = time.Minute
	DefaultStormThreshold = 20
	DefaultStormWindow    = 30 * time.Second
	DefaultStormPage      = 200
	DefaultForgetAfter    = 10 * time.Minute
	// DefaultCheckpointEvery: a start replays at most an hour of events,
	// about 14,000 at 2,000 hosted clusters (docs/capacity.md).
	DefaultCheckpointEvery = time.Hour
	DefaultCheckpointName  = "bot"
)

// Silencer reports the silence covering a hosted cluster or an incident;
// package bot/silence provides one.
type Silencer func(cluster, incident string, now time.Time) (SilenceInfo, bool)

// SilenceInfo is what an incident message says about its silence.
type SilenceInfo struct {
	ID, By, Reason string
	Until          time.Time
}
