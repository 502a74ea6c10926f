package approval

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hcpbot/hcpbot/actions"
)

// Exposures returns the NodePort exposures in place: the executed expose
// proposals that have not been rolled back, oldest execution first. A
// proposal still marked executed but undone by an executed rollback
// (whose marking of the original failed) is left out too. It reads at
// most maxListed proposals (ErrTruncated, with those found so far).
func (f *Flow) Exposures(ctx context.Context) ([]Proposal, error) {
	var exposed []Proposal
	undone := map[string]bool{}
	err := f.kv.scan(ctx, func(_ string, rec Record, err error) {
		if err != nil {
			return
		}
		p, err := view(rec, f.trust())
		switch {
		case err != nil, p.State != StateExecuted:
		case p.Change.Type == actions.TypeExposeNodePort && p.Change.Expose != nil:
			exposed = append(exposed, p)
		case p.Change.Type == actions.TypeRollback && p.Change.Rollback != nil:
			undone[p.Change.Rollback.Undo.ActionID] = true
		}
	})
	exposed = slices.DeleteFunc(exposed, func(p Proposal) bool { return undone[p.ID] })
	slices.SortFunc(exposed, func(a, b Proposal) int {
		if c := a.Executed().Compare(b.Executed()); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	if err != nil {
		return exposed, fmt.Errorf("approval: exposures: %w", err)
	}
	return exposed, nil
}

// Follow passes fn every proposal in the bucket, then every change to
// one, until ctx ends. It returns once the proposals present at the call
// were passed (so a caller can load them before it replays anything
// else); the changes follow on a goroutine of its own. A record whose
// seals do not verify is left out: what fn shows of it would be someone
// else's words.
func (f *Flow) Follow(ctx context.Context, fn func(Proposal)) error {
	w, err := f.kv.kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("approval: follow proposals: %w", err)
	}
	pass := func(e jetstream.KeyValueEntry) {
		rec, err := decodeRecord(e)
		if err != nil {
			return
		}
		if p, err := view(rec, f.trust()); err == nil {
			fn(p)
		}
	}
	ready := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() { _ = w.Stop() }()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				switch {
				case !ok:
					return
				case e == nil: // the end of the current values
					close(ready)
				default:
					pass(e)
				}
			}
		}
	}()
	select {
	case <-ready:
		return nil
	case <-done:
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("approval: follow proposals: %w", err)
		}
		return errors.New("approval: follow proposals: watch closed")
	}
}

// Sentinel errors of ProposeRollback.
var (
	// ErrIsRollback: a rollback is not rolled back; the original change
	// is proposed again instead.
	ErrIsRollback = errors.New("a rollback cannot be rolled back")
	// ErrNotExecuted: only executed changes can be rolled back.
	ErrNotExecuted = errors.New("only executed actions can be rolled back")
	// ErrRolledBack: it was rolled back already.
	ErrRolledBack = errors.New("already rolled back")
	// ErrNothingToUndo: the change changed nothing.
	ErrNothingToUndo = errors.New("nothing to roll back")
	// ErrRollbackProposed: its rollback is proposed already (returned
	// with that proposal).
	ErrRollbackProposed = errors.New("rollback already proposed")
)

// RollbackPrefix names rollback proposals. The first rollback proposal of
// action act-X is rbk-X, so that proposing the same rollback twice finds
// the first one instead of making a second.
const RollbackPrefix = "rbk-"

// ProposeRollback proposes undoing executed action id, as requestedBy.
// Undoing changes the cluster like any change, so it needs its own
// approvals before the agent runs it. What to undo is taken from the
// agent's own answer to the original (the results bucket, which only
// that agent may write), not from the proposal record, so that whoever
// can write the approval store cannot choose what a rollback restores.
// The original is returned with every refusal.
func (f *Flow) ProposeRollback(ctx context.Context, id, requestedBy string, opts ...ProposeOption) (rollback, orig Proposal, err error) {
	orig, err = f.Get(ctx, id)
	switch {
	case err != nil:
		return Proposal{}, orig, err
	case orig.Change.Type == actions.TypeRollback:
		return Proposal{}, orig, ErrIsRollback
	case orig.State == StateRolledBack:
		return Proposal{}, orig, ErrRolledBack
	case orig.State != StateExecuted:
		return Proposal{}, orig, fmt.Errorf("%w: %s is %s", ErrNotExecuted, id, orig.State)
	case orig.Result == nil || orig.Result.Undo == nil:
		return Proposal{}, orig, ErrNothingToUndo
	}
	data, err := f.queue.Result(ctx, orig.Source, orig.ID)
	if err != nil {
		return Proposal{}, orig, fmt.Errorf("approval: the agent's record of %s: %w", id, err)
	}
	res, err := decodeResult(data)
	switch {
	case err != nil:
		return Proposal{}, orig, err
	case res.Proposal != orig.digest || res.Change == nil || res.Change.Undo == nil:
		return Proposal{}, orig, fmt.Errorf("%w: the agent's record of %s holds nothing to undo", ErrNothingToUndo, id)
	}
	undo := *res.Change.Undo
	if res.ID != orig.ID || undo.ActionID != orig.ID || undo.Cluster != orig.Change.Cluster || undo.Type != orig.Change.Type {
		// The answer must undo this change, of this cluster: not another
		// action, which a rollback approved as this one's would mark
		// rolled back.
		return Proposal{}, orig, fmt.Errorf("%w: the agent's record of %s undoes %s %q of %s instead", ErrNothingToUndo, id, undo.Type, truncate(undo.ActionID), undo.Cluster)
	}
	ch := actions.Change{
		ID: rollbackID(orig.ID), Type: actions.TypeRollback, Cluster: undo.Cluster,
		Rollback: &actions.RollbackParams{Undo: undo},
	}
	opts = append(opts, ForSource(orig.Source))
	rollback, err = f.Propose(ctx, ch, requestedBy, opts...)
	if errors.Is(err, ErrExists) {
		prev, gerr := f.Get(ctx, ch.ID)
		if gerr == nil && (prev.State == StatePending || prev.State == StateApproved || prev.State == StateExecuted) {
			return prev, orig, ErrRollbackProposed
		}
		// The first rollback proposal was rejected, expired or failed:
		// this one gets an id of its own.
		ch.ID = RollbackPrefix + strings.TrimPrefix(NewID(), "act-")
		rollback, err = f.Propose(ctx, ch, requestedBy, opts...)
	}
	return rollback, orig, err
}

func rollbackID(actionID string) string {
	_, suffix, _ := strings.Cut(actionID, "-")
	return RollbackPrefix + suffix
}
