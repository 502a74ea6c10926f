package approval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hcpbot/hcpbot/actions"
)

// Record is a proposal as the bucket stores it: seals only, but for the
// channel to post in. The terms and the decisions decide whether it may
// run (Permit); the outcome and the rolled-back mark, sealed by the bot
// when it records what the agent answered, say what became of it, and
// chain to the decision and the outcome before them.
type Record struct {
	Proposal  Seal   `json:"proposal"`
	Decisions []Seal `json:"decisions,omitempty"`
	// Outcome seals an Outcome; nil before the agent answered.
	Outcome *Seal `json:"outcome,omitempty"`
	// RolledBack seals a RolledBack, once the change's rollback ran.
	RolledBack *Seal `json:"rolledBack,omitempty"`
	// Channel is where the decision was asked for: where to post (it
	// decides nothing).
	Channel string `json:"channel,omitempty"`

	revision uint64
	// key is the bucket key the record was read under: the sealed terms
	// must name it, or a record copied under another key (and the
	// approvals made of it there) would pass for that proposal's.
	key string
}

// Contexts of the seals of what became of a proposal.
const (
	outcomeContext    = "hcpbot-outcome-v1\n"
	rolledBackContext = "hcpbot-rolled-back-v1\n"
)

// Outcome is what became of an approved proposal, as the agent answered.
type Outcome struct {
	ProposalID string `json:"proposalId"`
	// Prev is the digest of the decision that completed the approval.
	Prev string `json:"prev"`
	// State is StateExecuted or StateFailed.
	State  State           `json:"state"`
	Result *actions.Result `json:"result,omitempty"`
	Code   Code            `json:"code,omitempty"`
	Reason string          `json:"reason,omitempty"`
	// Collision details a refused exposure's node ports.
	Collision *actions.PortCollision `json:"collision,omitempty"`
	At        time.Time              `json:"at"`
}

// RolledBack marks an executed change undone by its rollback.
type RolledBack struct {
	ProposalID string `json:"proposalId"`
	// Prev is the digest of the outcome it follows.
	Prev string `json:"prev"`
	// Rollback is the rollback proposal that ran; By who completed its
	// approval.
	Rollback string    `json:"rollback"`
	By       string    `json:"by"`
	At       time.Time `json:"at"`
}

// view is what the bot shows of rec: verify's proposal with its sealed
// outcome and rolled-back mark applied. Either must be sealed by a
// trusted key and chained where it belongs; an outcome on a proposal
// whose seals do not approve it is a forgery too.
func view(rec Record, t Trust) (Proposal, error) {
	p, err := verify(rec, t)
	if err != nil {
		return p, err
	}
	p.revision, p.Channel = rec.revision, rec.Channel
	// A mark that does not verify is ignored, as if never written, and
	// reported (tampered): the decisions stand, and the loop records the
	// agent's real answer over it.
	if rec.Outcome == nil {
		if rec.RolledBack != nil {
			p.tampered = fmt.Errorf("%w: %s is marked rolled back without an outcome", ErrForged, p.ID)
		}
		return p, nil
	}
	if p.State != StateApproved {
		// Judged by the proposal's own terms: a stricter policy since
		// does not unmake what was approved and ran.
		if q, err := verify(rec, Trust{Keys: t.Keys}); err != nil || q.State != StateApproved {
			p.tampered = fmt.Errorf("%w: %s has an outcome recorded but its seals do not approve it", ErrForged, p.ID)
			return p, nil
		}
	}
	var o Outcome
	if err := rec.Outcome.open(outcomeContext, t.Keys, &o); err != nil {
		p.tampered = fmt.Errorf("outcome of %s: %w", p.ID, err)
		return p, nil
	}
	last := rec.Decisions[len(rec.Decisions)-1].digest(decisionContext)
	switch {
	case o.ProposalID != p.ID || o.Prev != last:
		p.tampered = fmt.Errorf("%w: the outcome of %s belongs to another proposal or decision", ErrForged, p.ID)
		return p, nil
	case o.State != StateExecuted && o.State != StateFailed:
		p.tampered = fmt.Errorf("%w: %s has outcome %q", ErrForged, p.ID, o.State)
		return p, nil
	}
	p.State, p.Result, p.Code, p.ExecutedAt = o.State, o.Result, o.Code, o.At
	if o.State == StateFailed {
		p.Reason, p.Collision = o.Reason, o.Collision
	}
	if rec.RolledBack == nil {
		return p, nil
	}
	var rb RolledBack
	if err := rec.RolledBack.open(rolledBackContext, t.Keys, &rb); err != nil {
		p.tampered = fmt.Errorf("rolled-back mark of %s: %w", p.ID, err)
		return p, nil
	}
	if rb.ProposalID != p.ID || rb.Prev != rec.Outcome.digest(outcomeContext) || o.State != StateExecuted {
		p.tampered = fmt.Errorf("%w: the rolled-back mark of %s belongs to another proposal or outcome", ErrForged, p.ID)
		return p, nil
	}
	p.State, p.RolledBackBy, p.RolledBackAt = StateRolledBack, rb.By, rb.At
	return p, nil
}

