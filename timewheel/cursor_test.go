package timewheel

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// TestCancelAndMoveDuringFiringWalk cancels and moves entries, the next one
// the walk will look at among them, while the tick goroutine has released
// the lock between chunks of a large slot. Every key must be fired once or
// cancelled once, and the wheel must stay consistent.
func TestCancelAndMoveDuringFiringWalk(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		w, err := New(Config{Tick: time.Millisecond, Slots: rapid.SampledFrom([]int{1, 4}).Draw(rt, "slots")})
		require.NoError(rt, err)
		defer w.Stop()
		w.chunk = rapid.IntRange(1, 5).Draw(rt, "chunk")
		n := rapid.IntRange(1, 60).Draw(rt, "keys")
		for i := range n {
			// Ticks 1 and 5: with 1 or 4 slots both share the walked slot.
			require.NoError(rt, w.Add(fmt.Sprint(i), w.origin.Add(time.Duration(1+4*(i%2))*time.Millisecond)))
		}
		cancelled := map[string]bool{}
		moved := map[string]bool{}
		w.betweenChunks = func() {
			w.mu.Lock()
			next := w.cursor
			key := ""
			if next != nilIdx {
				key = w.table.entry(next).key
			}
			w.mu.Unlock()
			if key == "" {
				return
			}
			switch rapid.IntRange(0, 2).Draw(rt, "action") {
			case 0:
				require.True(rt, w.Cancel(key))
				cancelled[key] = true
			case 1: // far away, so that it must not fire now
				require.NoError(rt, w.Add(key, w.origin.Add(time.Hour)))
				moved[key] = true
			}
		}
		w.advance(1, int64(time.Millisecond))
		var got []string
		for _, b := range w.ready {
			got = append(got, b...)
		}
		require.Len(rt, got, len(slices.Compact(slices.Sorted(slices.Values(got)))), "no key fires twice")
		for _, k := range got {
			require.False(rt, cancelled[k], "cancelled key %s fired", k)
			require.False(rt, moved[k], "moved key %s fired", k)
			var i int
			_, _ = fmt.Sscan(k, &i)
			require.Zero(rt, i%2, "key %s is due on tick 5 but fired on tick 1", k)
		}
		require.Equal(rt, (n+1)/2-countEven(cancelled)-countEven(moved), len(got))
		require.Equal(rt, n-len(got)-len(cancelled), w.Len())
		w.betweenChunks = nil
		left := w.Stop()
		require.Len(rt, left, n-len(cancelled), "Stop returns fired and scheduled keys")
	})
}

func countEven(keys map[string]bool) int {
	n := 0
	for k := range keys {
		var i int
		_, _ = fmt.Sscan(k, &i)
		if i%2 == 0 {
			n++
		}
	}
	return n
}
