package audit

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Metrics exports what the last verification of the trail found. Alert on
// hcpbot_audit_verify_problems > 0, and on a last-verification time that
// falls behind the verifier's interval.
type Metrics struct {
	problems prometheus.Gauge
	records  prometheus.Gauge
	last     prometheus.Gauge
	failures prometheus.Counter
}

// NewMetrics registers the verification metrics with reg (nil: not
// registered).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		problems: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hcpbot_audit_verify_problems",
			Help: "Problems (gaps, broken links, unsigned or badly signed records) the last verification of the audit trail found.",
		}),
		records: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hcpbot_audit_verify_records",
			Help: "Audit records the last verification read.",
		}),
		last: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hcpbot_audit_verify_last_timestamp_seconds",
			Help: "When the last verification of the audit trail completed.",
		}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hcpbot_audit_verify_failures_total",
			Help: "Verifications of the audit trail that could not read it to the end.",
		}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.problems, m.records, m.last, m.failures} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("audit: registering metrics: %w", err)
			}
		}
	}
	return m, nil
}

func (m *Metrics) observe(r Report, err error) {
	if m == nil {
		return
	}
	if err != nil {
		m.failures.Inc()
		return
	}
	m.problems.Set(float64(r.ProblemCount))
	m.records.Set(float64(r.Records))
	m.last.Set(float64(r.Started.Add(r.Took).UnixNano()) / 1e9)
}

// Verifier verifies the trail on demand (`/hcp audit verify`) and on a
// schedule (Run), feeding Metrics and the log either way. One
// verification runs at a time: callers that asked while one ran get the
// answer of the next, which began after they asked.
type Verifier struct {
	log     *Log
	opts    VerifyOptions
	metrics *Metrics
	logger  zerolog.Logger

	turn chan struct{} // holds one token: whose turn it is to verify

	mu          sync.Mutex
	last        Report
	lastStarted time.Time // zero: no verification completed
}

// loggedProblems bounds the problems each verification logs one by one.
const loggedProblems = 10

// NewVerifier verifies l with opts; m may be nil.
func NewVerifier(l *Log, opts VerifyOptions, m *Metrics, logger zerolog.Logger) *Verifier {
	v := &Verifier{log: l, opts: opts, metrics: m, logger: logger, turn: make(chan struct{}, 1)}
	v.turn <- struct{}{}
	return v
}

// Verify verifies the whole trail (Log.Verify), updates the metrics and
// logs the problems found.
func (v *Verifier) Verify(ctx context.Context) (Report, error) {
	asked := time.Now()
	select {
	case <-ctx.Done():
		return Report{}, fmt.Errorf("audit: verify: %w", ctx.Err())
	case <-v.turn:
	}
	defer func() { v.turn <- struct{}{} }()
	v.mu.Lock()
	if !v.lastStarted.IsZero() && !v.lastStarted.Before(asked) {
		r := v.last
		v.mu.Unlock()
		return r, nil
	}
	v.mu.Unlock()

	r, err := v.log.Verify(ctx, v.opts)
	v.metrics.observe(r, err)
	if err != nil {
		if ctx.Err() == nil {
			v.logger.Error().Err(err).Msg("audit trail could not be verified")
		}
		return r, err
	}
	v.mu.Lock()
	v.last, v.lastStarted = r, r.Started
	v.mu.Unlock()
	ev := v.logger.Info()
	if !r.OK() {
		ev = v.logger.Error()
		// The trail keeps its problems: each run would log them again.
		// The first few point the way; `/hcp audit verify` lists more.
		for _, p := range r.Problems[:min(len(r.Problems), loggedProblems)] {
			v.logger.Error().Uint64("seq", p.Seq).Str("subject", p.Subject).Str("kind", string(p.Kind)).Str("detail", p.Detail).
				Msg("audit trail problem")
		}
	}
	ev.Int("records", r.Records).Int("subjects", r.Subjects).Uint64("firstSeq", r.FirstSeq).Int("problems", r.ProblemCount).
		Int("legacy", r.Legacy).Int("signed", r.Signed).Dur("took", r.Took).Msg("audit trail verified")
	return r, nil
}

// leaderPoll bounds how long Run takes to notice that this replica became
// the leader.
const leaderPoll = time.Minute

// Run verifies the trail every interval until ctx ends, while leader (nil:
// always) says this replica leads: one replica's verification is enough,
// and each reads the whole stream. The first runs as soon as this replica
// leads.
func (v *Verifier) Run(ctx context.Context, every time.Duration, leader func() bool) error {
	if every <= 0 {
		return fmt.Errorf("audit: verification interval %v must be positive", every)
	}
	t := time.NewTicker(min(every, leaderPoll))
	defer t.Stop()
	var last time.Time
	for {
		if (leader == nil || leader()) && (last.IsZero() || time.Since(last) >= every) {
			last = time.Now()
			_, _ = v.Verify(ctx) // logged and counted by Verify
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
