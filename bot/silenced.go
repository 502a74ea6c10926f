package bot

import (
	"slices"
)

// The stages of silences: which incidents a silence covers (silence), the
// incident not handled yet that one covers (new-silenced), and the one
// the flush handles (silenced). Config.Silenced answers; bot/silence
// keeps the silences.

// silenceStage refreshes which incidents are silenced; it holds nothing
// (new-silenced and silenced do).
type silenceStage struct{ silenced Silencer }

func (silenceStage) Name() string { return "silence" }

func (s silenceStage) Exec(f *flushRun, due []*Incident) []*Incident {
	if s.silenced == nil {
		return due
	}
	for _, inc := range due {
		if !inc.Open() {
			inc.Silence = nil
			continue
		}
		info, ok := s.silenced(inc.Cluster.String(), inc.Key, f.now)
		if !ok && inc.Storm != "" {
			info, ok = s.silenced("", inc.Storm, f.now)
		}
		was := inc.Silence != nil
		inc.Silence = nil
		if ok {
			inc.Silence = &info
		}
		if was != ok {
			inc.n.dirty = true
		}
	}
	return due
}

// newSilencedStage holds an open incident the flush has not handled yet
// that a silence covers: nothing is posted while the silence lasts.
type newSilencedStage struct{ holder }

func (newSilencedStage) Name() string { return "new-silenced" }

func (s newSilencedStage) Exec(_ *flushRun, due []*Incident) []*Incident {
	return s.holdIncidents(due, func(inc *Incident) bool {
		return inc.n.first.IsZero() && inc.Open() && inc.Silence != nil
	})
}

// silencedStage keeps a silenced incident quiet: one with a message lets
// one rendering on to say it is silenced (sendStage then holds it), then
// holds everything until the silence ends; one without waits unposted.
type silencedStage struct{ holder }

func (silencedStage) Name() string { return "silenced" }

func (s silencedStage) Exec(_ *flushRun, due []*Incident) []*Incident {
	return slices.DeleteFunc(due, func(inc *Incident) bool {
		n := &inc.n
		switch {
		case inc.Silence == nil:
			if n.held == reasonSilenced {
				n.held = "" // the silence ended: nothing is held for it
			}
			return false
		case n.rooted && n.held != reasonSilenced:
			return false // its message is to say so
		}
		told := n.held == reasonSilenced && n.rooted
		s.hold(&n.held, "incident", inc.Key)
		if told {
			n.dirty = false // shown with the next rendering after the silence
		}
		return true
	})
}
