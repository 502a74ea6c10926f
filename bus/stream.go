package bus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// StreamSpec is the part of a stream's configuration hcpbot decides. Streams
// are always file-backed: events must survive a restart.
type StreamSpec struct {
	Name        string
	Description string
	Subjects    []string
	// Retention: jetstream.LimitsPolicy (default), WorkQueuePolicy or
	// InterestPolicy.
	Retention jetstream.RetentionPolicy
	MaxAge    time.Duration // 0 keeps messages forever
	MaxBytes  int64         // 0 is unlimited
	// Replicas: 1 (default) standalone, 3 in a cluster.
	Replicas int
	// Duplicates is how long Nats-Msg-Id values are remembered for
	// de-duplication; 0 is the server's default (2m, capped at MaxAge).
	Duplicates time.Duration
	// Discard: jetstream.DiscardOld (default) or DiscardNew when full.
	Discard jetstream.DiscardPolicy
	// DenyDelete and DenyPurge make the stream append-only: once set, the
	// server refuses to clear them.
	DenyDelete, DenyPurge bool
}

// EnsureStream creates the stream while it is absent and returns it. An
// existing stream keeps its settings: no hcpbot user may update a stream
// (an update can add a source or a mirror that writes onto subjects the
// user may not publish to, past every permission), so what differs from
// spec (StreamDrift) is logged as a warning with zerolog.Ctx(ctx) for an
// operator with admin credentials, and the process goes on. A stream that
// carries what hcpbot never configures — sources, a mirror, republishing,
// a subject transform — is refused (ErrForeignStream): it may hold
// messages nobody allowed. Every process may call it at start-up, several
// replicas at once; it retries as CreateStream does.
func EnsureStream(ctx context.Context, js jetstream.StreamManager, spec StreamSpec) (jetstream.Stream, error) {
	s, err := CreateStream(ctx, js, spec)
	if err != nil {
		return nil, err
	}
	if err := Vet(s.CachedInfo().Config); err != nil {
		return nil, fmt.Errorf("bus: stream %q: %w", spec.Name, err)
	}
	warnDrift(ctx, "stream", spec.Name, StreamDrift(s.CachedInfo().Config, spec))
	return s, nil
}

// ErrForeignStream: a stream hcpbot uses carries what hcpbot never
// configures (sources, a mirror, republishing, a subject transform).
var ErrForeignStream = errors.New("configured outside hcpbot")

// Vet refuses a stream configuration with what hcpbot never sets: each of
// these makes the server write onto the stream's subjects, or from them
// elsewhere, whatever the users' permissions say.
func Vet(cfg jetstream.StreamConfig) error {
	var what []string
	if len(cfg.Sources) > 0 {
		what = append(what, "sources")
	}
	if cfg.Mirror != nil {
		what = append(what, "a mirror")
	}
	if cfg.RePublish != nil {
		what = append(what, "republishing")
	}
	if cfg.SubjectTransform != nil {
		what = append(what, "a subject transform")
	}
	if len(what) == 0 {
		return nil
	}
	return fmt.Errorf("%w: it has %s; an operator must remove them (and check what they wrote)", ErrForeignStream, strings.Join(what, ", "))
}

// warnDrift tells the operator what differs from the configuration.
func warnDrift(ctx context.Context, kind, name string, drift []string) {
	if len(drift) == 0 {
		return
	}
	zerolog.Ctx(ctx).Warn().Str(kind, name).Strs("differs", drift).
		Msg(kind + " " + name + " differs from the configuration; hcpbot does not change it: an operator with admin NATS credentials must update it")
}

