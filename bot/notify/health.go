package notify

import (
	"slices"
	"strings"
	"sync"
	"time"
)

// A channel the bot cannot post to stays so until someone acts (invites
// the bot, unarchives the channel, reinstalls the app): retrying is
// useless, and the people who should see the incidents do not know. The
// notifier drops the items for such a channel (each new rendering still
// tries once), logs the channel once when it goes bad and once when it is
// back, and keeps it in Unpostable, which `/hcp status` shows.

// ChannelProblem is a channel the notifier cannot post to.
type ChannelProblem struct {
	Channel string
	Error   string    // Slack's error code, e.g. not_in_channel
	Since   time.Time // the first refusal with this error
}

// unpostableCodes are Slack's errors that say the bot cannot post to a
// channel at all, until a person fixes something.
var unpostableCodes = map[string]bool{
	"channel_not_found": true,
	"not_in_channel":    true,
	"is_archived":       true,
	"token_revoked":     true,
	"account_inactive":  true,
	"invalid_auth":      true,
	"not_authed":        true,
	"missing_scope":     true,
}

// channelHealth remembers the channels Slack refused posts to.
type channelHealth struct {
	mu  sync.Mutex
	bad map[string]ChannelProblem
}

// unpostable reports whether err says the bot cannot post to the channel.
func unpostable(err error) bool { return unpostableCodes[errorCode(err)] }

// Unpostable lists the channels the last post or update to was refused
// for a reason only a person can fix, by channel. It is this process's
// view: another replica that posted since may know better.
func (s *Slack) Unpostable() []ChannelProblem {
	s.health.mu.Lock()
	defer s.health.mu.Unlock()
	out := make([]ChannelProblem, 0, len(s.health.bad))
	for _, p := range s.health.bad {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b ChannelProblem) int { return strings.Compare(a.Channel, b.Channel) })
	return out
}

// posted notes the outcome of a post or update to channel: an error that
// makes the channel unpostable marks it (logged when it starts or changes),
// a success clears it (logged).
func (s *Slack) posted(channel string, err error, now time.Time) {
	s.health.mu.Lock()
	defer s.health.mu.Unlock()
	old, wasBad := s.health.bad[channel]
	switch {
	case err == nil:
		if !wasBad {
			return
		}
		delete(s.health.bad, channel)
		s.log.Info().Str("channel", channel).Str("was", old.Error).Msg("can post to the channel again")
	case unpostable(err):
		code := errorCode(err)
		if wasBad && old.Error == code {
			return
		}
		s.health.bad[channel] = ChannelProblem{Channel: channel, Error: code, Since: now}
		s.log.Error().Str("channel", channel).Str("error", code).
			Msg("cannot post to the channel; its messages are dropped until a person fixes it (see /hcp status)")
	default:
		return
	}
	s.m.unpostable.Set(float64(len(s.health.bad)))
}
