package bot

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/bot/notify"
	"github.com/hcpbot/hcpbot/event"
)

// Config of a Bot.
type Config struct {
	// Channel receives every incident (routing rules come later).
	Channel string
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Incident is the bot's view of one hosted cluster's current problem.
type Incident struct {
	Key       string // notification key, stable for the incident's life
	Cluster   diagnose.Key
	Opened    time.Time
	Resolved  time.Time // zero while open
	Diagnoses []diagnose.Diagnosis
	version   uint64
	printed   string // fingerprint of what was last sent
}

// Open reports whether the incident is still open.
func (i *Incident) Open() bool { return i.Resolved.IsZero() }

// Bot is the pipeline from the events stream to notifications.
type Bot struct {
	cfg     Config
	js      jetstream.JetStream
	out     notify.Notifier
	log     zerolog.Logger
	metrics *metrics

	mu        sync.Mutex
	model     *diagnose.Model
	incidents map[diagnose.Key]*Incident
}

type metrics struct {
	consumed   *prometheus.CounterVec
	deadLetter *prometheus.CounterVec
	open       prometheus.Gauge
	latency    prometheus.Histogram
}

// New returns a Bot. reg may be nil.
func New(cfg Config, js jetstream.JetStream, out notify.Notifier, reg prometheus.Registerer, log zerolog.Logger) *Bot {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	m := &metrics{
		consumed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hcpbot_bot_events_consumed_total", Help: "Events applied to the state model, by type.",
		}, []string{"type"}),
		deadLetter: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hcpbot_bot_events_dead_lettered_total", Help: "Events that could not be used (acknowledged and skipped), by reason.",
		}, []string{"reason"}),
		open: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hcpbot_bot_incidents_open", Help: "Open incidents.",
		}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "hcpbot_bot_event_to_notify_seconds", Help: "From the agent observing a fact to the notification being queued.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}),
	}
	if reg != nil {
		reg.MustRegister(m.consumed, m.deadLetter, m.open, m.latency)
	}
	return &Bot{cfg: cfg, js: js, out: out, log: log.With().Str("component", "bot").Logger(), metrics: m,
		model: diagnose.NewModel(), incidents: map[diagnose.Key]*Incident{}}
}

// Run consumes the events stream from its start until ctx ends.
func (b *Bot) Run(ctx context.Context) error {
	cons, err := b.js.OrderedConsumer(ctx, event.StreamName, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{event.EventsStreamSubjects},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return fmt.Errorf("events consumer: %w", err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) { b.Handle(ctx, m.Data()) })
	if err != nil {
		return fmt.Errorf("consume events: %w", err)
	}
	<-ctx.Done()
	cc.Stop()
	return nil
}

