// Package partition says which bot group holds which management cluster
// (the event source) when the events stream is shared by several groups
// (docs/capacity.md, "Scaling out: partitions of the events stream").
//
// The same function runs in three places that must agree: NATS, which
// tags each event with its group through an account subject mapping
// (Set.Mappings: `partition(P,1)` on the source token, or one literal
// mapping per source of a static map); the bot, which skips before
// decoding every event of a source it does not hold (Set.Of); and the
// fleet commands, which send a command naming a cluster to the group of
// its source. partition_test.go proves Of equal to the server's hash on
// the real embedded nats-server.
package partition

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/hcpbot/hcpbot/event"
)

// Set says which bot group holds which source.
type Set struct {
	// Count is P, the number of groups; <= 1 means one group holding
	// every source (and no name, subject or mapping changes).
	Count int
	// Static, optional, maps a source to its group (written from the
	// agents' list to even out the groups by the sources' sizes); a
	// source not in it falls back to the hash. A value outside
	// [0, Count) is refused by Check and ignored by Of.
	Static map[string]int
}

// Of is the group of source: Static[source] if present, else FNV-1a 32 of
// the source's subject token ('.' escaped as '~', as event.SourceToken
// writes it) mod Count, which is what nats-server's mapping function
// partition(Count, 1) computes on the source's wildcard
// (server/subject_transform.go, getHashPartition: fnv.New32a over the
// token's bytes, Sum32 % numBuckets).
func (s Set) Of(source string) int {
	if s.Count <= 1 {
		return 0
	}
	if k, ok := s.Static[source]; ok && k >= 0 && k < s.Count {
		return k
	}
	return hashToken(Token(source), s.Count)
}

// OfToken is Of for a source as its subject token (escaped): what a
// consumer reads off a subject without decoding the event.
func (s Set) OfToken(tok string) int {
	if s.Count <= 1 {
		return 0
	}
	if len(s.Static) > 0 {
		return s.Of(untoken(tok))
	}
	return hashToken(tok, s.Count)
}

func hashToken(tok string, n int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(tok))
	return int(h.Sum32() % uint32(n))
}

// Token is source as one subject token, '.' escaped as '~' (the event
// package's escaping; DNS-1123 names hold no '~', so it is reversible).
// Not checked: event.SourceToken checks.
func Token(source string) string { return strings.ReplaceAll(source, ".", "~") }

func untoken(tok string) string { return strings.ReplaceAll(tok, "~", ".") }

// Partitioned reports whether there is more than one group.
func (s Set) Partitioned() bool { return s.Count > 1 }

// Check refuses a set NATS and the bot could not agree on: a negative
// count, a static group outside [0, Count), a static map without
// partitions, an empty source.
func (s Set) Check() error {
	if s.Count < 0 {
		return fmt.Errorf("partition: %d partitions: must be at least 1", s.Count)
	}
	if len(s.Static) > 0 && s.Count <= 1 {
		return fmt.Errorf("partition: a static map needs more than one partition")
	}
	for _, src := range slices.Sorted(maps.Keys(s.Static)) {
		if src == "" {
			return fmt.Errorf("partition: static map: empty source")
		}
		if k := s.Static[src]; k < 0 || k >= s.Count {
			return fmt.Errorf("partition: static map: source %q in group %d: must be in 0..%d", src, k, s.Count-1)
		}
	}
	return nil
}

// Layout is a short digest of the static map, "" without one: two sets of
// the same Count hold the same sources in the same groups only if their
// layouts are equal. A checkpoint is named with it (CheckpointName), so a
// group whose static map changed never restores the state of another
// layout (it would miss the events of a source moved into it).
func (s Set) Layout() string {
	if s.Count <= 1 || len(s.Static) == 0 {
		return ""
	}
	h := sha256.New()
	for _, src := range slices.Sorted(maps.Keys(s.Static)) {
		fmt.Fprintf(h, "%s=%d\n", src, s.Static[src])
	}
	return hex.EncodeToString(h.Sum(nil)[:4])
}

// ID is one group: Index of Count.
type ID struct{ Index, Count int }

// ID is group index of s.
func (s Set) ID(index int) ID { return ID{Index: index, Count: s.Count} }

