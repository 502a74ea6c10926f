package bus_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hcpbot/hcpbot/bus"
	"github.com/hcpbot/hcpbot/internal/testenv/natstest"
)

// TestEnsureConcurrentOnFreshCluster is two bot replicas starting at once
// on a fresh 3-node cluster: each ensures every R3 stream and bucket of the
// bot, the same ones at the same moment, each through another node. Every
// ensure must succeed within the start-up budget (before the fix, a create
// racing an equal create lost its reply and the bot exited on "context
// deadline exceeded"). Repeated on fresh clusters because the race is one
// of timing.
func TestEnsureConcurrentOnFreshCluster(t *testing.T) {
	rounds := 3
	if testing.Short() {
		rounds = 1
	}
	for r := range rounds {
		t.Run(fmt.Sprint("round", r), func(t *testing.T) { ensureConcurrently(t) })
	}
}

func ensureConcurrently(t *testing.T) {
	c := natstest.RunCluster(t, 3)
	log := natstest.Logger(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	ctx = log.WithContext(ctx)
	const replicas = 3
	r := bus.WithReplicas(replicas)
	streams := []bus.StreamSpec{
		bus.EventsStream(0, 0, r),
		bus.AuditStream(0, 0, r),
		bus.ActionsStream(r),
	}
	buckets := []bus.KVSpec{
		bus.ProposalsKV(0, r),
		bus.SilencesKV(time.Hour, r),
		bus.LeasesKV(15*time.Second, r),
		bus.SlackMessagesKV("", 0, r),
		bus.SlackReplayKV(5*time.Minute, r),
		bus.DigestTicksKV(r),
		bus.DigestStateKV(r),
		bus.ActionResultsKV(r),
	}
	var wg sync.WaitGroup
	for i := range 2 {
		conn, err := bus.Connect(ctx, bus.Config{URLs: []string{c.URL(i)}, Name: fmt.Sprint("bot-", i)}, log)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(conn.Close)
		// Like a bot: one after the other, as bot.go opens them.
		wg.Go(func() {
			for _, spec := range streams {
				start := time.Now()
				// The audit stream only while absent, as audit.Open does
				// (the bot's user may not update it): its create's lost
				// reply is retried the same way.
				open := bus.EnsureStream
				if spec.Name == bus.AuditStreamName {
					open = bus.CreateStream
				}
				if _, err := open(ctx, conn.JS, spec); err != nil {
					t.Errorf("bot %d: %v", i, err)
					return
				}
				t.Logf("bot %d: stream %s ensured in %v", i, spec.Name, time.Since(start).Round(time.Millisecond))
			}
			for _, spec := range buckets {
				start := time.Now()
				if _, err := bus.EnsureKV(ctx, conn.JS, spec); err != nil {
					t.Errorf("bot %d: %v", i, err)
					return
				}
				t.Logf("bot %d: bucket %s ensured in %v", i, spec.Bucket, time.Since(start).Round(time.Millisecond))
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	// Each exists once, R3, with the spec's settings.
	conn, err := bus.Connect(ctx, bus.Config{URLs: c.URLs(), Name: "check"}, log)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, spec := range streams {
		s, err := conn.JS.Stream(ctx, spec.Name)
		if err != nil {
			t.Fatal(err)
		}
		if cfg := s.CachedInfo().Config; cfg.Replicas != replicas || cfg.MaxAge != spec.MaxAge {
			t.Errorf("stream %s: replicas %d max age %v", spec.Name, cfg.Replicas, cfg.MaxAge)
		}
	}
	for _, spec := range buckets {
		kv, err := conn.JS.KeyValue(ctx, spec.Bucket)
		if err != nil {
			t.Fatal(err)
		}
		st, err := kv.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config.Replicas != replicas || st.TTL() != spec.TTL {
			t.Errorf("bucket %s: %+v", spec.Bucket, st)
		}
	}
}
