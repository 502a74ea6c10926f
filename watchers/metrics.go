package watchers

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Metrics of the agent. Labels are bounded: event types, error kinds and
// hosted cluster names (one per HostedCluster the agent watches).
type Metrics struct {
	published     *prometheus.CounterVec
	duplicates    prometheus.Counter
	publishErrors *prometheus.CounterVec
	bufferDepth   prometheus.Gauge
	lastPublish   prometheus.Gauge
	hostedWatched prometheus.Gauge
	hostedSynced  *prometheus.GaugeVec
	syncErrors    *prometheus.CounterVec
	isLeader      prometheus.Gauge
	hostedConns   prometheus.Gauge
}

// HostedConnections is the number of open connections to hosted API servers.
func (m *Metrics) HostedConnections() float64 { return gaugeValue(m.hostedConns) }

// SyncErrors is the count of sync errors for reason (e.g. "crd_missing").
func (m *Metrics) SyncErrors(reason string) float64 {
	var out dto.Metric
	if err := m.syncErrors.WithLabelValues(reason).Write(&out); err != nil {
		return 0
	}
	return out.GetCounter().GetValue()
}

// NewMetrics registers the agent's metrics with reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		published: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hcpbot_agent_events_published_total", Help: "Events accepted by JetStream, by type.",
		}, []string{"type"}),
		duplicates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hcpbot_agent_events_duplicate_total", Help: "Events JetStream dropped as duplicates (same fact published before).",
		}),
		publishErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hcpbot_agent_publish_errors_total", Help: "Failed publish attempts, by kind: nats (transient: timeouts, reconnects), no_stream, permission, too_large, rejected (need a fix; /readyz fails), buffer_full, invalid.",
		}, []string{"kind"}),
		bufferDepth: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hcpbot_agent_publish_buffer_events", Help: "Events waiting to be published.",
		}),
		lastPublish: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hcpbot_agent_last_publish_timestamp_seconds", Help: "When JetStream last accepted an event.",
		}),
		hostedWatched: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hcpbot_agent_hosted_clusters_watched", Help: "Hosted clusters with running informers.",
		}),
		hostedSynced: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "hcpbot_agent_hosted_cluster_synced", Help: "1 when the informers of a hosted cluster have synced and its API answers.",
		}, []string{"cluster"}),
		syncErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hcpbot_agent_sync_errors_total", Help: "Errors while syncing an object or a hosted cluster, by reason.",
		}, []string{"reason"}),
		isLeader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hcpbot_agent_leader", Help: "1 while this replica holds the agent lease and publishes.",
		}),
		hostedConns: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hcpbot_agent_hosted_connections", Help: "Open TCP connections to hosted API servers.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.published, m.duplicates, m.publishErrors, m.bufferDepth, m.lastPublish,
			m.hostedWatched, m.hostedSynced, m.syncErrors, m.isLeader, m.hostedConns)
	}
	return m
}

func gaugeValue(g prometheus.Gauge) float64 {
	var out dto.Metric
	if err := g.Write(&out); err != nil {
		return 0
	}
	return out.GetGauge().GetValue()
}
