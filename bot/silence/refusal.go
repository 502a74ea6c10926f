package silence

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Refusal is a record of the bucket that silences nothing, or a silence
// deleted or replaced while it applied: what a person looking at `/hcp
// status` must see, since it is somebody writing the bucket without the
// bot's key.
type Refusal struct {
	Key    string    // the record's key in Bucket
	Reason string    // why it silences nothing
	Seen   time.Time // when this replica read it
	// Kept is the genuine silence a deletion or replacement removed from
	// the bucket, which this replica still applies until it expires.
	Kept *Silence
	// Deleted: the refused record was deleted since.
	Deleted bool
	// Missing: a silence the signed audit trail names, that would apply
	// until Until, absent from the bucket when this replica started.
	Missing bool
	Until   time.Time
	// Incomplete: the comparison of the trail with the bucket at start
	// read only part of the trail, or none (Key is TrailKey): a silence
	// deleted before this start may be missing unlisted until Until.
	Incomplete bool
}

// TrailKey is the Key of the Refusal saying that the comparison with the
// audit trail was incomplete: no key of the bucket (a key has no space
// nor parenthesis), so no record put there replaces it.
const TrailKey = "(audit trail)"

// Limits on what Refused keeps: an attacker who writes many records must
// not grow the bot's memory, and a refusal of a record deleted since is
// shown for a day.
const (
	maxRefusals  = 100
	refusalAfter = 24 * time.Hour
)

// presentTimeout bounds the look-ups of checkPresent.
const presentTimeout = 5 * time.Second

// checkPresent looks up, after a put, every silence this replica applies:
// a put carrying a rollup of the whole bucket (Nats-Rollup: all, which
// the bot's NATS user may publish and the KV stream allows) removes every
// other record without a delete marker the watch would deliver. hcpbot
// writes none; a silence gone that way is listed as tampered with, and
// still applied until it expires. Silences are few and puts rare: one
// direct get each.
func (s *Store) checkPresent(ctx context.Context) {
	if !s.Sealed() {
		return
	}
	now := s.now()
	s.mu.RLock()
	var ids []string
	for id, sil := range s.cache {
		if r, listed := s.refused[id]; sil.Active(now) && !(listed && r.Kept != nil) {
			ids = append(ids, id)
		}
	}
	s.mu.RUnlock()
	ctx, cancel := context.WithTimeout(ctx, presentTimeout)
	defer cancel()
	for _, id := range ids {
		_, err := s.kv.Get(ctx, id)
		if !errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // there, or not known: the watch tells the rest
		}
		s.mu.Lock()
		if kept, ok := s.cache[id]; ok && kept.Active(now) && !s.keptLocked(id) {
			s.refuseLocked(id, now, fmt.Sprintf("removed from the bucket without a delete marker while it applies (%s): a rollup of the whole bucket, which hcpbot never writes; still applied here until it expires", describe(kept)), &kept)
		}
		s.mu.Unlock()
	}
}

// keptLocked reports whether key is listed as a genuine silence tampered
// with. Callers hold mu.
func (s *Store) keptLocked(key string) bool {
	r, ok := s.refused[key]
	return ok && r.Kept != nil
}

// refuseLocked records a refusal of the record under key and logs it as
// an error. Callers hold mu.
func (s *Store) refuseLocked(key string, now time.Time, reason string, kept *Silence) {
	s.noteLocked(Refusal{Key: key, Reason: reason, Seen: now, Kept: kept})
}

