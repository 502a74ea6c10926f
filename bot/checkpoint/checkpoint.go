// Package checkpoint stores the bot's checkpoints in NATS: the bot's state
// at one sequence of the events stream, so that a starting replica
// restores it and replays only the events after it instead of the whole
// stream (docs/capacity.md, "Cold start": 72 h of events are 1,000,000 at
// 2,000 hosted clusters; an hourly checkpoint leaves at most an hour's).
//
// # What is in it
//
// The bot (bot/state.go) writes, with encoding/gob: the model
// (diagnose.ModelCheckpoint: every Cluster's facts, tombstones and their
// stamps), the incidents (current, pending resolution and storm members)
// with their keys, channels, diagnoses, silences as last seen, remedies,
// timeline steps and notification state (whether each has a Slack
// message, what it last showed), the storms with their members, the
// deleted clusters waiting to be forgotten, and the stream sequence of
// the last event applied. Incident keys derive from the time an incident
// opened, which a replay from a later point cannot know: hence the
// incidents themselves, not just the model. This package sees bytes only.
//
// # Format and where it is
//
// One bucket, bus.CheckpointsBucket, which only the bot's NATS user may
// read or write (bus.BotPermissions, configs/deploy/nats/nats.conf). A
// checkpoint named name (one per bot group: "bot") is a manifest under
// key name, JSON (Manifest: format version, the build that wrote it, the
// stream and its creation time, the sequence, when written, size, chunk
// count, SHA-256 of the content), and the content in chunks of
// ChunkSize under name.<generation>.<i>. A checkpoint of 2,000 clusters
// is tens of MB: over NATS's 1 MiB message limit, hence chunks. The
// manifest is written after every chunk, so a reader never finds a
// manifest whose chunks are not all there; the previous generation's
// chunks are purged after it (KV purge markers, which the bucket's TTL
// ages out). A reader that loses the race with that purge reads the
// manifest again.
//
// # When it is written
//
// By the leader, once it has replayed the stream, every interval
// (bot.Config.CheckpointEvery, default hourly) and at a clean shutdown.
// A follower writes none: its state is the leader's, and two writers
// would only race for the manifest.
//
// # Who may write one: the seal
//
// The checkpoint is the bot's whole state, and a record the bot reads at
// start: whoever could write one would choose what the bot believes —
// incidents and diagnoses nobody diagnosed (with the fix an approver is
// asked to press), outages hidden, remedies and silences as shown. The
// bucket's permission is not enough: a stolen bot NATS seed writes it,
// and that seed cannot publish an event (docs/security.md). So the
// manifest is sealed with the bot's action-signing key (Signer, under
// SigningContext: the signature passes for no proposal, decision, order
// or audit record, nor they for it), bound to the checkpoint's name, and
// Load verifies the seal (package seal) against the trusted keys before
// it believes any field of the manifest, reads a chunk or allocates for
// one (ErrForged, ErrUntrustedKey). The manifest names the content's size
// and SHA-256, so the seal covers the content too. A bot without a
// signing key writes and reads no checkpoint.
//
// # How it is verified, and what a mismatch does
//
// Load reads the manifest, verifies its seal, refuses a format it does
// not know (ErrFormat) before reading a chunk, reads every chunk and
// checks the size and the SHA-256 of the whole (ErrCorrupt); the bot then checks
// that the stream is the one the checkpoint was taken from (its creation
// time) and that no event after the checkpoint's sequence has aged out
// of it. Anything else — a missing chunk, a truncated content, bytes
// flipped, a checkpoint of another format or stream, a gob that does not
// decode — is logged as a warning and the bot replays the whole stream,
// as it does without a checkpoint: a checkpoint can make a start faster,
// never different. The content is decoded only once its digest matched.
package checkpoint

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hcpbot/hcpbot/seal"
)

