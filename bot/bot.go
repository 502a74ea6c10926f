package bot

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/bot/notify"
	"github.com/hcpbot/hcpbot/bus"
)

// Incident is the bot's view of one hosted cluster's current problem.
type Incident struct {
	Key       string // notification key, stable for the incident's life
	Cluster   diagnose.Key
	Opened    time.Time // the first signal's own time
	Resolved  time.Time // zero while open
	Diagnoses []diagnose.Diagnosis
	// Storm is the key of the storm the incident belongs to, if any.
	Storm string
	// Silence is set while a silence covers the incident.
	Silence *SilenceInfo
	Channel string
	// Deleted is set when the incident was resolved because its
	// HostedCluster was deleted.
	Deleted bool
	// Remedy is the approved fix that ran while the incident was open and
	// how the cluster responds to it (remediation.go); nil without one.
	Remedy *Remedy

	clearAt time.Time // own time the signals cleared; zero while present
	n       notifyState
	lazy    lazyDiagnoses // Diagnoses not yet built for the newest state
	steps   []step        // the timeline's steps taken from events (remediation.go)
	rules   []string      // the rules that fired at the last step noted
}

// Open reports whether the incident is still open.
func (i *Incident) Open() bool { return i.Resolved.IsZero() }

// Bot is the pipeline from the events stream to notifications.
type Bot struct {
	cfg     Config
	js      EventSource
	out     notify.Notifier
	log     zerolog.Logger
	metrics *metrics
	holds   suppressions // logs and counts what the flush holds back
	kick    chan struct{}

	mu        sync.Mutex
	model     *diagnose.Model
	incidents map[diagnose.Key]*Incident
	storms    map[string]*Storm
	// pending are resolved incidents replaced by a newer one of their
	// cluster before their resolution was sent.
	pending []*Incident
	// sentPending are the pending resolutions this replica sent while
	// leading, kept for retain: the notifier drops a leader-only
	// rendering it still holds when the lease is lost, and a replica
	// taking the lease back renders them again (takeOver), as it does
	// every incident it still holds.
	sentPending []*Incident
	// pendingScanned is pending's length after its last horizon scan.
	pendingScanned int
	// pendingSwept is pending's length after the last sweep, sweptAt
	// when it began (pending.go).
	pendingSwept int
	sweptAt      time.Time
	// gone are the deleted hosted clusters still in the model, with the
	// time this replica saw them go (forgetGone).
	gone map[diagnose.Key]time.Time
	// caughtUp is false while Run replays the stream up to where it stood
	// at start: nothing is sent from a half-built picture.
	caughtUp bool
	leader   bool
	// stormsChecked is set once the storms of the previous run (or
	// leader) were looked for after a takeover.
	stormsChecked bool
	buf           []*Incident // candidates
	// remediations are the executed fixes of the approval store, per
	// cluster, newest first (RecordRemediation).
	remediations map[diagnose.Key][]Remediation
	// applied is the stream sequence of the newest event applied (or
	// dead-lettered), or of the restored checkpoint: what a checkpoint
	// taken now covers.
	applied uint64
	// liveFrom is the first sequence of the events stream stored after
	// this replica held the lease (takeover.go, liveSince); 0 while it
	// does not lead or has not read it, and liveAgain when it may try
	// again after a failed read.
	liveFrom  uint64
	liveAgain time.Time
	// leaseLost counts the losses of the lease bus.Lease reported
	// (LeaderChanged(false)), lossSeen those the flush or apply acted on:
	// the lease may be lost and taken back between two flushes, and what
	// was known while leading (liveFrom, checked) does not outlive a loss.
	leaseLost atomic.Uint64
	lossSeen  uint64
	// writing serialises the checkpoints this replica writes.
	writing sync.Mutex
	// stormSuffix ends the storm keys of this group (partition.go).
	stormSuffix string
}

// EventSource is what a Bot reads the events stream with: the stream's
// state, to resume from a checkpoint, and an ordered consumer on it.
type EventSource interface {
	jetstream.StreamManager
	jetstream.StreamConsumerManager
}

// New returns a Bot. reg may be nil.
func New(cfg Config, js EventSource, out notify.Notifier, reg prometheus.Registerer, log zerolog.Logger) *Bot {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.StormThreshold == 0 {
		cfg.StormThreshold = DefaultStormThreshold
	}
	if cfg.StormWindow <= 0 {
		cfg.StormWindow = DefaultStormWindow
	}
	if cfg.StormPage <= 0 {
		cfg.StormPage = DefaultStormPage
	}
	if cfg.ForgetAfter <= 0 {
		cfg.ForgetAfter = DefaultForgetAfter
	}
	if cfg.HealDeadline <= 0 {
		cfg.HealDeadline = DefaultHealDeadline
	}
	if cfg.PendingHorizon <= 0 {
		cfg.PendingHorizon = bus.DefaultEventsMaxAge
	}
	cfg.GroupWait = max(cfg.GroupWait, 0)
	cfg.GroupInterval = max(cfg.GroupInterval, 0)
	m := newMetrics(reg)
	log = log.With().Str("component", "bot").Logger()
	return &Bot{cfg: cfg, js: js, out: out, log: log, metrics: m, holds: suppressions{counter: m.suppressed, log: log},
		kick: make(chan struct{}, 1), model: newModel(cfg.Clients), incidents: map[diagnose.Key]*Incident{},
		storms: map[string]*Storm{}, gone: map[diagnose.Key]time.Time{}, caughtUp: true,
		stormSuffix: stormSuffix(cfg.Partitions, cfg.Partition)}
}

func newModel(clients diagnose.ClientsFunc) *diagnose.Model {
	m := diagnose.NewModel()
	m.SetClients(clients)
	return m
}

// LeaderChanged makes the flush look at once when this replica's
// leadership changed (bus.OnLeaderChange): a standby that took over sends
// what the dead leader left now, not at the flush's next tick. A loss is
// counted at once: another replica may post from now on, even if this
// one takes the lease back before its flush looks (stepDown).
func (b *Bot) LeaderChanged(leader bool) {
	if !leader {
		b.leaseLost.Add(1)
	}
	b.wake()
}

// wake makes the flush loop look at once.
func (b *Bot) wake() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// IncidentKeyPrefix starts every incident key, and no action id.
const IncidentKeyPrefix = "inc-"

// incidentKey is derived from the cluster and the time of the event that
// opened the incident, so replaying the stream after a restart finds the
// same key (and bot/notify the same Slack message).
func incidentKey(k diagnose.Key, opened time.Time) string {
	sum := sha256.Sum256([]byte(k.String() + "@" + opened.UTC().Format(time.RFC3339Nano)))
	return IncidentKeyPrefix + hex.EncodeToString(sum[:6])
}

// fingerprint covers what a rendering shows, except durations.
func fingerprint(inc *Incident) string {
	// Computed on every event of an open incident: plain writes, no fmt.
	h := sha256.New()
	var buf []byte
	w := func(parts ...string) {
		for _, p := range parts {
			buf = append(append(buf, p...), '|')
		}
	}
	w(strconv.FormatBool(inc.Open()))
	for _, d := range inc.Diagnoses {
		w(d.Rule, string(d.Severity), d.Title, string(d.Confidence.Level))
		for _, e := range d.Evidence {
			buf = e.At.UTC().AppendFormat(buf, time.RFC3339)
			w("", e.Object, e.Text)
		}
		if d.Fix != nil {
			w(d.Fix.After)
		}
	}
	if inc.Remedy != nil {
		w(remedyShown(*inc.Remedy))
	}
	h.Write(buf)
	return hex.EncodeToString(h.Sum(nil))
}
