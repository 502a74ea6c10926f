package bus

import (
	"time"

	"github.com/hcpbot/hcpbot/event"
)

// EventsStream is the stream the agents publish to and the bots consume
// from, with the defaults both sides create it with (the config overrides
// replicas and retention). The duplicate window is what makes a restated
// fact from a restarted agent or a new leader a no-op.
func EventsStream(replicas int, maxAge, duplicates time.Duration) StreamSpec {
	maxAge = durOr(maxAge, DefaultEventsMaxAge)
	duplicates = durOr(duplicates, DefaultEventsDuplicates)
	return StreamSpec{
		Name:       EventsStreamName,
		Subjects:   []string{event.EventsStreamSubjects},
		MaxAge:     maxAge,
		Replicas:   replicas,
		Duplicates: min(duplicates, maxAge),
	}
}
