package wire_test

import (
	"bytes"
	"crypto/rand"
	"errors"
	mrand "math/rand/v2"
	"testing"

	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/bot/fleet/wire"
)

// An answer larger than max_payload travels in chunks that each fit it,
// arrive in any order (two replicas' copies mixed), and join into the
// sealed answer; a chunk whose bytes were changed, or that answers
// another request or another group, does not verify.
func TestChunksJoinIntoTheSealedAnswer(t *testing.T) {
	s, err := approval.NewEphemeralSigner()
	if err != nil {
		t.Fatal(err)
	}
	answer := make([]byte, 100_000) // random: no compression would shrink it
	if _, err := rand.Read(answer); err != nil {
		t.Fatal(err)
	}
	request := []byte(`{"nonce":"00112233445566778899aabbccddeeff","op":"states"}`)
	const maxPayload = 8 << 10
	var msgs [][]byte
	for _, replica := range []string{"r1", "r2"} {
		chunks, err := wire.Seal(s.ForFleet(), 4, 2, request, replica, answer, maxPayload)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range chunks {
			if len(c) > maxPayload {
				t.Fatalf("a chunk of %d bytes, max_payload %d", len(c), maxPayload)
			}
		}
		msgs = append(msgs, chunks...)
	}
	if len(msgs) < 2*13 {
		t.Fatalf("%d chunks for 100 KB under 8 KB each", len(msgs))
	}
	mrand.Shuffle(len(msgs), func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })
	trusted := []string{s.PublicKey()}
	digest := wire.RequestDigest(request)
	asm := wire.Assembly{Max: 1 << 20}
	var whole []byte
	for _, m := range msgs {
		c, err := wire.Open(m, trusted, 4, digest)
		if err != nil {
			t.Fatal(err)
		}
		if c.Group != 2 {
			t.Fatalf("group %d", c.Group)
		}
		if w, done, err := asm.Add(c); err != nil {
			t.Fatal(err)
		} else if done {
			whole = w
			break
		}
	}
	if !bytes.Equal(whole, answer) {
		t.Fatalf("joined %d bytes, not the sealed answer", len(whole))
	}

	tampered := bytes.Clone(msgs[0])
	tampered[len(tampered)-1] ^= 1
	for name, check := range map[string]func() error{
		"changed bytes": func() error { _, err := wire.Open(tampered, trusted, 4, digest); return err },
		"another request": func() error {
			_, err := wire.Open(msgs[0], trusted, 4, wire.RequestDigest([]byte("other")))
			return err
		},
		"another count":    func() error { _, err := wire.Open(msgs[0], trusted, 3, digest); return err },
		"an untrusted key": func() error { _, err := wire.Open(msgs[0], []string{"UOTHER"}, 4, digest); return err },
		"no header at all": func() error { _, err := wire.Open(answer[:64], trusted, 4, digest); return err },
	} {
		if err := check(); !errors.Is(err, wire.ErrForged) && !errors.Is(err, wire.ErrUntrustedKey) {
			t.Errorf("%s: %v, want refused", name, err)
		}
	}
}
