package audit

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hcpbot/hcpbot/event"
)

// ForStream is a bot Log over a stream the test made itself (one that
// allows deleting a message, as an admin could), signing with signer
// (nil: unsigned).
func ForStream(js jetstream.JetStream, s jetstream.Stream, signer Signer) *Log {
	return &Log{js: js, stream: s, defaultSource: DefaultSource, now: time.Now, subject: event.AuditSubject,
		signer: signer, heads: map[string]*head{}}
}

// SetMaxSince lowers the bound of Since.
func SetMaxSince(l *Log, n int) { l.maxSince = n }
