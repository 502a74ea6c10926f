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

// EnsureStream creates the stream or brings an existing one to spec.
// Calling it again with the same spec changes nothing, so every process can
// call it at start-up, several replicas at once. It retries, each attempt
// bounded, until it succeeds or ctx ends (retryEnsure says why), logging
// with zerolog.Ctx(ctx).
func EnsureStream(ctx context.Context, js jetstream.JetStream, spec StreamSpec) (jetstream.Stream, error) {
	cfg := spec.config()
	s, err := retryEnsure(ctx, "stream", spec.Name, func(ctx context.Context) (jetstream.Stream, error) {
		return createOrUpdate(ctx, func(ctx context.Context) (jetstream.Stream, error) { return js.CreateOrUpdateStream(ctx, cfg) })
	})
	if err != nil {
		return nil, fmt.Errorf("bus: ensure stream %q: %w", spec.Name, err)
	}
	return s, nil
}

// CreateStream creates the stream if it does not exist and otherwise
// leaves it exactly as it is, whatever its settings (StreamDrift says
// which differ from spec). It is for a process that needs a stream whose
// settings it may not or must not rewrite: the agent on its own embedded
// server (the bot's settings are kept), and the bot's audit stream (its
// user may not update it). It retries as EnsureStream does: on a fresh
// cluster a create's reply can be lost, and the next attempt finds the
// stream.
func CreateStream(ctx context.Context, js jetstream.JetStream, spec StreamSpec) (jetstream.Stream, error) {
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
	var out []string
	diff := func(field string, have, want any) {
		if have != want {
			out = append(out, fmt.Sprintf("%s: %v → %v", field, have, want))
		}
	}
	diff("subjects", strings.Join(cfg.Subjects, ","), strings.Join(want.Subjects, ","))
	diff("retention", cfg.Retention, want.Retention)
	diff("replicas", max(cfg.Replicas, 1), want.Replicas)
	diff("max age", cfg.MaxAge, want.MaxAge)
	diff("max bytes", cfg.MaxBytes, want.MaxBytes)
	diff("max messages", cfg.MaxMsgs, want.MaxMsgs)
	if want.Duplicates > 0 { // 0: the server's default, whatever it is
		diff("duplicate window", cfg.Duplicates, want.Duplicates)
	}
	diff("discard", cfg.Discard, want.Discard)
	diff("deny delete", cfg.DenyDelete, want.DenyDelete)
	diff("deny purge", cfg.DenyPurge, want.DenyPurge)
	return out
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
func WaitForStream(ctx context.Context, js jetstream.JetStream, name string, log zerolog.Logger) (jetstream.Stream, error) {
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

// EnsureKV creates the bucket or brings an existing one to spec; calling it
// again with the same spec changes nothing. It retries as EnsureStream
// does.
func EnsureKV(ctx context.Context, js jetstream.JetStream, spec KVSpec) (jetstream.KeyValue, error) {
	cfg := jetstream.KeyValueConfig{
		Bucket:      spec.Bucket,
		Description: spec.Description,
		History:     max(spec.History, 1),
		TTL:         spec.TTL,
		Storage:     jetstream.FileStorage,
		Replicas:    max(spec.Replicas, 1),
	}
	kv, err := retryEnsure(ctx, "bucket", spec.Bucket, func(ctx context.Context) (jetstream.KeyValue, error) {
		return createOrUpdate(ctx, func(ctx context.Context) (jetstream.KeyValue, error) { return js.CreateOrUpdateKeyValue(ctx, cfg) })
	})
	if err != nil {
		return nil, fmt.Errorf("bus: ensure KV bucket %q: %w", spec.Bucket, err)
	}
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
