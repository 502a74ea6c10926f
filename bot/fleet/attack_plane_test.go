package fleet_test

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/hcpbot/hcpbot/approval"
	"github.com/hcpbot/hcpbot/bot/chatops"
	"github.com/hcpbot/hcpbot/bot/command"
	"github.com/hcpbot/hcpbot/bot/fleet"
	"github.com/hcpbot/hcpbot/bot/fleet/wire"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
)

// clientTrusting is group 0's client trusting the bot's key and extra
// (approvals.trustedKeys), taking at most maxAnswer bytes per answer.
func (f *fixture) clientTrusting(extra []string, maxAnswer int, timeout time.Duration) *fleet.Client {
	f.t.Helper()
	c, err := fleet.NewClient(fleet.ClientConfig{Set: f.set, Self: 0, Bot: f.bots[0], Conn: f.connect(bus.BotRole()).NC,
		Trusted: append([]string{f.signer.PublicKey()}, extra...), Timeout: timeout, MaxAnswer: maxAnswer, Log: natstest.Logger(f.t)})
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}

// sealAs seals data as group 1's answer to request with key s, under a
// header of the sealer's choosing (total chunks claimed, one sent).
func sealAs(t *testing.T, s *approval.Signer, request, data []byte, answer string, total int) []byte {
	t.Helper()
	sum := sha256.Sum256(data)
	h := wire.Header{Count: 2, Group: 1, Request: wire.RequestDigest(request), Replica: "thief", Answer: answer,
		Total: total, Sum: hex.EncodeToString(sum[:]), Key: s.PublicKey()}
	sig, err := s.ForFleet().Sign(signedInput(h))
	if err != nil {
		t.Error(err)
	}
	h.Sig = sig
	msg, err := wire.Marshal(wire.Chunk{Header: h, Data: data})
	if err != nil {
		t.Error(err)
	}
	return msg
}

// Attacker 4: a rotated signing key, stolen, still listed in
// approvals.trustedKeys (the rotation keeps it there for the audit
// trail), with the bot's NATS seed. Group 1 is down; the thief answers
// for it.
//
//   - A chunk claiming 2^40 or 2^26 chunks: before the fix the client's
//     assembly allocated the slots the header claimed, and the bot died
//     ("fatal error: runtime: out of memory", not a recoverable panic)
//     from one 64-byte chunk. Now refused before allocation: the group is
//     named, the bot keeps answering.
//   - A gzip bomb (64 MB of zeros in 64 KB, a gob message claiming
//     512 MB), sealed: inflated no further than MaxAnswer (1 MB here).
//   - A forged diagnosis with a fix, sealed: shown. That is the
//     residual (docs/security.md): a key trusted for the past's seals
//     seals fleet answers now. A client that trusts only the bot's
//     current key refuses it.
func TestI30AttackOldTrustedKeyOnTheFleet(t *testing.T) {
	f := newFixture(t, 4)
	thief, err := approval.NewEphemeralSigner()
	if err != nil {
		t.Fatal(err)
	}
	f.servers[1].Stop()
	const maxAnswer = 1 << 20
	h0 := &command.Handler{Bot: f.clientTrusting([]string{thief.PublicKey()}, maxAnswer, time.Second)}
	lie := forged(t)

	for _, total := range []int{1 << 40, 1 << 26} {
		f.rogue(t, func(_ *nats.Conn, request []byte) [][]byte {
			return [][]byte{sealAs(t, thief, request, lie[:64], "ab", total)}
		})
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		got := ask(h0, chatops.Status{})
		runtime.ReadMemStats(&after)
		if !strings.Contains(got, "group 1 of 2 did not answer") || strings.Contains(got, "FORGED") {
			t.Errorf("a chunk claiming %d chunks: status\n%s", total, got)
		}
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
			t.Errorf("a chunk claiming %d chunks: %d MB allocated", total, grew>>20)
		}
	}

	// A gob message whose count claims 512 MB, then 64 MB of zeros.
	var bomb bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&bomb, gzip.BestCompression)
	_, _ = zw.Write([]byte{0xfc, 0x20, 0x00, 0x00, 0x00}) // gob uint: 4 bytes, 1<<29
	zeros := make([]byte, 1<<20)
	for range 64 {
		_, _ = zw.Write(zeros)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("bomb: %d bytes compressed", bomb.Len())
	f.rogue(t, func(_ *nats.Conn, request []byte) [][]byte {
		chunks, err := wire.Seal(thief.ForFleet(), 2, 1, request, "thief", bomb.Bytes(), int(f.conns[0].NC.MaxPayload()))
		if err != nil {
			t.Error(err)
		}
		return chunks
	})
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	got := ask(h0, chatops.Status{})
	runtime.ReadMemStats(&after)
	if !strings.Contains(got, "group 1 of 2 did not answer") {
		t.Errorf("a gzip bomb: status\n%s", got)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 32<<20 {
		t.Errorf("a gzip bomb of 64 MB inflated, MaxAnswer %d: %d MB allocated", maxAnswer, grew>>20)
	}

	// The residual: a forged diagnosis with its fix, sealed by the old
	// key, is believed by a client that trusts approvals.trustedKeys.
	f.rogue(t, func(_ *nats.Conn, request []byte) [][]byte {
		chunks, err := wire.Seal(thief.ForFleet(), 2, 1, request, "thief", lie, int(f.conns[0].NC.MaxPayload()))
		if err != nil {
			t.Error(err)
		}
		return chunks
	})
	if got := ask(h0, diagnoseCmd(1)); !strings.Contains(got, "FORGED") {
		t.Errorf("the residual changed: an old trusted key's answer is no longer shown; update docs/security.md:\n%s", got)
	}
	current := &command.Handler{Bot: f.clientTrusting(nil, maxAnswer, time.Second)}
	if got := ask(current, diagnoseCmd(1)); strings.Contains(got, "FORGED") || !strings.Contains(got, "group 1 of 2 did not answer") {
		t.Errorf("a client trusting the current key only:\n%s", got)
	}
}
