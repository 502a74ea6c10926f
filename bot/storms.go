package bot

import (
	"fmt"
	"slices"
	"time"

	"github.com/hcpbot/hcpbot/bot/notify"
	"github.com/hcpbot/hcpbot/bot/storm"
	"github.com/hcpbot/hcpbot/event"
)

// Storms: the correlator's side of bot/storm. Due incidents sharing a
// cause are folded into one storm message (stormStage), storms of the
// previous run are found again after a restart (replayedStorms, revive),
// and storms go through a pipeline of their own (stormStages).

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
	listed  int    // members already listed in the thread
	rooted  bool   // revived with the message of a previous run
	held    reason // why a stage holds it back; "" after a rendering went out
	// bare is a revived storm's key without the group's suffix (set with
	// several groups only): the key one bot had before a repartition
	// from one group, whose message the group holding the storm's first
	// member takes over (flush.go).
	bare string
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

// stormStage folds the incidents now due (those flush has not handled:
// first is zero) into storms: into an open storm of their channel whose
// cause they share, else into a new one when at least StormThreshold
// incidents of the channel share a cause within StormWindow. The others
// are handled on their own, except that while a storm may be brewing
// around an incident it is held back, for at most StormWindow: agents
// report a storm over seconds, and posting its first clusters one by one
// is exactly the flood storms exist to prevent. A storm is brewing
// (storm.Brewing) only while the incidents sharing one of the incident's
// causes can still reach StormThreshold within the window at the pace they
// opened at, and the newest of them is younger than GroupWait: incidents
// with no cause in common never hold each other, and a burst of unrelated
// failures on one management cluster posts GroupWait after its last
// incident, not after the storm window. It lets on every incident it does
// not hold; storm members go on to the storm-member stage.
func (b *Bot) stormStage(f *flushRun, due []*Incident) []*Incident {
	var fresh []*Incident
	for _, inc := range due {
		if inc.n.first.IsZero() {
			inc.n.causes = b.causesOf(inc)
			fresh = append(fresh, inc)
		}
	}
	slices.SortStableFunc(fresh, compareOpened)
	if b.cfg.StormThreshold < 0 || len(fresh) == 0 {
		for _, inc := range fresh {
			inc.n.first = f.now
		}
		return due
	}
	var rest []*Incident
	for _, inc := range fresh {
		if s := b.stormFor(inc); s != nil {
			inc.n.first = f.now
			s.join(inc)
			continue
		}
		rest = append(rest, inc)
	}
	if len(rest) == 0 {
		return due
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
		byChannel[inc.Channel] = append(byChannel[inc.Channel], storm.Member{Key: inc.Key, Opened: inc.Opened, Causes: inc.n.causes, Seen: inc.n.seen})
	}
	channels := make([]string, 0, len(byChannel))
	for ch := range byChannel {
		channels = append(channels, ch)
	}
	slices.Sort(channels)
	for _, channel := range channels {
		groups, _ := storm.Find(byChannel[channel], b.cfg.StormThreshold, b.cfg.StormWindow)
		for _, g := range groups {
			if !slices.ContainsFunc(g.Members, func(m storm.Member) bool { return isDue[m.Key] }) {
				continue // all already told one by one
			}
			s := b.storms[b.stormKey(g)]
			if s == nil {
				s = &Storm{Key: b.stormKey(g), Cause: g.Cause, Channel: channel, Opened: g.Members[0].Opened}
				b.storms[s.Key] = s
				b.log.Info().Str("storm", s.Key).Str("cause", s.Cause.Kind.String()).Int("clusters", len(g.Members)).Msg("storm")
			}
			for _, m := range g.Members {
				inc := byKey[m.Key]
				if inc.n.first.IsZero() {
					inc.n.first = f.now
				}
				s.join(inc)
			}
		}
	}
	held := map[*Incident]bool{}
	for _, inc := range rest {
		if inc.Storm != "" {
			continue
		}
		until := storm.Brewing(inc.n.causes, inc.Opened, byChannel[inc.Channel], b.cfg.StormThreshold, b.cfg.StormWindow, b.cfg.GroupWait)
		if until = earliest(until, inc.n.seen.Add(b.cfg.StormWindow)); f.now.Before(until) {
			f.lookAgain(until)
			b.hold(&inc.n.held, "incident", inc.Key, reasonStormBrewing)
			held[inc] = true
			continue
		}
		inc.n.first = f.now
	}
	return slices.DeleteFunc(due, func(inc *Incident) bool { return held[inc] })
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

// stormMemberStage drops a storm member without a message of its own: its
// storm speaks for it, and is to show what changed. A member posted before
// its storm formed keeps its own message up to date.
func (b *Bot) stormMemberStage(_ *flushRun, due []*Incident) []*Incident {
	return slices.DeleteFunc(due, func(inc *Incident) bool {
		if inc.Storm == "" || inc.n.rooted {
			return false
		}
		inc.n.dirty = false
		if s := b.storms[inc.Storm]; s != nil {
			s.dirty = true
		}
		b.hold(&inc.n.held, "incident", inc.Key, reasonStormMember)
		return true
	})
}

// stormStages is the order a storm goes through, as incidentStages and
// for the same reasons: its state is settled (and members that joined
// since its message went out are listed in the thread at once, not when
// the group interval lets the message change), what has nothing new to
// show stops, a storm every open member of which is clearing waits, the
// message is paced, a storm resolved before its message was posted is
// dropped, and the rest is sent.
func (b *Bot) stormStages() pipeline[*Storm] {
	return pipeline[*Storm]{
		{"settle", b.settleStormStage},
		{"unchanged", func(_ *flushRun, due []*Storm) []*Storm {
			return slices.DeleteFunc(due, func(s *Storm) bool { return !s.dirty })
		}},
		{"clearing", b.holdStorms(func(_ *flushRun, s *Storm) (reason, bool) {
			return reasonClearing, s.Open() && s.clearing()
		})},
		{"group-interval", b.holdStorms(func(f *flushRun, s *Storm) (reason, bool) {
			if s.sent.IsZero() || !s.Open() || !f.now.Before(s.sent.Add(b.cfg.GroupInterval)) {
				return "", false
			}
			f.lookAgain(s.sent.Add(b.cfg.GroupInterval))
			return reasonGroupInterval, true
		})},
		{"resolved-unposted", b.holdStorms(func(_ *flushRun, s *Storm) (reason, bool) {
			if !s.sent.IsZero() || s.Open() || s.rooted {
				return "", false
			}
			s.dirty = false
			return reasonResolvedUnposted, true
		})},
		{"send", b.sendStormStage},
	}
}

// holdStorms is a storm stage holding back the storms held says so for.
func (b *Bot) holdStorms(held func(*flushRun, *Storm) (reason, bool)) func(*flushRun, []*Storm) []*Storm {
	return func(f *flushRun, due []*Storm) []*Storm {
		return slices.DeleteFunc(due, func(s *Storm) bool {
			r, ok := held(f, s)
			if ok {
				b.hold(&s.held, "storm", s.Key, r)
			}
			return ok
		})
	}
}

// settleStormStage resolves a storm none of whose members is open, and
// lists the members not listed yet of a storm whose message went out.
func (b *Bot) settleStormStage(f *flushRun, due []*Storm) []*Storm {
	for _, s := range due {
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
			b.listStormMembers(f, s)
		}
	}
	return due
}

