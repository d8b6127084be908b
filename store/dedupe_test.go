package store_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/store"
)

// Every copy of an event within the window after its first copy gets the first copy's
// id, whoever asks, however many at once; the window is judged by the caller's clock,
// so a repeat that comes a window later — by that clock, whatever Redis's — is a new
// event with the id it picked, and its own window starts.
func TestDedupeOnceByTheCallersClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	a, b := store.NewDedupe(rdb, prefix), store.NewDedupe(rdb, prefix)
	t0 := time.Now()
	const window = 5 * time.Minute

	ids := make([]string, 8)
	var wg sync.WaitGroup
	for i := range ids {
		d := a
		if i%2 == 1 {
			d = b
		}
		wg.Go(func() {
			id, err := d.Once(ctx, "ev", []string{"x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7"}[i], t0, window)
			require.NoError(t, err)
			ids[i] = id
		})
	}
	wg.Wait()
	for _, id := range ids {
		require.Equal(t, ids[0], id, "copies at once get one id")
	}
	first := ids[0]

	id, err := b.Once(ctx, "ev", "late", t0.Add(window-time.Millisecond), window)
	require.NoError(t, err)
	require.Equal(t, first, id, "a copy at the window's last millisecond")
	id, err = a.Once(ctx, "other", "o1", t0, window)
	require.NoError(t, err)
	require.Equal(t, "o1", id, "another event")

	id, err = a.Once(ctx, "ev", "repeat", t0.Add(window), window)
	require.NoError(t, err)
	require.Equal(t, "repeat", id, "a window after the first copy, the same event is new")
	id, err = b.Once(ctx, "ev", "again", t0.Add(window+time.Second), window)
	require.NoError(t, err)
	require.Equal(t, "repeat", id, "the repeat's copies get the repeat's id")
}