// Format is the version of what the bot writes in a checkpoint. Bump it
// whenever what a field means changes: a checkpoint of another format is
// ignored (the bot replays in full), never read with today's meaning.
const Format = 1

// ChunkSize is the size of one chunk: well under NATS's default 1 MiB
// max_payload with the KV headers.
const ChunkSize = 512 << 10

// maxSize bounds the size a manifest may claim before Load allocates it.
const maxSize = 4 << 30

// Errors of Load.
var (
	// ErrNotFound: no checkpoint of that name.
	ErrNotFound = errors.New("checkpoint: none stored")
	// ErrFormat: the checkpoint is of another format version.
	ErrFormat = errors.New("checkpoint: foreign format version")
	// ErrCorrupt: a chunk is missing, or the content does not match the
	// manifest's size or digest.
	ErrCorrupt = errors.New("checkpoint: corrupt")
	// ErrForged: the manifest is unsealed, or its seal does not verify
	// (written without the bot's key, or for another checkpoint name).
	ErrForged = errors.New("checkpoint: seal does not verify")
	// ErrUntrustedKey: sealed by a key not trusted here (another
	// installation's, or one rotated out of approvals.trustedKeys).
	ErrUntrustedKey = errors.New("checkpoint: sealed by a key that is not trusted")
)

// SigningContext starts what a Signer signs: the checkpoint's name, a
// newline and the manifest's JSON follow it.
const SigningContext = "hcpbot-checkpoint-v1\n"

// Signer seals the manifests a Store writes. The bot passes its
// action-signing key (approval.Signer.ForCheckpoints), which signs only
// what starts with SigningContext.
type Signer = seal.Signer

// sealed is what the manifest key holds: the manifest's JSON as signed,
// the key and the signature. The bytes verified are the bytes decoded.
type sealed struct {
	Manifest json.RawMessage `json:"manifest"`
	Key      string          `json:"key"`
	Sig      []byte          `json:"sig"`
}

// signedBody is what the seal covers after SigningContext: the
// checkpoint's name binds the manifest to it.
func signedBody(name string, manifest []byte) []byte {
	return append([]byte(name+"\n"), manifest...)
}

// sentinels are Load's errors for what seal.Verify finds.
var sentinels = seal.Sentinels{Forged: ErrForged, UntrustedKey: ErrUntrustedKey}

// SealManifest is the value Save stores under name for m, sealed by
// signer. Tests use it to write a manifest the bot's key vouches for.
func SealManifest(signer Signer, name string, m Manifest) ([]byte, error) {
	body, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: manifest: %w", name, err)
	}
	sig, err := seal.Sign(signer, SigningContext, signedBody(name, body))
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: seal: %w", name, err)
	}
	return json.Marshal(sealed{Manifest: body, Key: signer.PublicKey(), Sig: sig})
}

// open verifies the seal of a manifest key's value and decodes the
// manifest it vouches for.
func open(name string, value []byte, trusted []string) (Manifest, error) {
	var env sealed
	if err := json.Unmarshal(value, &env); err != nil {
		return Manifest{}, fmt.Errorf("%w: %s: not a sealed manifest: %w", ErrForged, name, err)
	}
	if len(env.Manifest) == 0 {
		return Manifest{}, fmt.Errorf("%w: %s: unsealed", ErrForged, name)
	}
	if err := seal.Verify(trusted, env.Key, SigningContext, signedBody(name, env.Manifest), env.Sig); err != nil {
		return Manifest{}, fmt.Errorf("%w: %s: %w", sentinels.Of(err), name, err)
	}
	// Only the bot's key made these bytes: a field this build does not
	// know is a newer build's, whose Format says whether to read it.
	var m Manifest
	if err := json.Unmarshal(env.Manifest, &m); err != nil {
		return Manifest{}, fmt.Errorf("%w: %s: sealed manifest does not decode: %w", ErrCorrupt, name, err)
	}
	return m, nil
}

