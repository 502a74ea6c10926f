package checkpoint_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hcpbot/hcpbot/bot/checkpoint"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
)

// Attacks on the checkpoint store (issue 30), each naming its attacker of
// docs/security.md. The checkpoint is a record the bot reads at start and
// believes: only a seal by the bot's key may make it believe one.

// botUserStore is the bot's checkpoint store, on a key made for the test,
// and the checkpoints bucket as the bot's NATS user holds it on the
// product's embedded server (bus.StartLocal: the shipped permission
// split): the bot and whoever stole its NATS seed hold the same rights.
func botUserStore(t *testing.T) (*checkpoint.Store, jetstream.KeyValue, testSigner) {
	t.Helper()
	ctx := context.Background()
	l, err := bus.StartLocal(ctx, bus.LocalConfig{StoreDir: t.TempDir(), Agents: []string{"mgmt-1"}}, natstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Shutdown)
	conn, err := l.Connect(ctx, bus.BotRole(), bus.Config{Name: t.Name()}, natstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	kv, err := bus.EnsureKV(ctx, conn.JS, bus.CheckpointsKV(0))
	if err != nil {
		t.Fatal(err)
	}
	signer := newSigner(t)
	store, err := checkpoint.New(kv, signer)
	if err != nil {
		t.Fatal(err)
	}
	return store, kv, signer
}

// plant writes a checkpoint under name as the bucket's writer can, with
// no key: content in one chunk of generation gen and manifest as the
// manifest key's value.
func plant(t *testing.T, kv jetstream.KeyValue, name, gen string, content, manifest []byte) {
	t.Helper()
	ctx := context.Background()
	if content != nil {
		if _, err := kv.Put(ctx, name+"."+gen+".0", content); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := kv.Put(ctx, name, manifest); err != nil {
		t.Fatal(err)
	}
}

// describe is a manifest of content in one chunk of gen, with its true
// size and digest: everything Load checked before the seal.
func describe(seq uint64, gen string, content []byte) checkpoint.Manifest {
	sum := sha256.Sum256(content)
	return checkpoint.Manifest{Format: checkpoint.Format, Build: "forged", Stream: "HCPBOT_EVENTS", Seq: seq,
		Written: time.Now().UTC(), Generation: gen, Size: int64(len(content)), Chunks: 1, SHA256: hex.EncodeToString(sum[:])}
}

// The bot's NATS user (its seed stolen, not the signing key) writes the
// checkpoints bucket: the permission split cannot tell it from the bot.
// Before the seal, a manifest naming the size and SHA-256 of content it
// planted was a checkpoint the bot restored — its whole state, of the
// attacker's choosing. Each way of passing one off is refused before any
// chunk is read or allocated for.
func TestI30AttackBotSeedForgesCheckpoint(t *testing.T) {
	ctx := context.Background()
	store, kv, bot := botUserStore(t)
	forged := []byte("the state the attacker wants the bot to start from")
	genuine := save(t, store, 7, []byte("the state the bot wrote"))
	raw, err := kv.Get(ctx, "bot")
	if err != nil {
		t.Fatal(err)
	}
	var env struct {
		Manifest json.RawMessage `json:"manifest"`
		Key      string          `json:"key"`
		Sig      []byte          `json:"sig"`
	}
	if err := json.Unmarshal(raw.Value(), &env); err != nil {
		t.Fatalf("the manifest key: %v", err)
	}
	other, err := checkpoint.New(kv, bot)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Save(ctx, "other-group", checkpoint.Manifest{Format: checkpoint.Format, Seq: 3, Written: time.Now()},
		func(w io.Writer) error { _, err := w.Write(forged); return err }); err != nil {
		t.Fatal(err)
	}
	otherRaw, err := kv.Get(ctx, "other-group")
	if err != nil {
		t.Fatal(err)
	}
	attacker := newSigner(t) // a key of the attacker's own: nobody trusts it

	for _, tc := range []struct {
		name string
		do   func(t *testing.T)
		want error
	}{
		{"a plain manifest, as before the seal, naming the planted content's size and digest", func(t *testing.T) {
			data, _ := json.Marshal(describe(9, "g1", forged))
			plant(t, kv, "bot", "g1", forged, data)
		}, checkpoint.ErrForged},
		{"sealed with the attacker's own key", func(t *testing.T) {
			data, err := checkpoint.SealManifest(attacker, "bot", describe(9, "g2", forged))
			if err != nil {
				t.Fatal(err)
			}
			plant(t, kv, "bot", "g2", forged, data)
		}, checkpoint.ErrUntrustedKey},
		{"the bot's seal kept, the manifest rewritten to the planted content", func(t *testing.T) {
			m := describe(genuine.Seq, genuine.Generation+"x", forged)
			body, _ := json.Marshal(m)
			data, _ := json.Marshal(map[string]any{"manifest": json.RawMessage(body), "key": env.Key, "sig": env.Sig})
			plant(t, kv, "bot", m.Generation, forged, data)
		}, checkpoint.ErrForged},
		{"the bot's seal kept, one byte of the sealed manifest changed (the sequence)", func(t *testing.T) {
			body := bytes.Replace(env.Manifest, []byte(`"seq":7`), []byte(`"seq":8`), 1)
			if bytes.Equal(body, env.Manifest) {
				t.Fatalf("no sequence in %s", env.Manifest)
			}
			data, _ := json.Marshal(map[string]any{"manifest": json.RawMessage(body), "key": env.Key, "sig": env.Sig})
			plant(t, kv, "bot", "", nil, data)
		}, checkpoint.ErrForged},
		{"another checkpoint's genuine seal copied under this name", func(t *testing.T) {
			plant(t, kv, "bot", "", nil, otherRaw.Value())
		}, checkpoint.ErrForged},
		{"a manifest claiming the largest size in chunks that are not there (refused unread)", func(t *testing.T) {
			m := describe(9, "huge", forged)
			m.Size, m.Chunks = 4<<30, 8192
			data, _ := json.Marshal(m)
			plant(t, kv, "bot", "", nil, data)
		}, checkpoint.ErrForged},
		{"the bot's own key as the key, no signature", func(t *testing.T) {
			body, _ := json.Marshal(describe(9, "g3", forged))
			data, _ := json.Marshal(map[string]any{"manifest": json.RawMessage(body), "key": bot.PublicKey()})
			plant(t, kv, "bot", "g3", forged, data)
		}, checkpoint.ErrForged},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.do(t)
			m, got, err := store.Load(ctx, "bot")
			if !errors.Is(err, tc.want) || got != nil {
				t.Fatalf("load: %d bytes (seq %d), %v; want nothing and %v", len(got), m.Seq, err, tc.want)
			}
		})
	}

	// What the seal does not stop: the bucket's writer may put back a
	// genuine checkpoint of before (it read it while it was current). It
	// is the bot's own state at an earlier sequence: the bot replays the
	// events after it, and refuses it once those aged out of the stream
	// (bot.TestI30AttackBotSeedPlantsCheckpoint covers the restore).
	old := save(t, store, 20, []byte("an earlier genuine state"))
	oldManifest, err := kv.Get(ctx, "bot")
	if err != nil {
		t.Fatal(err)
	}
	oldChunk, err := kv.Get(ctx, "bot."+old.Generation+".0")
	if err != nil {
		t.Fatal(err)
	}
	save(t, store, 30, []byte("the newest genuine state"))
	plant(t, kv, "bot", old.Generation, oldChunk.Value(), oldManifest.Value())
	if m, got, err := store.Load(ctx, "bot"); err != nil || m.Seq != 20 || string(got) != "an earlier genuine state" {
		t.Errorf("an earlier genuine checkpoint put back: seq %d, %q, %v; want it read as what it is", m.Seq, got, err)
	}
}