// Name is "" for Count <= 1 (today's names unchanged: lease "bot",
// checkpoint "bot", storm keys unchanged), else "p<Count>-<Index>".
func (id ID) Name() string {
	if id.Count <= 1 {
		return ""
	}
	return "p" + strconv.Itoa(id.Count) + "-" + strconv.Itoa(id.Index)
}

// Suffix is base followed by "-" and the group's Name, or base alone for
// one group: the lease key "bot" or "bot-p2-1".
func (id ID) Suffix(base string) string {
	if n := id.Name(); n != "" {
		return base + "-" + n
	}
	return base
}

// Check refuses an index outside [0, Count).
func (id ID) Check() error {
	if id.Count <= 1 {
		if id.Index != 0 {
			return fmt.Errorf("partition: partition %d of one: must be 0", id.Index)
		}
		return nil
	}
	if id.Index < 0 || id.Index >= id.Count {
		return fmt.Errorf("partition: partition %d of %d: must be in 0..%d", id.Index, id.Count, id.Count-1)
	}
	return nil
}

// CheckpointName is the name of group id's checkpoint in s: base
// suffixed with the group, and with the static map's Layout when there
// is one.
func (s Set) CheckpointName(base string, id ID) string {
	n := id.Suffix(base)
	if l := s.Layout(); l != "" {
		n += "-" + l
	}
	return n
}

// Tag is the partition tag NATS's mapping (Mappings) adds to the events
// of source; false when it adds none: one group, or a static map that
// does not list source (such a source's events are stored untagged and
// the bot places them by the hash, Of, all the same).
func (s Set) Tag(source string) (event.Tag, bool) {
	if s.Count <= 1 {
		return event.Tag{}, false
	}
	if len(s.Static) > 0 {
		if _, ok := s.Static[source]; !ok {
			return event.Tag{}, false
		}
	}
	return event.Tag{Count: s.Count, Index: s.Of(source)}, true
}

// Mapping is one account subject mapping: what an agent publishes on a
// subject matching Src, NATS stores on Dest.
type Mapping struct{ Src, Dest string }

// Mappings are the account subject mappings that tag every event with its
// group (event.Tag), none for one group. Without a static map one
// mapping hashes the source token with partition(Count,1) (Of computes
// the same). With one, a mapping per listed source names its group, and
// there is no hash mapping for the others: nats.conf's mappings block is
// an unordered map and nats-server applies the first match in its own
// order, so a catch-all beside the literal sources would tag a listed
// source by the hash on some servers. List every agent in the static map.
func (s Set) Mappings() []Mapping {
	if s.Count <= 1 {
		return nil
	}
	p := strconv.Itoa(s.Count)
	if len(s.Static) == 0 {
		return []Mapping{{
			Src: event.EventsSubjectPrefix + ".*.*.*.*",
			Dest: event.EventsSubjectPrefix + ".{{wildcard(1)}}.{{wildcard(2)}}.{{wildcard(3)}}.{{wildcard(4)}}." +
				p + ".{{partition(" + p + ",1)}}",
		}}
	}
	out := make([]Mapping, 0, len(s.Static))
	for _, src := range slices.Sorted(maps.Keys(s.Static)) {
		tok := Token(src)
		out = append(out, Mapping{
			Src:  event.EventsSubjectPrefix + "." + tok + ".*.*.*",
			Dest: event.EventsSubjectPrefix + "." + tok + ".{{wildcard(1)}}.{{wildcard(2)}}.{{wildcard(3)}}." + p + "." + strconv.Itoa(s.Of(src)),
		})
	}
	return out
}

// NATSConf is the mappings block of nats.conf for the account the agents
// publish in (inside `accounts { HCPBOT { ... } }` of
// configs/deploy/nats/nats.conf), "" for one group.
func (s Set) NATSConf() string {
	ms := s.Mappings()
	if len(ms) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# hcpbot: %d bot groups (bot.partitions); every event stored with its group as two more tokens, <P>.<k>.\n", s.Count)
	if len(s.Static) > 0 {
		b.WriteString("# Static map (bot.partitionMap): a source not listed here is stored untagged; the bot places it by the hash.\n")
	}
	b.WriteString("mappings: {\n")
	for _, m := range ms {
		fmt.Fprintf(&b, "  %q: %q\n", m.Src, m.Dest)
	}
	b.WriteString("}\n")
	return b.String()
}
