package scheduler_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/scheduler"
	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/timewheel"
)

// steppedClock is a replica clock that moves only when the time source is asked: each
// round trip takes the next of rtts.
type steppedClock struct{ now time.Time }

func (c *steppedClock) Now() time.Time { return c.now }
func (c *steppedClock) NewTimer(d time.Duration) timewheel.Timer {
	return timewheel.ShiftedClock(0).NewTimer(d)
}

// fakeSource is a reference clock ahead of the replica's by ahead; it reads its clock
// halfway through each round trip, whose lengths are rtts in turn.
type fakeSource struct {
	replica *steppedClock
	ahead   time.Duration
	rtts    []time.Duration
	err     error
	calls   int
}

func (f *fakeSource) Time(context.Context) (time.Time, error) {
	rtt := f.rtts[f.calls%len(f.rtts)]
	f.calls++
	// Asymmetric legs on the slow round trips: only the shortest one is trustworthy.
	there := rtt / 2
	if rtt > 5*time.Millisecond {
		there = rtt * 9 / 10
	}
	at := f.replica.now.Add(there).Add(f.ahead)
	f.replica.now = f.replica.now.Add(rtt)
	if f.err != nil {
		return time.Time{}, f.err
	}
	return at, nil
}

// The offset comes from the shortest of the round trips, to within half of it; Now is
// the replica's clock plus that offset; the gauges say both.
func TestRefClockMeasuresItsOffsetByTheShortestRoundTrip(t *testing.T) {
	for _, ahead := range []time.Duration{5 * time.Second, -5 * time.Second, 0} {
		replica := &steppedClock{now: time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)}
		src := &fakeSource{replica: replica, ahead: ahead,
			rtts: []time.Duration{40 * time.Millisecond, 2 * time.Millisecond, 30 * time.Millisecond, 300 * time.Millisecond}}
		reg := prometheus.NewRegistry()
		c := scheduler.NewRefClock(src, replica, 0, testenv.Logger(), scheduler.NewMetrics(reg))
		require.Zero(t, c.Offset(), "0 until the first sync")
		require.NoError(t, c.Sync(context.Background()))
		require.Equal(t, 5, src.calls, "five round trips")
		require.InDelta(t, ahead.Seconds(), c.Offset().Seconds(), 0.001, "ahead %s", ahead)
		require.Equal(t, replica.now.Add(c.Offset()), c.Now())
		require.InDelta(t, ahead.Seconds(), testenv.Metric(t, reg, "rocketdelay_clock_offset_seconds"), 0.001)
		require.InDelta(t, 0.001, testenv.Metric(t, reg, "rocketdelay_clock_offset_uncertainty_seconds"), 1e-9)
	}
}

// A sync that reaches nothing keeps the last offset and says why.
func TestRefClockKeepsItsOffsetWhenTheSourceIsDown(t *testing.T) {
	replica := &steppedClock{now: time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)}
	src := &fakeSource{replica: replica, ahead: 3 * time.Second, rtts: []time.Duration{time.Millisecond}}
	c := scheduler.NewRefClock(src, replica, 0, testenv.Logger(), scheduler.NewMetrics(prometheus.NewRegistry()))
	require.NoError(t, c.Sync(context.Background()))
	src.err = store.ErrUnavailable
	err := c.Sync(context.Background())
	require.ErrorIs(t, err, store.ErrUnavailable)
	require.ErrorContains(t, err, "clock offset to Redis")
	require.InDelta(t, 3, c.Offset().Seconds(), 0.001)
	require.False(t, errors.Is(err, context.Canceled))
}

// Against the real Redis: a replica whose clock runs 5 s fast (or slow) reads, through
// its reference clock, Redis's time.
func TestRefClockFollowsRedis(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	ws := store.NewWheelStage(rdb, prefix, store.WheelStageOptions{})
	for _, skew := range []time.Duration{5 * time.Second, -5 * time.Second} {
		c := scheduler.NewRefClock(ws, timewheel.ShiftedClock(skew), 0, testenv.Logger(), scheduler.NewMetrics(prometheus.NewRegistry()))
		require.NoError(t, c.Sync(context.Background()))
		before, err := rdb.Time(context.Background()).Result()
		require.NoError(t, err)
		got := c.Now()
		after, err := rdb.Time(context.Background()).Result()
		require.NoError(t, err)
		// Within the sync's uncertainty (half its shortest round trip) of Redis's clock.
		slack := 50 * time.Millisecond
		require.True(t, !got.Before(before.Add(-slack)) && !got.After(after.Add(slack)),
			"skew %s: reference %s, Redis between %s and %s", skew, got, before, after)
	}
}
