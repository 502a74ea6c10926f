package bot

import (
	"slices"
	"time"

	"github.com/rs/zerolog"

	"github.com/hcpbot/hcpbot/bot/diagnose"
	"github.com/hcpbot/hcpbot/bot/storm"
	"github.com/hcpbot/hcpbot/event"
)

// Storms: the correlator's side of bot/storm. Due incidents sharing a
// cause are folded into one storm message (stormStage) and its members
// dropped from the incident pipeline (stormMemberStage); storms of the
// previous run are found again by the takeover (takeover.go), and storms
// go through a pipeline of their own (storm_stages.go).

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
	// member takes over (takeover.go).
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
type stormStage struct {
	holder
	threshold         int
	window, groupWait time.Duration
	incidents         map[diagnose.Key]*Incident
	storms            map[string]*Storm
	model             *diagnose.Model // what causes an incident could share (causesOf)
	key               func(storm.Group) string
	log               zerolog.Logger
}

func (stormStage) Name() string { return "storm" }

func (p stormStage) Exec(f *flushRun, due []*Incident) []*Incident {
	var fresh []*Incident
	for _, inc := range due {
		if inc.n.first.IsZero() {
			inc.n.causes = causesOf(p.model, inc)
			fresh = append(fresh, inc)
		}
	}
	slices.SortStableFunc(fresh, compareOpened)
	if p.threshold < 0 || len(fresh) == 0 {
		for _, inc := range fresh {
			inc.n.first = f.now
		}
		return due
	}
	var rest []*Incident
	for _, inc := range fresh {
		if s := p.stormFor(inc); s != nil {
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
	for _, inc := range p.incidents {
		if !inc.Open() || inc.Storm != "" || inc.Silence != nil {
			continue
		}
		if inc.n.causes == nil {
			// Not due yet, but it counts towards a storm.
			inc.n.causes = causesOf(p.model, inc)
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
		groups, _ := storm.Find(byChannel[channel], p.threshold, p.window)
		for _, g := range groups {
			if !slices.ContainsFunc(g.Members, func(m storm.Member) bool { return isDue[m.Key] }) {
				continue // all already told one by one
			}
			s := p.storms[p.key(g)]
			if s == nil {
				s = &Storm{Key: p.key(g), Cause: g.Cause, Channel: channel, Opened: g.Members[0].Opened}
				p.storms[s.Key] = s
				p.log.Info().Str("storm", s.Key).Str("cause", s.Cause.Kind.String()).Int("clusters", len(g.Members)).Msg("storm")
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
		until := storm.Brewing(inc.n.causes, inc.Opened, byChannel[inc.Channel], p.threshold, p.window, p.groupWait)
		if until = earliest(until, inc.n.seen.Add(p.window)); f.now.Before(until) {
			f.lookAgain(until)
			p.hold(&inc.n.held, "incident", inc.Key)
			held[inc] = true
			continue
		}
		inc.n.first = f.now
	}
	return slices.DeleteFunc(due, func(inc *Incident) bool { return held[inc] })
}

// causesOf is what inc could share with other incidents, from its
// cluster in model.
func causesOf(model *diagnose.Model, inc *Incident) []storm.Cause {
	c := model.Cluster(inc.Cluster)
	if c == nil {
		return storm.CausesOf(inc.Cluster, event.HostedClusterState{}, false, inc.Diagnoses)
	}
	hc, known := c.HostedCluster()
	return storm.CausesOf(inc.Cluster, hc, known, inc.Diagnoses)
}

// stormFor returns the open storm an incident joins, if any.
func (p stormStage) stormFor(inc *Incident) *Storm {
	var best *Storm
	for _, s := range p.storms {
		if !s.Open() || s.Channel != inc.Channel || !storm.Joins(s.Cause, s.last, inc.n.causes, inc.Opened, p.window) {
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
type stormMemberStage struct {
	holder
	storms map[string]*Storm
}

func (stormMemberStage) Name() string { return "storm-member" }

func (p stormMemberStage) Exec(_ *flushRun, due []*Incident) []*Incident {
	return p.holdIncidents(due, func(inc *Incident) bool {
		if inc.Storm == "" || inc.n.rooted {
			return false
		}
		inc.n.dirty = false
		if s := p.storms[inc.Storm]; s != nil {
			s.dirty = true
		}
		return true
	})
}

// stormKey is g's key, with this group's suffix when there are several
// (partition.go).
func (b *Bot) stormKey(g storm.Group) string { return g.Key() + b.stormSuffix }