// sendStormStage hands each storm's rendering to the notifier and lists
// its new members in the thread.
func (b *Bot) sendStormStage(f *flushRun, due []*Storm) []*Storm {
	for _, s := range due {
		s.version = nextVersion(s.version, f.now)
		msg := notify.Message{Key: s.Key, Channel: s.Channel, Version: s.version}
		msg.Text, msg.Blocks = RenderStorm(s, f.now)
		msg.Digest = digest(RenderStorm(s, s.Opened))
		if err := b.out.Upsert(f.ctx, msg); err != nil {
			b.log.Error().Err(err).Str("storm", s.Key).Msg("notification not queued")
			continue
		}
		b.metrics.sent.WithLabelValues("storm").Inc()
		s.sent, s.dirty, s.held = f.now, false, ""
		b.listStormMembers(f, s)
	}
	return due
}

// listStormMembers replies with pages listing the members not listed yet:
// at most StormPage members and stormPageBytes of text per page.
func (b *Bot) listStormMembers(f *flushRun, s *Storm) {
	for s.listed < len(s.Members) {
		to := stormPageEnd(s, s.listed, b.cfg.StormPage)
		r := notify.Reply{Key: s.Key, Channel: s.Channel, ID: fmt.Sprintf("members-%d-%d", s.listed, to),
			Text: StormPage(s, s.listed, to)}
		if err := b.out.Reply(f.ctx, r); err != nil {
			b.log.Warn().Err(err).Str("storm", s.Key).Msg("storm page not queued")
			return
		}
		b.metrics.sent.WithLabelValues("reply").Inc()
		s.listed = to
	}
}

// stormKey is g's key, with this group's suffix when there are several
// (partition.go).
func (b *Bot) stormKey(g storm.Group) string { return g.Key() + b.stormSuffix }