// Manifest describes a stored checkpoint.
type Manifest struct {
	Format int `json:"format"`
	// Build is the build that wrote it (internal/version.String()).
	Build string `json:"build"`
	// Stream is the events stream and StreamCreated its creation time:
	// a stream deleted and created again starts its sequences anew.
	Stream        string    `json:"stream"`
	StreamCreated time.Time `json:"streamCreated"`
	// Seq is the stream sequence of the last event the state includes.
	Seq     uint64    `json:"seq"`
	Written time.Time `json:"written"`
	// Generation names the chunks; Size, Chunks and SHA256 (hex) are the
	// content's.
	Generation string `json:"generation"`
	Size       int64  `json:"size"`
	Chunks     int    `json:"chunks"`
	SHA256     string `json:"sha256"`
}

// Store reads and writes the checkpoints of one bucket.
type Store struct {
	kv      jetstream.KeyValue
	signer  Signer
	trusted []string
}

// New returns a Store on kv, the bus.CheckpointsKV bucket, sealing what
// it writes with signer and reading only what signer's key or one of
// trusted sealed (approvals.trustedKeys: the keys of before a rotation).
func New(kv jetstream.KeyValue, signer Signer, trusted ...string) (*Store, error) {
	if signer == nil {
		return nil, errors.New("checkpoint: no signing key: a checkpoint nobody can verify is a record anyone with the bucket writes")
	}
	return &Store{kv: kv, signer: signer, trusted: append([]string{signer.PublicKey()}, trusted...)}, nil
}

func chunkKey(name, gen string, i int) string { return name + "." + gen + "." + strconv.Itoa(i) }

// Save writes the checkpoint name: write writes the content, m describes
// it (Format, Build, Stream, StreamCreated, Seq, Written; the rest is
// Save's). It returns the manifest stored. The content is streamed to
// the chunks as write produces it, not held whole.
func (s *Store) Save(ctx context.Context, name string, m Manifest, write func(io.Writer) error) (Manifest, error) {
	prev, _ := s.manifest(ctx, name) // its chunks go once the new one is in place
	m.Generation = strconv.FormatUint(m.Seq, 10) + "-" + strconv.FormatInt(m.Written.UnixNano(), 36)
	w := &chunkWriter{ctx: ctx, kv: s.kv, name: name, gen: m.Generation, hash: sha256.New(), buf: make([]byte, 0, ChunkSize)}
	err := write(w)
	if err == nil {
		err = w.flush()
	}
	if err != nil {
		s.purge(ctx, name, m.Generation, w.chunks+1)
		return Manifest{}, fmt.Errorf("checkpoint %s: write: %w", name, err)
	}
	m.Size, m.Chunks, m.SHA256 = w.size, w.chunks, hex.EncodeToString(w.hash.Sum(nil))
	data, err := SealManifest(s.signer, name, m)
	if err != nil {
		s.purge(ctx, name, m.Generation, w.chunks)
		return Manifest{}, err
	}
	if _, err := s.kv.Put(ctx, name, data); err != nil {
		s.purge(ctx, name, m.Generation, w.chunks)
		return Manifest{}, fmt.Errorf("checkpoint %s: put manifest: %w", name, err)
	}
	if prev.Generation != "" && prev.Generation != m.Generation {
		s.purge(ctx, name, prev.Generation, prev.Chunks)
	}
	return m, nil
}

// purge removes the chunks of a generation, as far as it can: what
// remains ages out with the bucket's TTL.
func (s *Store) purge(ctx context.Context, name, gen string, chunks int) {
	for i := range chunks {
		if err := s.kv.Purge(ctx, chunkKey(name, gen, i)); err != nil && ctx.Err() != nil {
			return
		}
	}
}

