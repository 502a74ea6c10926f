package bot

import (
	"fmt"
	"slices"
	"time"

	"github.com/hcpbot/hcpbot/bot/notify"
)

// The stages of the storm pipeline (stages.go lists them in order): a
// storm's message goes through them as an incident's does.

// stormPages lists a storm's members in its thread.
type stormPages struct {
	sender
	page int // members per page at most (Config.StormPage)
}

// list replies with pages listing the members not listed yet: at most
// page members and stormPageBytes of text per page.
func (p stormPages) list(f *flushRun, s *Storm) {
	for s.listed < len(s.Members) {
		to := stormPageEnd(s, s.listed, p.page)
		r := notify.Reply{Key: s.Key, Channel: s.Channel, ID: fmt.Sprintf("members-%d-%d", s.listed, to),
			Text: StormPage(s, s.listed, to)}
		if err := p.out.Reply(f.ctx, r); err != nil {
			p.log.Warn().Err(err).Str("storm", s.Key).Msg("storm page not queued")
			return
		}
		p.sent.WithLabelValues("reply").Inc()
		s.listed = to
	}
}

// settleStormStage resolves a storm none of whose members is open, and
// lists the members not listed yet of a storm whose message went out. It
// holds nothing.
type settleStormStage struct{ pages stormPages }

func (settleStormStage) Name() string { return "settle" }

func (p settleStormStage) Exec(f *flushRun, due []*Storm) []*Storm {
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
			p.pages.list(f, s)
		}
	}
	return due
}

// unchangedStormStage stops a storm with nothing new to show, uncounted.
type unchangedStormStage struct{}

func (unchangedStormStage) Name() string { return "unchanged" }

func (unchangedStormStage) Exec(_ *flushRun, due []*Storm) []*Storm {
	return slices.DeleteFunc(due, func(s *Storm) bool { return !s.dirty })
}

// clearingStormStage holds an open storm every open member of which has
// its signals cleared: they wait for their resolution.
type clearingStormStage struct{ holder }

func (clearingStormStage) Name() string { return "clearing" }

func (p clearingStormStage) Exec(_ *flushRun, due []*Storm) []*Storm {
	return p.holdStorms(due, func(s *Storm) bool { return s.Open() && s.clearing() })
}

// groupIntervalStormStage paces an open storm's message as
// groupIntervalStage does an incident's.
type groupIntervalStormStage struct {
	holder
	interval time.Duration
}

func (groupIntervalStormStage) Name() string { return "group-interval" }

func (p groupIntervalStormStage) Exec(f *flushRun, due []*Storm) []*Storm {
	return p.holdStorms(due, func(s *Storm) bool { return s.Open() && paced(f, s.sent, p.interval) })
}

// resolvedUnpostedStormStage drops a storm resolved before its message
// was posted (and not revived with one of the previous run).
type resolvedUnpostedStormStage struct{ holder }

func (resolvedUnpostedStormStage) Name() string { return "resolved-unposted" }

func (p resolvedUnpostedStormStage) Exec(_ *flushRun, due []*Storm) []*Storm {
	return p.holdStorms(due, func(s *Storm) bool {
		if !s.sent.IsZero() || s.Open() || s.rooted {
			return false
		}
		s.dirty = false
		return true
	})
}

// sendStormStage hands each storm's rendering to the notifier and lists
// its new members in the thread.
type sendStormStage struct{ stormPages }

func (sendStormStage) Name() string { return "send" }

func (p sendStormStage) Exec(f *flushRun, due []*Storm) []*Storm {
	for _, s := range due {
		s.version = nextVersion(s.version, f.now)
		msg := notify.Message{Key: s.Key, Channel: s.Channel, Version: s.version, LeaderOnly: true}
		msg.Text, msg.Blocks = RenderStorm(s, f.now)
		msg.Digest = digest(RenderStorm(s, s.Opened))
		if err := p.out.Upsert(f.ctx, msg); err != nil {
			p.log.Error().Err(err).Str("storm", s.Key).Msg("notification not queued")
			continue
		}
		p.sent.WithLabelValues("storm").Inc()
		s.sent, s.dirty, s.held = f.now, false, ""
		p.list(f, s)
	}
	return due
}
