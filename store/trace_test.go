package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/store"
)

// An alert's trace follows it: a hop, the wheel stage, a claim, a delivery with how it
// went; a late copy's hop after that changes nothing. Inspect reads it all in one round
// trip, and a delivered alert costs Redis a few hundred bytes for the dedupe window.
func TestTraceFollowsAnAlert(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix, ws := newWheelStage(t, store.WheelStageOptions{})
	due := time.Now().Add(-time.Second).Truncate(time.Millisecond)

	s, err := ws.Inspect(ctx, "order-1")
	require.NoError(t, err)
	require.Equal(t, store.AlertState{}, s, "never seen")

	require.NoError(t, ws.TraceHop(ctx, store.HopNote{ID: "order-1", Due: due, Target: "ops", Hops: 1, Delay: 10 * time.Second}))
	s, err = ws.Inspect(ctx, "order-1")
	require.NoError(t, err)
	require.True(t, s.Traced)
	require.Equal(t, "hopping", s.Stage)
	require.Equal(t, 1, s.Hops)
	require.Equal(t, 10*time.Second, s.NextArrival.Sub(s.LastHopAt))
	require.Equal(t, due, s.DueAt)
	accepted := s.AcceptedAt
	require.False(t, accepted.IsZero())

	e := entryAt("order-1", due)
	e.Hops = 1
	_, err = ws.Put(ctx, e)
	require.NoError(t, err)
	s, err = ws.Inspect(ctx, "order-1")
	require.NoError(t, err)
	require.Equal(t, "waiting", s.Stage)
	require.True(t, s.Waiting)
	require.Equal(t, due, s.NextDue)
	require.Equal(t, accepted, s.AcceptedAt, "first seen at the hop")
	require.False(t, s.PutAt.IsZero())

	_, err = entriesOf(ws.Claim(ctx, []string{"order-1"}, tok))
	require.NoError(t, err)
	s, err = ws.Inspect(ctx, "order-1")
	require.NoError(t, err)
	require.True(t, s.InFlight)
	require.False(t, s.Waiting)
	require.Equal(t, tok, s.Owner)
	require.True(t, s.LeaseUntil.After(time.Now()))

	_, err = ws.ReleaseReceipt(ctx, store.Receipt{Outcome: store.Delivered, Robot: "r2", Merged: 3, Parts: 1, Replica: "replica-a"},
		store.Claim{ID: "order-1", Token: tok})
	require.NoError(t, err)
	require.NoError(t, ws.TraceHop(ctx, store.HopNote{ID: "order-1", Due: due, Target: "ops", Hops: 2, Delay: time.Second})) // a late copy
	s, err = ws.Inspect(ctx, "order-1")
	require.NoError(t, err)
	require.Equal(t, "delivered", s.Stage)
	require.False(t, s.InFlight || s.Waiting)
	require.True(t, s.Done)
	require.False(t, s.Recorded)
	require.Equal(t, s.EndedAt, s.DoneAt)
	require.Equal(t, s.EndedAt.Sub(due), s.Late)
	require.Equal(t, 1, s.Hops)
	require.Equal(t, []any{"r2", 3, 1, "replica-a"}, []any{s.Robot, s.Merged, s.Parts, s.By})

	var bytes int64
	for _, k := range []string{"{" + prefix + "}:trace:order-1", "{" + prefix + "}:done:order-1"} {
		n, err := rdb.MemoryUsage(ctx, k).Result()
		require.NoError(t, err)
		bytes += n
		ttl, err := rdb.PTTL(ctx, k).Result()
		require.NoError(t, err)
		require.Greater(t, ttl, 6*24*time.Hour, "%s lives as long as the dedupe window", k)
	}
	t.Logf("a delivered alert's trace and done marker: %d bytes", bytes)
	require.Less(t, bytes, int64(512))
}

// A recorded failure's trace says so; cancel leaves the tombstone's time.
func TestTraceOfARecordedAndACancelledAlert(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, _, ws := newWheelStage(t, store.WheelStageOptions{})
	_, err := ws.Put(ctx, entryAt("failing", time.Now()))
	require.NoError(t, err)
	_, err = entriesOf(ws.Claim(ctx, []string{"failing"}, tok))
	require.NoError(t, err)
	_, err = ws.ReleaseReceipt(ctx, store.Receipt{Outcome: store.Recorded, Replica: "replica-b"}, store.Claim{ID: "failing", Token: tok})
	require.NoError(t, err)
	s, err := ws.Inspect(ctx, "failing")
	require.NoError(t, err)
	require.Equal(t, "recorded", s.Stage)
	require.True(t, s.Done && s.Recorded)
	require.Equal(t, "replica-b", s.By)

	_, err = ws.Put(ctx, entryAt("later", time.Now().Add(time.Hour)))
	require.NoError(t, err)
	before := redisNow(t, rdb).Truncate(time.Millisecond)
	_, err = ws.Cancel(ctx, "later")
	require.NoError(t, err)
	after := redisNow(t, rdb)
	s, err = ws.Inspect(ctx, "later")
	require.NoError(t, err)
	require.True(t, s.Cancelled)
	require.False(t, s.Waiting)
	require.Equal(t, "waiting", s.Stage, "where it was when cancelled")
	require.False(t, s.CancelledAt.Before(before) || s.CancelledAt.After(after), "cancelled at %s, by Redis's clock between %s and %s",
		s.CancelledAt, before, after)
}
