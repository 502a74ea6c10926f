package event_test

import (
	"testing"

	"github.com/hcpbot/hcpbot/event"
)

func BenchmarkEncodeNode(b *testing.B) {
	e := nodeEvent(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := event.Encode(e); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeNode measures what a consumer pays per message: the
// envelope, its checks, and the typed payload.
func BenchmarkDecodeNode(b *testing.B) {
	data := encodedNode(b)
	for b.Loop() {
		e, err := event.Decode(data)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := e.DecodePayload(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNewNode measures what the agent pays to build an event: payload
// redaction and encoding, and the ID hash.
func BenchmarkNewNode(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		nodeEvent(b)
	}
}

// BenchmarkDecodeAllNode is what the bot pays per consumed message
// (event.DecodeAll: envelope, checks and typed payload, each byte read
// once).
func BenchmarkDecodeAllNode(b *testing.B) {
	data := encodedNode(b)
	for b.Loop() {
		if _, _, err := event.DecodeAll(data); err != nil {
			b.Fatal(err)
		}
	}
}

// encodedNode is a node event as the agent publishes it, with the
// benchmark set to report bytes and allocations.
func encodedNode(b *testing.B) []byte {
	b.Helper()
	data, err := event.Encode(nodeEvent(b))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	return data
}
