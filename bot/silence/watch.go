package silence

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// rewatchDelay is the pause before a watch that ended on its own is
// started again.
const rewatchDelay = time.Second

// Run keeps the local copy in sync with the bucket until ctx ends, then
// returns nil. It first loads every stored silence, then follows changes
// (other replicas' silences). It fails only if the first watch cannot be
// started; a watch that ends later is restarted.
func (s *Store) Run(ctx context.Context) error {
	first := true
	for {
		w, err := s.kv.WatchAll(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil // stopped before the watch began
			}
			if first {
				return fmt.Errorf("silence: watch bucket %s: %w", Bucket, err)
			}
		} else {
			s.follow(ctx, w)
			_ = w.Stop()
		}
		first = false
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(rewatchDelay):
		}
	}
}

// follow applies the watcher's entries to the copy until the watcher ends
// or ctx does. The initial values are followed by a nil entry.
func (s *Store) follow(ctx context.Context, w jetstream.KeyWatcher) {
	initial := true
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e == nil {
				// End of the initial values: what the trail says was
				// silenced and the bucket lacks, once per Store.
				s.crossCheckOnce(ctx)
				initial = false
				continue
			}
			s.apply(e)
			// Once caught up (Delta 0: the newest entry): a flood of
			// puts costs one round of look-ups, not one a put.
			if !initial && e.Operation() == jetstream.KeyValuePut && e.Delta() == 0 {
				s.checkPresent(ctx)
			}
		}
	}
}

func (s *Store) apply(e jetstream.KeyValueEntry) {
	now := s.now()
	key := e.Key()
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.pruneLocked(now)
	kept, applies := s.cache[key]
	applies = applies && kept.Active(now) && s.Sealed()
	if e.Operation() != jetstream.KeyValuePut {
		if applies {
			// Nobody's silence ends early by a delete: hcpbot never
			// deletes one, so this is someone writing the bucket.
			s.refuseLocked(key, now, fmt.Sprintf("deleted from the bucket while it applies (%s); hcpbot never deletes a silence: still applied here until it expires", describe(kept)), &kept)
			return
		}
		delete(s.cache, key)
		if r, ok := s.refused[key]; ok && !r.genuine() {
			r.Deleted, r.Seen = true, now
			s.refused[key] = r
			return
		}
		if s.Sealed() && !s.refusedLocked(key) {
			// A delete marker nobody here saw the silence of: deleted
			// before this replica started, or before its watch read
			// the put. hcpbot deletes none; the trail says what it was
			// (crossCheck, at start).
			s.noteLocked(Refusal{Key: key, Seen: now, Deleted: true,
				Reason: "deleted from the bucket by someone without the bot's key (hcpbot never deletes a silence); if it was a silence, `/hcp audit` names what it silenced"})
		}
		return
	}
	sil, err := s.open(key, e.Value(), now)
	switch {
	case err != nil && applies:
		s.refuseLocked(key, now, fmt.Sprintf("replaced while it applies (%s) by a record that is refused: %v; the silence is still applied here until it expires", describe(kept), err), &kept)
		return
	case err != nil:
		delete(s.cache, key)
		s.refuseLocked(key, now, err.Error(), nil)
		return
	case applies && !same(sil, kept):
		// Sealed by a trusted key, yet another silence under the same
		// id: only a trusted key's holder can make it, not hcpbot
		// (silences are never edited). The first one read stays.
		s.refuseLocked(key, now, fmt.Sprintf("replaced while it applies (%s) by another sealed silence (%s): hcpbot never edits a silence; the first is still applied here", describe(kept), describe(sil)), &kept)
		return
	}
	if r, ok := s.refused[key]; ok && r.Kept == nil {
		delete(s.refused, key)
	}
	s.cache[key] = sil
}