// Whoever holds the signing key but no NATS user of the bot cannot write
// the bucket; the key's other uses cannot be turned into a checkpoint:
// a checkpoint's seal is over SigningContext and the name, so a
// signature the key made for anything else (it signs proposals,
// decisions, orders, audit records, each under its own context) never
// verifies as one.
func TestI30AttackSignatureOfAnotherKindIsNoCheckpoint(t *testing.T) {
	ctx := context.Background()
	store, kv, bot := botUserStore(t)
	m := describe(4, "g", []byte("state"))
	body, _ := json.Marshal(m)
	for i, ctxString := range []string{"hcpbot-audit-v1\n", "hcpbot-proposal-v2\n", "hcpbot-decision-v1\n", "hcpbot-request-v2\n", ""} {
		sig, err := bot.Sign(append([]byte(ctxString), body...))
		if err != nil {
			t.Fatal(err)
		}
		data, _ := json.Marshal(map[string]any{"manifest": json.RawMessage(body), "key": bot.PublicKey(), "sig": sig})
		plant(t, kv, "bot", "g", []byte("state"), data)
		if _, got, err := store.Load(ctx, "bot"); !errors.Is(err, checkpoint.ErrForged) || got != nil {
			t.Errorf("signature %d (context %q): %d bytes, %v; want ErrForged", i, ctxString, len(got), err)
		}
	}
}
