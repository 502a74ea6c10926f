package approval

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/audit"
)

// Every change of state and every refusal is one audit record. A change
// of state has an ID derived from the proposal and the change (and the
// person, for approvals), so a retried append is de-duplicated.

// auditAttempts bounds retries of an audit append; the record ID makes
// them safe.
const auditAttempts = 3

// markTimeout bounds recording what happened once it happened: counted
// from then, not from the caller's context, which may be spent.
const markTimeout = 15 * time.Second

// recordIDPart keeps a Slack user id usable in a record ID.
var recordIDPart = regexp.MustCompile(`[^A-Za-z0-9_-]`)

// record audits a change of state of p by actor; who, when set, makes
// the record ID unique per person (approvals).
func (f *Flow) record(ctx context.Context, p Proposal, kind audit.Kind, actor, who string, at time.Time, fill func(*audit.Record)) error {
	id := p.ID + "." + string(kind)
	if who != "" {
		id += "." + recordIDPart.ReplaceAllString(who, "_")
	}
	r := audit.Record{
		ID: id, Time: at, Actor: actor, Kind: kind,
		ActionID: p.ID, Cluster: p.Change.Cluster.String(), Source: p.Source,
	}
	if fill != nil {
		fill(&r)
	}
	return f.append(ctx, r)
}

// refused audits a refused decision and returns cause, joined with the
// audit failure if the record could not be written.
func (f *Flow) refused(ctx context.Context, verb, id, userID string, at time.Time, p Proposal, cause error) error {
	r := audit.Record{
		ID: audit.NewID(), Time: at, Actor: userID, Kind: audit.KindRefused,
		ActionID: id, Summary: verb + " refused", Reason: cause.Error(),
	}
	if p.ID != "" {
		r.Cluster, r.Source = p.Change.Cluster.String(), p.Source
	}
	if !idPattern.MatchString(id) {
		// Whatever was sent is kept, but only as (redacted) text.
		r.ActionID, r.Reason = "", fmt.Sprintf("%s (action id %q)", cause, id)
	}
	err := fmt.Errorf("approval: %s %s: %w", verb, id, cause)
	if aerr := f.append(ctx, r); aerr != nil {
		return errors.Join(err, aerr)
	}
	return err
}

// reportForgery records, once per revision of the record, that
// proposal id holds seals that do not verify: someone without the bot's
// key wrote the approval store. Nothing of it is sent, shown as approved,
// or counted.
func (f *Flow) reportForgery(ctx context.Context, id string, rec Record, cause error) {
	f.mu.Lock()
	if f.reported[id] == rec.revision {
		f.mu.Unlock()
		return
	}
	f.reported[id] = rec.revision
	f.mu.Unlock()
	f.m.forgeries.Inc()
	f.log.Warn().Str("action", truncate(id)).Uint64("revision", rec.revision).Err(cause).
		Msg("forged approval record: written without the bot's key; refused")
	r := audit.Record{
		ID:   fmt.Sprintf("%s.forged.%d", id, rec.revision),
		Time: f.now(), Kind: audit.KindForged, ActionID: id,
		Summary: "approval record refused: its seals do not verify", Reason: cause.Error(),
	}
	if !idPattern.MatchString(id) {
		r.ID, r.ActionID = audit.NewID(), ""
		r.Reason = fmt.Sprintf("%s (key %q)", cause, truncate(id))
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), markTimeout)
	defer cancel()
	if err := f.append(actx, r); err != nil {
		f.log.Error().Err(err).Msg("forged approval record not audited")
	}
}

func (f *Flow) append(ctx context.Context, r audit.Record) error {
	var err error
	for attempt := range auditAttempts {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return fmt.Errorf("%w: %s: %w", ErrAudit, r.ID, errors.Join(err, ctx.Err()))
			case <-time.After(time.Duration(attempt) * 100 * time.Millisecond):
			}
		}
		if err = f.trail.Append(ctx, r); err == nil || errors.Is(err, audit.ErrInvalid) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrAudit, r.ID, err)
	}
	return nil
}

// Describe renders a change for people: a one-line summary and, for a
// noProxy patch, the change as a diff.
func Describe(ch actions.Change) (summary, diff string) {
	switch {
	case ch.Type == actions.TypeNoProxyPatch && ch.NoProxy != nil:
		target := ch.NoProxy.Target
		if target == "" {
			target = actions.TargetHostedCluster
		}
		summary = fmt.Sprintf("add %s to the noProxy of %s %s", strings.Join(ch.NoProxy.Add, ", "), target, ch.Cluster)
		after := strings.Join(ch.NoProxy.Add, ",")
		if ch.NoProxy.Expected != "" {
			after = ch.NoProxy.Expected + "," + after
		}
		diff = fmt.Sprintf("- noProxy: %s\n+ noProxy: %s", ch.NoProxy.Expected, after)
	case ch.Type == actions.TypeExposeNodePort && ch.Expose != nil:
		ports := "all ports"
		if len(ch.Expose.Ports) > 0 {
			ps := make([]string, len(ch.Expose.Ports))
			for i, p := range ch.Expose.Ports {
				ps[i] = fmt.Sprint(p.Port)
			}
			ports = "ports " + strings.Join(ps, ", ")
		}
		if chosen := ch.Expose.ChosenNodePorts(); len(chosen) > 0 {
			ports += "; node ports " + actions.JoinPorts(chosen)
		}
		summary = fmt.Sprintf("expose Service %s/%s (%s) of %s on NodePorts", ch.Expose.Namespace, ch.Expose.Service, ports, ch.Cluster)
	case ch.Type == actions.TypeRollback && ch.Rollback != nil:
		summary = fmt.Sprintf("roll back %s (%s) on %s", ch.Rollback.Undo.ActionID, ch.Rollback.Undo.Type, ch.Cluster)
	default:
		summary = fmt.Sprintf("%s on %s", ch.Type, ch.Cluster)
	}
	return summary, diff
}

// truncate bounds attacker-controlled text in logs.
func truncate(s string) string {
	const max = 128
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}

// flowMetrics are the bot side's.
type flowMetrics struct {
	forgeries prometheus.Counter
	sent      prometheus.Counter
	outcomes  *prometheus.CounterVec
}

func newFlowMetrics(reg prometheus.Registerer) *flowMetrics {
	m := &flowMetrics{
		forgeries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hcpbot_approval_forgeries_total",
			Help: "Approval records found whose seals do not verify (written to the approval store without the bot's key); none is ever sent to an agent.",
		}),
		sent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hcpbot_approval_requests_sent_total",
			Help: "Requests sent to agents for approved proposals (a re-sent copy counts again; the stream drops it).",
		}),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hcpbot_approval_outcomes_total",
			Help: "Outcomes of approved proposals recorded, by state and code.",
		}, []string{"state", "code"}),
	}
	if reg != nil {
		reg.MustRegister(m.forgeries, m.sent, m.outcomes)
	}
	return m
}
