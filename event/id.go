package event

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strings"
	"time"
)

// idLen is the length of an event ID in hex digits: 128 bits are plenty to
// avoid collisions inside a JetStream duplicate window.
const idLen = 32

// idDomain separates these hashes from any other use of sha256 over similar
// fields, and lets a future ID rule coexist.
const idDomain = "hcpbot/event/id/v1"

// computeID derives the event ID from the fact an event describes, never
// from when or by whom it was observed, so that a restarted agent or a
// second agent watching the same cluster produce the same Nats-Msg-Id.
// Fields are length-prefixed so no two field lists hash alike.
func computeID(source string, cluster *ClusterRef, t Type, obj ObjectRef, transitionKey, snapshot string) string {
	h := sha256.New()
	var lenBuf [binary.MaxVarintLen64]byte
	write := func(s string) {
		n := binary.PutUvarint(lenBuf[:], uint64(len(s)))
		h.Write(lenBuf[:n])
		h.Write([]byte(s))
	}
	write(idDomain)
	write(source)
	if cluster != nil {
		write(cluster.Namespace)
		write(cluster.Name)
	} else {
		write("")
		write("")
	}
	write(string(t))
	if obj.UID != "" {
		write("uid")
		write(obj.UID)
	} else {
		write("ref")
		if obj.Hosted {
			write("hosted")
		} else {
			write("management")
		}
		write(obj.Kind)
		write(obj.Namespace)
		write(obj.Name)
	}
	write(transitionKey)
	write(snapshot)
	return hex.EncodeToString(h.Sum(nil))[:idLen]
}

// TransitionAt formats the conventional transition key of a state entered
// at a point in time, e.g. TransitionAt("Ready=False", lastTransitionTime)
// gives "Ready=False@2026-07-22T10:00:00Z". Times are reduced to UTC
// seconds, the precision Kubernetes stores them with, so every agent derives
// the same key from the same object.
func TransitionAt(state string, at time.Time) string {
	var b strings.Builder
	b.WriteString(state)
	b.WriteByte('@')
	b.WriteString(at.UTC().Truncate(time.Second).Format(time.RFC3339))
	return b.String()
}
