package event_test

import (
	"errors"
	"reflect"
	"testing"

	"github.com/hcpbot/hcpbot/event"
)

// decodeSentinels are the errors Decode may wrap; exactly one per failure.
var decodeSentinels = []error{event.ErrMalformed, event.ErrUnsupportedVersion, event.ErrUnknownType, event.ErrTooLarge}

// FuzzDecode checks that Decode never panics, classifies every failure with
// exactly one sentinel, and that whatever it accepts (including envelopes of
// unknown types) re-encodes to bytes that decode to the same event. The seed
// corpus lives in testdata/fuzz/FuzzDecode.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(validJSON))
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := event.Decode(data)
		if err != nil {
			n := 0
			for _, s := range decodeSentinels {
				if errors.Is(err, s) {
					n++
				}
			}
			if n != 1 {
				t.Fatalf("error %v matches %d sentinels, want 1", err, n)
			}
			if !errors.Is(err, event.ErrUnknownType) {
				return
			}
		}
		enc, encErr := event.Encode(e)
		if encErr != nil {
			// Re-encoding normalises the time and escapes U+2028/9 in the
			// (bounded) envelope strings, so input right at the limit may
			// grow past it.
			if errors.Is(encErr, event.ErrTooLarge) && len(data) > event.MaxSize-8192 {
				return
			}
			t.Fatalf("Encode of decoded event: %v\ninput: %q", encErr, data)
		}
		e2, err2 := event.Decode(enc)
		if (err == nil) != (err2 == nil) || err != nil && !errors.Is(err2, event.ErrUnknownType) {
			t.Fatalf("re-decoding changed the outcome: %v, then %v\nencoded: %s", err, err2, enc)
		}
		if !reflect.DeepEqual(e, e2) {
			t.Fatalf("round trip changed the event:\n%#v\n%#v\nencoded: %s", e, e2, enc)
		}
		if err != nil {
			return
		}
		if _, err := e.DecodePayload(); err != nil {
			t.Fatalf("DecodePayload after successful Decode: %v", err)
		}
		if _, err := event.Subject(e); err != nil {
			t.Fatalf("Subject after successful Decode: %v", err)
		}
	})
}
