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
	if maxAge <= 0 {
		maxAge = 72 * time.Hour
	}
	if duplicates <= 0 {
		duplicates = 15 * time.Minute
	}
	return StreamSpec{
		Name:       event.StreamName,
		Subjects:   []string{event.EventsStreamSubjects},
		MaxAge:     maxAge,
		Replicas:   replicas,
		Duplicates: min(duplicates, maxAge),
	}
}
