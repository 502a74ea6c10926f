package bot

import "github.com/prometheus/client_golang/prometheus"

// metrics of a Bot; the package doc lists them.
type metrics struct {
	consumed   *prometheus.CounterVec
	deadLetter *prometheus.CounterVec
	open       *prometheus.GaugeVec
	storms     prometheus.Gauge
	sent       *prometheus.CounterVec
	suppressed *prometheus.CounterVec
	latency    prometheus.Histogram
}

// newMetrics returns the metrics, registered on reg unless it is nil.
func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		consumed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hcpbot_bot_events_consumed_total", Help: "Events applied to the state model, by type.",
		}, []string{"type"}),
		deadLetter: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hcpbot_bot_events_dead_lettered_total", Help: "Events that could not be used (acknowledged and skipped), by reason.",
		}, []string{"reason"}),
		open: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "hcpbot_bot_incidents_open", Help: "Open incidents, by the rule of their main diagnosis.",
		}, []string{"diagnosis"}),
		storms: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hcpbot_bot_storms_open", Help: "Open storms (incidents of many clusters with one shared cause).",
		}),
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hcpbot_bot_notifications_total", Help: "Renderings and thread replies handed to the notifier, by kind.",
		}, []string{"kind"}),
		suppressed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hcpbot_bot_notifications_suppressed_total",
			Help: "Incidents and storms with something new to show that a flush stage held back or dropped, by reason; counted when one starts being held for a reason.",
		}, []string{"reason"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "hcpbot_bot_event_to_notify_seconds", Help: "From the agent observing a fact to the notification being queued.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}),
	}
	// Every reason is exported from the start, at 0: a rate over a series
	// that appears only with its first suppression misses that one.
	for _, r := range reasons {
		m.suppressed.WithLabelValues(string(r))
	}
	if reg != nil {
		reg.MustRegister(m.consumed, m.deadLetter, m.open, m.storms, m.sent, m.suppressed, m.latency)
	}
	return m
}
