package notify

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/slack-go/slack"
)

// Message is the current rendering of one conversation root (an incident or
// a storm).
type Message struct {
	// Key is the stable id of the incident or storm, e.g. "inc-7f3a…".
	// Every Key gets exactly one Slack root message.
	Key string
	// Channel is the Slack channel id. A Key lives in one channel: the
	// channel its root was posted to wins over later values.
	Channel string
	// Text is the notification and fallback text (mrkdwn).
	Text string
	// Blocks is the Block Kit rendering; the notifier clamps it to Slack's
	// limits with blockkit.ClampBlocks.
	Blocks []slack.Block
	// Version (from 1) increases with every new rendering of Key. A version never
	// overwrites a newer one, and re-sending a delivered version is a no-op,
	// so a correlator may replay its state after a restart.
	Version uint64
	// Digest, when set, identifies what the rendering shows, leaving out
	// what only ages (durations): an update whose Digest equals the one
	// of the rendering delivered last is not sent. A correlator that
	// replays its state after a restart then changes nothing in Slack
	// that is still true there.
	Digest string
	// LeaderOnly marks a rendering only the holder of the bot's lease
	// sends: the correlator's incidents and storms. It is delivered only
	// while SlackConfig.Leading says this replica leads, and dropped
	// otherwise ("Leader-only messages" in doc.go). Digests, refusals and
	// outcomes leave it false: whichever replica runs them posts them.
	LeaderOnly bool
}

// Reply is a thread reply under the root of Key: evidence, state changes,
// pages of storm members.
type Reply struct {
	Key     string
	Channel string
	Text    string
	Blocks  []slack.Block
	// ID de-duplicates: a reply with an ID already posted (or queued) for
	// the same Key is dropped, across restarts and replicas. An empty ID
	// opts out of de-duplication.
	ID string
}

// Notifier delivers conversation roots and their thread replies.
//
// Upsert and Reply only enqueue: they never wait for the destination, so a
// slow or rate-limiting Slack cannot stall the correlator. Run does the
// delivery until its context ends.
type Notifier interface {
	// Upsert queues the newest rendering of m.Key: the first one creates the
	// root message, later ones replace its content in place.
	Upsert(ctx context.Context, m Message) error
	// Reply queues a thread reply under the root of r.Key. It is delivered
	// after the root exists and after the replies of the same Key queued
	// before it.
	Reply(ctx context.Context, r Reply) error
	// Run delivers until ctx is done and returns nil after a clean stop.
	Run(ctx context.Context) error
}

var (
	// ErrStopped is returned by Upsert and Reply once Run has returned.
	ErrStopped = errors.New("notify: notifier stopped")
	// ErrQueueFull is returned by Reply when too many replies are waiting.
	// Upserts are never refused: they coalesce to one item per Key.
	ErrQueueFull = errors.New("notify: reply queue full")
	// ErrInvalid wraps validation errors of Upsert and Reply.
	ErrInvalid = errors.New("notify: invalid item")
)

func (m *Message) validate() error {
	switch {
	case m.Key == "":
		return fmt.Errorf("%w: message without key", ErrInvalid)
	case m.Channel == "":
		return fmt.Errorf("%w: message %q without channel", ErrInvalid, m.Key)
	case m.Text == "" && len(m.Blocks) == 0:
		return fmt.Errorf("%w: message %q without text or blocks", ErrInvalid, m.Key)
	case m.Version == 0:
		// Versions start at 1: with a constant 0 every update after the
		// first would look stale and be dropped silently.
		return fmt.Errorf("%w: message %q without version", ErrInvalid, m.Key)
	}
	return nil
}

func (r *Reply) validate() error {
	switch {
	case r.Key == "":
		return fmt.Errorf("%w: reply without key", ErrInvalid)
	case r.Channel == "":
		return fmt.Errorf("%w: reply %q/%q without channel", ErrInvalid, r.Key, r.ID)
	case r.Text == "" && len(r.Blocks) == 0:
		return fmt.Errorf("%w: reply %q/%q without text or blocks", ErrInvalid, r.Key, r.ID)
	}
	return nil
}

// RootChecker is implemented by notifiers that can tell whether a Key's
// root message exists, e.g. posted by an earlier run or another replica.
// A correlator that restarts asks it before deciding that an incident it
// folds into a storm never had a message of its own.
type RootChecker interface {
	HasRoot(ctx context.Context, key string) (bool, error)
}

// RootsChecker is implemented by notifiers that answer RootChecker for
// many Keys at once, in one pass over their store where they can.
type RootsChecker interface {
	// HasRoots answers HasRoot for each of keys, in their order.
	HasRoots(ctx context.Context, keys []string) ([]bool, error)
}

// DeliveryChecker is implemented by notifiers that can tell whether a
// Key's messages were delivered, whoever sent them (another replica, an
// earlier run). A replica that sends nothing asks it to let go of a
// resolution the leader already sent, instead of keeping it in case it
// takes over.
type DeliveryChecker interface {
	// Delivered reports whether the root of key shows the rendering whose
	// Message.Digest is digest and every reply of replyIDs was posted.
	Delivered(ctx context.Context, key, digest string, replyIDs []string) (bool, error)
}

// PostTimes is implemented by notifiers that know when a Key's root
// message was first posted (Slack: the message's ts), for timelines.
type PostTimes interface {
	FirstPosted(ctx context.Context, key string) (at time.Time, ok bool, err error)
}
