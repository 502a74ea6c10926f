package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// MaxSince bounds what Since returns: a whole incident's records, with
// room to spare, in a few megabytes.
const MaxSince = 20000

// ErrTooMany: Since found more than MaxSince records; it returns the
// oldest MaxSince with it.
var ErrTooMany = errors.New("audit: more records than a read returns")

// errAppendOnly answers the reads of a Log made by ForAgent.
var errAppendOnly = errors.New("audit: this log only appends (ForAgent)")

// readWait bounds the wait for the next message of a read. They are
// stored, so they come at once; a longer silence means the stream changed
// under the read, which then fails rather than answer short.
const readWait = 5 * time.Second

// readBatch is how many messages a read asks the server for at a time.
const readBatch = 256

// scan reads the stream with a short-lived ordered consumer configured by
// cfg, oldest first, and calls fn with each message and its stream
// sequence until fn says it has had enough or every message that matched
// when the read began has been read (later ones are not waited for).
func (l *Log) scan(ctx context.Context, cfg jetstream.OrderedConsumerConfig, fn func(msg jetstream.Msg, seq uint64) (more bool)) error {
	if l.stream == nil {
		return errAppendOnly
	}
	cfg.InactiveThreshold = 30 * time.Second
	cons, err := l.stream.OrderedConsumer(ctx, cfg)
	if err != nil {
		return fmt.Errorf("audit: read consumer: %w", err)
	}
	defer func() {
		// The consumer is ephemeral and expires on its own; deleting it
		// now only saves server resources, so the error does not matter.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = l.stream.DeleteConsumer(dctx, cons.CachedInfo().Name)
	}()
	pending := cons.CachedInfo().NumPending
	if pending == 0 {
		return nil
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(int(min(pending, readBatch))))
	if err != nil {
		return fmt.Errorf("audit: read: %w", err)
	}
	defer it.Stop()
	for read := uint64(0); read < pending; read++ {
		msg, err := next(ctx, it)
		if err != nil {
			return fmt.Errorf("audit: read (%d of %d messages): %w", read, pending, err)
		}
		meta, err := msg.Metadata()
		if err != nil {
			return fmt.Errorf("audit: read: %w", err)
		}
		// NumPending 0: this was the last message there is now (fewer than
		// counted at the start when old ones aged out meanwhile).
		if !fn(msg, meta.Sequence.Stream) || meta.NumPending == 0 {
			return nil
		}
	}
	return nil
}

func next(ctx context.Context, it jetstream.MessagesContext) (jetstream.Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, readWait)
	defer cancel()
	return it.Next(jetstream.NextContext(ctx))
}

// decodeAt decodes a stored record; ok is false for a message Append did
// not write.
func decodeAt(data []byte, seq uint64) (Record, bool) {
	var r Record
	if err := json.Unmarshal(data, &r); err != nil {
		return Record{}, false
	}
	r.Seq = seq
	return r, true
}

// readAt is decodeAt for the readers: a record an agent could not have
// written where it is (misplaced) is not read back — Verify reports it.
func readAt(msg jetstream.Msg, seq uint64) (Record, bool) {
	r, ok := decodeAt(msg.Data(), seq)
	return r, ok && misplaced(msg.Subject(), r) == ""
}

// Recent returns the newest n records, newest first. It reads from n
// messages before the end: the stream denies deletion, so sequences
// between first and last have no holes and the start sequence is exact.
// Records that cannot be decoded (not written by Append), or that an
// agent wrote of another source or kind, are skipped.
func (l *Log) Recent(ctx context.Context, n int) ([]Record, error) {
	if l.stream == nil {
		return nil, errAppendOnly
	}
	if n <= 0 {
		return nil, nil
	}
	info, err := l.stream.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("audit: stream info: %w", err)
	}
	st := info.State
	if st.Msgs == 0 {
		return nil, nil
	}
	last := st.LastSeq
	start := st.FirstSeq
	if last >= uint64(n) && last-uint64(n)+1 > start {
		start = last - uint64(n) + 1
	}
	out := make([]Record, 0, min(uint64(n), last-start+1))
	err = l.scan(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: start},
		func(msg jetstream.Msg, seq uint64) bool {
			if seq > last {
				return false // appended after we looked
			}
			if r, ok := readAt(msg, seq); ok {
				out = append(out, r)
			}
			return seq < last
		})
	if err != nil {
		return nil, err
	}
	// Newest first; the consumer delivered oldest first.
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	if len(out) > n {
		out = out[:n]
	}
	return out, nil
}

// Since returns every record stored from start on, oldest first, on the
// given subjects (filters such as event.AuditFilter work too) or on all
// when none are given. Records are skipped as by Recent. Past
// MaxSince records it returns the first MaxSince and an error wrapping
// ErrTooMany.
func (l *Log) Since(ctx context.Context, start time.Time, subjects ...string) ([]Record, error) {
	cfg := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &start, FilterSubjects: subjects}
	if start.IsZero() {
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverAllPolicy, nil
	}
	limit := MaxSince
	if l.maxSince > 0 {
		limit = l.maxSince
	}
	var out []Record
	more := false
	err := l.scan(ctx, cfg, func(msg jetstream.Msg, seq uint64) bool {
		r, ok := readAt(msg, seq)
		if !ok {
			return true
		}
		if len(out) == limit {
			more = true
			return false
		}
		out = append(out, r)
		return true
	})
	if err != nil {
		return nil, err
	}
	if more {
		return out, fmt.Errorf("%w: more than %d since %s", ErrTooMany, limit, start.UTC().Format(time.RFC3339))
	}
	return out, nil
}
