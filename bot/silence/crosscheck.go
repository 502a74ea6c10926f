package silence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/seal"
)

// auditSigned reports whether r carries a trusted key's signature:
// audit.Record.Sig is over audit.SigningContext and the record encoded
// without Sig, which a record read back encodes to again (its fields are
// strings, integers, a time and bytes). A record that Append did not
// encode need not, and is not believed.
func (s *Store) auditSigned(r audit.Record) bool {
	sig := r.Sig
	r.Sig = nil
	body, err := json.Marshal(r)
	return err == nil && seal.Verify(s.trusted, r.Key, audit.SigningContext, body, sig) == nil
}

// crossCheckTimeout bounds the comparison of the trail with the bucket at
// start: it must not hold the watch long.
const crossCheckTimeout = 30 * time.Second

func (s *Store) crossCheckOnce(ctx context.Context) {
	s.mu.Lock()
	done := s.checked
	s.checked = true
	s.mu.Unlock()
	if done || !s.Sealed() {
		return
	}
	trail, ok := s.audit.(audit.Reader)
	if !ok {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, crossCheckTimeout)
	defer cancel()
	if err := s.crossCheck(cctx, trail); err != nil {
		if ctx.Err() != nil {
			return // stopping: nothing to list
		}
		// Said where a person looks, not only in the log: a flood of
		// the trail (its writers include the bot's NATS user) is how a
		// deletion made before this start would be hidden.
		s.log.Error().Err(err).Msg("silences: could not compare the whole audit trail with the bucket: a silence deleted before this start may go unnoticed")
		now := s.now()
		s.mu.Lock()
		s.noteLocked(Refusal{Key: TrailKey, Seen: now, Incomplete: true, Until: now.Add(s.max + clockSkew),
			Reason: fmt.Sprintf("the audit trail was not compared whole with the silences bucket at this replica's start (%v): a silence deleted before then may be missing from this list; a flood of the trail hides one that way, `/hcp audit` shows it", err)})
		s.mu.Unlock()
	}
}

// crossCheck lists, as refused, every silence that the trail says was
// made, that still applies and that the bucket lacks: deleted by someone
// without the bot's key before this replica started (a deletion leaves
// nothing a seal can prove). It is not applied — the audit record is no
// silence's seal, and a forged one (`/hcp audit verify` reports it)
// must not mute anything — but a person sees it in `/hcp status`.
func (s *Store) crossCheck(ctx context.Context, trail audit.Reader) error {
	now := s.now()
	// The bot's subjects only: an agent records no silence, and its
	// records must not push the bot's past what Since returns.
	recs, err := trail.Since(ctx, now.Add(-s.max-clockSkew), event.AuditFilter)
	if err != nil && !errors.Is(err, audit.ErrTooMany) {
		return fmt.Errorf("silence: read the audit trail: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range recs {
		// A sealing bot's records are chained and signed. The signature
		// is checked here too: the bot's NATS user appends to the trail,
		// and claims it made up, listed as missing silences, would crowd
		// out a real one past what Refused keeps.
		if r.Kind != audit.KindSilenced || !idPattern.MatchString(r.ActionID) || r.Chain == 0 || !s.auditSigned(r) {
			continue
		}
		_, until, ok := strings.Cut(r.Summary, ", until ")
		expires, perr := time.Parse(time.RFC3339, until)
		// No silence outlives the maximum after it was made: a record
		// saying otherwise is no record of Add's (and would stay listed).
		if !ok || perr != nil || !now.Before(expires) || expires.After(r.Time.Add(s.max+clockSkew)) {
			continue
		}
		if _, there := s.cache[r.ActionID]; there {
			continue
		}
		what := "deleted"
		if o, listed := s.refused[r.ActionID]; listed {
			if o.genuine() {
				continue
			}
			if !o.Deleted {
				// The genuine record was replaced by one refused.
				what = "replaced by a record that is refused (" + clip(o.Reason, 200) + ")"
			}
		}
		s.noteLocked(Refusal{Key: r.ActionID, Seen: now, Missing: true, Until: expires,
			Reason: fmt.Sprintf("missing from the bucket, yet the audit trail records %q (by %s, %s; `/hcp audit verify` checks that record's seal): %s by someone without the bot's key before this replica started; not applied here, re-create it with `/hcp silence` if it still matters",
				clip(r.Summary, 200), clip(r.Actor, maxUserLen), r.Time.UTC().Format(time.RFC3339), what)})
	}
	return err
}
