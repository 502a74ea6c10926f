package bot

import (
	"context"
	"time"

	"github.com/hcpbot/hcpbot/bot/notify"
	"github.com/hcpbot/hcpbot/bot/storm"
	"github.com/hcpbot/hcpbot/event"
)

// Which messages exist: a new leader, or a restarted bot, does not know
// what the previous one posted. Before it sends, it asks the notifier
// (notify.RootChecker) for each incident it is about to handle, so that an
// incident posted before keeps its message (and is not folded into a
// storm), and a resolution reaches the message that needs it; once after
// a takeover, it finds the storms of the previous run again from the
// incidents nobody handled yet and revives those whose message exists.
// This is the flush's work before its stages (flush.go): takeoverWork
// under the lock, lookUp outside it (network calls), learn under it.

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
	// The resolutions of replaced incidents it sent before a loss: the
	// notifier may have dropped them (leader-only), and nothing else
	// holds them any more.
	now := b.cfg.Now()
	for _, p := range b.sentPending {
		if now.Sub(p.n.sent) <= retain {
			p.n.checked, p.n.dirty = false, true
			b.pending = append(b.pending, p)
		}
	}
	b.sentPending = nil
	b.stormsChecked = false
}

// stepDown forgets what this replica knew while it led: from the loss of
// the lease on, another replica may post any incident, also one born
// looked up (liveSince), and one replaced while this replica follows
// must wait as pending (evaluate) for the next takeover's look-up.
// Called with b.mu held.
func (b *Bot) stepDown() {
	b.leader, b.liveFrom = false, 0
	for _, inc := range b.incidents {
		inc.n.checked = false
	}
}

// noteLoss steps down if the lease was lost since the last look, even
// if it was taken back since: the flush then takes over again. Called
// with b.mu held.
func (b *Bot) noteLoss() {
	if n := b.leaseLost.Load(); n != b.lossSeen {
		b.lossSeen = n
		if b.leader {
			b.stepDown()
		}
	}
}

// takeover is the work a flush does before its stages when the notifier
// is to be asked which messages exist: for the incidents about to be
// handled whose root this replica has not looked up, and, once after a
// takeover, for the storms of the previous run.
type takeover struct {
	incidents []*Incident
	storms    []*Storm
	// live: the leader has not read yet from which sequence on nobody
	// else can have posted an incident (liveSince).
	live bool
}

func (t takeover) due() bool { return len(t.incidents) > 0 || len(t.storms) > 0 || t.live }

// takeoverWork is what the flush is to look up. Called with b.mu held.
func (b *Bot) takeoverWork() takeover {
	now := b.cfg.Now()
	// Resolved first, so that a replayed incident whose signals cleared
	// long ago is looked up (and handled) as resolved from the start.
	resolveStage{timeout: b.cfg.ResolveTimeout}.Exec(&flushRun{now: now, next: now.Add(maxFlush)}, b.candidates())
	var t takeover
	for _, inc := range b.candidates() {
		// Open ones past their group wait, resolved ones at once (their
		// message, if any, must learn it).
		if !inc.n.checked && (!inc.n.first.IsZero() || !inc.Open() || !now.Before(inc.n.seen.Add(b.cfg.GroupWait))) {
			t.incidents = append(t.incidents, inc)
		}
	}
	if !b.stormsChecked {
		b.stormsChecked = true
		t.storms = b.replayedStorms()
	}
	t.live = b.liveFrom == 0 && !now.Before(b.liveAgain)
	return t
}

// roots are the answers of a takeover's lookups, and the sequence from
// which on this leader alone can have posted (liveSince; 0: unknown).
type roots struct {
	incidents, storms map[string]bool
	liveFrom          uint64
}

// lookUp asks lookup (lookupRoots) about t's incidents and storms; called
// without b.mu: they are network calls.
func (t takeover) lookUp(ctx context.Context, lookup func(context.Context, []string, bool) map[string]bool) roots {
	keys := make([]string, 0, len(t.incidents))
	for _, inc := range t.incidents {
		keys = append(keys, inc.Key)
	}
	var r roots
	r.incidents = lookup(ctx, keys, true)
	keys = keys[:0]
	for _, s := range t.storms {
		keys = append(keys, s.Key)
		if s.bare != "" {
			keys = append(keys, s.bare)
		}
	}
	// A storm whose lookup failed is not revived: reviving one without a
	// message would post a new root.
	r.storms = lookup(ctx, keys, false)
	return r
}

