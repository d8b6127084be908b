package bench

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A row measured several times is its run of median max lateness (the upper one of an
// even count), with the least and the most max lateness of the runs.
func TestMedianRunIsTheMedianOfMaxLateness(t *testing.T) {
	run := func(worst time.Duration, rate float64) scaleRun { return scaleRun{worst: worst, rate: rate} }
	r := medianRun([]scaleRun{run(90*time.Millisecond, 1), run(40*time.Millisecond, 2), run(60*time.Millisecond, 3)})
	require.Equal(t, 60*time.Millisecond, r.worst)
	require.Equal(t, 3.0, r.rate, "the median run's other figures come with it")
	require.Equal(t, [2]time.Duration{40 * time.Millisecond, 90 * time.Millisecond}, r.spread)
	require.Equal(t, 3, r.runs)

	r = medianRun([]scaleRun{run(4, 0), run(1, 0), run(3, 0), run(2, 0)})
	require.Equal(t, time.Duration(3), r.worst)
	require.Equal(t, [2]time.Duration{1, 4}, r.spread)

	r = medianRun([]scaleRun{run(7, 0)})
	require.Equal(t, time.Duration(7), r.worst)
	require.Equal(t, 1, r.runs)
}
