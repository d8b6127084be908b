package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/store"
)

// liveUntil is the end of replica's liveness as {p}:live holds it.
func liveUntil(t testing.TB, rdb redis.UniversalClient, prefix, replica string) time.Time {
	t.Helper()
	ms, err := rdb.ZScore(context.Background(), "{"+prefix+"}:live", replica).Result()
	require.NoError(t, err)
	return time.UnixMilli(int64(ms))
}

// requireWithin checks that got lies in [from, to] at millisecond precision (the scripts'
// clock is Redis TIME in whole ms).
func requireWithin(t testing.TB, got, from, to time.Time, msg string) {
	t.Helper()
	require.False(t, got.Before(from.Truncate(time.Millisecond)), "%s: %s is before %s", msg, got, from)
	require.False(t, got.After(to), "%s: %s is after %s", msg, got, to)
}

// TestBeatRegistersAndRenews: a beat makes its replica live until Redis now + T, a later
// beat moves that on, and a replica that let T pass is lapsed until it beats again,
// which reports the lapse.
func TestBeatRegistersAndRenews(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const period = 2 * time.Second
	rdb, prefix, ws := newWheelStage(t, store.WheelStageOptions{Liveness: period})
	lv := ws.Liveness(nil)

	before := redisNow(t, rdb)
	beat, err := lv.Beat(ctx, "ra")
	require.NoError(t, err)
	after := redisNow(t, rdb)
	require.False(t, beat.Lapsed, "a new replica has not lapsed")
	first := liveUntil(t, rdb, prefix, "ra")
	requireWithin(t, first, before.Add(period), after.Add(period), "first beat")
	v, err := lv.View(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"ra"}, v.Live)
	require.Empty(t, v.Lapsed)
	requireWithin(t, v.LastBeat, before, after, "last beat")
	require.True(t, v.QuietUntil.IsZero(), "no silence yet")

	waitRedisPast(t, rdb, first.Add(-period+time.Millisecond)) // the next whole ms
	before = redisNow(t, rdb)
	beat, err = lv.Beat(ctx, "ra")
	require.NoError(t, err)
	after = redisNow(t, rdb)
	require.False(t, beat.Lapsed)
	second := liveUntil(t, rdb, prefix, "ra")
	require.True(t, second.After(first), "renewed: %s, then %s", first, second)
	requireWithin(t, second, before.Add(period), after.Add(period), "second beat")

	waitRedisPast(t, rdb, second.Add(time.Millisecond))
	v, err = lv.View(ctx)
	require.NoError(t, err)
	require.Empty(t, v.Live)
	require.Equal(t, []string{"ra"}, v.Lapsed)
	beat, err = lv.Beat(ctx, "ra")
	require.NoError(t, err)
	require.True(t, beat.Lapsed, "the beat after T reports the lapse")
	v, err = lv.View(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"ra"}, v.Live, "live again")
}

// TestBeatRefusesBadReplicaIDs: a replica id is what a claim token holds before its "/",
// so an id with "/" (or none) is an error, as is a beat with liveness off.
func TestBeatRefusesBadReplicaIDs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix, ws := newWheelStage(t, store.WheelStageOptions{Liveness: time.Second})
	for _, id := range []string{"", "a/b"} {
		_, err := ws.Liveness(nil).Beat(ctx, id)
		require.ErrorContains(t, err, "without \"/\"", "replica id %q", id)
	}
	_, err := store.NewWheelStage(rdb, prefix, store.WheelStageOptions{}).Liveness(nil).Beat(ctx, "ra")
	require.ErrorContains(t, err, "liveness is off")
	n, err := rdb.Exists(ctx, "{"+prefix+"}:live", "{"+prefix+"}:live-meta").Result()
	require.NoError(t, err)
	require.Zero(t, n, "nothing written")
}

// TestBeatAfterSilenceSetsQuiet: beats closer than T/2 to the last one of any replica
// open no quiet window; the first beat after a longer silence of everyone opens one until
// its Redis now + T, and the beats after it do not move it.
func TestBeatAfterSilenceSetsQuiet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const period = 2 * time.Second
	rdb, _, ws := newWheelStage(t, store.WheelStageOptions{Liveness: period})
	lv := ws.Liveness(nil)

	for _, id := range []string{"ra", "rb", "ra"} {
		_, err := lv.Beat(ctx, id)
		require.NoError(t, err)
	}
	v, err := lv.View(ctx)
	require.NoError(t, err)
	require.True(t, v.QuietUntil.IsZero(), "beats of different replicas in quick succession are no silence")

	waitRedisPast(t, rdb, v.LastBeat.Add(period/2+time.Millisecond))
	before := redisNow(t, rdb)
	_, err = lv.Beat(ctx, "rb")
	require.NoError(t, err)
	after := redisNow(t, rdb)
	v, err = lv.View(ctx)
	require.NoError(t, err)
	requireWithin(t, v.QuietUntil, before.Add(period), after.Add(period), "quiet window after a silence of T/2")
	require.Equal(t, []string{"ra", "rb"}, v.Live, "a silence shorter than T lapses nobody")

	quiet := v.QuietUntil
	_, err = lv.Beat(ctx, "ra")
	require.NoError(t, err)
	v, err = lv.View(ctx)
	require.NoError(t, err)
	require.Equal(t, quiet, v.QuietUntil, "a beat right after does not move the window")
}
