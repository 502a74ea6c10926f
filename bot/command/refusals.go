package command

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/hcpbot/hcpbot/audit"
	"github.com/hcpbot/hcpbot/bot/notify"
	"github.com/hcpbot/hcpbot/event"
)

// RefusalNotices tells the channel about the action requests agents
// refused (a forged, replayed or tampered request, a key that is not
// trusted): the agents write each refusal to their own audit subject,
// where no reply reaches the bot when the request did not come from it.
//
// One message per management cluster and UTC day, updated in place with
// the count, and one thread reply per refusal (de-duplicated by audit
// record id). Every replica reads the records from the start of the day,
// so all count alike; the lease holder posts.
type RefusalNotices struct {
	JS  jetstream.StreamManager // looks up the audit stream
	Out notify.Notifier
	// Channel is where the refusals of source go.
	Channel func(source string) string
	// Leader reports whether this replica posts; nil means always.
	Leader func() bool
	// Owns reports whether this bot group holds source (bot groups,
	// package partition): a group tells about its own management
	// clusters only, so each refusal is told once across the groups.
	// Nil means every source.
	Owns func(source string) bool
	Log  zerolog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	mu     sync.Mutex
	day    string
	counts map[string]uint64
}

// Run reads refusals until ctx ends.
func (n *RefusalNotices) Run(ctx context.Context) error {
	now := time.Now
	if n.Now != nil {
		now = n.Now
	}
	stream, err := n.waitStream(ctx)
	if err != nil {
		return err
	}
	day := now().UTC().Truncate(24 * time.Hour)
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{event.AgentAuditFilter},
		DeliverPolicy:  jetstream.DeliverByStartTimePolicy,
		OptStartTime:   &day,
	})
	if err != nil {
		return fmt.Errorf("bot: refusal notices: %w", err)
	}
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("bot: refusal notices: %w", err)
	}
	go func() {
		<-ctx.Done()
		it.Stop()
	}()
	for {
		msg, err := it.Next()
		if errors.Is(err, jetstream.ErrMsgIteratorClosed) || ctx.Err() != nil {
			return nil
		}
		if err != nil {
			n.Log.Warn().Err(err).Msg("refusal notices: read failed")
			continue
		}
		n.handle(ctx, msg.Subject(), msg.Data())
	}
}

// waitStream waits for the audit stream, which the bot's audit.Open creates.
func (n *RefusalNotices) waitStream(ctx context.Context) (jetstream.Stream, error) {
	for {
		s, err := n.JS.Stream(ctx, audit.StreamName)
		if err == nil {
			return s, nil
		}
		if !errors.Is(err, jetstream.ErrStreamNotFound) {
			n.Log.Warn().Err(err).Msg("refusal notices: audit stream not reachable yet")
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

func (n *RefusalNotices) handle(ctx context.Context, subject string, data []byte) {
	var r audit.Record
	if err := json.Unmarshal(data, &r); err != nil || r.Kind != audit.KindRefused {
		return
	}
	// The subject names who wrote it, whatever the record says.
	source, ok := event.AgentAuditSource(subject)
	if !ok || n.Owns != nil && !n.Owns(source) {
		return
	}
	day := r.Time.UTC().Format("2006-01-02")
	key := "refused-" + source + "-" + strings.ReplaceAll(day, "-", "")
	n.mu.Lock()
	if n.counts == nil || day > n.day {
		// One day's messages at a time: earlier days are done.
		n.counts, n.day = map[string]uint64{}, day
	}
	n.counts[key]++
	count := n.counts[key]
	n.mu.Unlock()
	if n.Leader != nil && !n.Leader() {
		return
	}
	channel := n.Channel(source)
	plural := "s"
	if count == 1 {
		plural = ""
	}
	root := fmt.Sprintf("🚫 *The agent of `%s` refused %d action request%s on %s* that it could not verify as approved (unsigned, untrusted key, tampered, replayed, or not approved in the approval store). Nothing was changed. Each refusal is in the thread and in `/hcp audit`; requests the bot did not send mean someone is publishing on NATS directly.",
		esc(source), count, plural, day)
	if err := n.Out.Upsert(ctx, notify.Message{Key: key, Channel: channel, Text: root, Blocks: textBlocks(root), Version: count}); err != nil {
		n.Log.Warn().Err(err).Msg("refusal notice not queued")
		return
	}
	line := fmt.Sprintf("%s · %s", r.Time.UTC().Format("15:04:05"), esc(r.Summary))
	if r.ActionID != "" {
		line += fmt.Sprintf(" · `%s`", escCode(r.ActionID))
	}
	if r.Cluster != "" {
		line += fmt.Sprintf(" · cluster `%s`", escCode(r.Cluster))
	}
	if r.Actor != "" {
		// Claimed by the request, so shown as data, never as a mention.
		line += fmt.Sprintf(" · claimed approver `%s`", escCode(r.Actor))
	}
	line += "\n" + esc(r.Reason)
	if err := n.Out.Reply(ctx, notify.Reply{Key: key, Channel: channel, Text: line, ID: r.ID}); err != nil {
		n.Log.Warn().Err(err).Msg("refusal notice reply not queued")
	}
}
