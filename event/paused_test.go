package event

import (
	"testing"
	"time"
)

// The cases of HyperShift's ProcessPausedUntilField
// (support/util/pausereconcile.go:31-48 at 3ee9615): strconv.ParseBool
// first, then time.RFC3339, else not paused.
func TestReadPausedUntil(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		value string
		want  Pause
	}{
		{"", Pause{}},
		{"true", Pause{Paused: true}},
		{"True", Pause{Paused: true}},
		{"false", Pause{}},
		{"False", Pause{}},
		{"2026-12-07T00:00:00Z", Pause{Paused: true, Until: time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)}},
		{"2026-12-06T11:00:00Z", Pause{Until: time.Date(2026, 12, 6, 11, 0, 0, 0, time.UTC)}},
		{"2026-12-07T00:00:00", Pause{Invalid: true}}, // passes the CRD's pattern, not RFC3339
	} {
		got := ReadPausedUntil(tc.value, now)
		if got.Paused != tc.want.Paused || !got.Until.Equal(tc.want.Until) || got.Invalid != tc.want.Invalid {
			t.Errorf("ReadPausedUntil(%q) = %+v, want %+v", tc.value, got, tc.want)
		}
	}
}
