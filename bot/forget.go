package bot

import (
	"slices"
	"time"
)

// What the correlator forgets, and when: deleted hosted clusters after
// ForgetAfter (every replica), and what was resolved and told long ago
// (retain), so that memory follows the fleet, not its history.

// retain bounds memory: resolved incidents and storms are forgotten this
// long after they were resolved and sent.
const retain = time.Hour

// forgetGone drops what the bot holds for hosted clusters deleted at least
// ForgetAfter ago: the model's Cluster, the incident and its storm
// membership. A leader keeps an incident whose resolution is still to be
// sent. Every replica runs it, so followers do not grow either.
func (b *Bot) forgetGone(now time.Time, leader bool) {
	for k, since := range b.gone {
		if c := b.model.Cluster(k); c == nil || !c.Gone() {
			delete(b.gone, k) // created again
			continue
		}
		if now.Sub(since) < b.cfg.ForgetAfter {
			continue
		}
		if inc := b.incidents[k]; inc != nil {
			if leader && b.caughtUp && inc.n.dirty && inc.n.rooted {
				continue
			}
			delete(b.incidents, k)
			if s := b.storms[inc.Storm]; s != nil {
				s.Members = slices.DeleteFunc(s.Members, func(m *Incident) bool { return m == inc })
				s.listed = min(s.listed, len(s.Members))
				if len(s.Members) == 0 {
					delete(b.storms, s.Key)
				}
			}
		}
		b.pending = slices.DeleteFunc(b.pending, func(p *Incident) bool { return p.Cluster == k })
		b.model.Forget(k)
		delete(b.gone, k)
	}
}

// prune forgets what was resolved and told long ago.
func (b *Bot) prune(now time.Time) {
	for k, inc := range b.incidents {
		if !inc.Open() && !inc.n.dirty && now.Sub(inc.Resolved) > retain && inc.Storm == "" {
			delete(b.incidents, k)
		}
	}
	b.sentPending = slices.DeleteFunc(b.sentPending, func(p *Incident) bool { return now.Sub(p.n.sent) > retain })
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
