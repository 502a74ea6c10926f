package bot

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Why a notification is held back, and how that is counted. A flush
// stage that holds one back or drops it names a reason, logged (debug)
// and counted (hcpbot_bot_notifications_suppressed_total{reason}); each
// such stage holds for ONE reason, the one its holder was made for
// (TestStagesHoldForOneReason).

// reason says why a flush stage held a notification back or dropped it.
type reason string

// The reasons. A held notification goes out later (group-wait,
// storm-brewing, clearing, group-interval, replaying, root-lookup) or
// never (storm-member, resolved-unposted, silenced until the silence
// ends). There is no inhibition here: bot/diagnose folds the symptoms a
// root cause explains into its diagnosis before an incident is formed.
const (
	reasonReplaying        reason = "replaying"         // the stream was not replayed yet: nothing is sent from a half-built picture
	reasonRootLookup       reason = "root-lookup"       // resolved before the notifier was asked whether it has a message
	reasonGroupWait        reason = "group-wait"        // a new incident gathers signals for GroupWait
	reasonStormBrewing     reason = "storm-brewing"     // a storm may still form around it and is growing: held, StormWindow at most
	reasonStormMember      reason = "storm-member"      // its storm's message speaks for it
	reasonResolvedUnposted reason = "resolved-unposted" // resolved before anyone was told: nothing to say
	reasonSilenced         reason = "silenced"          // a silence covers it (its message said so once)
	reasonClearing         reason = "clearing"          // its signals cleared: it waits for its resolution or their return
	reasonGroupInterval    reason = "group-interval"    // paced: folded into the next rendering
)

var reasons = []reason{reasonReplaying, reasonRootLookup, reasonGroupWait, reasonStormBrewing, reasonStormMember,
	reasonResolvedUnposted, reasonSilenced, reasonClearing, reasonGroupInterval}

// suppressions logs and counts the notifications held back.
type suppressions struct {
	counter *prometheus.CounterVec
	log     zerolog.Logger
}

// hold records that the incident or storm named kind and key is held back
// for r. It is logged and counted when the notification starts being held
// for r, not at every flush, so the counter says how often notifications
// were held, not how often the loop looked; held is reset when a
// rendering goes out.
func (s suppressions) hold(held *reason, kind, key string, r reason) {
	if *held == r {
		return
	}
	*held = r
	s.counter.WithLabelValues(string(r)).Inc()
	s.log.Debug().Str(kind, key).Str("reason", string(r)).Msg("notification held")
}

// holderFor is what a stage holding for r is given.
func (s suppressions) holderFor(r reason) holder { return holder{reason: r, s: s} }

// holder holds notifications back for its one reason. A stage that holds
// embeds one, which gives it its Reason.
type holder struct {
	reason reason
	s      suppressions
}

// Reason is the one reason the stage holds for.
func (h holder) Reason() reason { return h.reason }

func (h holder) hold(held *reason, kind, key string) { h.s.hold(held, kind, key, h.reason) }

// holdIncidents drops from due the incidents held says to hold back, and
// holds them for h's reason.
func (h holder) holdIncidents(due []*Incident, held func(*Incident) bool) []*Incident {
	return slices.DeleteFunc(due, func(inc *Incident) bool {
		if !held(inc) {
			return false
		}
		h.hold(&inc.n.held, "incident", inc.Key)
		return true
	})
}

// holdStorms is holdIncidents for storms.
func (h holder) holdStorms(due []*Storm, held func(*Storm) bool) []*Storm {
	return slices.DeleteFunc(due, func(s *Storm) bool {
		if !held(s) {
			return false
		}
		h.hold(&s.held, "storm", s.Key)
		return true
	})
}
