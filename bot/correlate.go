package bot

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"github.com/hcpbot/hcpbot/bot/notify"
	"github.com/hcpbot/hcpbot/bot/storm"
	"github.com/hcpbot/hcpbot/event"
)

// The flush loop is the correlator's clock: events only record state
// (evaluate), and flush decides, on the leader and once the stream is
// replayed, what goes out: it holds a new incident for GroupWait, folds
// incidents that share a cause into a storm, paces updates by
// GroupInterval, keeps silenced incidents quiet, and posts thread replies
// for new evidence and state changes.

// notifyState is what the correlator remembers of an incident's
// notifications on this replica.
type notifyState struct {
	seen time.Time // wall time this replica saw the incident open
	// clearSeen is the wall time this replica saw the signals clear.
	clearSeen time.Time
	state     string    // fingerprint of the newest state
	changed   time.Time // the newest change's own time (for latency)
	dirty     bool      // state not yet sent
	first     time.Time // when flush first handled it; zero before
	sent      time.Time // last rendering handed to the notifier
	version   uint64

	checked bool // the notifier was asked whether a root exists
	rooted  bool // the incident has a message of its own

	evidence map[string]bool // evidence lines already shown
	top      string          // main diagnosis last shown
	muted    bool            // the silenced rendering was sent
	causes   []storm.Cause
}

// Storm is one message for many incidents with a shared cause.
type Storm struct {
	Key      string
	Cause    storm.Cause
	Channel  string
	Opened   time.Time // the first member's opening
	Resolved time.Time // zero while a member is open
	Members  []*Incident

	last    time.Time // the newest member's opening
	dirty   bool
	sent    time.Time
	version uint64
	listed  int  // members already listed in the thread
	rooted  bool // revived with the message of a previous run
}

// clearing reports whether every open member's signals have cleared: the
// members wait for their resolution.
func (s *Storm) clearing() bool {
	for _, m := range s.Members {
		if m.Open() && m.clearAt.IsZero() {
			return false
		}
	}
	return true
}

// Open reports whether a member of the storm is open.
func (s *Storm) Open() bool { return s.Resolved.IsZero() }

// retain bounds memory: resolved incidents and storms are forgotten this
// long after they were resolved and sent.
const retain = time.Hour

const (
	minFlush = 10 * time.Millisecond
	maxFlush = time.Second
)

func (b *Bot) flushLoop(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.kick:
		case <-t.C:
		}
		next := b.flush(ctx)
		t.Reset(min(max(time.Until(next), minFlush), maxFlush))
	}
}

