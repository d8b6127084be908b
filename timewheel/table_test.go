package timewheel

import (
	"fmt"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// TestTable checks the slab and its open-addressing index against a map,
// starting from a small index so that probe runs collide, wrap around,
// shift back on removal and get rehashed on growth.
func TestTable(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		tb := newTable(rapid.IntRange(0, 40).Draw(rt, "capacity"))
		model := map[string]int32{}
		keys := rapid.IntRange(1, 300).Draw(rt, "keys")
		for _, n := range rapid.SliceOf(rapid.IntRange(0, keys-1)).Draw(rt, "ops") {
			key := fmt.Sprint(n)
			i, ok := model[key]
			got := tb.find(key, tb.hash(key))
			if ok {
				require.Equal(rt, i, got)
				require.Equal(rt, key, tb.remove(got))
				delete(model, key)
			} else {
				require.Equal(rt, nilIdx, got)
				model[key] = tb.insert(key, tb.hash(key))
			}
			require.Equal(rt, len(model), tb.n)
		}
		for key, i := range model {
			require.Equal(rt, i, tb.find(key, tb.hash(key)))
			require.Equal(rt, key, tb.entry(i).key)
		}
		require.LessOrEqual(rt, tb.n*4, len(tb.index)*3, "load stays at most 3/4")
	})
}

// TestEntrySize keeps an entry at 32 bytes: a page of 1024 is 32KiB and a
// pending key costs 32 bytes of slab.
func TestEntrySize(t *testing.T) {
	require.Equal(t, uintptr(32), unsafe.Sizeof(entry{}))
}