// CreateStream creates the stream if it does not exist and otherwise
// leaves it exactly as it is, whatever its settings (StreamDrift says
// which differ from spec). It is for a process that needs a stream whose
// settings it may not or must not rewrite: the agent on its own embedded
// server (the bot's settings are kept), and the bot's audit stream (its
// user may not update it). It retries as EnsureStream does: on a fresh
// cluster a create's reply can be lost, and the next attempt finds the
// stream.
func CreateStream(ctx context.Context, js jetstream.StreamManager, spec StreamSpec) (jetstream.Stream, error) {
	cfg := spec.config()
	s, err := retryEnsure(ctx, "stream", spec.Name, func(ctx context.Context) (jetstream.Stream, error) {
		s, err := js.Stream(ctx, spec.Name)
		if err == nil || !errors.Is(err, jetstream.ErrStreamNotFound) {
			return s, err
		}
		s, err = js.CreateStream(ctx, cfg)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			// Created meanwhile, by another process: keep its settings.
			s, err = js.Stream(ctx, spec.Name)
		}
		return s, err
	})
	if err != nil {
		return nil, fmt.Errorf("bus: create stream %q: %w", spec.Name, err)
	}
	return s, nil
}

// StreamDrift names the settings of an existing stream (cfg, as the
// server reports it) that differ from spec, each as "field: have → want";
// nil when it is to spec. It is what a process that must not update a
// stream (CreateStream) tells its operator.
func StreamDrift(cfg jetstream.StreamConfig, spec StreamSpec) []string {
	want := spec.config()
	var d drift
	d.diff("subjects", strings.Join(cfg.Subjects, ","), strings.Join(want.Subjects, ","))
	d.diff("retention", cfg.Retention, want.Retention)
	d.diff("replicas", max(cfg.Replicas, 1), want.Replicas)
	d.diff("max age", cfg.MaxAge, want.MaxAge)
	d.diff("max bytes", cfg.MaxBytes, want.MaxBytes)
	d.diff("max messages", cfg.MaxMsgs, want.MaxMsgs)
	if want.Duplicates > 0 { // 0: the server's default, whatever it is
		d.diff("duplicate window", cfg.Duplicates, want.Duplicates)
	}
	d.diff("discard", cfg.Discard, want.Discard)
	d.diff("deny delete", cfg.DenyDelete, want.DenyDelete)
	d.diff("deny purge", cfg.DenyPurge, want.DenyPurge)
	return d
}

// drift collects the settings that differ, each as "field: have → want".
type drift []string

func (d *drift) diff(field string, have, want any) {
	if have != want {
		*d = append(*d, fmt.Sprintf("%s: %v → %v", field, have, want))
	}
}

func (spec StreamSpec) config() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        spec.Name,
		Description: spec.Description,
		Subjects:    spec.Subjects,
		Retention:   spec.Retention,
		MaxAge:      spec.MaxAge,
		MaxBytes:    unlimitedIfZero(spec.MaxBytes),
		// The server reports "no limit" as -1; spelling it the same way
		// keeps a repeated ensure a true no-op.
		MaxMsgs:    -1,
		Storage:    jetstream.FileStorage,
		Replicas:   max(spec.Replicas, 1),
		Duplicates: spec.Duplicates,
		Discard:    spec.Discard,
		DenyDelete: spec.DenyDelete,
		DenyPurge:  spec.DenyPurge,
	}
}

// Bounds of WaitForStream's pause between look-ups.
const (
	streamWaitFirst = 500 * time.Millisecond
	streamWaitMax   = 15 * time.Second
)

