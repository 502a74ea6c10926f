package wire_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bot/fleet/wire"
	"github.com/hcpbot/hcpbot/seal"
)

// lyingChunk is chunk index of an answer whose header claims total
// chunks and the digest answer: sealed by a trusted key (an old one,
// still in approvals.trustedKeys for the audit trail, stolen) whose
// holder writes headers Seal never would.
func lyingChunk(t *testing.T, s *approval.Signer, request []byte, answer string, index, total int, data []byte) []byte {
	t.Helper()
	sum := sha256.Sum256(data)
	h := wire.Header{Count: 2, Group: 1, Request: wire.RequestDigest(request), Replica: "thief", Answer: answer,
		Index: index, Total: total, Sum: hex.EncodeToString(sum[:]), Key: s.PublicKey()}
	sig, err := s.ForFleet().Sign(wire.SignedInput(h))
	if err != nil {
		t.Fatal(err)
	}
	h.Sig = sig
	msg, err := wire.Marshal(wire.Chunk{Header: h, Data: data})
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

// A chunk's Total and Answer are its sealer's word. Whoever holds a key
// the client trusts (approvals.trustedKeys keeps a rotated, perhaps
// stolen, key for the audit trail) seals chunks claiming 2^40 chunks (a
// makeslice panic: the bot down), 2^26 (1.5 GB of slots for one 64-byte
// chunk), or opens a thousand answers of which none completes (each held
// within Max, all together without bound). The assembly refuses each
// before it allocates: its Max bounds the bytes and chunk slots of all
// the answers it holds together, and a genuine answer still joins.
func TestI30AttackSealedChunkCountsBoundedBeforeAllocation(t *testing.T) {
	thief, err := approval.NewEphemeralSigner()
	if err != nil {
		t.Fatal(err)
	}
	request := []byte(`{"nonce":"00112233445566778899aabbccddeeff","op":"states"}`)
	trusted, digest := []string{thief.PublicKey()}, wire.RequestDigest(request)
	const max = 1 << 20
	open := func(msg []byte) wire.Chunk {
		t.Helper()
		c, err := wire.Open(msg, trusted, 2, digest)
		if err != nil {
			t.Fatalf("a chunk sealed by a trusted key: %v", err)
		}
		return c
	}
	data := []byte(strings.Repeat("x", 64))
	for _, total := range []int{1 << 40, 1 << 26, wire.MaxChunks(max) + 1} {
		t.Run(fmt.Sprintf("total %d", total), func(t *testing.T) {
			asm := wire.Assembly{Max: max}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, done, err := asm.Add(open(lyingChunk(t, thief, request, "ab", 0, total, data)))
			runtime.ReadMemStats(&after)
			if err == nil || done {
				t.Errorf("a chunk claiming %d chunks of an answer within %d bytes kept (done %v)", total, max, done)
			}
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
				t.Errorf("%d bytes allocated for one 64-byte chunk", grew)
			}
		})
	}
	t.Run("answers that never complete", func(t *testing.T) {
		asm := wire.Assembly{Max: max}
		big := make([]byte, 16<<10)
		var kept int
		for i := range 1000 {
			// Two chunks claimed, one sent: the answer never completes.
			_, _, err := asm.Add(open(lyingChunk(t, thief, request, fmt.Sprintf("answer-%d", i), 0, 2, big)))
			if err == nil {
				kept++
			}
		}
		if kept*len(big) > max {
			t.Errorf("%d incomplete answers of %d bytes held, beyond Max %d", kept, len(big), max)
		}
		// The genuine answer: the thief's open ones take the room, and
		// the client names the group; once they are gone, it joins.
		asm = wire.Assembly{Max: max}
		answer := []byte(strings.Repeat("genuine ", 1000))
		chunks, err := wire.Seal(thief.ForFleet(), 2, 1, request, "r1", answer, 4<<10)
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range chunks {
			whole, done, err := asm.Add(open(m))
			if err != nil || done != (i == len(chunks)-1) || (done && string(whole) != string(answer)) {
				t.Fatalf("genuine chunk %d of %d: done %v, %v", i, len(chunks), done, err)
			}
		}
	})
}

// Attacker 5, before any seal: what Open reads of a message is a JSON
// header line, then the bytes after it are hashed; nothing is inflated
// or gob-decoded (that happens to a whole answer whose every chunk
// verified and whose bytes make the sealed digest). A header nested
// 500,000 deep, one with a 1 MB signature by an untrusted key, one
// claiming 2^62 chunks unsealed, each refused as forged or untrusted,
// within little memory.
func TestI30AttackHeaderBeforeTheSeal(t *testing.T) {
	s, err := approval.NewEphemeralSigner()
	if err != nil {
		t.Fatal(err)
	}
	request := []byte(`{"nonce":"00112233445566778899aabbccddeeff","op":"states"}`)
	trusted, digest := []string{s.PublicKey()}, wire.RequestDigest(request)
	other, err := approval.NewEphemeralSigner()
	if err != nil {
		t.Fatal(err)
	}
	msgs := map[string][]byte{
		"nested":         []byte(`{"x":` + strings.Repeat("[", 500_000) + strings.Repeat("]", 500_000) + "}\n"),
		"1 MB signature": []byte(fmt.Sprintf(`{"p":2,"g":1,"key":%q,"sig":%q}`+"\n", other.PublicKey(), strings.Repeat("QUFB", 1<<18))),
		"2^62 chunks":    []byte(fmt.Sprintf(`{"p":2,"g":1,"req":%q,"i":0,"n":%d}`+"\ngzip bomb here", digest, 1<<62)),
	}
	for name, msg := range msgs {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := wire.Open(msg, trusted, 2, digest)
		runtime.ReadMemStats(&after)
		if err == nil {
			t.Errorf("%s: opened", name)
		}
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
			t.Errorf("%s: %d MB allocated before the seal", name, grew>>20)
		}
		t.Logf("%s (%d bytes): %v", name, len(msg), err)
	}
}

