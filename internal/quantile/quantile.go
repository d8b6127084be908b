// Package quantile summarises measured durations (lateness, latencies) for the
// benchmarks, the fault suite and the tests, with one definition of a percentile, so
// that every figure the project prints is computed the same way.
package quantile

import (
	"slices"
	"time"
)

// Of returns the p-quantile (0 ≤ p ≤ 1) of sorted, which is in ascending order: the
// element at index ⌊p·(n−1)⌋, so Of(s, 0) is the minimum and Of(s, 1) the maximum. It
// returns 0 for an empty slice.
func Of(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	p = min(max(p, 0), 1)
	return sorted[int(p*float64(len(sorted)-1))]
}

// Summary is the shape of a sample of durations.
type Summary struct {
	N             int
	P50, P99, Max time.Duration
	// Early counts the negative values (an alert handed off before its due time).
	Early int
}

// Summarize sorts a copy of d and summarises it.
func Summarize(d []time.Duration) Summary {
	s := slices.Clone(d)
	slices.Sort(s)
	out := Summary{N: len(s), P50: Of(s, 0.5), P99: Of(s, 0.99), Max: Of(s, 1)}
	for _, v := range s {
		if v >= 0 {
			break
		}
		out.Early++
	}
	return out
}
