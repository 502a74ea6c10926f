package checkpoint_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/hcpbot/hcpbot/bot/checkpoint"
	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
)

// testSigner is a checkpoint.Signer on a key made for the test, as the
// bot's approval.Signer.ForCheckpoints is on its signing key.
type testSigner struct{ kp nkeys.KeyPair }

func newSigner(t *testing.T) testSigner {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	return testSigner{kp}
}

func (s testSigner) PublicKey() string {
	pub, _ := s.kp.PublicKey()
	return pub
}

func (s testSigner) Sign(input []byte) ([]byte, error) { return s.kp.Sign(input) }

func openStore(t *testing.T) (*checkpoint.Store, jetstream.KeyValue) {
	t.Helper()
	s, kv, _ := openSigned(t)
	return s, kv
}

// openSigned is openStore returning the store's signer too.
func openSigned(t *testing.T) (*checkpoint.Store, jetstream.KeyValue, testSigner) {
	t.Helper()
	srv := natstest.RunServer(t)
	conn, err := bus.Connect(context.Background(), bus.Config{URLs: []string{srv.ClientURL()}}, natstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	kv, err := bus.EnsureKV(context.Background(), conn.JS, bus.CheckpointsKV(0))
	if err != nil {
		t.Fatal(err)
	}
	signer := newSigner(t)
	s, err := checkpoint.New(kv, signer)
	if err != nil {
		t.Fatal(err)
	}
	return s, kv, signer
}

func content(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.UintN(256))
	}
	return b
}

func save(t *testing.T, s *checkpoint.Store, seq uint64, body []byte) checkpoint.Manifest {
	t.Helper()
	m, err := s.Save(context.Background(), "bot", checkpoint.Manifest{Format: checkpoint.Format, Build: "test", Seq: seq, Written: time.Now()},
		func(w io.Writer) error {
			// Written in odd pieces: chunks do not follow the writes.
			for len(body) > 0 {
				n := min(len(body), 70_001)
				if _, err := w.Write(body[:n]); err != nil {
					return err
				}
				body = body[n:]
			}
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A checkpoint over NATS's message limit is stored in chunks and read back
// whole; a newer one replaces it and its chunks are purged.
func TestSaveLoad(t *testing.T) {
	ctx := context.Background()
	s, kv := openStore(t)
	if _, _, err := s.Load(ctx, "bot"); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Fatalf("empty bucket: %v, want ErrNotFound", err)
	}
	first := content(3*checkpoint.ChunkSize+12345, 1)
	m1 := save(t, s, 10, first)
	if m1.Chunks != 4 || m1.Size != int64(len(first)) {
		t.Errorf("manifest: %d chunks, %d bytes; want 4, %d", m1.Chunks, m1.Size, len(first))
	}
	m, got, err := s.Load(ctx, "bot")
	if err != nil || !bytes.Equal(got, first) || m.Seq != 10 || m.Build != "test" {
		t.Fatalf("load: seq %d build %q, %d bytes, %v", m.Seq, m.Build, len(got), err)
	}
	second := content(checkpoint.ChunkSize/2, 2)
	save(t, s, 20, second)
	m, got, err = s.Load(ctx, "bot")
	if err != nil || !bytes.Equal(got, second) || m.Seq != 20 {
		t.Fatalf("load after replace: seq %d, %d bytes, %v", m.Seq, len(got), err)
	}
	if _, err := kv.Get(ctx, "bot."+m1.Generation+".0"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("the replaced checkpoint's chunk: %v, want purged", err)
	}
}

// What Load refuses, each with the error the bot replays in full on.
func TestLoadRefuses(t *testing.T) {
	ctx := context.Background()
	s, kv, signer := openSigned(t)
	body := content(2*checkpoint.ChunkSize+7, 3)
	m := save(t, s, 5, body)
	manifest, err := kv.Get(ctx, "bot")
	if err != nil {
		t.Fatal(err)
	}
	chunk := func(i int) string { return "bot." + m.Generation + "." + strconv.Itoa(i) }
	pristine := map[string][]byte{"bot": manifest.Value()}
	for i := range m.Chunks {
		e, err := kv.Get(ctx, chunk(i))
		if err != nil {
			t.Fatal(err)
		}
		pristine[chunk(i)] = e.Value()
	}
	restore := func(t *testing.T) {
		for k, v := range pristine {
			if _, err := kv.Put(ctx, k, v); err != nil {
				t.Fatal(err)
			}
		}
	}
	withManifest := func(edit func(*checkpoint.Manifest)) func(t *testing.T) {
		return func(t *testing.T) {
			mm := m
			edit(&mm)
			// Sealed with the bot's key: what Load refuses here is
			// what the manifest says, not who wrote it.
			data, err := checkpoint.SealManifest(signer, "bot", mm)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := kv.Put(ctx, "bot", data); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []struct {
		name    string
		corrupt func(t *testing.T)
		want    error
	}{
		{"a byte flipped in a chunk", func(t *testing.T) {
			v := bytes.Clone(pristine[chunk(1)])
			v[len(v)/2] ^= 0x20
			if _, err := kv.Put(ctx, chunk(1), v); err != nil {
				t.Fatal(err)
			}
		}, checkpoint.ErrCorrupt},
		{"a chunk truncated", func(t *testing.T) {
			if _, err := kv.Put(ctx, chunk(2), pristine[chunk(2)][:3]); err != nil {
				t.Fatal(err)
			}
		}, checkpoint.ErrCorrupt},
		{"a chunk missing", func(t *testing.T) {
			if err := kv.Purge(ctx, chunk(1)); err != nil {
				t.Fatal(err)
			}
		}, checkpoint.ErrCorrupt},
		{"a chunk longer", func(t *testing.T) {
			if _, err := kv.Put(ctx, chunk(2), append(bytes.Clone(pristine[chunk(2)]), 0)); err != nil {
				t.Fatal(err)
			}
		}, checkpoint.ErrCorrupt},
		{"the manifest's digest", withManifest(func(mm *checkpoint.Manifest) { mm.SHA256 = "00" + mm.SHA256[2:] }), checkpoint.ErrCorrupt},
		{"the manifest's size", withManifest(func(mm *checkpoint.Manifest) { mm.Size = 1 << 40 }), checkpoint.ErrCorrupt},
		{"the manifest not JSON", func(t *testing.T) {
			if _, err := kv.Put(ctx, "bot", []byte("{")); err != nil {
				t.Fatal(err)
			}
		}, checkpoint.ErrForged},
		{"another format", withManifest(func(mm *checkpoint.Manifest) { mm.Format = checkpoint.Format + 1 }), checkpoint.ErrFormat},
	} {
		t.Run(tc.name, func(t *testing.T) {
			restore(t)
			if _, got, err := s.Load(ctx, "bot"); err != nil || !bytes.Equal(got, body) {
				t.Fatalf("pristine: %d bytes, %v", len(got), err)
			}
			tc.corrupt(t)
			_, got, err := s.Load(ctx, "bot")
			if !errors.Is(err, tc.want) || got != nil {
				t.Errorf("load: %d bytes, %v; want none and %v", len(got), err, tc.want)
			}
		})
	}
}