func (s *Store) noteLocked(r Refusal) {
	key, reason := r.Key, r.Reason
	if o, listed := s.refused[key]; listed && (o.rank() == r.rank() || (o.rank() < r.rank() && o.live(r.Seen))) {
		// Listed already, and as serious: the same key put, or a
		// silence deleted, again and again must not flood the log one
		// line a write. Listed as more serious (a genuine silence
		// deleted): junk put under its key later must not turn it into
		// one refused record among many.
		if o.rank() == r.rank() {
			s.refused[key] = r
		}
		s.again++
		if isPowerOfTen(s.again) {
			s.log.Error().Str("bucket", Bucket).Int("refused_again", s.again).Str("last_key", clip(key, 80)).Str("reason", reason).
				Msg("silence records listed already refused again: someone keeps writing the silences bucket without the bot's signing key")
		}
		return
	}
	if _, ok := s.refused[key]; !ok && len(s.refused) >= maxRefusals {
		// What is certain never gives way to what may be noise: a
		// genuine silence tampered with evicts anything else, a silence
		// the trail names (whose audit record may be forged too) evicts
		// a refused record. The rest is counted, and logged sparingly:
		// a flood of records must not flood the log either.
		victim := ""
		for k, o := range s.refused {
			if o.rank() > r.rank() && (victim == "" || o.rank() > s.refused[victim].rank()) {
				victim = k
			}
		}
		s.more++
		if victim == "" {
			if s.more == 1 || isPowerOfTen(s.more) {
				s.log.Error().Str("bucket", Bucket).Int("not_listed", s.more).Str("last_key", clip(key, 80)).Str("reason", reason).
					Msg("silence records refused past what the bot lists: someone is writing the silences bucket without the bot's signing key")
			}
			return
		}
		delete(s.refused, victim)
	}
	s.log.Error().Str("bucket", Bucket).Str("key", clip(key, 80)).Str("reason", reason).
		Msg("silence refused: someone without the bot's signing key wrote the silences bucket (or an hcpbot of before sealing did)")
	s.refused[key] = r
}

func isPowerOfTen(n int) bool {
	for n >= 10 && n%10 == 0 {
		n /= 10
	}
	return n == 1
}

func (s *Store) refusedLocked(key string) bool { _, ok := s.refused[key]; return ok }

// genuine reports whether r is about a silence the bot made.
func (r Refusal) genuine() bool { return r.Kept != nil || r.Missing || r.Incomplete }

// live reports whether r, about a genuine silence, still matters at now.
func (r Refusal) live(now time.Time) bool {
	return (r.Kept != nil && r.Kept.Active(now)) || ((r.Missing || r.Incomplete) && now.Before(r.Until))
}

// rank orders refusals by how sure and how serious: a genuine silence
// tampered with (0), one the trail names missing or a comparison with
// the trail incomplete (1), a refused record (2). Refused lists them in
// that order; the first are kept longest.
func (r Refusal) rank() int {
	switch {
	case r.Kept != nil:
		return 0
	case r.Missing, r.Incomplete:
		return 1
	}
	return 2
}

// same reports whether a and b are one silence (times compared as
// instants, whatever their representation).
func same(a, b Silence) bool {
	return a.ID == b.ID && a.Cluster == b.Cluster && a.Incident == b.Incident && a.Reason == b.Reason &&
		a.CreatedBy == b.CreatedBy && a.CreatedAt.Equal(b.CreatedAt) && a.ExpiresAt.Equal(b.ExpiresAt)
}

func describe(sil Silence) string {
	return fmt.Sprintf("%s silencing %s until %s, by %s", sil.ID, sil.Target(), sil.ExpiresAt.UTC().Format(time.RFC3339), sil.CreatedBy)
}

// Refused lists the genuine silences deleted or replaced (first), then
// the records of the bucket this replica read and applies not —
// unsealed, forged, sealed by an untrusted key, invalid —, each oldest
// first; more counts the refusals past what it keeps (each was logged).
// A refusal stays while its record is in the bucket, a day after it is
// deleted, and a deleted silence's until it expires.
func (s *Store) Refused(now time.Time) (list []Refusal, more int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, r := range s.refused {
		if (r.Kept != nil && !r.Kept.Active(now)) || (r.Deleted && now.Sub(r.Seen) > refusalAfter) || ((r.Missing || r.Incomplete) && !now.Before(r.Until)) {
			delete(s.refused, key)
			continue
		}
		list = append(list, r)
	}
	slices.SortFunc(list, func(a, b Refusal) int {
		if c := cmp.Compare(a.rank(), b.rank()); c != 0 {
			return c
		}
		if c := a.Seen.Compare(b.Seen); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	return list, s.more
}