// liveSince reads the sequence the events stream's next event will have,
// once this replica leads: an incident opened by that event or a later
// one needs no look-up (evaluate marks it checked), as no other replica
// can have posted it. The lease excludes a second sender from the moment
// this one holds it, and the sequence is read after that, so every later
// event was stored while only this replica could send. Events stored
// before it, even if this replica applies them later (a follower lagging
// behind the old leader), are looked up as before. The look-up it saves
// is a store round trip on the way of every new incident's first message
// (B2, docs/performance.md). Should the lease ever overlap two senders,
// the notifier still claims a root before posting it: one message per
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
	// Stream read the stream's info just now, after the lease was held:
	// asking Info again would be a second round trip for the same state.
	return s.CachedInfo().State.LastSeq + 1
}

// liveRetry is how long the flush waits to read the stream again after
// liveSince failed.
const liveRetry = 5 * time.Second

// learn records the answers: the storms of the previous run whose
// message exists are revived, the incidents looked up learn whether they
// have one, and the sequence liveSince read is kept while this replica
// still leads and has not lost the lease since the flush looked (a loss
// in between: another replica may have posted from a later event).
// Called with b.mu held.
func (b *Bot) learn(t takeover, r roots) {
	switch {
	case t.live && r.liveFrom > 0 && b.leader && b.leaseLost.Load() == b.lossSeen:
		b.liveFrom = r.liveFrom
	case t.live:
		b.liveAgain = b.cfg.Now().Add(liveRetry)
	}
	for _, s := range t.storms {
		if !r.storms[s.Key] && s.bare != "" && r.storms[s.bare] {
			// Posted by the one group before a repartition: its key is
			// the group's own storm's without the suffix only in the
			// group holding the storm's first member (the key hashes
			// the cause and that member's opening), so one group takes
			// the message over and the others post their part.
			s.Key = s.bare
		}
		if r.storms[s.Key] && b.storms[s.Key] == nil {
			b.revive(s)
		}
	}
	for _, inc := range t.incidents {
		inc.n.checked = true
		if r.incidents[inc.Key] {
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

// replayedStorms are the storms the incidents nobody handled yet would
// have formed: after a restart (or on a new leader), the storms of the
// previous run. A storm whose members all healed while the bot was down
// is otherwise never formed again, and its message would stay open.
func (b *Bot) replayedStorms() []*Storm {
	if b.cfg.StormThreshold < 0 {
		return nil
	}
	byChannel := map[string][]storm.Member{}
	byKey := map[string]*Incident{}
	for _, inc := range b.incidents {
		if !inc.n.first.IsZero() || inc.Storm != "" {
			continue
		}
		if inc.n.causes == nil {
			inc.n.causes = causesOf(b.model, inc)
		}
		byKey[inc.Key] = inc
		byChannel[inc.Channel] = append(byChannel[inc.Channel], storm.Member{Key: inc.Key, Opened: inc.Opened, Causes: inc.n.causes})
	}
	var out []*Storm
	for channel, members := range byChannel {
		groups, _ := storm.Find(members, b.cfg.StormThreshold, b.cfg.StormWindow)
		for _, g := range groups {
			s := &Storm{Key: b.stormKey(g), Cause: g.Cause, Channel: channel, Opened: g.Members[0].Opened}
			if b.stormSuffix != "" {
				s.bare = g.Key()
			}
			for _, m := range g.Members {
				s.Members = append(s.Members, byKey[m.Key])
			}
			out = append(out, s)
		}
	}
	return out
}

// revive takes back a storm of the previous run whose message exists.
func (b *Bot) revive(s *Storm) {
	members := s.Members
	s.Members = nil
	open := false
	for _, inc := range members {
		if inc.Storm == "" {
			s.join(inc)
			open = open || inc.Open()
		}
	}
	if len(s.Members) == 0 {
		return
	}
	s.rooted = true
	if !open {
		// All healed while the bot was down: the thread listed them
		// then; only the message is left to resolve.
		s.listed = len(s.Members)
	}
	b.storms[s.Key] = s
	b.log.Info().Str("storm", s.Key).Int("clusters", len(s.Members)).Msg("storm of the previous run")
}
