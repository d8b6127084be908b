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
		checkSlotMins(rt, w)
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

// checkSlotMins checks that every slot's min is at most the time of each of
// its entries, and noEntry if it is empty.
func checkSlotMins(t require.TestingT, w *Wheel) {
	for n, s := range w.slots {
		if s.head == nilIdx {
			require.Equal(t, int64(noEntry), s.min, "empty slot %d", n)
		}
		for i := s.head; i != nilIdx; i = w.table.entry(i).next {
			require.LessOrEqual(t, s.min, w.table.entry(i).at, "slot %d", n)
		}
	}
}

// TestWakeWithNothingDueSkipsSlot checks that a wake-up does not walk a slot
// none of whose keys is due: its min, kept by the walks, Add and Cancel,
// tells it so. A walk of the 101 entries below releases the lock 100 times
// with a chunk of 1; a skipped slot, not at all.
func TestWakeWithNothingDueSkipsSlot(t *testing.T) {
	w, err := New(Config{Tick: 10 * time.Millisecond, Slots: 1, WakesPerTick: 4})
	require.NoError(t, err)
	defer w.Stop()
	w.chunk = 1
	walked := 0
	w.betweenChunks = func() { walked++ }
	ms := func(f float64) int64 { return int64(f * float64(time.Millisecond)) }
	at := func(ns int64) time.Time { return w.origin.Add(time.Duration(ns)) }
	for i := range 100 { // tick 2, from 12ms
		require.NoError(t, w.Add(fmt.Sprint(i), at(ms(12)+int64(i)*1000)))
	}
	require.NoError(t, w.Add("later", at(ms(1000)))) // a later round of the one slot
	fired := func() int {
		n := 0
		for _, b := range w.ready {
			n += len(b)
		}
		return n
	}
	for _, step := range []struct {
		tick    int64
		now     float64 // ms
		walked  bool
		fired   int // keys fired so far
		comment string
	}{
		{1, 10, false, 0, "boundary: nothing due in tick 2 (its min is 12ms)"},
		{1, 11, false, 0, "intermediate wake-up, nothing due: skipped"},
		{1, 12.05, true, 51, "keys due: walked"},
		{1, 12.07, true, 71, "min is exact again"},
		{1, 12.0705, false, 71, "nothing due since the last walk"},
		{1, 15, true, 100, ""},
		{1, 17.5, false, 100, "only the later round left"},
		{2, 20, false, 100, "boundary: tick 2 processed, nothing due"},
		{2, 22.5, false, 100, ""},
	} {
		walked = 0
		w.advance(step.tick, ms(step.now))
		require.Equal(t, step.walked, walked > 0, "at %vms: %s", step.now, step.comment)
		require.Equal(t, step.fired, fired(), "at %vms", step.now)
		checkSlotMins(t, w)
	}
	require.Equal(t, ms(1000), w.slots[0].min)
	require.True(t, w.Cancel("later"))
	require.Equal(t, int64(noEntry), w.slots[0].min, "an emptied slot has no min")
	w.betweenChunks = nil
}
