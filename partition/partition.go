// Package partition says which bot group holds which management cluster.
//
// This is the minimal API of the partition contract
// (notes/partition-contract.md) that package bot/fleet needs; the
// integrator takes helper PART's version of this file, which computes Of
// exactly as nats-server's subject-mapping function partition(Count, 1)
// does.
package partition

import (
	"hash/fnv"
	"strconv"
	"strings"
)

// Set says which bot group holds which source.
type Set struct {
	Count  int            // P; <= 1 means one group
	Static map[string]int // optional source -> group; others fall back to the hash
}

// Of is the group of source: Static[source] if present, else FNV-1a 32 of
// the source's subject token mod Count.
func (s Set) Of(source string) int {
	if s.Count <= 1 {
		return 0
	}
	if k, ok := s.Static[source]; ok {
		return k
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(strings.ReplaceAll(source, ".", "~")))
	return int(h.Sum32() % uint32(s.Count))
}

// ID is one group: Index of Count.
type ID struct{ Index, Count int }

// Name is "" for Count <= 1, else "p<Count>-<Index>".
func (id ID) Name() string {
	if id.Count <= 1 {
		return ""
	}
	return "p" + strconv.Itoa(id.Count) + "-" + strconv.Itoa(id.Index)
}
