package notify

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Call outcomes, the "outcome" label of hcpbot_slack_calls_total.
const (
	outcomeOK          = "ok"
	outcomeRateLimited = "rate_limited"
	outcomeRetry       = "retryable_error"
	outcomePermanent   = "permanent_error"
)

// Item kinds, the "kind" label.
const (
	kindRoot   = "root"
	kindUpdate = "update"
	kindReply  = "reply"
)

// metrics carry no channel label: channel ids are not secret, but their
// number is not bounded by us.
type metrics struct {
	calls          *prometheus.CounterVec
	depth          prometheus.Gauge
	retryAfter     prometheus.Counter
	latency        *prometheus.HistogramVec
	dropped        *prometheus.CounterVec
	notLeading     *prometheus.CounterVec
	coalesced      prometheus.Counter
	unchanged      prometheus.Counter
	deduplicated   prometheus.Counter
	duplicateRoots prometheus.Counter
	recovered      prometheus.Counter
	errors         *prometheus.CounterVec
	unpostable     prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hcpbot_slack_calls_total",
			Help: "Slack Web API calls by method and outcome (ok, rate_limited, retryable_error, permanent_error).",
		}, []string{"method", "outcome"}),
		depth: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hcpbot_slack_queue_depth",
			Help: "Items waiting for Slack: one per Key with a pending update, plus pending replies.",
		}),
		retryAfter: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hcpbot_slack_retry_after_seconds_total",
			Help: "Seconds Slack asked us to wait in Retry-After answers.",
		}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "hcpbot_slack_delivery_latency_seconds",
			Help:    "Time from enqueue (of the oldest change folded into an item) to delivery, by kind.",
			Buckets: []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600},
		}, []string{"kind"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hcpbot_slack_dropped_total",
			Help: "Items given up after a permanent Slack error, by kind.",
		}, []string{"kind"}),
		notLeading: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hcpbot_slack_not_leading_total",
			Help: "Leader-only renderings (incidents, storms) dropped because this replica no longer held the lease, by kind (root: its root not known to exist yet; update).",
		}, []string{"kind"}),
		coalesced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hcpbot_slack_coalesced_total",
			Help: "Upserts superseded by a newer version before delivery, or older than one delivered.",
		}),
		unchanged: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hcpbot_slack_unchanged_total",
			Help: "Updates not sent because the message already shows that rendering (e.g. replayed after a restart).",
		}),
		deduplicated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hcpbot_slack_deduplicated_total",
			Help: "Replies skipped because the same reply id was already queued or posted.",
		}),
		duplicateRoots: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hcpbot_slack_duplicate_roots_total",
			Help: "Root messages found posted twice (a claim taken over from a replica presumed dead).",
		}),
		recovered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hcpbot_slack_recovered_posts_total",
			Help: "Posts whose answer was lost, found in Slack by their metadata instead of being posted again.",
		}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hcpbot_slack_errors_total",
			Help: "Slack Web API calls answered with an error code, by code (channel_not_found, not_in_channel, is_archived, token_revoked, invalid_blocks, msg_too_long, ...; other).",
		}, []string{"error"}),
		unpostable: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hcpbot_slack_unpostable_channels",
			Help: "Channels whose last post or update Slack refused for a reason only a person can fix (not_in_channel, is_archived, ...).",
		}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.calls, m.depth, m.retryAfter, m.latency,
		m.dropped, m.notLeading, m.coalesced, m.unchanged, m.deduplicated, m.duplicateRoots, m.recovered, m.errors, m.unpostable} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("notify: register metrics: %w", err)
		}
	}
	return m, nil
}
