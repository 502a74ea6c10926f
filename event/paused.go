package event

import (
	"strconv"
	"time"
)

// Pause is what a spec.pausedUntil value means at one moment, read as
// HyperShift reads it (support/util/pausereconcile.go,
// ProcessPausedUntilField): a boolean pauses while true, with no end; an
// RFC3339 time pauses until then; anything else (the CRD lets
// "2026-09-01T00:00:00" without a zone through) pauses nothing, and
// HyperShift reports it as InvalidPausedUntilValue.
type Pause struct {
	Paused  bool
	Until   time.Time // zero while paused "true" (until the field is removed)
	Invalid bool      // set but neither a boolean nor RFC3339
}

// ReadPausedUntil reads a spec.pausedUntil value at now.
func ReadPausedUntil(value string, now time.Time) Pause {
	if value == "" {
		return Pause{}
	}
	if b, err := strconv.ParseBool(value); err == nil {
		return Pause{Paused: b}
	}
	t, err := time.Parse(time.RFC3339, value)
	if err != nil {
		return Pause{Invalid: true}
	}
	return Pause{Paused: now.Before(t), Until: t}
}
