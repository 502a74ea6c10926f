package bot

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/hcpbot/hcpbot/bot/checkpoint"
	"github.com/hcpbot/hcpbot/event"
	"github.com/hcpbot/hcpbot/internal/version"
)

// Resuming from a checkpoint (package bot/checkpoint has the design): a
// starting replica restores the newest checkpoint, if one is usable, and
// consumes the stream from the sequence after it; the leader writes one
// every Config.CheckpointEvery and at a clean shutdown.

// shutdownWrite bounds the checkpoint written at a clean shutdown: the
// pod's grace period is longer, and the next start replays in full if
// it did not make it.
const shutdownWrite = 20 * time.Second

// checkpointName is Config.CheckpointName, or DefaultCheckpointName with
// the group's name and the static map's layout when there are several
// groups ("bot-p2-1"): each group restores its own state only.
func (b *Bot) checkpointName() string {
	if b.cfg.CheckpointName != "" {
		return b.cfg.CheckpointName
	}
	return b.cfg.Partitions.CheckpointName(DefaultCheckpointName, b.cfg.Partitions.ID(b.cfg.Partition))
}

// restore loads the newest checkpoint into the bot and returns the stream
// sequence it covers; 0 when there is none or it is not usable, which
// replays the whole stream. info is the events stream's, as Run found it.
func (b *Bot) restore(ctx context.Context, info *jetstream.StreamInfo) uint64 {
	if b.cfg.Checkpoints == nil {
		return 0
	}
	start := time.Now()
	name := b.checkpointName()
	m, body, err := b.cfg.Checkpoints.Load(ctx, name)
	log := b.log.With().Str("checkpoint", name).Logger()
	switch {
	case errors.Is(err, checkpoint.ErrNotFound):
		log.Info().Msg("no checkpoint: replaying the whole events stream")
		return 0
	case errors.Is(err, checkpoint.ErrForged):
		// Written by someone with the bucket but not the bot's key (a
		// stolen bot NATS seed): what it says is not believed.
		log.Error().Err(err).Msg("checkpoint not sealed by the bot's key, ignored: replaying the whole events stream")
		return 0
	case err != nil:
		log.Warn().Err(err).Str("build", m.Build).Msg("checkpoint ignored: replaying the whole events stream")
		return 0
	}
	warn := func() *zerolog.Event {
		return log.Warn().Uint64("seq", m.Seq).Time("written", m.Written).Str("build", m.Build)
	}
	switch {
	case m.Stream != event.StreamName || !m.StreamCreated.Equal(info.Created):
		// Another stream, or this one deleted and created again: its
		// sequences are not the checkpoint's.
		warn().Time("stream_created", info.Created).Msg("checkpoint of another events stream ignored: replaying the whole stream")
		return 0
	case m.Seq > info.State.LastSeq:
		warn().Uint64("last_seq", info.State.LastSeq).Msg("checkpoint ahead of the events stream ignored: replaying the whole stream")
		return 0
	case m.Seq+1 < info.State.FirstSeq:
		// Events after the checkpoint aged out of the stream.
		warn().Uint64("first_seq", info.State.FirstSeq).Msg("checkpoint older than the events stream ignored: replaying the whole stream")
		return 0
	}
	r, err := decodeState(body, b.cfg.Clients)
	if err == nil && r.seq != m.Seq {
		err = errors.New("its content and manifest name different sequences")
	}
	if err != nil {
		warn().Err(err).Msg("checkpoint ignored: replaying the whole events stream")
		return 0
	}
	b.adopt(r)
	log.Info().Uint64("seq", m.Seq).Time("written", m.Written).Str("build", m.Build).Int64("bytes", m.Size).
		Int("clusters", len(r.model.Keys())).Int("incidents", len(r.incidents)).Dur("took", time.Since(start)).
		Uint64("to_replay", info.State.LastSeq-m.Seq).Msg("checkpoint restored: replaying the events after it")
	return m.Seq
}

// adopt makes a decoded checkpoint this bot's state.
func (b *Bot) adopt(r *restored) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.model, b.incidents, b.pending, b.pendingScanned = r.model, r.incidents, r.pending, r.scanned
	b.storms, b.gone, b.applied = r.storms, r.gone, r.seq
}

// checkpointLoop writes a checkpoint every CheckpointEvery while this
// replica leads and has replayed the stream.
func (b *Bot) checkpointLoop(ctx context.Context) {
	every := b.cfg.CheckpointEvery
	if b.cfg.Checkpoints == nil || every < 0 {
		return
	}
	if every == 0 {
		every = DefaultCheckpointEvery
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		b.mu.Lock()
		due := b.leader && b.caughtUp
		b.mu.Unlock()
		if !due {
			continue
		}
		if _, err := b.WriteCheckpoint(ctx); err != nil && ctx.Err() == nil {
			b.log.Warn().Err(err).Msg("checkpoint not written; the next start replays more of the stream")
		}
	}
}

// checkpointAtShutdown writes a checkpoint when Run ends, if this replica
// led and had replayed the stream: the next start of any replica resumes
// from where this one stopped.
func (b *Bot) checkpointAtShutdown(ctx context.Context) {
	if b.cfg.Checkpoints == nil {
		return
	}
	b.mu.Lock()
	leader, caughtUp := b.leader, b.caughtUp
	b.mu.Unlock()
	if !leader || !caughtUp {
		b.log.Debug().Bool("leader", leader).Bool("caught_up", caughtUp).Msg("no checkpoint at shutdown: only a current leader writes one")
		return
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownWrite)
	defer cancel()
	if _, err := b.WriteCheckpoint(wctx); err != nil {
		b.log.Warn().Err(err).Msg("checkpoint at shutdown not written; the next start replays more of the stream")
	}
}

// WriteCheckpoint writes a checkpoint of the bot's state now and returns
// its manifest. The state is copied under the lock and encoded outside
// it, so events go on being applied meanwhile. Run calls it (the leader,
// on schedule and at shutdown); tests and benchmarks too.
func (b *Bot) WriteCheckpoint(ctx context.Context) (checkpoint.Manifest, error) {
	if b.cfg.Checkpoints == nil {
		return checkpoint.Manifest{}, errors.New("bot: no checkpoint store configured")
	}
	stream, err := b.js.Stream(ctx, event.StreamName)
	if err != nil {
		return checkpoint.Manifest{}, err
	}
	b.writing.Lock()
	defer b.writing.Unlock()
	start := time.Now()
	b.mu.Lock()
	snap := b.snapshot()
	b.mu.Unlock()
	copied := time.Since(start)
	m := checkpoint.Manifest{Format: checkpoint.Format, Build: version.String(), Stream: event.StreamName,
		StreamCreated: stream.CachedInfo().Created, Seq: snap.state.Seq, Written: b.cfg.Now().UTC()}
	m, err = b.cfg.Checkpoints.Save(ctx, b.checkpointName(), m, snap.encode)
	if err != nil {
		return m, err
	}
	b.log.Info().Str("checkpoint", b.checkpointName()).Uint64("seq", m.Seq).Int64("bytes", m.Size).Int("chunks", m.Chunks).
		Int("clusters", snap.model.Len()).Int("incidents", len(snap.state.Current)).Dur("locked", copied).
		Dur("took", time.Since(start)).Msg("checkpoint written")
	return m, nil
}
