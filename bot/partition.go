package bot

import (
	"github.com/rs/zerolog"

	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/partition"
)

// Partitions: with Config.Partitions.Count > 1 this bot is one group of
// several sharing the events stream, and holds the sources (management
// clusters) partition.Set.Of gives its group. It still consumes the whole
// stream, "hcpbot.events.>": a replay is then right for any history,
// events stored before NATS tagged them, or tagged for another count of
// groups before a repartition. What it skips it skips before decoding,
// from the subject alone (decoding is most of a replay's cost), and the
// skip advances the applied sequence, so a checkpoint covers it and the
// catch-up ends even when the stream's last event is another group's.

// selector decides, from an event's subject, whether this group holds its
// source. It runs on the consumer's goroutine only: its maps need no lock.
type selector struct {
	set   partition.Set
	group int
	log   zerolog.Logger
	// groups caches Of per source token: a fleet has dozens of sources
	// and millions of events.
	groups map[string]int
	// warned are the sources whose tag disagreed with Of, logged once.
	warned map[string]bool
}

func newSelector(set partition.Set, group int, log zerolog.Logger) *selector {
	if set.Count <= 1 {
		return nil
	}
	return &selector{set: set, group: group, log: log, groups: map[string]int{}, warned: map[string]bool{}}
}

// skip reports whether the event on subject belongs to another group. A
// subject that is no event subject is not skipped: it is decoded and
// dead-lettered as before. A tag NATS added for the current count must
// name the group Of names (the mapping computes the same function, or
// lists the same static map); if it does not, the configurations
// disagree: logged once per source as an error, and Of is followed, so
// every group still holds every source exactly once.
func (s *selector) skip(subject string) bool {
	if s == nil {
		return false
	}
	tok, tag, ok := event.SubjectSource(subject)
	if !ok {
		return false
	}
	group, known := s.groups[tok]
	if !known {
		group = s.set.OfToken(tok)
		s.groups[tok] = group
	}
	if tag.Count == s.set.Count && tag.Index != group && !s.warned[tok] {
		s.warned[tok] = true
		s.log.Error().Str("source_token", tok).Int("tag", tag.Index).Int("partition", group).Int("partitions", s.set.Count).
			Msg("NATS tagged this source's events for another partition than bot.partitions/bot.partitionMap give: the NATS mapping and the bot's configuration differ (hcpbot config nats-mapping prints the right one); following the bot's configuration")
	}
	return group != s.group
}

// stormSuffix distinguishes the storms of the groups: two groups' storms
// on one cause (a proxy several management clusters share) are two Slack
// messages with two keys, never one key two leaders write.
func stormSuffix(set partition.Set, group int) string {
	if n := set.ID(group).Name(); n != "" {
		return "-" + n
	}
	return ""
}
