package bot

import (
	"context"
	"time"

	"github.com/hcpbot/hcpbot/bot/notify"
	"github.com/hcpbot/hcpbot/event"
)

// Which messages exist: a new leader, or a restarted bot, does not know
// what the previous one posted. Before it sends, it asks the notifier
// (notify.RootChecker) for each incident it is about to handle, so that an
// incident posted before keeps its message (and is not folded into a
// storm), and a resolution reaches the message that needs it.

// takeOver makes a new leader (or a restarted bot) re-check every message
// before sending: another replica may have sent it.
func (b *Bot) takeOver() {
	for _, inc := range b.incidents {
		inc.n.checked = false
		inc.n.dirty = inc.n.dirty || !inc.n.first.IsZero()
	}
	for _, s := range b.storms {
		s.dirty = true
	}
	b.stormsChecked = false
}

// liveSince reads the sequence the events stream's next event will have,
// once this replica leads: an incident opened by that event or a later
// one needs no look-up (evaluate
// marks it checked), as no other replica can have posted it. The lease
// excludes a second sender from the moment this one holds it, and the
// sequence is read after that, so every later event was stored while
// only this replica could send. Events stored before it, even if this
// replica applies them later (a follower lagging behind the old leader),
// are looked up as before. The look-up it saves is a store round trip on
// the way of every new incident's first message (B2,
// docs/performance.md). Should the lease ever overlap two senders, the
// notifier still claims a root before posting it: one message per
// incident holds either way. 0: not read (no stream, or an error): every
// incident is looked up, and the flush reads again after liveRetry.
func (b *Bot) liveSince(ctx context.Context) uint64 {
	if b.js == nil {
		return 0
	}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := b.js.Stream(lctx, event.StreamName)
	if err != nil {
		b.log.Debug().Err(err).Msg("events stream not read: every new incident is looked up")
		return 0
	}
	info, err := s.Info(lctx)
	if err != nil {
		b.log.Debug().Err(err).Msg("events stream not read: every new incident is looked up")
		return 0
	}
	return info.State.LastSeq + 1
}

// liveRetry is how long the flush waits to read the stream again after
// liveSince failed.
const liveRetry = 5 * time.Second

// uncheckedDue lists the incidents about to be handled whose root this
// replica has not looked up: open ones past their group wait, resolved
// ones at once (their message, if any, must learn it).
func (b *Bot) uncheckedDue(now time.Time) []*Incident {
	var out []*Incident
	for _, inc := range b.candidates() {
		if !inc.n.checked && (!inc.n.first.IsZero() || !inc.Open() || !now.Before(inc.n.seen.Add(b.cfg.GroupWait))) {
			out = append(out, inc)
		}
	}
	return out
}

// lookupRoots asks the notifier which keys have a message; onError is
// the answer when it cannot tell.
func (b *Bot) lookupRoots(ctx context.Context, keys []string, onError bool) map[string]bool {
	rc, ok := b.out.(notify.RootChecker)
	out := make(map[string]bool, len(keys))
	if !ok {
		return out
	}
	for _, key := range keys {
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		r, err := rc.HasRoot(lctx, key)
		cancel()
		if err != nil {
			// For incidents: assume it exists: an update of a missing root
			// is posted by notify anyway, while guessing "absent" could
			// fold a visible incident into a storm and leave its message
			// stale.
			b.log.Warn().Err(err).Str("key", key).Msg("root lookup failed")
			r = onError
		}
		out[key] = r
	}
	return out
}

// learnRoots records the answers of lookupRoots for the incidents looked up.
func (b *Bot) learnRoots(looked []*Incident, roots map[string]bool) {
	for _, inc := range looked {
		inc.n.checked = true
		if r, ok := roots[inc.Key]; ok && r {
			if !inc.n.rooted {
				// What its message shows is unknown: a silence it
				// was held for is to be said again.
				inc.n.held = ""
			}
			inc.n.rooted = true
			// The message exists: what it shows is unknown, so the next
			// rendering goes out (bot/notify drops it if the message
			// shows it already), but evidence is not repeated in the
			// thread. A resolution is: its reply's ID de-duplicates it
			// if the previous run posted it.
			inc.n.evidence = evidenceSet(inc)
			if inc.Open() {
				inc.n.top = topOf(inc)
			}
		}
	}
}
