package approval

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hcpbot/hcpbot/actions"
	"github.com/hcpbot/hcpbot/audit"
)

// The audit trail: every transition and every refusal of a proposal is
// one audit record, with an ID that makes a retried append a no-op.

// record audits a transition of p. The record ID is derived from the
// proposal and the transition: each transition happens once, so a retried
// append (here or by the caller) is de-duplicated.
func (s *Store) record(ctx context.Context, p Proposal, kind audit.Kind, actor string, at time.Time, fill func(*audit.Record)) error {
	r := audit.Record{
		ID: p.ID + "." + string(kind), Time: at, Actor: actor, Kind: kind,
		ActionID: p.ID, Cluster: p.Request.Cluster.String(), Source: p.Source,
	}
	if fill != nil {
		fill(&r)
	}
	return s.append(ctx, r)
}

// refused audits a refused decision and returns cause, joined with the
// audit failure if the record could not be written.
func (s *Store) refused(ctx context.Context, verb, id, userID string, at time.Time, p Proposal, cause error) error {
	r := audit.Record{
		ID: audit.NewID(), Time: at, Actor: userID, Kind: audit.KindRefused,
		ActionID: id, Summary: verb + " refused", Reason: cause.Error(),
	}
	if p.ID != "" {
		r.Cluster, r.Source = p.Request.Cluster.String(), p.Source
	}
	if !idPattern.MatchString(id) {
		// Whatever was sent is kept, but only as (redacted) text.
		r.ActionID, r.Reason = "", fmt.Sprintf("%s (action id %q)", cause, id)
	}
	err := fmt.Errorf("approval: %s %s: %w", verb, id, cause)
	if aerr := s.append(ctx, r); aerr != nil {
		return errors.Join(err, aerr)
	}
	return err
}

func (s *Store) append(ctx context.Context, r audit.Record) error {
	var err error
	for attempt := range auditAttempts {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return fmt.Errorf("%w: %s: %w", ErrAudit, r.ID, errors.Join(err, ctx.Err()))
			case <-time.After(time.Duration(attempt) * 100 * time.Millisecond):
			}
		}
		if err = s.audit.Append(ctx, r); err == nil || errors.Is(err, audit.ErrInvalid) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrAudit, r.ID, err)
	}
	return nil
}

// describe renders a request for people: a one-line summary and, for a
// noProxy patch, the change as a diff.
func describe(req actions.Change) (summary, diff string) {
	switch {
	case req.Type == actions.TypeNoProxyPatch && req.NoProxy != nil:
		target := req.NoProxy.Target
		if target == "" {
			target = actions.TargetHostedCluster
		}
		summary = fmt.Sprintf("add %s to the noProxy of %s %s", strings.Join(req.NoProxy.Add, ", "), target, req.Cluster)
		after := strings.Join(req.NoProxy.Add, ",")
		if req.NoProxy.Expected != "" {
			after = req.NoProxy.Expected + "," + after
		}
		diff = fmt.Sprintf("- noProxy: %s\n+ noProxy: %s", req.NoProxy.Expected, after)
	case req.Type == actions.TypeExposeNodePort && req.Expose != nil:
		ports := "all ports"
		if len(req.Expose.Ports) > 0 {
			ps := make([]string, len(req.Expose.Ports))
			for i, p := range req.Expose.Ports {
				ps[i] = fmt.Sprint(p.Port)
			}
			ports = "ports " + strings.Join(ps, ", ")
		}
		if chosen := req.Expose.ChosenNodePorts(); len(chosen) > 0 {
			ports += "; node ports " + actions.JoinPorts(chosen)
		}
		summary = fmt.Sprintf("expose Service %s/%s (%s) of %s on NodePorts", req.Expose.Namespace, req.Expose.Service, ports, req.Cluster)
	case req.Type == actions.TypeRollback && req.Rollback != nil:
		summary = fmt.Sprintf("roll back %s (%s) on %s", req.Rollback.Undo.ActionID, req.Rollback.Undo.Type, req.Cluster)
	default:
		summary = fmt.Sprintf("%s on %s", req.Type, req.Cluster)
	}
	return summary, diff
}