// WaitForStream looks the stream up until it exists or ctx ends, pausing
// with a doubling backoff bounded by 15s. It is for processes that use a
// stream without owning it (the agent against an external NATS: the bot
// creates the events stream with its configured settings, and the agent's
// user may not create or update streams), so it never creates anything.
func WaitForStream(ctx context.Context, js jetstream.StreamManager, name string, log zerolog.Logger) (jetstream.Stream, error) {
	wait := streamWaitFirst
	for attempt := 0; ; attempt++ {
		s, err := js.Stream(ctx, name)
		if err == nil {
			if attempt > 0 {
				log.Info().Str("stream", name).Msg("stream found")
			}
			return s, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("bus: wait for stream %q: %w", name, ctx.Err())
		}
		ev := log.Info()
		if !errors.Is(err, jetstream.ErrStreamNotFound) {
			// Not allowed to look, or NATS unreachable: say why, retry.
			ev = log.Warn().Err(err)
		}
		if attempt == 0 || !errors.Is(err, jetstream.ErrStreamNotFound) {
			ev.Str("stream", name).Dur("retry_in", wait).Msg("waiting for the bot to create stream " + name)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("bus: wait for stream %q: %w", name, ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, streamWaitMax)
	}
}

// KVSpec is the part of a key-value bucket's configuration hcpbot decides;
// buckets are file-backed too.
type KVSpec struct {
	Bucket      string
	Description string
	History     uint8         // values kept per key; 0 means 1
	TTL         time.Duration // 0 keeps values forever
	Replicas    int           // 0 means 1
}

// BucketManager is what ensuring a bucket takes of JetStream: the bucket,
// and the stream under it, whose settings say what the bucket carries.
type BucketManager interface {
	jetstream.KeyValueManager
	jetstream.StreamManager
}

// EnsureKV creates the bucket while it is absent and returns it; an
// existing one keeps its settings, as EnsureStream's, with a warning for
// what differs and ErrForeignStream for what hcpbot never configures.
func EnsureKV(ctx context.Context, js BucketManager, spec KVSpec) (jetstream.KeyValue, error) {
	cfg := jetstream.KeyValueConfig{
		Bucket:      spec.Bucket,
		Description: spec.Description,
		History:     max(spec.History, 1),
		TTL:         spec.TTL,
		Storage:     jetstream.FileStorage,
		Replicas:    max(spec.Replicas, 1),
	}
	type bucket struct {
		kv jetstream.KeyValue
		s  jetstream.Stream
	}
	got, err := retryEnsure(ctx, "bucket", spec.Bucket, func(ctx context.Context) (bucket, error) {
		kv, err := js.KeyValue(ctx, spec.Bucket)
		if err != nil && errors.Is(err, jetstream.ErrBucketNotFound) {
			kv, err = js.CreateKeyValue(ctx, cfg)
			if errors.Is(err, jetstream.ErrBucketExists) || errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
				// Created meanwhile, by another process: keep its settings.
				kv, err = js.KeyValue(ctx, spec.Bucket)
			}
		}
		if err != nil {
			return bucket{}, err
		}
		// Looked up in the same attempt: on a fresh cluster a bucket
		// another replica has just created can be unknown to the server
		// answering for a moment ("stream not found"), which is a reason
		// to retry, not to fail the start.
		s, err := js.Stream(ctx, "KV_"+spec.Bucket)
		return bucket{kv, s}, err
	})
	if err != nil {
		return nil, fmt.Errorf("bus: ensure KV bucket %q: %w", spec.Bucket, err)
	}
	kv, s := got.kv, got.s
	have := s.CachedInfo().Config
	if err := Vet(have); err != nil {
		return nil, fmt.Errorf("bus: KV bucket %q: %w", spec.Bucket, err)
	}
	var drift []string
	if have.MaxAge != spec.TTL {
		drift = append(drift, fmt.Sprintf("TTL: %v → %v", have.MaxAge, spec.TTL))
	}
	if r := max(spec.Replicas, 1); max(have.Replicas, 1) != r {
		drift = append(drift, fmt.Sprintf("replicas: %d → %d", max(have.Replicas, 1), r))
	}
	if h := int64(max(spec.History, 1)); have.MaxMsgsPerSubject != h {
		drift = append(drift, fmt.Sprintf("history: %d → %d", have.MaxMsgsPerSubject, h))
	}
	warnDrift(ctx, "bucket", spec.Bucket, drift)
	return kv, nil
}

// unlimitedIfZero spells "no limit" the way the server reports it back, so
// an update with an unchanged spec is a true no-op.
func unlimitedIfZero(n int64) int64 {
	if n == 0 {
		return -1
	}
	return n
}