// chunkWriter cuts what is written into ChunkSize values.
type chunkWriter struct {
	ctx       context.Context
	kv        jetstream.KeyValue
	name, gen string
	hash      hash.Hash
	buf       []byte
	size      int64
	chunks    int
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		k := min(len(p), ChunkSize-len(w.buf))
		w.buf = append(w.buf, p[:k]...)
		p = p[k:]
		if len(w.buf) == ChunkSize {
			if err := w.flush(); err != nil {
				return n - len(p), err
			}
		}
	}
	return n, nil
}

func (w *chunkWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	if _, err := w.kv.Put(w.ctx, chunkKey(w.name, w.gen, w.chunks), w.buf); err != nil {
		return fmt.Errorf("chunk %d: %w", w.chunks, err)
	}
	w.hash.Write(w.buf)
	w.size += int64(len(w.buf))
	w.chunks++
	w.buf = w.buf[:0]
	return nil
}

// manifest reads the manifest of name and verifies its seal: nothing of
// it is believed, not even the size to allocate, before that.
func (s *Store) manifest(ctx context.Context, name string) (Manifest, error) {
	e, err := s.kv.Get(ctx, name)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Manifest{}, ErrNotFound
	}
	if err != nil {
		return Manifest{}, fmt.Errorf("checkpoint %s: manifest: %w", name, err)
	}
	return open(name, e.Value(), s.trusted)
}

// Load reads the checkpoint name and returns its manifest and content,
// verified: ErrNotFound, ErrForged, ErrUntrustedKey, ErrFormat (the
// manifest is returned, to say which) and ErrCorrupt are the reasons to
// replay in full; other errors are NATS's.
func (s *Store) Load(ctx context.Context, name string) (Manifest, []byte, error) {
	m, body, err := s.load(ctx, name)
	if errors.Is(err, errRaced) {
		// A newer checkpoint replaced the one read meanwhile.
		m, body, err = s.load(ctx, name)
	}
	if errors.Is(err, errRaced) {
		err = fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return m, body, err
}

// errRaced: a chunk of the manifest read is gone, and the manifest
// changed since.
var errRaced = errors.New("checkpoint replaced while read")

func (s *Store) load(ctx context.Context, name string) (Manifest, []byte, error) {
	m, err := s.manifest(ctx, name)
	if err != nil {
		return Manifest{}, nil, err
	}
	if m.Format != Format {
		return m, nil, fmt.Errorf("%w: %s is format %d (build %s), this build reads %d", ErrFormat, name, m.Format, m.Build, Format)
	}
	if m.Size < 0 || m.Size > maxSize || m.Chunks < 0 || int64(m.Chunks) > m.Size {
		return m, nil, fmt.Errorf("%w: %s: manifest claims %d bytes in %d chunks", ErrCorrupt, name, m.Size, m.Chunks)
	}
	buf := bytes.NewBuffer(make([]byte, 0, m.Size))
	for i := range m.Chunks {
		e, err := s.kv.Get(ctx, chunkKey(name, m.Generation, i))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			if now, _ := s.manifest(ctx, name); now.Generation != m.Generation {
				return m, nil, errRaced
			}
			return m, nil, fmt.Errorf("%w: %s: chunk %d of %d missing", ErrCorrupt, name, i, m.Chunks)
		}
		if err != nil {
			return m, nil, fmt.Errorf("checkpoint %s: chunk %d: %w", name, i, err)
		}
		if int64(buf.Len()+len(e.Value())) > m.Size {
			return m, nil, fmt.Errorf("%w: %s: more than the %d bytes of the manifest", ErrCorrupt, name, m.Size)
		}
		buf.Write(e.Value())
	}
	body := buf.Bytes()
	if int64(len(body)) != m.Size {
		return m, nil, fmt.Errorf("%w: %s: %d bytes, manifest says %d", ErrCorrupt, name, len(body), m.Size)
	}
	sum := sha256.Sum256(body)
	if hex.EncodeToString(sum[:]) != m.SHA256 {
		return m, nil, fmt.Errorf("%w: %s: SHA-256 does not match the manifest", ErrCorrupt, name)
	}
	return m, body, nil
}
