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

// A rate of 100/s lets a burst of a tenth of a second's worth (10) go at once, then
// says how long until the next token; targets do not share tokens.
func TestTopicRateBurstThenWait(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	r := store.NewTopicRate(rdb, prefix)

	got, wait, err := r.Take(ctx, "orders", 50, 100)
	require.NoError(t, err)
	require.Equal(t, 10, got, "a burst is a tenth of a second's worth")
	require.Zero(t, wait)
	got, wait, err = r.Take(ctx, "orders", 50, 100)
	require.NoError(t, err)
	if got == 0 {
		// The next token is one interval (10 ms) after the burst's last, on Redis's clock;
		// whatever passed since the first call only shortens the wait.
		require.Greater(t, wait, time.Duration(0))
		require.LessOrEqual(t, wait, 10*time.Millisecond)
	} else {
		require.LessOrEqual(t, got, 10, "a pause (a loaded machine) refills at most a burst")
	}
	got, _, err = r.Take(ctx, "payments", 3, 100)
	require.NoError(t, err)
	require.Equal(t, 3, got, "another target has tokens of its own")

	_, _, err = r.Take(ctx, "orders", 0, 100)
	require.Error(t, err)
}

// Takers on several goroutines (as replicas are) never get more than the burst plus the
// rate times the time that passed, measured on Redis's clock: a bound that load cannot
// break, since a slow machine only takes fewer.
func TestTopicRateNeverExceedsTheRateTogether(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	const rate, burst = 200, 20
	start, err := rdb.Time(ctx).Result()
	require.NoError(t, err)
	var mu sync.Mutex
	taken := 0
	var wg sync.WaitGroup
	for range 4 {
		r := store.NewTopicRate(rdb, prefix)
		wg.Go(func() {
			for range 40 {
				n, wait, err := r.Take(ctx, "orders", 7, rate)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				taken += n
				mu.Unlock()
				time.Sleep(wait)
			}
		})
	}
	wg.Wait()
	end, err := rdb.Time(ctx).Result()
	require.NoError(t, err)
	elapsed := end.Sub(start)
	limit := burst + int(elapsed.Seconds()*rate) + 1
	t.Logf("took %d tokens in %s (limit %d)", taken, elapsed, limit)
	require.Greater(t, taken, burst, "tokens refill as time passes")
	require.LessOrEqual(t, taken, limit)
}