// Issue 31 moved Open's check onto package seal. What Open says of a
// chunk is still one thing, by the same order: a key not trusted is
// refused as such before its signature is looked at (whatever bytes it
// carries), and only then is a signature judged — the bot's key claimed
// over a stranger's signature, a bit flipped, no signature, the bot's
// signature made for another use (an audit record) or for another
// header (another group, another chunk) each a forgery, never taken
// for a stranger's key. Each error also matches seal's sentinel.
func TestI31AttackSealClassification(t *testing.T) {
	bot, err := approval.NewEphemeralSigner()
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := approval.NewEphemeralSigner()
	if err != nil {
		t.Fatal(err)
	}
	request := []byte(`{"nonce":"00112233445566778899aabbccddeeff","op":"states"}`)
	trusted, digest := []string{bot.PublicKey()}, wire.RequestDigest(request)
	sealed := func(s *approval.Signer) (wire.Header, []byte) {
		t.Helper()
		msgs, err := wire.Seal(s.ForFleet(), 2, 1, request, "r1", []byte(`{"states":[]}`), 8<<10)
		if err != nil {
			t.Fatal(err)
		}
		head, data, _ := bytes.Cut(msgs[0], []byte{'\n'})
		var h wire.Header
		if err := json.Unmarshal(head, &h); err != nil {
			t.Fatal(err)
		}
		return h, data
	}
	genuine, data := sealed(bot)
	theirs, _ := sealed(stranger)
	asAudit, err := bot.ForAudit().Sign(append([]byte(audit.SigningContext), bytes.TrimPrefix(wire.SignedInput(genuine), []byte(wire.SigningContext))...))
	if err != nil {
		t.Fatal(err)
	}
	edit := func(h wire.Header, f func(*wire.Header)) wire.Header {
		h.Sig = bytes.Clone(h.Sig)
		f(&h)
		return h
	}
	garbage := bytes.Repeat([]byte("x"), 64)
	for _, tc := range []struct {
		name        string
		h           wire.Header
		want, inner error // wire's sentinel, seal's
	}{
		{"genuine", genuine, nil, nil},
		{"a stranger's own seal", theirs, wire.ErrUntrustedKey, seal.ErrUntrustedKey},
		{"a stranger's key over garbage", edit(genuine, func(h *wire.Header) { h.Key, h.Sig = stranger.PublicKey(), garbage }), wire.ErrUntrustedKey, seal.ErrUntrustedKey},
		{"a stranger's key over the bot's signature", edit(genuine, func(h *wire.Header) { h.Key = stranger.PublicKey() }), wire.ErrUntrustedKey, seal.ErrUntrustedKey},
		{"the bot's key over a stranger's signature", edit(theirs, func(h *wire.Header) { h.Key = bot.PublicKey() }), wire.ErrForged, seal.ErrForged},
		{"the bot's key over garbage", edit(genuine, func(h *wire.Header) { h.Sig = garbage }), wire.ErrForged, seal.ErrForged},
		{"a bit flipped", edit(genuine, func(h *wire.Header) { h.Sig[0] ^= 1 }), wire.ErrForged, seal.ErrForged},
		{"no signature, a stranger's key", edit(theirs, func(h *wire.Header) { h.Sig = nil }), wire.ErrForged, seal.ErrUnsealed},
		{"no key", edit(genuine, func(h *wire.Header) { h.Key = "" }), wire.ErrForged, seal.ErrUnsealed},
		{"the bot's signature of the header as an audit record", edit(genuine, func(h *wire.Header) { h.Sig = asAudit }), wire.ErrForged, seal.ErrForged},
		{"relayed as group 0's", edit(genuine, func(h *wire.Header) { h.Group = 0 }), wire.ErrForged, seal.ErrForged},
		{"another chunk's place", edit(genuine, func(h *wire.Header) { h.Index, h.Total = 1, 2 }), wire.ErrForged, seal.ErrForged},
	} {
		msg, err := wire.Marshal(wire.Chunk{Header: tc.h, Data: data})
		if err != nil {
			t.Fatal(err)
		}
		_, err = wire.Open(msg, trusted, 2, digest)
		other := wire.ErrForged
		if tc.want == wire.ErrForged {
			other = wire.ErrUntrustedKey
		}
		switch {
		case tc.want == nil:
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
		case !errors.Is(err, tc.want) || errors.Is(err, other) || !errors.Is(err, tc.inner):
			t.Errorf("%s: %v, want %v (and %v) only", tc.name, err, tc.want, tc.inner)
		}
	}
}
