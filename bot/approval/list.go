package approval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hcpbot/hcpbot/actions"
)

// Listings read from the bucket: the exposures in place and the approved
// proposals without a recorded outcome.

// maxListed bounds how many proposals Exposures reads from the bucket; a
// bucket holding more (90 days of proposals at an unusual rate) gives a
// partial answer and ErrTruncated. A variable for tests.
var maxListed = 10000

// ErrTruncated: Exposures stopped after reading its bound of proposals; the answer it
// returns with this error is partial.
var ErrTruncated = errors.New("proposal list truncated")

// Exposures returns the NodePort exposures in place: the executed expose
// proposals that have not been rolled back, oldest execution first. A
// proposal still marked executed but undone by an executed rollback (whose
// marking of the original failed) is left out too. It reads at most
// maxListed (10000) proposals (ErrTruncated, with the exposures found so far).
func (s *Store) Exposures(ctx context.Context) ([]Proposal, error) {
	var exposed []Proposal
	undone := map[string]bool{}
	err := s.scan(ctx, func(p Proposal) {
		switch {
		case p.State != StateExecuted:
		case p.Request.Type == actions.TypeExposeNodePort && p.Request.Expose != nil:
			exposed = append(exposed, p)
		case p.Request.Type == actions.TypeRollback && p.Request.Rollback != nil:
			undone[p.Request.Rollback.Undo.ActionID] = true
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

// Approved returns the proposals approved but without a recorded outcome
// yet: their requests are queued for (or running in) the agent, or were
// never sent because the bot stopped right after the approval. Bounded
// like Exposures.
func (s *Store) Approved(ctx context.Context) ([]Proposal, error) {
	var out []Proposal
	err := s.scan(ctx, func(p Proposal) {
		if p.State == StateApproved {
			out = append(out, p)
		}
	})
	if err != nil {
		return out, fmt.Errorf("approval: approved proposals: %w", err)
	}
	return out, nil
}

// scan calls f with every stored proposal, reading at most maxListed
// (ErrTruncated, after calling f with those read).
func (s *Store) scan(ctx context.Context, f func(Proposal)) error {
	w, err := s.kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("list proposals: %w", err)
	}
	defer func() { _ = w.Stop() }()
	var errs []error
	for n := 0; ; {
		select {
		case <-ctx.Done():
			return fmt.Errorf("list proposals: %w", ctx.Err())
		case e, ok := <-w.Updates():
			if !ok || e == nil {
				return errors.Join(errs...) // nil marks the end of the current values
			}
			if n++; n > maxListed {
				return errors.Join(append(errs, fmt.Errorf("%w: read %d proposals", ErrTruncated, maxListed))...)
			}
			var p Proposal
			if err := json.Unmarshal(e.Value(), &p); err != nil {
				errs = append(errs, fmt.Errorf("decode proposal %s: %w", e.Key(), err))
				continue
			}
			p.Revision = e.Revision()
			f(p)
		}
	}
}

// Follow passes fn every proposal in the bucket, then every change to
// one, until ctx ends. It returns once the proposals present at the call
// were passed (so a caller can load them before it replays anything
// else); the changes follow on a goroutine of its own. With a sealer, a
// record whose seal does not verify is left out, and a Cause whose
// CauseSeal does not is dropped: what fn shows of them would be someone
// else's words.
func (s *Store) Follow(ctx context.Context, fn func(Proposal)) error {
	w, err := s.kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("approval: follow proposals: %w", err)
	}
	pass := func(e jetstream.KeyValueEntry) {
		var p Proposal
		if err := json.Unmarshal(e.Value(), &p); err != nil {
			return
		}
		if s.sealer != nil {
			keys := []string{s.sealer.PublicKey()}
			claims, err := p.Claims()
			if err != nil || actions.VerifyProposal(keys, claims, p.Seal) != nil {
				return
			}
			if p.Cause != nil {
				note, err := json.Marshal(p.Cause)
				if err != nil || actions.VerifyNote(keys, p.ID, note, p.CauseSeal) != nil {
					p.Cause = nil // rewritten: not the bot's words
				}
			}
		}
		p.Revision = e.Revision()
		fn(p)
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