// flush sends what is due and returns when it next needs to look.
func (b *Bot) flush(ctx context.Context) time.Time {
	leader := b.cfg.Leader == nil || b.cfg.Leader()
	b.mu.Lock()
	if leader != b.leader {
		b.leader = leader
		if leader {
			b.takeOver()
		}
	}
	b.forgetGone(b.cfg.Now(), leader)
	if !leader || !b.caughtUp {
		b.mu.Unlock()
		return b.cfg.Now().Add(maxFlush)
	}
	b.settleAll(nil)
	now := b.cfg.Now()
	next := now.Add(maxFlush)
	// Resolved first, so that a replayed incident whose signals cleared
	// long ago is handled as resolved from the start.
	b.resolveCleared(now, &next)
	unchecked := b.uncheckedDue(now)
	var revived []*Storm
	if !b.stormsChecked {
		b.stormsChecked = true
		revived = b.replayedStorms()
	}
	b.mu.Unlock()

	// Lookups leave the lock: they are network calls.
	keys := make([]string, 0, len(unchecked))
	for _, inc := range unchecked {
		keys = append(keys, inc.Key)
	}
	roots := b.lookupRoots(ctx, keys, true)
	keys = keys[:0]
	for _, s := range revived {
		keys = append(keys, s.Key)
	}
	// A storm whose lookup failed is not revived: reviving one without a
	// message would post a new root.
	stormRoots := b.lookupRoots(ctx, keys, false)

	b.mu.Lock()
	defer b.mu.Unlock()
	b.settleAll(nil) // events applied while the lock was free
	now = b.cfg.Now()
	next = now.Add(maxFlush)
	for _, s := range revived {
		if stormRoots[s.Key] && b.storms[s.Key] == nil {
			b.revive(s)
		}
	}
	for _, inc := range unchecked {
		inc.n.checked = true
		if r, ok := roots[inc.Key]; ok && r {
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
	b.resolveCleared(now, &next)
	b.silences(now)
	due := b.due(now, &next)
	b.assignStorms(now, due, &next)
	for _, inc := range b.incidents {
		b.flushIncident(ctx, inc, now, &next)
	}
	for _, inc := range b.pending {
		b.flushIncident(ctx, inc, now, &next)
	}
	b.pending = slices.DeleteFunc(b.pending, func(inc *Incident) bool { return !inc.n.dirty })
	for _, s := range b.storms {
		b.flushStorm(ctx, s, now, &next)
	}
	b.prune(now)
	b.updateMetrics()
	return next
}

// resolveCleared resolves the incidents whose signals stayed clear for
// ResolveTimeout.
func (b *Bot) resolveCleared(now time.Time, next *time.Time) {
	for _, inc := range b.incidents {
		if !inc.Open() || inc.clearAt.IsZero() {
			continue
		}
		if at := inc.n.clearSeen.Add(b.cfg.ResolveTimeout); now.Before(at) {
			*next = earliest(*next, at)
			continue
		}
		inc.Resolved = inc.clearAt
		inc.n.state = fingerprint(inc)
		inc.n.changed = inc.clearAt
		inc.n.dirty = true
	}
}

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

// uncheckedDue lists the incidents about to be handled whose root this
// replica has not looked up: open ones past their group wait, resolved
// ones at once (their message, if any, must learn it).
func (b *Bot) uncheckedDue(now time.Time) []*Incident {
	var out []*Incident
	add := func(inc *Incident) {
		if !inc.n.checked && (!inc.n.first.IsZero() || !inc.Open() || !now.Before(inc.n.seen.Add(b.cfg.GroupWait))) {
			out = append(out, inc)
		}
	}
	for _, inc := range b.incidents {
		add(inc)
	}
	for _, inc := range b.pending {
		add(inc)
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
			inc.n.causes = b.causesOf(inc)
		}
		byKey[inc.Key] = inc
		byChannel[inc.Channel] = append(byChannel[inc.Channel], storm.Member{Key: inc.Key, Opened: inc.Opened, Causes: inc.n.causes})
	}
	var out []*Storm
	for channel, members := range byChannel {
		groups, _ := storm.Find(members, b.cfg.StormThreshold, b.cfg.StormWindow)
		for _, g := range groups {
			s := &Storm{Key: g.Key(), Cause: g.Cause, Channel: channel, Opened: g.Members[0].Opened}
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

// silences refreshes which incidents are silenced.
func (b *Bot) silences(now time.Time) {
	if b.cfg.Silenced == nil {
		return
	}
	for _, inc := range b.incidents {
		if !inc.Open() {
			inc.Silence = nil
			continue
		}
		info, ok := b.cfg.Silenced(inc.Cluster.String(), inc.Key, now)
		if !ok && inc.Storm != "" {
			info, ok = b.cfg.Silenced("", inc.Storm, now)
		}
		was := inc.Silence != nil
		switch {
		case ok:
			inc.Silence = &info
		default:
			inc.Silence = nil
		}
		if was != ok {
			inc.n.dirty = true
		}
	}
}

// due returns the open incidents whose group wait is over and that flush
// has not handled yet, oldest first.
func (b *Bot) due(now time.Time, next *time.Time) []*Incident {
	var out []*Incident
	for _, inc := range b.pending {
		b.dueResolved(inc, now)
	}
	for _, inc := range b.incidents {
		if !inc.n.first.IsZero() {
			continue
		}
		if !inc.Open() {
			b.dueResolved(inc, now)
			continue
		}
		if inc.Silence != nil || !inc.clearAt.IsZero() {
			// Silenced, or its signals cleared: nothing to post unless
			// they come back (then it is due) or it resolves.
			continue
		}
		if at := inc.n.seen.Add(b.cfg.GroupWait); now.Before(at) {
			*next = earliest(*next, at)
			continue
		}
		out = append(out, inc)
	}
	slices.SortFunc(out, func(x, y *Incident) int {
		if c := x.Opened.Compare(y.Opened); c != 0 {
			return c
		}
		return strings.Compare(x.Key, y.Key)
	})
	return out
}

// dueResolved handles an incident resolved before flush handled it, once
// its root was looked up: e.g. replayed after a restart, where the
// previous run may have posted it.
func (b *Bot) dueResolved(inc *Incident, now time.Time) {
	if !inc.n.first.IsZero() || !inc.n.checked {
		return
	}
	inc.n.first = now
	if !inc.n.rooted {
		// Resolved before anyone was told: nothing to say.
		inc.n.dirty = false
	}
}

// assignStorms folds due incidents into storms: into an open storm of
// their channel whose cause they share, else into a new one when at least
// StormThreshold incidents of the channel share a cause within
// StormWindow. The others are handled on their own, except that while a
// storm may be brewing (a quarter of the threshold already shares a cause
// with the incident) an incident is held back, for at most StormWindow:
// agents report a storm over seconds, and posting its first clusters one
// by one is exactly the flood storms exist to prevent.
func (b *Bot) assignStorms(now time.Time, due []*Incident, next *time.Time) {
	for _, inc := range due {
		inc.n.causes = b.causesOf(inc)
	}
	if b.cfg.StormThreshold < 0 || len(due) == 0 {
		for _, inc := range due {
			inc.n.first = now
		}
		return
	}
	var rest []*Incident
	for _, inc := range due {
		if s := b.stormFor(inc); s != nil {
			inc.n.first = now
			s.join(inc)
			continue
		}
		rest = append(rest, inc)
	}
	if len(rest) == 0 {
		return
	}
	isDue := make(map[string]bool, len(rest))
	for _, inc := range rest {
		isDue[inc.Key] = true
	}
	byChannel := map[string][]storm.Member{}
	byKey := map[string]*Incident{}
	for _, inc := range b.incidents {
		if !inc.Open() || inc.Storm != "" || inc.Silence != nil {
			continue
		}
		if inc.n.causes == nil {
			// Not due yet, but it counts towards a storm.
			inc.n.causes = b.causesOf(inc)
		}
		byKey[inc.Key] = inc
		byChannel[inc.Channel] = append(byChannel[inc.Channel], storm.Member{Key: inc.Key, Opened: inc.Opened, Causes: inc.n.causes})
	}
	channels := make([]string, 0, len(byChannel))
	for ch := range byChannel {
		channels = append(channels, ch)
	}
	slices.Sort(channels)
	for _, channel := range channels {
		members := byChannel[channel]
		groups, _ := storm.Find(members, b.cfg.StormThreshold, b.cfg.StormWindow)
		for _, g := range groups {
			if !slices.ContainsFunc(g.Members, func(m storm.Member) bool { return isDue[m.Key] }) {
				continue // all already told one by one
			}
			s := b.storms[g.Key()]
			if s == nil {
				s = &Storm{Key: g.Key(), Cause: g.Cause, Channel: channel, Opened: g.Members[0].Opened}
				b.storms[s.Key] = s
				b.log.Info().Str("storm", s.Key).Str("cause", s.Cause.Kind.String()).Int("clusters", len(g.Members)).Msg("storm")
			}
			for _, m := range g.Members {
				inc := byKey[m.Key]
				if inc.n.first.IsZero() {
					inc.n.first = now
				}
				s.join(inc)
			}
		}
	}
	brew := max(2, b.cfg.StormThreshold/4)
	for _, inc := range rest {
		if inc.Storm != "" {
			continue
		}
		if hold := inc.n.seen.Add(b.cfg.StormWindow); now.Before(hold) && b.brewing(inc, byChannel[inc.Channel], brew) {
			*next = earliest(*next, now.Add(maxFlush))
			continue
		}
		inc.n.first = now
	}
}

// brewing reports whether at least n open incidents of members (the
// incident included) share a cause with inc within StormWindow.
func (b *Bot) brewing(inc *Incident, members []storm.Member, n int) bool {
	for _, c := range inc.n.causes {
		count := 0
		for _, m := range members {
			if d := m.Opened.Sub(inc.Opened); d > b.cfg.StormWindow || -d > b.cfg.StormWindow {
				continue
			}
			if slices.ContainsFunc(m.Causes, func(x storm.Cause) bool { return x.Kind == c.Kind && x.Value == c.Value }) {
				if count++; count >= n {
					return true
				}
			}
		}
	}
	return false
}

func (b *Bot) causesOf(inc *Incident) []storm.Cause {
	c := b.model.Cluster(inc.Cluster)
	if c == nil {
		return storm.CausesOf(inc.Cluster, event.HostedClusterState{}, false, inc.Diagnoses)
	}
	hc, known := c.HostedCluster()
	return storm.CausesOf(inc.Cluster, hc, known, inc.Diagnoses)
}

// stormFor returns the open storm an incident joins, if any.
func (b *Bot) stormFor(inc *Incident) *Storm {
	var best *Storm
	for _, s := range b.storms {
		if !s.Open() || s.Channel != inc.Channel || !storm.Joins(s.Cause, s.last, inc.n.causes, inc.Opened, b.cfg.StormWindow) {
			continue
		}
		if best == nil || s.Cause.Kind < best.Cause.Kind || s.Cause.Kind == best.Cause.Kind && s.Key < best.Key {
			best = s
		}
	}
	return best
}

func (s *Storm) join(inc *Incident) {
	if inc.Storm == s.Key {
		return
	}
	inc.Storm = s.Key
	s.Members = append(s.Members, inc)
	if inc.Opened.After(s.last) {
		s.last = inc.Opened
	}
	s.Resolved = time.Time{}
	s.dirty = true
}

// flushIncident sends an incident's rendering and thread replies when due.
func (b *Bot) flushIncident(ctx context.Context, inc *Incident, now time.Time, next *time.Time) {
	n := &inc.n
	if n.first.IsZero() || !n.dirty {
		return
	}
	if inc.Storm != "" && !n.rooted {
		// Its storm speaks for it.
		n.dirty = false
		if s := b.storms[inc.Storm]; s != nil {
			s.dirty = true
		}
		return
	}
	if !inc.Open() && !n.rooted {
		n.dirty = false
		return
	}
	if inc.Open() && !inc.clearAt.IsZero() {
		// Its signals cleared: a rendering now would show a problem that
		// is gone (after a restart, one the message no longer shows).
		// It waits for the resolution, or for the signals to come back.
		return
	}
	if inc.Silence != nil {
		if n.rooted && !n.muted {
			b.send(ctx, inc, now)
			n.muted = true
		}
		n.dirty = !n.muted
		return
	}
	n.muted = false
	if !n.sent.IsZero() && now.Before(n.sent.Add(b.cfg.GroupInterval)) {
		*next = earliest(*next, n.sent.Add(b.cfg.GroupInterval))
		return
	}
	b.send(ctx, inc, now)
}

// send hands the incident's rendering and the thread replies it warrants
// to the notifier.
func (b *Bot) send(ctx context.Context, inc *Incident, now time.Time) {
	n := &inc.n
	n.version = nextVersion(n.version, now)
	msg := notify.Message{Key: inc.Key, Channel: inc.Channel, Version: n.version}
	msg.Text, msg.Blocks = Render(inc, now)
	msg.Digest = digest(Render(inc, inc.Opened))
	if err := b.out.Upsert(ctx, msg); err != nil {
		b.log.Error().Err(err).Str("incident", inc.Key).Msg("notification not queued")
		return
	}
	b.metrics.sent.WithLabelValues("incident").Inc()
	b.metrics.latency.Observe(now.Sub(n.changed).Seconds())
	first := !n.rooted
	n.rooted, n.sent, n.dirty = true, now, false
	for _, r := range b.replies(inc, first, now) {
		if err := b.out.Reply(ctx, r); err != nil {
			b.log.Warn().Err(err).Str("incident", inc.Key).Msg("thread reply not queued")
			continue
		}
		b.metrics.sent.WithLabelValues("reply").Inc()
	}
}

// replies are the thread replies of a rendering: the full evidence under
// a new message, and afterwards what is new and what changed state.
func (b *Bot) replies(inc *Incident, first bool, now time.Time) []notify.Reply {
	n := &inc.n
	lines := evidenceLines(inc)
	top := topOf(inc)
	defer func() {
		n.top = top
		if n.evidence == nil {
			n.evidence = map[string]bool{}
		}
		for _, l := range lines {
			n.evidence[l] = true
		}
	}()
	reply := func(id, text string) notify.Reply {
		return notify.Reply{Key: inc.Key, Channel: inc.Channel, ID: id, Text: text}
	}
	var out []notify.Reply
	if first {
		if len(lines) > maxEvidence {
			for i, page := range notify.SplitText("*All evidence*\n"+strings.Join(lines, "\n"), notify.MaxSectionText) {
				out = append(out, reply(fmt.Sprintf("evidence-%d", i), page))
			}
		}
		return out
	}
	var fresh []string
	for _, l := range lines {
		if !n.evidence[l] {
			fresh = append(fresh, l)
		}
	}
	var b2 strings.Builder
	if top != n.top {
		switch {
		case !inc.Open():
			fmt.Fprintf(&b2, "✅ Resolved at %s, after %s.\n", inc.Resolved.UTC().Format(time.RFC3339), inc.Resolved.Sub(inc.Opened).Round(time.Second))
		case n.top == "resolved" || n.top == "":
			fmt.Fprintf(&b2, "Now: %s\n", top)
		default:
			fmt.Fprintf(&b2, "Changed: %s → %s\n", n.top, top)
		}
	}
	if len(fresh) > 0 && inc.Open() {
		b2.WriteString("*New evidence*\n" + strings.Join(fresh, "\n"))
	}
	if b2.Len() == 0 {
		return nil
	}
	for i, page := range notify.SplitText(b2.String(), notify.MaxSectionText) {
		sum := sha256.Sum256([]byte(page))
		out = append(out, reply(fmt.Sprintf("upd-%d-%s", i, hex.EncodeToString(sum[:6])), page))
	}
	return out
}

// flushStorm sends a storm's rendering and lists new members in its thread.
func (b *Bot) flushStorm(ctx context.Context, s *Storm, now time.Time, next *time.Time) {
	open := 0
	var resolved time.Time
	for _, m := range s.Members {
		if m.Open() {
			open++
		} else if m.Resolved.After(resolved) {
			resolved = m.Resolved
		}
	}
	if open == 0 && s.Open() {
		s.Resolved, s.dirty = resolved, true
	}
	if !s.sent.IsZero() {
		// Members that joined after the message went out are listed at
		// once, not when the group interval lets the message change.
		b.listStormMembers(ctx, s)
	}
	if !s.dirty {
		return
	}
	if s.Open() && s.clearing() {
		// As for an incident: every open member's signals cleared, so a
		// rendering now would show a storm that is over (after a restart,
		// one its message may no longer show). It waits for the
		// resolution, or for a member's signals to come back.
		return
	}
	if !s.sent.IsZero() && now.Before(s.sent.Add(b.cfg.GroupInterval)) && s.Open() {
		*next = earliest(*next, s.sent.Add(b.cfg.GroupInterval))
		return
	}
	if s.sent.IsZero() && !s.Open() && !s.rooted {
		s.dirty = false
		return
	}
	s.version = nextVersion(s.version, now)
	msg := notify.Message{Key: s.Key, Channel: s.Channel, Version: s.version}
	msg.Text, msg.Blocks = RenderStorm(s, now)
	msg.Digest = digest(RenderStorm(s, s.Opened))
	if err := b.out.Upsert(ctx, msg); err != nil {
		b.log.Error().Err(err).Str("storm", s.Key).Msg("notification not queued")
		return
	}
	b.metrics.sent.WithLabelValues("storm").Inc()
	s.sent, s.dirty = now, false
	b.listStormMembers(ctx, s)
}

// stormPageBytes bounds the text of one storm page: far below Slack's
// message limit, and few pages, since each is a post (one per second).
const stormPageBytes = 12000

// listStormMembers replies with pages listing the members not listed yet:
// at most StormPage members and stormPageBytes of text per page.
func (b *Bot) listStormMembers(ctx context.Context, s *Storm) {
	main := mainRule(s)
	for s.listed < len(s.Members) {
		to, size := s.listed, 0
		for to < len(s.Members) && to-s.listed < b.cfg.StormPage {
			n := len(stormLine(s.Members[to], main))
			if to > s.listed && size+n > stormPageBytes {
				break
			}
			size += n
			to++
		}
		r := notify.Reply{Key: s.Key, Channel: s.Channel, ID: fmt.Sprintf("members-%d-%d", s.listed, to),
			Text: StormPage(s, s.listed, to)}
		if err := b.out.Reply(ctx, r); err != nil {
			b.log.Warn().Err(err).Str("storm", s.Key).Msg("storm page not queued")
			return
		}
		b.metrics.sent.WithLabelValues("reply").Inc()
		s.listed = to
	}
}

// prune forgets what was resolved and told long ago.
func (b *Bot) prune(now time.Time) {
	for k, inc := range b.incidents {
		if !inc.Open() && !inc.n.dirty && now.Sub(inc.Resolved) > retain && inc.Storm == "" {
			delete(b.incidents, k)
		}
	}
	for key, s := range b.storms {
		if !s.Open() && !s.dirty && now.Sub(s.Resolved) > retain {
			for _, m := range s.Members {
				if b.incidents[m.Cluster] == m && !m.Open() {
					delete(b.incidents, m.Cluster)
				}
			}
			delete(b.storms, key)
		}
	}
}

func (b *Bot) updateMetrics() {
	b.metrics.open.Reset()
	for _, inc := range b.incidents {
		if inc.Open() && len(inc.Diagnoses) > 0 {
			b.metrics.open.WithLabelValues(inc.Diagnoses[0].Rule).Inc()
		}
	}
	n := 0
	for _, s := range b.storms {
		if s.Open() {
			n++
		}
	}
	b.metrics.storms.Set(float64(n))
}

// digest identifies what a rendering shows. Rendered at a fixed time (the
// opening), durations stay out of it: a restarted bot that re-renders an
// incident nobody changed leaves its message alone (notify.Message.Digest).
func digest(text string, blocks []slack.Block) string {
	h := sha256.New()
	h.Write([]byte(text))
	if b, err := json.Marshal(blocks); err == nil {
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// nextVersion orders renderings across restarts and replicas: wall time,
// strictly increasing.
func nextVersion(prev uint64, now time.Time) uint64 {
	return max(prev+1, uint64(now.UnixNano()))
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func topOf(inc *Incident) string {
	if !inc.Open() {
		return "resolved"
	}
	if len(inc.Diagnoses) == 0 {
		return ""
	}
	d := inc.Diagnoses[0]
	return fmt.Sprintf("%s %s — %s", severityIcon[d.Severity], strings.ToUpper(string(d.Severity)), d.Title)
}

func evidenceLines(inc *Incident) []string {
	var out []string
	for _, d := range inc.Diagnoses {
		for _, e := range d.Evidence {
			out = append(out, evidenceLine(e))
		}
	}
	return out
}

func evidenceSet(inc *Incident) map[string]bool {
	m := map[string]bool{}
	for _, l := range evidenceLines(inc) {
		m[l] = true
	}
	return m
}

// copy returns a snapshot of the incident for readers outside the lock.
func (inc *Incident) copy() *Incident {
	cp := *inc
	cp.n = notifyState{}
	if inc.Silence != nil {
		s := *inc.Silence
		cp.Silence = &s
	}
	return &cp
}

// Storms returns a snapshot of every storm, open ones first.
func (b *Bot) Storms() []StormState {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]StormState, 0, len(b.storms))
	for _, s := range b.storms {
		st := StormState{Key: s.Key, Cause: s.Cause, Channel: s.Channel, Opened: s.Opened, Resolved: s.Resolved}
		for _, m := range s.Members {
			st.Members = append(st.Members, m.Key)
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(x, y StormState) int {
		if x.Resolved.IsZero() != y.Resolved.IsZero() {
			if x.Resolved.IsZero() {
				return -1
			}
			return 1
		}
		return y.Opened.Compare(x.Opened)
	})
	return out
}

// StormState is a copy of a storm for readers outside the event loop.
type StormState struct {
	Key      string
	Cause    storm.Cause
	Channel  string
	Opened   time.Time
	Resolved time.Time
	Members  []string // incident keys
}
