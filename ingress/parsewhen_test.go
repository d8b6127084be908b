package ingress

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A moment is an RFC 3339 time or a duration from now written as every duration of the
// service is, days included (`alerts list --due-before 2d` was refused).
func TestParseWhenTakesDays(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"2d":                   now.Add(48 * time.Hour),
		"-30m":                 now.Add(-30 * time.Minute),
		"1d12h":                now.Add(36 * time.Hour),
		"2026-12-07T00:00:00Z": time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC),
	} {
		got, err := ParseWhen(in, now)
		require.NoError(t, err, in)
		require.True(t, want.Equal(got), "%s: %s", in, got)
	}
	_, err := ParseWhen("tomorrow", now)
	require.ErrorContains(t, err, "3d")
}