// store is the proposals bucket. Every write is a compare-and-set on the
// key's revision, so of concurrent writers (replicas, double clicks)
// exactly one wins each transition.
type store struct {
	kv jetstream.KeyValue
}

// maxCASAttempts bounds the re-read/re-try loop of one transition. Every
// write is a transition out of the state it read, so a second conflict
// is already unusual.
const maxCASAttempts = 5

func (s store) get(ctx context.Context, id string) (Record, error) {
	if !idPattern.MatchString(id) {
		// Not a key we could have written; also keeps garbage out of
		// the KV API.
		return Record{}, fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	e, err := s.kv.Get(ctx, id)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrKeyDeleted):
		return Record{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	case err != nil:
		return Record{}, fmt.Errorf("read proposal %s: %w", id, err)
	}
	return decodeRecord(e)
}

func decodeRecord(e jetstream.KeyValueEntry) (Record, error) {
	var rec Record
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return Record{}, fmt.Errorf("%w: proposal %s does not decode: %w", ErrForged, e.Key(), err)
	}
	rec.revision, rec.key = e.Revision(), e.Key()
	if len(rec.Proposal.Body) == 0 {
		var old struct {
			Request json.RawMessage `json:"request"`
			Seal    json.RawMessage `json:"seal"`
		}
		if json.Unmarshal(e.Value(), &old) == nil && len(old.Request) > 0 && len(old.Seal) > 0 {
			return rec, fmt.Errorf("%w: %s", ErrLegacy, e.Key())
		}
	}
	return rec, nil
}

func (s store) create(ctx context.Context, id string, rec Record) (Record, error) {
	data, err := json.Marshal(rec)
	if err != nil {
		return Record{}, fmt.Errorf("encode proposal %s: %w", id, err)
	}
	rev, err := s.kv.Create(ctx, id, data)
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return Record{}, fmt.Errorf("propose %s: %w", id, ErrExists)
		}
		return Record{}, fmt.Errorf("propose %s: %w", id, err)
	}
	rec.revision, rec.key = rev, id
	return rec, nil
}

// update applies change to the current record of id and writes it with
// compare-and-set on the revision it read; on a conflict it re-reads and
// asks change again, so change always judges the latest state. change
// reports whether to write; an error it returns is returned after the
// write (if any), so a transition can both happen and be a refusal (an
// approval that finds the proposal expired expires it).
func (s store) update(ctx context.Context, id string, change func(rec *Record) (write bool, err error)) (Record, error) {
	for attempt := 1; ; attempt++ {
		rec, err := s.get(ctx, id)
		if err != nil {
			return Record{}, err
		}
		write, cerr := change(&rec)
		if !write {
			return rec, cerr
		}
		data, err := json.Marshal(rec)
		if err != nil {
			return Record{}, fmt.Errorf("encode proposal %s: %w", id, err)
		}
		rev, err := s.kv.Update(ctx, id, data, rec.revision)
		if err == nil {
			rec.revision, rec.key = rev, id
			return rec, cerr
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !errors.Is(err, jetstream.ErrKeyExists) {
			return Record{}, fmt.Errorf("write proposal %s: %w", id, err)
		}
		if attempt == maxCASAttempts {
			return Record{}, fmt.Errorf("write proposal %s: still changing after %d attempts: %w", id, attempt, err)
		}
	}
}

// maxListed bounds how many proposals one scan reads; a bucket holding
// more (90 days of proposals at an unusual rate) gives a partial answer
// and ErrTruncated. A variable for tests.
var maxListed = 10000

// ErrTruncated: a listing stopped after reading its bound of proposals;
// the answer it returns with this error is partial.
var ErrTruncated = errors.New("proposal list truncated")

// scan calls f with every stored record, reading at most maxListed.
func (s store) scan(ctx context.Context, f func(id string, rec Record, err error)) error {
	w, err := s.kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("list proposals: %w", err)
	}
	defer func() { _ = w.Stop() }()
	for n := 0; ; {
		select {
		case <-ctx.Done():
			return fmt.Errorf("list proposals: %w", ctx.Err())
		case e, ok := <-w.Updates():
			if !ok || e == nil {
				return nil // nil marks the end of the current values
			}
			if n++; n > maxListed {
				return fmt.Errorf("%w: read %d proposals", ErrTruncated, maxListed)
			}
			rec, err := decodeRecord(e)
			f(e.Key(), rec, err)
		}
	}
}