// Handle applies one encoded event. Bad events are dead-lettered: counted,
// logged without their content, and skipped, so they never block the stream.
func (b *Bot) Handle(ctx context.Context, data []byte) {
	e, err := event.Decode(data)
	if err != nil {
		b.deadLetter(err, e)
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	changed, err := b.model.Apply(e)
	if err != nil {
		b.deadLetter(err, e)
		return
	}
	b.metrics.consumed.WithLabelValues(string(e.Type)).Inc()
	for _, k := range changed {
		b.evaluate(ctx, k, e.Time)
	}
}

func (b *Bot) deadLetter(err error, e event.Event) {
	reason := "malformed"
	switch {
	case errors.Is(err, event.ErrTooLarge):
		reason = "too_large"
	case errors.Is(err, event.ErrUnsupportedVersion):
		reason = "unsupported_version"
	case errors.Is(err, event.ErrUnknownType):
		reason = "unknown_type"
	}
	b.metrics.deadLetter.WithLabelValues(reason).Inc()
	b.log.Warn().Err(err).Str("reason", reason).Str("id", e.ID).Str("type", string(e.Type)).Msg("event dead-lettered")
}

// evaluate diagnoses a cluster and opens, updates or resolves its incident.
func (b *Bot) evaluate(ctx context.Context, k diagnose.Key, observed time.Time) {
	if k.Management() {
		return
	}
	c := b.model.Cluster(k)
	now := b.cfg.Now()
	var diags []diagnose.Diagnosis
	if c != nil && !c.Gone() {
		diags = diagnose.Diagnose(c, now)
	}
	inc := b.incidents[k]
	switch {
	case len(diags) == 0 && (inc == nil || !inc.Open()):
		return
	case len(diags) == 0:
		inc.Resolved = now
	case inc == nil || !inc.Open():
		inc = &Incident{Key: incidentKey(k, observed), Cluster: k, Opened: observed}
		b.incidents[k] = inc
	}
	if len(diags) > 0 {
		inc.Diagnoses = diags
	}
	fp := fingerprint(inc)
	if fp == inc.printed {
		return
	}
	inc.printed = fp
	inc.version++
	msg := notify.Message{Key: inc.Key, Channel: b.cfg.Channel, Version: inc.version}
	msg.Text, msg.Blocks = Render(inc, now)
	if err := b.out.Upsert(ctx, msg); err != nil {
		b.log.Error().Err(err).Str("incident", inc.Key).Msg("notification not queued")
		return
	}
	b.metrics.latency.Observe(now.Sub(observed).Seconds())
	b.updateOpen()
}

func (b *Bot) updateOpen() {
	n := 0
	for _, inc := range b.incidents {
		if inc.Open() {
			n++
		}
	}
	b.metrics.open.Set(float64(n))
}

// incidentKey is derived from the cluster and the time of the event that
// opened the incident, so replaying the stream after a restart finds the
// same key (and bot/notify the same Slack message).
func incidentKey(k diagnose.Key, opened time.Time) string {
	sum := sha256.Sum256([]byte(k.String() + "@" + opened.UTC().Format(time.RFC3339Nano)))
	return "inc-" + hex.EncodeToString(sum[:6])
}

func fingerprint(inc *Incident) string {
	h := sha256.New()
	fmt.Fprintf(h, "%v|", inc.Open())
	for _, d := range inc.Diagnoses {
		fmt.Fprintf(h, "%s|%s|%s|%s|", d.Rule, d.Severity, d.Title, d.Confidence.Level)
		for _, e := range d.Evidence {
			fmt.Fprintf(h, "%s|%s|%s|", e.At.UTC().Format(time.RFC3339), e.Object, e.Text)
		}
		if d.Fix != nil {
			fmt.Fprintf(h, "%s|", d.Fix.After)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Incidents returns every incident, open ones first, newest first.
func (b *Bot) Incidents() []Incident {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]Incident, 0, len(b.incidents))
	for _, inc := range b.incidents {
		out = append(out, *inc)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Open() != out[j].Open() {
			return out[i].Open()
		}
		return out[i].Opened.After(out[j].Opened)
	})
	return out
}

// Diagnose returns the current diagnoses of a hosted cluster.
func (b *Bot) Diagnose(k diagnose.Key) ([]diagnose.Diagnosis, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.model.Cluster(k)
	if c == nil {
		return nil, false
	}
	return diagnose.Diagnose(c, b.cfg.Now()), true
}

// Clusters returns the keys of every hosted cluster the bot knows.
func (b *Bot) Clusters() []diagnose.Key {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []diagnose.Key
	for _, k := range b.model.Keys() {
		if !k.Management() {
			out = append(out, k)
		}
	}
	return out
}

// ClusterState is a copy of what the bot knows of one hosted cluster, for
// readers outside the event loop (digests, noproxy checks).
type ClusterState struct {
	Key diagnose.Key
	// HostedCluster is the newest HostedClusterState; Known is false until
	// one was seen. Proxy URLs are redacted by package event.
	HostedCluster event.HostedClusterState
	Known         bool
	Diagnoses     []diagnose.Diagnosis
	// Incident is the open incident of the cluster, nil when none.
	Incident *Incident
}

// ClusterStates returns every live hosted cluster the bot knows, sorted by
// key. The states are copies: slices are cloned so the event loop may go on.
func (b *Bot) ClusterStates() []ClusterState {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []ClusterState
	for _, k := range b.model.Keys() {
		c := b.model.Cluster(k)
		if k.Management() || c == nil || c.Gone() {
			continue
		}
		s := ClusterState{Key: k, Diagnoses: diagnose.Diagnose(c, b.cfg.Now())}
		if hc, ok := c.HostedCluster(); ok {
			s.HostedCluster, s.Known = cloneHC(hc), true
		}
		if inc := b.incidents[k]; inc != nil && inc.Open() {
			cp := *inc
			s.Incident = &cp
		}
		out = append(out, s)
	}
	return out
}

// HostedCluster returns a copy of a hosted cluster's newest state.
func (b *Bot) HostedCluster(k diagnose.Key) (event.HostedClusterState, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.model.Cluster(k)
	if c == nil {
		return event.HostedClusterState{}, false
	}
	hc, ok := c.HostedCluster()
	return cloneHC(hc), ok
}

// cloneHC copies the slices the model shares with its readers.
func cloneHC(hc event.HostedClusterState) event.HostedClusterState {
	hc.ClusterNetwork = slices.Clone(hc.ClusterNetwork)
	hc.ServiceNetwork = slices.Clone(hc.ServiceNetwork)
	hc.MachineNetwork = slices.Clone(hc.MachineNetwork)
	hc.Conditions = slices.Clone(hc.Conditions)
	hc.Proxy.ReadinessEndpoints = slices.Clone(hc.Proxy.ReadinessEndpoints)
	if hc.ControlPlaneEndpoint != nil {
		ep := *hc.ControlPlaneEndpoint
		hc.ControlPlaneEndpoint = &ep
	}
	if hc.APIServer != nil {
		ep := *hc.APIServer
		hc.APIServer = &ep
	}
	return hc
}
