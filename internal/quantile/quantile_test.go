package quantile

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestOfAndSummarize(t *testing.T) {
	require.Zero(t, Of(nil, 0.5))
	var d []time.Duration
	for i := 100; i >= 1; i-- { // 100 down to 1 ms, unsorted on purpose
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	d = append(d, -3*time.Millisecond, -time.Millisecond)
	s := Summarize(d) // sorted: -3, -1, 1, …, 100 ms; ⌊0.5·101⌋ = 50 and ⌊0.99·101⌋ = 99 are 49 and 98 ms
	require.Equal(t, Summary{N: 102, P50: 49 * time.Millisecond, P99: 98 * time.Millisecond, Max: 100 * time.Millisecond, Early: 2}, s)
	require.Equal(t, 100*time.Millisecond, d[0], "the input is not reordered")
	sorted := []time.Duration{1, 2, 3}
	require.Equal(t, time.Duration(1), Of(sorted, 0))
	require.Equal(t, time.Duration(3), Of(sorted, 1))
	require.Equal(t, time.Duration(3), Of(sorted, 7), "p is clamped")
	require.Equal(t, time.Duration(2), Of(sorted, 0.5))
}
